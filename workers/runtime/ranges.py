"""Reading a range of a topic, committed messages only: what replay and audit read.

A range starts and ends at a `pipeline.trail.replay.Position` — an offset applied to every
partition, or a time resolved per partition with the broker's time index — and is read
without a consumer group, at read_committed (stages write in transactions: an aborted
attempt's outputs are never part of what an auditor sees). With no end, the range runs to
each partition's last stable offset as of the call, so a live topic does not keep the
read open forever.
"""

from __future__ import annotations

from collections.abc import Callable

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from pipeline.trail.replay import Position
from workers.clients.partitions import partitions
from workers.runtime.kafka_tools import reader
from workers.runtime.settings import Settings


async def _resolve(
    consumer: AIOKafkaConsumer,
    tps: list[TopicPartition],
    position: Position | None,
    default: dict[TopicPartition, int],
) -> dict[TopicPartition, int]:
    """Each partition's offset for `position`, clamped to [beginning, end]; `default`
    where no position is given or no message is at or after the time."""
    if position is None:
        return dict(default)
    if position.offset is not None:
        return {tp: position.offset for tp in tps}
    found = await consumer.offsets_for_times({tp: position.epoch_ms for tp in tps})
    return {tp: (default[tp] if found[tp] is None else found[tp].offset) for tp in tps}


async def read_range(
    settings: Settings,
    topic: str,
    start: Position | None = None,
    end: Position | None = None,
    on_record: Callable[[int, int], None] | None = None,
) -> list[ConsumerRecord]:
    """Committed records of `topic` from `start` (inclusive) to `end` (exclusive), in
    offset order per partition, partitions one after another. `on_record(done, total)`
    reports progress."""
    consumer = reader(settings, topic)
    await consumer.start()
    try:
        tps = await partitions(consumer, topic)
        firsts = await consumer.beginning_offsets(tps)
        lasts = await consumer.end_offsets(tps)
        begin = await _resolve(consumer, tps, start, firsts)
        stop = await _resolve(consumer, tps, end, lasts)
        begin = {tp: max(firsts[tp], min(begin[tp], lasts[tp])) for tp in tps}
        stop = {tp: max(begin[tp], min(stop[tp], lasts[tp])) for tp in tps}
        total = sum(stop[tp] - begin[tp] for tp in tps)
        out: list[ConsumerRecord] = []
        for tp in tps:
            consumer.seek(tp, begin[tp])
        pending = {tp for tp in tps if begin[tp] < stop[tp]}
        while pending:
            batches = await consumer.getmany(*pending, timeout_ms=1000)
            for tp, records in batches.items():
                out.extend(r for r in records if r.offset < stop[tp])
                if on_record is not None:
                    on_record(len(out), total)
            pending = {tp for tp in pending if await consumer.position(tp) < stop[tp]}
        out.sort(key=lambda r: (r.partition, r.offset))
        return out
    finally:
        await consumer.stop()
