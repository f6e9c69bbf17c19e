"""`groundstream audit record`: the audit recorder as a worker, one Kafka transaction a batch.

Per batch of `decisions` records, in ONE transaction: the audit entries, the public
projections, the chain heads (`audit.heads`, through `store.ChangelogStore`) and the
batch's input offsets. That is what makes the numbering exact — a crash neither skips a
sequence number (offsets committed without the entry) nor repeats one (the entry written
twice) — and the fixed transactional id makes a restarted recorder fence the one it
replaces and abort what that one left open. The heads are restored at read_committed for
the partitions held before a batch is recorded; a batch fetched under an assignment that
has since been revoked is dropped and the session starts over from the committed offsets.

Any error drops the pending heads, closes producer and consumer without committing and
starts over after a backoff. The recorder runs on aiokafka directly for the reason the
stages do (faust acks apart from its sends); when the stages' shared transactional loop
lands (issue 9), the recorder belongs on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition

from topics.names import MAX_MESSAGE_BYTES, Topic
from workers.runtime.settings import Settings
from workers.runtime.store import ChangelogStore
from workers.runtime.verify import make_context
from workers.stages.kit import Inbound, StageContext
from workers.stages.recorder import RecorderStage

log = logging.getLogger("groundstream.recorder")

READY_LINE = "recorder ready"
OP_TIMEOUT_S = 60.0
BACKOFF_S = (0.5, 1.0, 2.0, 4.0, 8.0)


class Revoked(RuntimeError):
    """Partitions were reassigned under a fetched batch: start over from the commits."""


class _Gate(ConsumerRebalanceListener):
    """A rebalance waits for the batch in hand; a batch fetched before one is dropped."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.revocations = 0

    async def on_partitions_revoked(self, revoked: object) -> None:
        async with self.lock:
            self.revocations += 1

    async def on_partitions_assigned(self, assigned: object) -> None:
        return None


class Recorder:
    """The recorder's consume → chain → commit loop (module docstring)."""

    def __init__(self, settings: Settings, key: bytes | None) -> None:
        self.settings = settings
        self.stage = RecorderStage(key)
        self.store = ChangelogStore(settings.topic(Topic.AUDIT_HEADS))
        self.ctx: StageContext = make_context(settings, settings.load_policy())
        self.ctx.sessions = self.store
        self.group = f"{settings.topic_prefix}groundstream-recorder"
        self.keyed = key is not None
        self.announced = False

    async def run(self) -> None:
        attempt = 0
        while True:
            try:
                await self._session()
            except Exception as exc:
                delay = BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)]
                attempt += 1
                log.warning("recorder: %r; nothing committed, starting over in %.1fs", exc, delay)
                await asyncio.sleep(delay)

    async def _session(self) -> None:
        s = self.settings
        consumer = AIOKafkaConsumer(
            bootstrap_servers=s.bootstrap_servers,
            group_id=self.group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            max_partition_fetch_bytes=MAX_MESSAGE_BYTES,
        )
        producer = AIOKafkaProducer(
            bootstrap_servers=s.bootstrap_servers,
            transactional_id=self.group,
            enable_idempotence=True,
            acks="all",
            max_request_size=MAX_MESSAGE_BYTES,
        )
        gate = _Gate()
        try:
            await asyncio.wait_for(producer.start(), OP_TIMEOUT_S)
            await asyncio.wait_for(consumer.start(), OP_TIMEOUT_S)
            consumer.subscribe([s.topic(Topic.DECISIONS)], listener=gate)
            while True:
                batches = await consumer.getmany(timeout_ms=500, max_records=s.batch_size)
                fetched_in = gate.revocations
                async with gate.lock:
                    if gate.revocations != fetched_in:
                        raise Revoked("partitions were reassigned under a fetched batch")
                    await self._restore(consumer)
                    records = [r for tp in sorted(batches) for r in batches[tp]]
                    if records:
                        await self._commit(producer, records)
        finally:
            self.store.rollback()
            self.store.partitions = frozenset()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(consumer.stop(), 10)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(producer.stop(), 10)

    async def _restore(self, consumer: AIOKafkaConsumer) -> None:
        held = frozenset(tp.partition for tp in consumer.assignment())
        if held != self.store.partitions:
            await asyncio.wait_for(
                self.store.restore(self.settings.bootstrap_servers, held), OP_TIMEOUT_S
            )
        if held and not self.announced:
            self.announced = True
            keyed = "keyed" if self.keyed else "unkeyed"
            print(f"{READY_LINE}: {keyed}, partitions {sorted(held)}", file=sys.stderr, flush=True)

    async def _commit(self, producer: AIOKafkaProducer, records: list) -> None:
        items = [
            Inbound(r.key, r.value, r.topic, r.partition, r.offset, tuple(r.headers or ()))
            for r in records
        ]
        offsets: dict[TopicPartition, int] = {}
        for r in records:
            tp = TopicPartition(r.topic, r.partition)
            offsets[tp] = max(offsets.get(tp, 0), r.offset + 1)
        emits = await self.stage.process(items, self.ctx)
        await asyncio.wait_for(producer.begin_transaction(), OP_TIMEOUT_S)
        futures = [
            await producer.send(self.settings.topic(e.topic), e.value, key=e.key) for e in emits
        ]
        futures += [
            await producer.send(self.store.topic, value, key=key)
            for key, value in self.store.changes()
        ]
        await asyncio.wait_for(asyncio.gather(*futures), OP_TIMEOUT_S)
        await asyncio.wait_for(
            producer.send_offsets_to_transaction(offsets, self.group), OP_TIMEOUT_S
        )
        await asyncio.wait_for(producer.commit_transaction(), OP_TIMEOUT_S)
        self.store.commit()


def run_recorder(settings: Settings, key: bytes | None) -> None:
    """Run until stopped; say `READY_LINE` on stderr once partitions are held."""
    asyncio.run(Recorder(settings, key).run())
