"""The bench's own Kafka clients: produce candidates, and watch topics for their outcomes.

Outputs are read at `read_committed`, as every reader of the ladder reads them, from the
topics' end at the moment the watch starts; each arrival is stamped with this process's
`perf_counter`, the clock the produce side stamps with too.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition

from topics import clients
from topics.codec import dumps, loads
from topics.names import MAX_MESSAGE_BYTES
from workers.bench.procs import BenchError, connection

METADATA_WAIT_S = 30.0
"""How long a watch waits for a new topic's partitions to be listed."""


def candidate_id(value: bytes) -> str | None:
    """The candidate id of an envelope, a decision record or a candidate; None if none."""
    try:
        v = loads(value)
    except ValueError:
        return None
    if not isinstance(v, dict):
        return None
    inner = v.get("candidate")
    if isinstance(inner, dict) and isinstance(inner.get("id"), str):
        return inner["id"]
    found = v.get("candidate_id", v.get("id"))
    return found if isinstance(found, str) else None


def decided_by(stage: str) -> Callable[[bytes], str | None]:
    """Match a `decisions` record written by `stage`: its candidate id."""

    def match(value: bytes) -> str | None:
        try:
            record = loads(value)
        except ValueError:
            return None
        if isinstance(record, dict) and record.get("stage") == stage:
            return record.get("candidate_id")
        return None

    return match


def producer(bootstrap: str, *, transactional: bool = False) -> AIOKafkaProducer:
    return clients.producer(
        connection(bootstrap),
        acks="all",
        linger_ms=5,
        max_request_size=MAX_MESSAGE_BYTES,
        transactional_id=f"bench-{uuid.uuid4().hex}" if transactional else None,
    )


async def produce(
    bootstrap: str,
    topic: str,
    messages: Sequence[dict | tuple[bytes | None, bytes]],
    *,
    rate: float | None = None,
    atomic: bool = False,
) -> dict[str, float]:
    """Send candidates (dicts, keyed by session) or (key, value) pairs; at `rate` per second
    when given, else as fast as the client goes. The send time of each, by candidate id.

    `atomic`: all in one transaction, so a `read_committed` reader (every worker) sees them
    at once, when it commits; each one's send time is then that moment. A throughput bench
    so times the stage from when its whole input is there, not its own producing."""
    sent: dict[str, float] = {}
    client = producer(bootstrap, transactional=atomic)
    await client.start()
    try:
        if atomic:
            await client.begin_transaction()
        futures = []
        started = time.perf_counter()
        for i, m in enumerate(messages):
            if rate is not None:
                await asyncio.sleep(max(0.0, started + i / rate - time.perf_counter()))
            if isinstance(m, dict):
                key, value, cid = m["session_id"].encode(), dumps(m), m["id"]
            else:
                key, value = m
                cid = candidate_id(value) or str(i)
            sent[cid] = time.perf_counter()
            futures.append(await client.send(topic, value, key=key))
        await asyncio.gather(*futures)
        if atomic:
            await client.commit_transaction()
            visible = time.perf_counter()
            sent = dict.fromkeys(sent, visible)
    finally:
        await client.stop()
    return sent


class Watch:
    """Topics read from their current end: `arrivals` stamps each matching candidate id
    when read here; `written` keeps the record's own timestamp (when its writer sent it)."""

    def __init__(
        self,
        bootstrap: str,
        topics: Sequence[str],
        match: Callable[[bytes], Any] = candidate_id,
        *,
        isolation: str = "read_committed",
    ) -> None:
        self.bootstrap, self.topics, self.match = bootstrap, list(topics), match
        self.isolation = isolation
        """read_committed: as the ladder's readers see the topics; read_uncommitted: as
        their writers write them, before their transactions commit (or abort)."""
        self.arrivals: dict[str, float] = {}
        self.written: dict[str, float] = {}
        self.count = 0

    async def __aenter__(self) -> Watch:
        self.consumer = clients.consumer(
            connection(self.bootstrap),
            group_id=None,
            enable_auto_commit=False,
            isolation_level=self.isolation,
            fetch_max_wait_ms=20,
            max_partition_fetch_bytes=MAX_MESSAGE_BYTES,
        )
        await self.consumer.start()
        tps = []
        for topic in self.topics:
            parts = self.consumer.partitions_for_topic(topic)
            deadline = time.monotonic() + METADATA_WAIT_S
            while not parts:
                # A topic created a moment ago: the broker that answers may not list it yet
                # (a loaded machine takes seconds), so ask again until it does.
                if time.monotonic() > deadline:
                    raise BenchError(f"topic {topic} has no partitions after {METADATA_WAIT_S}s")
                await self.consumer._client.force_metadata_update()
                parts = self.consumer.partitions_for_topic(topic)
                if not parts:
                    await asyncio.sleep(0.2)
            tps += [TopicPartition(topic, p) for p in sorted(parts)]
        self.consumer.assign(tps)
        await self.consumer.seek_to_end(*tps)
        for tp in tps:
            await self.consumer.position(tp)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.consumer.stop()

    async def until(self, want: set[str] | int, timeout: float) -> dict[str, float]:
        """Read until every id of `want` (or `want` matches in all) arrived; the arrivals."""
        deadline = time.perf_counter() + timeout
        done = (lambda: want <= self.arrivals.keys()) if isinstance(want, set) else None
        while not (done() if done else self.count >= want):
            if time.perf_counter() > deadline:
                missing = len(want - self.arrivals.keys()) if isinstance(want, set) else want
                raise BenchError(f"{missing} outputs never arrived on {', '.join(self.topics)}")
            await self.poll(200)
        return self.arrivals

    async def poll(self, timeout_ms: int) -> None:
        """One fetch: stamp each matching candidate id read for the first time."""
        batch = await self.consumer.getmany(timeout_ms=timeout_ms)
        now = time.perf_counter()
        for records in batch.values():
            for r in records:
                cid = self.match(r.value)
                if cid is not None and cid not in self.arrivals:
                    self.arrivals[cid] = now
                    self.written[cid] = r.timestamp / 1000
                    self.count += 1


async def through(
    bootstrap: str,
    source: str,
    messages: Sequence[dict | tuple[bytes | None, bytes]],
    watch: Sequence[str],
    match: Callable[[bytes], Any] = candidate_id,
    *,
    rate: float | None = None,
    atomic: bool = False,
    timeout: float = 900.0,
) -> tuple[float, dict[str, float], dict[str, float]]:
    """Produce `messages` to `source` and wait for each on `watch`: the seconds from the
    first send (with `atomic`, from when all became visible at once) to the last arrival,
    the send times and the arrival times by candidate id."""
    want = {m["id"] if isinstance(m, dict) else candidate_id(m[1]) for m in messages}
    async with Watch(bootstrap, watch, match) as w:
        # Read while producing: an arrival is stamped when it is read.
        reading = asyncio.create_task(w.until(want - {None}, timeout))
        sent = await produce(bootstrap, source, messages, rate=rate, atomic=atomic)
        arrivals = await reading
    return max(arrivals.values()) - min(sent.values()), sent, arrivals
