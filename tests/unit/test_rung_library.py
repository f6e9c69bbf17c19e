"""Library = service for every rung: a caller of `pipeline.stages.<rung>` gets the verdict
the stage's worker records for the same input (action, reason, gate, level, evidence),
and the routing table sends it where the record says."""

from __future__ import annotations

import asyncio

import numpy as np

from pipeline.policy.document import load_policy
from pipeline.policy.sessions import SessionState
from pipeline.scores.results import SGIResult
from pipeline.stages import consistency, geometry, review, rules, switch, terminal
from pipeline.stages.review import Claim
from pipeline.trail.ledger import Attempt
from pipeline.trail.verdict import Verdict
from tests.fixtures.fakes import FakeEncoder
from topics.codec import dumps, loads
from topics.conclusion import Conclusion, read_conclusion
from topics.names import Topic
from topics.schema import Candidate, Envelope, GeometryPayload, candidate_from_dict
from workers.interfaces import EndpointConfig, Inbound, StageContext
from workers.stages.consistency import ConsistencyStage
from workers.stages.geometry import GeometryStage
from workers.stages.review import review_emits
from workers.stages.routes import route
from workers.stages.rules import RulesStage
from workers.stages.switch import SwitchStage
from workers.stages.terminal import deliver

NOW = 1_700_000_000.0
POLICY = load_policy(None)


def ctx(**kw) -> StageContext:
    return StageContext(policy=POLICY, clock=lambda: NOW, **kw)


def records(emits) -> list[dict]:
    return [loads(e.value) for e in emits if e.topic is Topic.DECISIONS]


def sent_to(emits) -> str:
    """Where the candidate went: the outcome's topic when it ended, else the next stage's."""
    sent = next(e for e in emits if e.topic is not Topic.DECISIONS)
    if sent.topic is Topic.CONCLUDED:
        return read_conclusion(sent.value, sent.headers).topic
    return sent.topic.value


def agrees(emits, verdict: Verdict, stage: str) -> None:
    """The record says what the verdict says, and the envelope went where it routes."""
    record = records(emits)[0]
    assert (record["action"], record["reason"], record.get("gate")) == (
        verdict.action,
        verdict.reason,
        verdict.gate,
    )
    assert record.get("level") == verdict.level
    assert record.get("evidence") == (None if verdict.evidence is None else dict(verdict.evidence))
    assert sent_to(emits) == route(stage, verdict.routing).value


def envelope(candidate: Candidate, **kw) -> Envelope:
    return Envelope(candidate=candidate, route="default", mode="active", **kw)


CANDIDATE = candidate_from_dict(
    {
        "id": "c1",
        "session_id": "s1",
        "question": "How long are deleted files kept?",
        "context": "Deleted files are kept for 90 days.",
        "response": "They are kept for 90 days.",
    }
)


def test_geometry_screen_is_the_records_verdict_for_a_candidate_over_the_caps() -> None:
    big = candidate_from_dict({**CANDIDATE.to_dict(), "response": "word " * 800})
    c = ctx()
    raw = dumps(big.to_dict())
    emits = asyncio.run(GeometryStage().process([Inbound(b"s1", raw, "candidates", 0, 1)], c))
    route_ = geometry.route_of(big, POLICY, c.default_route)
    verdict = geometry.screen(big, route_, POLICY, None, NOW, c.caps)
    assert verdict is not None and verdict.gate == "work_cap"
    agrees(emits, verdict, "geometry")


def test_switch_decide_is_the_records_verdict() -> None:
    score = SGIResult(0.4, 1.2, 1.3, 0, 1)
    env = envelope(CANDIDATE, geometry=GeometryPayload(score))
    emits = SwitchStage().decide(env, ctx())
    r = POLICY.route("default")
    verdict, _ = switch.decide(
        CANDIDATE,
        r,
        SessionState(),
        score,
        POLICY.switch(r),
        POLICY.thresholds_dict("default"),
        POLICY.grounding_for("default"),
        False,
    )
    agrees(emits, verdict, "switch")


def test_consistency_decide_is_the_records_verdict() -> None:
    samples = ("They are kept for 90 days.", "Ninety days.", "Kept 90 days, then purged.")
    c = candidate_from_dict({**CANDIDATE.to_dict(), "samples": list(samples)})
    encoder = FakeEncoder(
        {
            c.response: [1.0, 0.0, 0.0],
            samples[1]: [0.9, 0.1, 0.0],
            samples[2]: [0.95, 0.05, 0.0],
        }
    )
    stage_ctx = ctx(services={"encoder": encoder})
    emits = asyncio.run(ConsistencyStage(EndpointConfig()).decide_one(envelope(c), stage_ctx))
    own = consistency.supplied(c, POLICY.route("default"))
    texts = [c.response, *consistency.samples_of(own, None)]
    sim = consistency.similarities(np.asarray(encoder.encode(texts)))
    verdict = consistency.decide(own, None, sim, POLICY.consistency, nli=False)
    agrees(emits, verdict, "consistency")


def test_rules_decide_is_the_records_verdict_and_the_kill_switch_holds() -> None:
    env = envelope(CANDIDATE)
    for kill in (False, True):
        stage_ctx = ctx()
        stage_ctx.control.kill_switch = kill
        emits = asyncio.run(RulesStage().decide_one(env, stage_ctx))
        verdict = rules.decide(env, POLICY.route("default"), POLICY.rules, stage_ctx.caps, kill)
        agrees(emits, verdict, "rules")
        assert (verdict.gate == "kill_switch") is kill


def test_review_decide_is_the_records_verdict() -> None:
    claim = Claim("k1", "c1", "parked", "reject", "alice", "wrong date", NOW)
    emits = review_emits(ctx(), envelope(CANDIDATE, last_hash="parked"), claim)
    agrees(emits, review.decide(claim), "review")


def test_terminal_decide_is_what_the_writer_delivers() -> None:
    outcome = {"hash": "h1", "decided_at": "t", "action": "accept", "reason": "r"}
    attempt = Attempt("c1", "state")
    first = terminal.decide(None, attempt, outcome, NOW)
    assert first.entry is not None and first.superseded is None
    later = terminal.decide(first.entry, Attempt("c1", "escalations.reject"), outcome, NOW)
    assert later.entry is None and later.superseded["stage"] == "superseded"
    ledger: dict = {}
    emits = deliver(ledger, Conclusion("c1", "state", b"s1", b"{}", outcome), NOW)
    assert ledger[b"c1"] == first.entry and len(emits) == 2
