"""Per-route fits: `calibrate --route NAME` writes a route's own model and cuts, the geometry
stage and the switch judge each candidate by its route's, and other routes keep the
policy's."""

from __future__ import annotations

import asyncio
import tomllib
from pathlib import Path

import pytest

from pipeline.errors import PolicyError
from pipeline.policy.document import load_policy, parse_policy
from pipeline.rungs.grounding_switch import SwitchAction
from pipeline.scores.grounding import FEATURES
from pipeline.scores.results import GroundingScore, SGIResult
from tests.fixtures.fakes import FakeEncoder, HashEncoder
from tests.fixtures.ladder_scenario import CONTEXT, QUESTION, R_ACCEPT, VECTORS
from topics.codec import dumps, loads
from topics.names import Topic
from topics.schema import Candidate, Envelope, GeometryPayload, parse_envelope
from workers.eval.calibration import calibrate, calibrate_route, write_fit
from workers.interfaces import Inbound, StageContext
from workers.stages.geometry import GeometryStage
from workers.stages.switch import SwitchStage

LABELLED = Path(__file__).resolve().parents[1] / "fixtures" / "labelled.jsonl"


def model_table(intercept: float) -> dict:
    """A grounding model that says `intercept` whatever it reads (no domain)."""
    return {
        "features": list(FEATURES),
        "coefficients": [0.0] * len(FEATURES),
        "intercept": intercept,
    }


POLICY = {
    "policy": {"version": "t-1"},
    "thresholds": {"grounding_accept": 0.8, "grounding_review": 0.5, "sgi_strong_pass": 2.0},
    "grounding": model_table(-20.0),  # the default route's model: sure it is ungrounded
    "routes": {
        "default": {"mode": "evaluate"},
        "qa": {
            "mode": "evaluate",
            "on_reject": "reject",
            "thresholds": {"grounding_accept": 0.95},
            "grounding": model_table(20.0),  # the qa route's own: sure it is grounded
        },
    },
}


class TestPolicy:
    def test_a_route_with_its_own_fit_uses_it(self) -> None:
        policy = parse_policy(POLICY)
        qa = policy.thresholds_for("qa")
        assert qa.grounding_accept == 0.95
        # A cut the route's table leaves out is the policy's.
        assert (qa.grounding_review, qa.sgi_strong_pass) == (0.5, 2.0)
        assert policy.grounding_for("qa").intercept == 20.0
        assert policy.route("qa").on_reject is SwitchAction.REJECT  # settings still parsed

    def test_routes_without_their_own_fit_use_the_policys(self) -> None:
        policy = parse_policy(POLICY)
        assert policy.thresholds_for("default") == policy.thresholds
        assert policy.thresholds_for("unknown") == policy.thresholds
        assert policy.grounding_for("default") is policy.grounding

    def test_the_switch_uses_the_routes_cuts(self) -> None:
        policy = parse_policy(POLICY)
        score = GroundingScore(0.9, SGIResult(1.5, 1.0, 0.6, 0, 1), {})
        assert policy.switch(policy.route("default")).decide(score).action is SwitchAction.ACCEPT
        assert policy.switch(policy.route("qa")).decide(score).action is SwitchAction.ESCALATE

    def test_a_bad_route_cut_is_named(self) -> None:
        bad = {"routes": {"qa": {"thresholds": {"grounding_accept": "high"}}}}
        with pytest.raises(PolicyError, match=r"routes\.qa\.thresholds\.grounding_accept"):
            parse_policy(bad)


def candidate(cid: str, route: str) -> bytes:
    return dumps(
        {
            "id": cid,
            "session_id": f"s-{cid}",
            "question": QUESTION,
            "response": R_ACCEPT,
            "context": CONTEXT,
            "route": route,
        }
    )


def test_the_geometry_stage_scores_each_candidate_with_its_routes_model() -> None:
    ctx = StageContext(policy=parse_policy(POLICY))
    ctx.services["encoder"] = FakeEncoder(VECTORS)
    batch = [Inbound(b"s", candidate("a", "default")), Inbound(b"s", candidate("b", "qa"))]
    emits = asyncio.run(GeometryStage().process(batch, ctx))
    scored = {
        env.candidate.id: env.geometry.score
        for env in (parse_envelope(e.value) for e in emits if e.topic is Topic.SCORED)
    }
    assert scored["a"].value < 0.01 and scored["b"].value > 0.99
    records = {r["candidate_id"]: r for r in (loads(e.value) for e in emits) if "stage" in r}
    assert records["a"]["thresholds"]["grounding_accept"] == 0.8
    assert records["b"]["thresholds"]["grounding_accept"] == 0.95


def test_the_switch_records_the_routes_cuts() -> None:
    ctx = StageContext(policy=parse_policy(POLICY), clock=lambda: 1e9)
    score = GroundingScore(0.9, SGIResult(1.5, 1.0, 0.6, 0, 1), {})
    c = Candidate(id="c1", session_id="s1", question="q?", response="r.", route="qa")
    env = Envelope(candidate=c, route="qa", mode="evaluate", geometry=GeometryPayload(score))
    emits = asyncio.run(SwitchStage().process([Inbound(b"s1", env.encode(), "scored", 0, 1)], ctx))
    record = next(r for r in (loads(e.value) for e in emits) if r.get("stage") == "switch")
    assert record["action"] == "escalate"
    assert record["thresholds"]["grounding_accept"] == 0.95


def test_calibrate_route_round_trip(tmp_path: Path) -> None:
    out = tmp_path / "policy.toml"
    options = {"max_accept_error": 0.1, "limit": None, "encoder": HashEncoder(dim=16)}
    calibrate([LABELLED], out, reference=None, command="calibrate all", **options)
    before = load_policy(out)
    # The route's own population: here the first 12 answers only.
    calibrate_route(
        [LABELLED], out, "qa", command="calibrate --route qa", **options | {"limit": 12}
    )
    after = load_policy(out)

    assert after.version != before.version and after.version.startswith(before.version)
    assert after.thresholds == before.thresholds  # the default's fit is untouched
    assert after.grounding == before.grounding
    own = after.grounding_for("qa")
    assert own is not None and own != after.grounding and own.domain is not None
    assert own.domain.n == 12 and after.grounding is not None
    assert after.route("qa").mode == after.route("default").mode  # settings from default
    table = tomllib.loads(out.read_text())["routes"]["qa"]
    assert table["calibration"]["produced_by"] == "calibrate --route qa"
    assert "labelled.jsonl" in table["calibration"]["data"]
    assert after.thresholds_for("qa").grounding_accept == table["thresholds"]["grounding_accept"]

    # Refitting the whole policy keeps the routes (their settings and their own fits).
    calibrate([LABELLED], out, reference=None, command="calibrate all", **options)
    again = load_policy(out)
    assert again.grounding_for("qa") == own


def test_write_fit_refuses_what_would_not_load(tmp_path: Path) -> None:
    out = tmp_path / "policy.toml"
    with pytest.raises(PolicyError, match="policy file"):
        write_fit(out, "qa", {"thresholds": {}}, {})
    out.write_text('[policy]\nversion = "v1"\n')
    with pytest.raises(PolicyError, match="grounding_review"):
        write_fit(out, None, {"thresholds": {"grounding_review": 2.0}}, {})
    write_fit(out, None, {"thresholds": {"grounding_accept": 0.9}}, {"n": 3})
    policy = load_policy(out)
    assert policy.thresholds.grounding_accept == 0.9
    assert policy.calibration["refit"]["n"] == 3
    assert policy.version.startswith("v1+")


class TestTaskRoutes:
    """A candidate naming no route goes to the route that serves its task kind."""

    SERVING = POLICY | {
        "routes": {
            "default": {"mode": "evaluate"},
            "qa": {**POLICY["routes"]["qa"], "tasks": ["QA"]},
        }
    }

    def test_the_route_serving_a_kind_is_found(self) -> None:
        policy = parse_policy(self.SERVING)
        assert policy.route_serving("QA") == "qa"
        assert policy.route_serving("Summary") is None and policy.route_serving(None) is None

    def test_a_candidate_goes_to_its_route_else_its_kind_s_else_the_default(self) -> None:
        policy = parse_policy(self.SERVING)
        assert policy.route_name("default", "QA", "x") == "default"  # named wins
        assert policy.route_name(None, "QA", "x") == "qa"
        assert policy.route_name(None, "Summary", "x") == "x"

    def test_two_routes_serving_one_kind_are_refused(self) -> None:
        both = self.SERVING | {
            "routes": {**self.SERVING["routes"], "other": {"mode": "evaluate", "tasks": ["QA"]}}
        }
        with pytest.raises(PolicyError, match=r"routes\.other\.tasks.*route 'qa'"):
            parse_policy(both)

    def test_geometry_routes_by_kind_unless_the_candidate_names_a_route(self) -> None:
        ctx = StageContext(policy=parse_policy(self.SERVING))
        ctx.services["encoder"] = FakeEncoder(VECTORS)

        def by_task(cid: str, route: str | None) -> bytes:
            c = loads(candidate(cid, route or "")) | {"metadata": {"task": "QA"}}
            return dumps({k: v for k, v in c.items() if k != "route" or v})

        batch = [Inbound(b"s", by_task("a", None)), Inbound(b"s", by_task("b", "default"))]
        emits = asyncio.run(GeometryStage().process(batch, ctx))
        envs = {
            e.candidate.id: e
            for e in (parse_envelope(x.value) for x in emits if x.topic is Topic.SCORED)
        }
        assert envs["a"].route == "qa" and envs["a"].geometry.score.value > 0.99
        assert envs["b"].route == "default" and envs["b"].geometry.score.value < 0.01


def test_calibrate_route_for_a_task_fits_and_serves_that_kind(tmp_path: Path) -> None:
    lines = LABELLED.read_text().splitlines()
    tasked = tmp_path / "tasked.jsonl"
    records = [loads(line) for line in lines if line.strip()]
    for n, r in enumerate(records):  # the first half QA, the rest summaries
        r["metadata"]["task"] = "QA" if n < len(records) // 2 else "Summary"
    tasked.write_bytes(b"\n".join(dumps(r) for r in records) + b"\n")
    out = tmp_path / "policy.toml"
    options = {"max_accept_error": 0.1, "limit": None, "encoder": HashEncoder(dim=16)}
    calibrate([tasked], out, reference=None, command="calibrate all", **options)
    calibrate_route([tasked], out, "qa", command="c --route qa --task QA", tasks=["QA"], **options)

    policy = load_policy(out)
    assert policy.route_serving("QA") == "qa" and policy.route_serving("Summary") is None
    own = policy.grounding_for("qa")
    assert own is not None and own.domain is not None
    assert own.domain.n == len(records) // 2 and own.domain.tasks == ("QA",)
    assert tomllib.loads(out.read_text())["routes"]["qa"]["calibration"]["tasks"] == ["QA"]
    with pytest.raises(PolicyError, match="--task"):
        calibrate_route([tasked], out, "d2t", command="c", tasks=["Data2txt"], **options)
