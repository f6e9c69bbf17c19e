"""The claim reader's guards at the switch and the judge stage, over a real socket.

With a grounding model that weighs the reader's feature and a judge configured, the switch
sends an accept the reader doubts to the judge (`reader_accept_cut`), and the judge stage
sends a yes on a claim the reader finds clearly unsupported to review (`reader_veto_cut`);
where the model gives the reader no weight, the feature holds no reading and both guards
stand aside. The judge is the scripted OpenAI-compatible server, always saying yes.
"""

from __future__ import annotations

import asyncio

from pipeline.policy.document import parse_policy
from pipeline.scores.grounding import CLAIM_READER, FEATURES
from pipeline.scores.results import GroundingScore, SGIResult
from tests.fakes.openai_server import FakeOpenAIServer, Verdict
from topics.codec import loads
from topics.names import Topic
from topics.schema import Candidate, Envelope, GeometryPayload
from workers.interfaces import EndpointConfig, Inbound, StageContext
from workers.stages.judge import JudgeStage
from workers.stages.switch import SwitchStage

GUARDED = {"reader_accept_cut": 0.5, "reader_veto_cut": 0.2}


def policy(reader_weight: float) -> dict:
    """A sure-grounded model (P ≈ 1 whatever it reads) that weighs the reader or not."""
    coefficients = [reader_weight if name == CLAIM_READER else 0.0 for name in FEATURES]
    return {
        "policy": {"version": "guards-1"},
        "thresholds": {"grounding_accept": 0.8, "grounding_review": 0.5},
        "grounding": {"features": list(FEATURES), "coefficients": coefficients, "intercept": 20},
        "routes": {"default": {"mode": "evaluate", **GUARDED}},
    }


def envelope(cid: str, reader: float) -> Envelope:
    score = GroundingScore(0.99, SGIResult(1.5, 1.0, 0.6, 0, 1), {CLAIM_READER: reader})
    c = Candidate(id=cid, session_id=f"s-{cid}", question="q?", response="r.")
    return Envelope(candidate=c, route="default", mode="evaluate", geometry=GeometryPayload(score))


def records(emits) -> dict[str, dict]:
    out = {}
    for e in emits:
        if e.topic is Topic.DECISIONS:
            r = loads(e.value)
            out[r["candidate_id"]] = r
    return out


async def through(stage, envs: list[Envelope], policy_table: dict) -> dict[str, dict]:
    ctx = StageContext(policy=parse_policy(policy_table), clock=lambda: 1e9)
    batch = [
        Inbound(e.candidate.session_id.encode(), e.encode(), "t", 0, i) for i, e in enumerate(envs)
    ]
    try:
        return records(await stage.process(batch, ctx))
    finally:
        await stage.close()


def test_an_accept_the_reader_doubts_goes_to_the_judge_a_sure_one_does_not() -> None:
    stage = SwitchStage(EndpointConfig(url="http://127.0.0.1:9/v1", model="judge"))
    got = asyncio.run(through(stage, [envelope("doubt", 0.3), envelope("sure", 0.9)], policy(1.0)))
    assert got["doubt"]["action"] == "escalate"
    assert "reader_accept_cut 0.500" in got["doubt"]["reason"]
    assert got["sure"]["action"] == "accept"
    # A model that gives the reader no weight never ran it: 0.0 is no reading.
    unread = asyncio.run(
        through(SwitchStage(EndpointConfig(url="http://x/v1")), [envelope("d", 0.0)], policy(0.0))
    )
    assert unread["d"]["action"] == "accept"


def test_a_judge_yes_on_a_clearly_unsupported_claim_goes_to_review() -> None:
    async def scenario() -> tuple[dict, dict, int]:
        async with FakeOpenAIServer(default=Verdict(p_yes=0.98)) as server:
            judge = EndpointConfig(url=server.base_url, model="judge")
            envs = [envelope("vetoed", 0.05), envelope("agreed", 0.6)]
            weighed = await through(JudgeStage(judge), envs, policy(1.0))
            unweighed = await through(JudgeStage(judge), [envelope("v2", 0.0)], policy(0.0))
            return weighed, unweighed, len(server.requests)

    weighed, unweighed, asked = asyncio.run(scenario())
    assert asked == 3  # the judge was asked every time: the veto reads its yes
    assert weighed["vetoed"]["action"] == "escalate"
    assert weighed["vetoed"]["gate"] == "reader_veto"
    assert "reader_veto_cut 0.200" in weighed["vetoed"]["reason"]
    assert weighed["agreed"]["action"] == "accept" and weighed["agreed"]["gate"] is None
    assert unweighed["v2"]["action"] == "accept"
