"""The benches' own Kafka clients on the real broker: an atomic produce is invisible to a
`read_committed` reader until it commits, and `through` times from that moment."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from workers.bench.data import unique_candidates
from workers.bench.kafka import Watch, produce, through

pytestmark = pytest.mark.integration


async def test_atomic_produce_is_seen_whole_and_stamped_at_its_commit(
    kafka_bootstrap: str, topic_prefix: str, kafka_helpers: SimpleNamespace
) -> None:
    topic = topic_prefix + "bench-atomic"
    await kafka_helpers.create_topics(kafka_bootstrap, [topic], partitions=2)
    rows = unique_candidates(12, "atomic")
    async with Watch(kafka_bootstrap, [topic]) as watch:
        sent = await produce(kafka_bootstrap, topic, rows, atomic=True)
        arrivals = await watch.until({r["id"] for r in rows}, timeout=30)
    assert set(sent) == set(arrivals) == {r["id"] for r in rows}
    assert len(set(sent.values())) == 1  # one moment: the commit
    assert min(arrivals.values()) >= next(iter(sent.values()))


async def test_through_times_from_the_commit_to_the_last_arrival(
    kafka_bootstrap: str, topic_prefix: str, kafka_helpers: SimpleNamespace
) -> None:
    topic = topic_prefix + "bench-through"
    await kafka_helpers.create_topics(kafka_bootstrap, [topic])
    rows = unique_candidates(5, "through")
    seconds, sent, arrivals = await through(kafka_bootstrap, topic, rows, [topic], atomic=True)
    assert seconds == pytest.approx(max(arrivals.values()) - min(sent.values()))
    assert 0 <= seconds < 30
