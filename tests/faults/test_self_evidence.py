"""Self-supplied evidence on the real broker, one process per stage, real encoder: a
candidate that hands back its own response as context (bare or wrapped), grounds itself
on history, or brings copies of its response as samples never reaches `state`, while the
same answer with real retrieved evidence and distinct samples still does (issue 9)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.faults.chaos import Ladder, wait_for_outcomes
from tests.integration.conftest import consume_all, produce
from tests.integration.harness import FIXTURES, values
from topics.codec import dumps
from topics.names import Topic

pytestmark = pytest.mark.timeout(600)

CASES = {
    c["id"]: c
    for c in map(json.loads, (FIXTURES / "ladder" / "ladder_cases.jsonl").read_text().splitlines())
}
GOOD = CASES["cs-agree"]  # real retrieved context, distinct samples: consistency commits
RESPONSE = GOOD["response"]
SELF = {
    "se-echo": {"context": [RESPONSE]},
    "se-wrapped": {"context": [f"Assistant: {RESPONSE}"]},
    "se-history": {"context": [{"text": GOOD["context"], "source": "history"}]},
    "se-user": {"context": [{"text": GOOD["context"], "source": "user"}]},
    "se-copied-samples": {"samples": [RESPONSE, RESPONSE.upper(), f"{RESPONSE} "]},
}


def candidate(cid: str, **override: object) -> tuple[bytes, bytes]:
    body = {k: v for k, v in GOOD.items() if k != "id"} | {"id": cid, "session_id": f"s-{cid}"}
    return f"s-{cid}".encode(), dumps(body | override)


def test_self_supplied_evidence_never_reaches_state(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    items = [candidate(cid, **override) for cid, override in SELF.items()]
    items.append(candidate("se-control"))
    ladder = Ladder(kafka_bootstrap, topic_prefix, tmp_path)
    ladder.create_topics()
    ladder.start()
    try:
        asyncio.run(produce(kafka_bootstrap, Topic.CANDIDATES.full(topic_prefix), items))
        ids = [*SELF, "se-control"]
        done = asyncio.run(wait_for_outcomes(kafka_bootstrap, topic_prefix, ids, timeout=180))
    finally:
        ladder.stop()
    assert done == len(ids)
    records = values(
        asyncio.run(
            consume_all(
                kafka_bootstrap,
                Topic.DECISIONS.full(topic_prefix),
                timeout=30,
                isolation_level="read_committed",
            )
        )
    )
    topics = {r["candidate_id"]: r["topic"] for r in records if r["stage"] == "outcome"}
    print(f"\nself-evidence outcomes: {topics}")
    assert topics == {**dict.fromkeys(SELF, Topic.REVIEW.value), "se-control": "state"}
    geometry = {r["candidate_id"]: r for r in records if r["stage"] == "geometry"}
    for cid in ("se-echo", "se-wrapped", "se-history", "se-user"):
        assert geometry[cid]["gate"] == "no_evidence", geometry[cid]
        assert geometry[cid]["evidence"]["provenance"]["counted"] == []
    consistency = {r["candidate_id"]: r for r in records if r["stage"] == "consistency"}
    copied = consistency["se-copied-samples"]
    assert copied["action"] != "committed"
    assert copied["evidence"]["distinct_samples"]["distinct"] == 1
