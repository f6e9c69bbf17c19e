"""The embedded runner end to end: the whole ladder in one process with a fake encoder.

The candidates and their vectors (each SGI known by construction) live in
tests/fixtures/ladder_scenario.py.
"""

from __future__ import annotations

from collections import Counter

import pytest

from pipeline.claims.units import answer_core
from pipeline.policy.document import parse_policy
from pipeline.trail.records import OUTCOME_STAGE, comparable, sanitize, verify_chain
from tests.fixtures.fakes import FakeEncoder
from tests.fixtures.ladder_scenario import (
    CONTEXT,
    MALFORMED,
    MU,
    QUESTION,
    R_ACCEPT,
    R_DGI_BAD,
    R_DGI_GOOD,
    R_MIDDLE,
    R_NAMED,
    R_REJECT,
    R_SAMPLED,
    SAMPLES,
    STANDARD,
    T_ACCEPT,
    T_MIDDLE,
    T_REJECT,
    VECTORS,
    cand,
    sgi_at,
)
from topics.names import Topic
from topics.schema import parse_envelope
from workers.interfaces import StageContext
from workers.runtime.embedded import EmbeddedResult, run_embedded
from workers.runtime.ladder import build_ladder
from workers.runtime.settings import Settings


def make_ctx(policy: dict | None = None) -> tuple[StageContext, FakeEncoder]:
    encoder = FakeEncoder(VECTORS)
    ctx = StageContext(policy=parse_policy(policy or {"policy": {"version": "test-1"}}))
    ctx.services["encoder"] = encoder
    return ctx, encoder


async def run(candidates, ctx: StageContext, **kwargs) -> EmbeddedResult:
    return await run_embedded(candidates, build_ladder(Settings()), ctx, **kwargs)


def stages_of(result: EmbeddedResult, cid: str) -> list[str]:
    return [r["stage"] for r in result.records if r["candidate_id"] == cid]


def record_of(result: EmbeddedResult, cid: str, stage: str) -> dict:
    (found,) = [r for r in result.records if r["candidate_id"] == cid and r["stage"] == stage]
    return found


def state_ids(result: EmbeddedResult) -> set[str]:
    return {parse_envelope(e.value).candidate.id for e in result.outputs[Topic.STATE]}


def assert_invariants(result: EmbeddedResult, n_candidates: int) -> None:
    """What holds for every run: one outcome each, write_to_state only onto state, chains."""
    outcomes = Counter(r["candidate_id"] for r in result.records if r["stage"] == OUTCOME_STAGE)
    assert len(outcomes) == n_candidates
    assert set(outcomes.values()) == {1}
    by_id = result.outcomes()
    for rec in result.records:
        if rec["stage"] == OUTCOME_STAGE:
            assert rec["write_to_state"] is (rec["topic"] == "state")
        elif rec["write_to_state"]:
            assert rec["stage"] == "rules"
            assert by_id[rec["candidate_id"]]["topic"] == "state"
    assert state_ids(result) == {cid for cid, r in by_id.items() if r["topic"] == "state"}
    assert verify_chain(result.records) == []


class TestLadder:
    async def test_each_zone_reaches_its_topic(self):
        ctx, _ = make_ctx()
        result = await run(STANDARD, ctx)
        topics = {cid: r["topic"] for cid, r in result.outcomes().items()}
        assert topics == {
            "accept": "state",
            "reject": "escalations.fallback",
            "middle": "escalations.review",
            "sampled": "state",
        }
        assert_invariants(result, 4)

    async def test_one_record_per_stage_passed(self):
        ctx, _ = make_ctx()
        result = await run(STANDARD, ctx)
        assert stages_of(result, "accept") == ["geometry", "switch", "rules", "outcome"]
        assert stages_of(result, "reject") == ["geometry", "switch", "outcome"]
        assert stages_of(result, "middle") == [
            "geometry",
            "switch",
            "consistency",
            "judge",
            "outcome",
        ]
        assert stages_of(result, "sampled") == [
            "geometry",
            "switch",
            "consistency",
            "rules",
            "outcome",
        ]

    async def test_scores_and_actions_on_the_records(self):
        ctx, _ = make_ctx()
        result = await run(STANDARD, ctx)
        for cid, t in (("accept", T_ACCEPT), ("reject", T_REJECT), ("middle", T_MIDDLE)):
            geometry = record_of(result, cid, "geometry")
            assert geometry["method"] == "sgi"
            assert geometry["score"] == pytest.approx(sgi_at(t), rel=1e-9)
        assert record_of(result, "accept", "switch")["action"] == "accept"
        assert record_of(result, "reject", "switch")["action"] == "fallback"
        assert record_of(result, "middle", "switch")["action"] == "escalate"
        assert record_of(result, "middle", "consistency")["action"] == "unresolved"
        judge = record_of(result, "middle", "judge")
        assert judge["gate"] == "judge_unavailable"
        assert judge["action"] == "escalate"
        assert record_of(result, "sampled", "consistency")["action"] == "committed"
        assert record_of(result, "accept", "rules")["action"] == "accept"

    async def test_one_encoder_call_for_the_geometry_batch(self):
        ctx, encoder = make_ctx()
        await run(STANDARD, ctx)
        geometry_call, consistency_call = encoder.calls
        assert len(geometry_call) == len(set(geometry_call))
        cores = {answer_core(r, QUESTION) for r in (R_ACCEPT, R_REJECT, R_MIDDLE, R_SAMPLED)}
        assert set(geometry_call) == {QUESTION, CONTEXT, *cores}  # SGI reads answers' cores
        assert consistency_call == [R_SAMPLED, *SAMPLES]

    async def test_state_messages_carry_the_candidate(self):
        ctx, _ = make_ctx()
        result = await run(STANDARD, ctx)
        for emit in result.outputs[Topic.STATE]:
            env = parse_envelope(emit.value)
            assert emit.key == env.candidate.session_id.encode()
            assert env.geometry is not None and env.geometry.to_dict()["method"] == "sgi"
            assert env.trail[0]["stage"] == "geometry"
            assert env.trail[-1]["stage"] == "rules"

    async def test_malformed_lines_go_to_deadletter_with_raw_bytes(self):
        ctx, _ = make_ctx()
        result = await run([*STANDARD, *MALFORMED], ctx)
        dead = result.outputs[Topic.DEADLETTER]
        assert [e.value for e in dead] == MALFORMED
        for emit in dead:
            headers = dict(emit.headers)
            assert headers["gs-reason"]
            assert headers["gs-stage"] == b"geometry"
            assert headers["gs-source-topic"] == b"candidates"
        # Each dead letter has its stage's record and an outcome, under the candidate's id
        # when the message names one, else under its origin.
        dead = [r for r in result.records if r["action"] == "deadletter"]
        assert [r["stage"] for r in dead] == ["geometry", OUTCOME_STAGE] * len(MALFORMED)
        outcomes = dead[1::2]
        assert [r["candidate_id"] for r in outcomes][1] == "x"
        assert len({r["candidate_id"] for r in outcomes}) == len(MALFORMED)
        assert all(r["topic"] == "deadletter" and not r["write_to_state"] for r in outcomes)
        assert "UTF-8" in outcomes[2]["reason"]
        assert_invariants(result, 4 + len(MALFORMED))  # the good candidates are unaffected

    async def test_rule_violation_goes_to_review(self):
        ctx, _ = make_ctx()
        result = await run([cand("named", R_NAMED)], ctx)
        rules = record_of(result, "named", "rules")
        assert rules["action"] == "escalate"
        assert "source_support" in rules["reason"]
        assert result.outcomes()["named"]["topic"] == "escalations.review"
        assert_invariants(result, 1)

    async def test_sanitized_records_carry_no_raw_text(self):
        ctx, _ = make_ctx()
        result = await run([*STANDARD, cand("named", R_NAMED)], ctx)
        texts = [QUESTION, CONTEXT, R_ACCEPT, R_MIDDLE, R_SAMPLED, *SAMPLES, "Zorblax"]
        for rec in result.records:
            dumped = str(sanitize(rec))
            for text in texts:
                assert text not in dumped, (rec["candidate_id"], rec["stage"], text)

    async def test_runs_are_deterministic(self):
        first = await run(STANDARD, make_ctx()[0])
        second = await run(STANDARD, make_ctx()[0])
        assert [comparable(r) for r in first.records] == [comparable(r) for r in second.records]

    async def test_dgi_without_context(self):
        ctx, _ = make_ctx({"policy": {"version": "dgi"}, "reference": {"dgi_mu": MU}})
        good = cand("dgi-good", R_DGI_GOOD)
        bad = cand("dgi-bad", R_DGI_BAD)
        del good["context"], bad["context"]
        result = await run([good, bad], ctx)
        assert record_of(result, "dgi-good", "geometry")["method"] == "dgi"
        assert record_of(result, "dgi-good", "geometry")["score"] == pytest.approx(1.0)
        assert record_of(result, "dgi-bad", "geometry")["score"] == pytest.approx(0.5)
        topics = {cid: r["topic"] for cid, r in result.outcomes().items()}
        assert topics == {"dgi-good": "state", "dgi-bad": "escalations.fallback"}
        assert_invariants(result, 2)


class TestModesAndControls:
    async def test_off_mode_sends_everything_to_fallback_without_geometry(self):
        ctx, encoder = make_ctx({"routes": {"default": {"mode": "off"}}})
        result = await run(STANDARD, ctx)
        assert encoder.calls == []
        assert {r["topic"] for r in result.outcomes().values()} == {"escalations.fallback"}
        for c in STANDARD:
            assert stages_of(result, c["id"]) == ["geometry", "outcome"]
            geometry = record_of(result, c["id"], "geometry")
            assert geometry["action"] == "skip"
            assert geometry["score"] is None and geometry["evidence"] == {}
        assert result.outputs[Topic.STATE] == []
        assert_invariants(result, 4)

    async def test_an_unknown_route_is_named_in_the_reason_and_the_record(self):
        ctx, encoder = make_ctx({"routes": {"default": {}, "qa": {}}})
        result = await run([{**STANDARD[0], "route": "qa-typo"}], ctx)
        assert encoder.calls == []
        geometry = record_of(result, STANDARD[0]["id"], "geometry")
        assert geometry["route"] == "qa-typo" and geometry["gate"] == "unknown_route"
        assert geometry["reason"] == (
            "unknown route 'qa-typo' (the policy has default, qa): "
            "mode off: no verification, nothing is auto-accepted"
        )
        assert result.outcomes()[STANDARD[0]["id"]]["topic"] == "escalations.fallback"

    async def test_a_route_set_off_on_purpose_has_no_gate(self):
        ctx, _ = make_ctx({"routes": {"default": {"mode": "off"}}})
        result = await run(STANDARD[:1], ctx)
        geometry = record_of(result, STANDARD[0]["id"], "geometry")
        assert geometry["gate"] is None and geometry["reason"].startswith("mode off")

    async def test_shadow_mode_records_decided_and_served(self):
        ctx, _ = make_ctx({"routes": {"default": {"mode": "shadow"}}})
        result = await run(STANDARD, ctx)
        assert result.outputs[Topic.STATE] == []
        assert {r["topic"] for r in result.outcomes().values()} == {"escalations.fallback"}
        rules = record_of(result, "accept", "rules")
        assert rules["decided_action"] == "accept"
        assert rules["served_action"] == "fallback"
        assert rules["write_to_state"] is False
        outcome = result.outcomes()["accept"]
        assert outcome["decided_action"] == "accept"
        assert outcome["served_action"] == "fallback"
        assert outcome["mode"] == "shadow"
        # shadow still decides everything: same stages as evaluate
        assert stages_of(result, "middle") == [
            "geometry",
            "switch",
            "consistency",
            "judge",
            "outcome",
        ]
        assert result.outcomes()["middle"]["decided_action"] == "escalate"
        assert_invariants(result, 4)

    async def test_kill_switch_stops_all_automatic_acceptance(self):
        ctx, _ = make_ctx()
        ctx.control.kill_switch = True
        result = await run(STANDARD, ctx)
        assert result.outputs[Topic.STATE] == []
        assert all(r["kill_switch"] is True for r in result.records)
        for cid in ("accept", "sampled"):
            outcome = result.outcomes()[cid]
            assert outcome["topic"] == "escalations.review"
            assert outcome["gate"] == "kill_switch"
            assert outcome["write_to_state"] is False
        assert_invariants(result, 4)

    async def test_expired_deadline_goes_to_review(self):
        ctx, encoder = make_ctx()
        late = cand("late", R_ACCEPT, deadline=1.0)
        result = await run([late], ctx)
        outcome = result.outcomes()["late"]
        assert outcome["topic"] == "escalations.review"
        assert outcome["gate"] == "deadline"
        assert "deadline" in outcome["reason"]
        assert stages_of(result, "late") == ["geometry", "outcome"]
        assert encoder.calls == []
        assert_invariants(result, 1)

    async def test_deadline_expiring_mid_ladder_goes_to_review(self):
        now = [1_000_000.0]
        ctx, _ = make_ctx({"routes": {"default": {"deadline_seconds": 5}}})
        ctx.clock = lambda: now[0]

        def tick(stage: str, n: int) -> None:
            if stage == "geometry":
                now[0] += 10.0  # the route's 5 s are gone before the switch runs

        result = await run([cand("slow", R_ACCEPT)], ctx, on_batch=tick)
        assert stages_of(result, "slow") == ["geometry", "switch", "outcome"]
        outcome = result.outcomes()["slow"]
        assert outcome["topic"] == "escalations.review"
        assert outcome["gate"] == "deadline"
        assert_invariants(result, 1)

    async def test_future_deadline_does_not_interfere(self):
        ctx, _ = make_ctx()
        result = await run([cand("ok", R_ACCEPT, deadline="2999-01-01T00:00:00+00:00")], ctx)
        assert result.outcomes()["ok"]["topic"] == "state"

    async def test_unknown_route_fails_closed_to_off(self):
        ctx, encoder = make_ctx()
        result = await run([cand("lost", R_ACCEPT, route="nope")], ctx)
        assert result.outcomes()["lost"]["topic"] == "escalations.fallback"
        assert encoder.calls == []


class TestSessions:
    async def test_agent_step_after_escalated_user_step_is_held(self):
        ctx, _ = make_ctx()
        steps = [
            cand("u1", R_MIDDLE, session_id="S", turn=1),
            cand("a1", R_ACCEPT, session_id="S", turn=1, initiator="agent"),
            cand("u2", R_ACCEPT, session_id="S", turn=2),
            cand("a2", R_ACCEPT, session_id="S", turn=2, initiator="agent"),
        ]
        result = await run(steps, ctx)
        held = record_of(result, "a1", "switch")
        assert held["gate"] == "turn_latched"
        assert result.outcomes()["a1"]["topic"] == "escalations.review"
        assert result.outcomes()["u2"]["topic"] == "state"
        assert result.outcomes()["a2"]["topic"] == "state"
        assert_invariants(result, 4)

    async def test_an_escalation_decided_later_on_the_ladder_latches_the_turn(self):
        ctx, _ = make_ctx()
        # The switch accepts u1; the rules hold it for review (an unsupported name).
        first = await run([cand("u1", R_NAMED, session_id="S", turn=1)], ctx)
        assert record_of(first, "u1", "switch")["action"] == "accept"
        assert first.outcomes()["u1"]["topic"] == "escalations.review"
        # The agent step of that turn would accept on its own; the latch holds it.
        second = await run([cand("a1", R_ACCEPT, session_id="S", turn=1, initiator="agent")], ctx)
        assert record_of(second, "a1", "switch")["gate"] == "turn_latched"
        assert second.outputs[Topic.STATE] == []
        # The next user turn releases it.
        third = await run([cand("u2", R_ACCEPT, session_id="S", turn=2)], ctx)
        assert third.outcomes()["u2"]["topic"] == "state"

    async def test_latch_escalation_holds_the_next_user_turn(self):
        ctx, _ = make_ctx({"routes": {"default": {"latch_escalation": True}}})
        steps = [
            cand("u1", R_REJECT, session_id="S", turn=1),
            cand("u2", R_ACCEPT, session_id="S", turn=2),
        ]
        result = await run(steps, ctx)
        assert record_of(result, "u2", "switch")["gate"] == "turn_latched"
        assert result.outputs[Topic.STATE] == []
