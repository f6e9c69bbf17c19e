"""A keyed state table backed by a compacted changelog topic, written inside the batch's
transaction.

Why not faust's table: faust flushes a table's changelog on its own schedule, apart from
the commit of the input offsets, so a crash can leave the state ahead of or behind the
offsets (the switch's session latch moved by an attempt whose outputs never existed).
Here a stage writes to the table during a batch; the writes stay pending until the loop
sends them to the changelog in the same transaction as the batch's outputs and input
offsets (`changes`, then `commit`), or drops them with the batch (`rollback`). On
(re)assignment the table is rebuilt by reading its changelog partitions to their end at
read_committed, so it holds exactly what committed transactions wrote — nothing of an
aborted one. The changelog is co-partitioned with the source: both are keyed by the same
bytes and hashed by the same partitioner over the same number of partitions — or, for a
table whose keys are not the source's (the judge's spend and verdict cache, one set per
source partition), `placement` names each key's partition and the entry is written there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from typing import Any

from aiokafka import TopicPartition

from topics import clients
from topics.clients import KafkaConnection
from topics.codec import dumps, loads
from topics.names import MAX_MESSAGE_BYTES

log = logging.getLogger("groundstream.store")
_DELETED = object()
_MISSING = object()


class ChangelogStore(MutableMapping[bytes, Any]):
    """JSON values by bytes key; pending writes on top of the committed table."""

    def __init__(self, topic: str, placement: Callable[[bytes], int | None] | None = None) -> None:
        self.topic = topic
        self.placement = placement
        """The changelog partition of a key, for tables not keyed like their source (None:
        the partitioner's, by the key's hash, as the source's keys are placed)."""
        self._data: dict[bytes, Any] = {}
        self._pending: dict[bytes, Any] = {}
        self.partitions: frozenset[int] = frozenset()

    def __getitem__(self, key: bytes) -> Any:
        value = self._pending.get(key, self._data.get(key, _DELETED))
        if value is _DELETED:
            raise KeyError(key)
        return value

    def __setitem__(self, key: bytes, value: Any) -> None:
        self._pending[key] = value

    def __delitem__(self, key: bytes) -> None:
        self[key]  # KeyError for a key that is not there, as a dict would
        self._pending[key] = _DELETED

    def __iter__(self) -> Iterator[bytes]:
        return iter([k for k in {**self._data, **self._pending} if k in self])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, key: object) -> bool:
        return self._pending.get(key, self._data.get(key, _DELETED)) is not _DELETED  # type: ignore[call-overload]

    def changes(self) -> list[tuple[bytes, bytes | None]]:
        """The pending writes as changelog messages (None is a tombstone)."""
        return [(k, None if v is _DELETED else dumps(v)) for k, v in self._pending.items()]

    def partition_for(self, key: bytes) -> int | None:
        """Where `key`'s changelog entry goes: its `placement`, else None (by its hash)."""
        return None if self.placement is None else self.placement(key)

    def commit(self, sent: list[tuple[bytes, bytes | None]] | None = None) -> None:
        """The pending writes are committed; with `sent` (the `changes()` a transaction
        carried), only those: a write made while it was in flight (a stage that decides
        while it commits, `loop.StageLoop._flow`) stays pending for the next one."""
        if sent is None:
            for key, value in self._pending.items():
                if value is _DELETED:
                    self._data.pop(key, None)
                else:
                    self._data[key] = value
            self._pending.clear()
            return
        for key, message in sent:
            current = self._pending.get(key, _MISSING)
            same = current is not _MISSING and message == (
                None if current is _DELETED else dumps(current)
            )
            if same:
                del self._pending[key]
            if message is None:
                self._data.pop(key, None)
            else:
                self._data[key] = current if same else loads(message)

    def rollback(self) -> None:
        self._pending.clear()

    def savepoint(self) -> Callable[[], None]:
        """A function that drops the pending writes made after this call."""
        kept = dict(self._pending)

        def restore() -> None:
            self._pending = dict(kept)

        return restore

    def load(
        self, entries: Iterable[tuple[bytes, bytes | None]], partitions: Iterable[int]
    ) -> None:
        """Replace the table by the changelog `entries` of `partitions`, read in order."""
        self._data.clear()
        self._pending.clear()
        for key, value in entries:
            if value is None:
                self._data.pop(key, None)
                continue
            try:
                self._data[key] = loads(value)
            except ValueError:
                log.warning("skipping an unreadable changelog entry on %s", self.topic)
        self.partitions = frozenset(partitions)

    async def restore(self, kafka: KafkaConnection, partitions: Iterable[int]) -> None:
        """Rebuild the table from the changelog partitions, committed writes only."""
        wanted = sorted(set(partitions))
        entries = await read_to_end(kafka, self.topic, wanted)
        self.load(entries, wanted)
        log.info(
            "restored %d entries of %s from partitions %s", len(self._data), self.topic, wanted
        )


async def read_to_end(
    kafka: KafkaConnection, topic: str, partitions: list[int]
) -> list[tuple[bytes, bytes | None]]:
    """Every committed (key, value) on `partitions` of `topic`, up to their last stable
    offset as of the call, in offset order per partition."""
    if not partitions:
        return []
    consumer = clients.consumer(
        kafka,
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        max_partition_fetch_bytes=MAX_MESSAGE_BYTES,
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        out: list[tuple[bytes, bytes | None]] = []
        pending = {tp for tp in tps if ends[tp] > 0}
        while pending:
            batches = await consumer.getmany(*pending, timeout_ms=1000)
            for tp, records in batches.items():
                out.extend((r.key or b"", r.value) for r in records if r.offset < ends[tp])
            pending = {tp for tp in pending if await consumer.position(tp) < ends[tp]}
        return out
    finally:
        await consumer.stop()
