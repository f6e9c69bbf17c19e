"""Property-based fuzzing of every stage's input on the real broker, one process per stage.

Hypothesis writes the corpus (tests/fixtures/fuzz.py): well over 1,000 malformed messages,
each aimed at one stage's input topic, mixed with good candidates and envelopes. Then:
each bad message ends in `deadletter` with a reason, with its outcome record under its
candidate id when it has a readable one; no good one is dead-lettered; every good one has
its outcome; no worker dies or restarts (issue 9, "What must be shown")."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.faults.chaos import Ladder, wait_for_outcomes
from tests.fixtures.fuzz import INPUTS, TEMPLATE, corpus, is_good, readable_id, with_id
from tests.integration.conftest import consume_all, produce
from tests.integration.harness import values
from topics.codec import dumps
from topics.names import Topic

pytestmark = pytest.mark.timeout(900)

EXAMPLES = 1600  # about three in four come out malformed
GOOD_EXTRA = 150  # plain good candidates, so the good ones are not all rare corner cases
BAD_WANTED = 1000


@dataclass(frozen=True)
class Sent:
    topic: Topic
    key: bytes
    value: bytes
    cid: str | None
    good: bool


def build() -> list[Sent]:
    messages = corpus(EXAMPLES) + [(Topic.CANDIDATES, dumps(TEMPLATE))] * GOOD_EXTRA
    sent = []
    for i, (topic, raw) in enumerate(messages):
        value = with_id(raw, f"fz-{i:05d}")
        key = f"fz-s{i % 50}".encode()
        sent.append(Sent(topic, key, value, readable_id(topic, value), is_good(topic, value)))
    return sent


def outcome_records(bootstrap: str, prefix: str) -> dict[str, list[dict]]:
    read = consume_all(
        bootstrap, Topic.DECISIONS.full(prefix), timeout=60, isolation_level="read_committed"
    )
    out: dict[str, list[dict]] = {}
    for r in values(asyncio.run(read)):
        if r["stage"] == "outcome":
            out.setdefault(r["candidate_id"], []).append(r)
    return out


def test_fuzzed_inputs_are_dead_lettered_under_their_ids_and_good_ones_never(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    sent = build()
    bad = [s for s in sent if not s.good]
    good = [s for s in sent if s.good]
    by_topic = dict(Counter(s.topic.value for s in bad))
    print(f"\nfuzz corpus: {len(bad)} malformed {by_topic}, {len(good)} good")
    assert len(bad) >= BAD_WANTED
    assert len({s.cid for s in good}) == len(good)

    ladder = Ladder(kafka_bootstrap, topic_prefix, tmp_path)
    ladder.create_topics()
    ladder.start()
    try:
        for topic in INPUTS:
            items = [(s.key, s.value) for s in sent if s.topic is topic]
            asyncio.run(produce(kafka_bootstrap, topic.full(topic_prefix), items))
        named = [s.cid for s in sent if s.cid is not None]
        asyncio.run(wait_for_outcomes(kafka_bootstrap, topic_prefix, named, timeout=240))
        alive = ladder.alive()
        ready = {name: w.ready_count() for name, w in ladder.workers.items()}
    finally:
        ladder.stop()

    outcomes = outcome_records(kafka_bootstrap, topic_prefix)
    dead = [r for rs in outcomes.values() for r in rs if r["topic"] == Topic.DEADLETTER.value]
    topics_of = {cid: [r["topic"] for r in rs] for cid, rs in outcomes.items()}
    good_dead = [s.cid for s in good if Topic.DEADLETTER.value in topics_of.get(s.cid, [])]
    good_missing = [s.cid for s in good if s.cid not in topics_of]
    bad_named = [s for s in bad if s.cid is not None]
    misnamed = [s.cid for s in bad_named if topics_of.get(s.cid) != [Topic.DEADLETTER.value]]
    print(
        f"outcomes {sum(map(len, outcomes.values()))}, dead letters {len(dead)} (malformed "
        f"{len(bad)}, {len(bad_named)} with a readable id), good dead-lettered "
        f"{len(good_dead)}, good without an outcome {len(good_missing)}"
    )
    assert all(alive.values()), alive
    assert set(ready.values()) == {1}, ready  # no worker restarted
    assert not good_dead, good_dead[:10]
    assert not good_missing, good_missing[:10]
    assert not misnamed, misnamed[:10]
    assert all(r["reason"] for r in dead)
    assert len(dead) == len(bad)
