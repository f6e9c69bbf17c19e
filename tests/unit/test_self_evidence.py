"""A candidate cannot ground itself (issue 9, item 4), through the whole embedded ladder:
its response given back as a context chunk, context from untrusted sources, and samples
that copy it never reach `state`; what was excluded, and why, is in the record."""

from __future__ import annotations

from pipeline.policy.document import parse_policy
from tests.fixtures.fakes import FakeEncoder
from tests.fixtures.ladder_scenario import (
    CONTEXT,
    R_ACCEPT,
    R_REJECT,
    R_SAMPLED,
    SAMPLES,
    VECTORS,
    cand,
)
from workers.interfaces import StageContext
from workers.runtime.embedded import run_embedded
from workers.runtime.ladder import build_ladder
from workers.runtime.settings import Settings


async def outcomes(candidates: list[dict], routes: dict | None = None):
    policy = {"policy": {"version": "test-1"}, **({"routes": routes} if routes else {})}
    ctx = StageContext(policy=parse_policy(policy))
    ctx.services["encoder"] = FakeEncoder(VECTORS)
    result = await run_embedded(candidates, build_ladder(Settings()), ctx)
    topics = {cid: r["topic"] for cid, r in result.outcomes().items()}
    records = {(r["candidate_id"], r["stage"]): r for r in result.records}
    return topics, records


def chunk(text: str, source: str) -> dict:
    return {"text": text, "source": source}


async def test_the_response_as_its_own_context_is_not_evidence():
    topics, records = await outcomes(
        [
            cand("echo", R_ACCEPT, context=[R_ACCEPT]),
            cand("wrapped", R_ACCEPT, context=[f"Assistant: {R_ACCEPT}"]),
            cand("echo-beside-real", R_REJECT, context=[R_REJECT, CONTEXT]),
        ]
    )
    assert topics["echo"] == topics["wrapped"] == "escalations.review"
    # With the echo set aside, the real chunk decides: it does not support this answer.
    assert topics["echo-beside-real"] == "escalations.fallback"
    geometry = records[("echo", "geometry")]
    assert geometry["gate"] == "no_evidence"
    assert geometry["evidence"]["provenance"] == {
        "chunks": 1,
        "counted": [],
        "excluded": [{"index": 0, "source": "retrieval", "reason": "equals_response"}],
    }
    assert records[("echo-beside-real", "geometry")]["evidence"]["provenance"]["counted"] == [1]


async def test_only_the_sources_the_route_trusts_ground_an_answer():
    candidates = [
        cand("history", R_ACCEPT, context=[chunk(CONTEXT, "history")]),
        cand("user", R_ACCEPT, context=[chunk(CONTEXT, "user")]),
        cand("tool", R_ACCEPT, context=[chunk(CONTEXT, "tool")]),
        cand("bare", R_ACCEPT, context=[CONTEXT]),
    ]
    topics, records = await outcomes(candidates)
    assert topics == {
        "history": "escalations.review",
        "user": "escalations.review",
        "tool": "state",
        "bare": "state",
    }
    excluded = records[("history", "geometry")]["evidence"]["provenance"]["excluded"]
    assert excluded == [{"index": 0, "source": "history", "reason": "source_not_grounding"}]
    trusting = {"default": {"grounding_sources": ["retrieval", "history"]}}
    topics, _ = await outcomes(candidates[:1], trusting)
    assert topics == {"history": "state"}


async def test_samples_that_copy_the_response_count_once():
    copies = [R_SAMPLED, R_SAMPLED.upper(), f"{R_SAMPLED}!"]
    topics, records = await outcomes(
        [
            cand("copied", R_SAMPLED, samples=copies),
            cand("one-distinct", R_SAMPLED, samples=[SAMPLES[0], SAMPLES[0]]),
            cand("distinct", R_SAMPLED, samples=list(SAMPLES)),
        ]
    )
    assert topics == {
        "copied": "escalations.review",
        "one-distinct": "escalations.review",
        "distinct": "state",
    }
    consistency = records[("copied", "consistency")]
    assert consistency["action"] == "unresolved"
    assert consistency["evidence"]["distinct_samples"] == {
        "samples": 3,
        "distinct": 1,
        "copies_of_response": 3,
        "duplicates": 2,
        "min_distinct": 2,
        "enough": False,
    }


async def test_a_route_can_ask_for_more_distinct_samples():
    strict = {"default": {"min_distinct_samples": 3}}
    topics, records = await outcomes([cand("distinct", R_SAMPLED, samples=list(SAMPLES))], strict)
    assert topics == {"distinct": "escalations.review"}
    consistency = records[("distinct", "consistency")]
    assert (consistency["action"], consistency["gate"]) == (
        "unresolved",
        "too_few_distinct_samples",
    )
