"""A batch too big for memory is halved, not retried whole until the worker gives up
(issue 33, item 6): the terminal writer, on a machine that holds no more than three
candidates at once, still delivers 20 conclusions on the real broker, every candidate
exactly once (outcome record, terminal message, ledger entry, read at read_committed),
with every input offset committed and the worker still running."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Sequence

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from pipeline.policy.document import load_policy
from tests.faults.chaos import accepted_conclusion
from tests.integration.conftest import consume_all, until
from topics.admin import create_topics
from topics.clients import KafkaConnection
from topics.codec import loads
from topics.names import Topic
from workers.interfaces import Emit, Inbound, StageContext
from workers.runtime.loop import StageLoop
from workers.runtime.settings import Settings
from workers.runtime.store import ChangelogStore
from workers.runtime.telemetry import StageTelemetry
from workers.stages.terminal import TerminalStage

pytestmark = pytest.mark.timeout(300)

N = 20
FITS = 3
"""The most candidates the cramped stage decides at once."""
PATIENCE_S = 20.0
"""The worker's `give_up_s`: the old loop, retrying the whole batch, gives up past it."""


class Cramped:
    """The terminal writer that runs out of memory on more than FITS candidates, after it
    has written their ledger entries: those writes must not outlive the failed attempt, or
    the halves would find every candidate already delivered and record it as superseded."""

    name, source, reads_control = "terminal", Topic.CONCLUDED, False

    def __init__(self, ledger: ChangelogStore) -> None:
        self.inner = TerminalStage(ledger)
        self.sizes: list[int] = []

    async def process(self, batch: Sequence[Inbound], ctx: StageContext) -> list[Emit]:
        self.sizes.append(len(batch))
        emits = await self.inner.process(batch, ctx)
        if len(batch) > FITS:
            raise MemoryError(f"{len(batch)} candidates do not fit")
        return emits

    async def close(self) -> None:
        return None


async def send_conclusions(settings: Settings, ids: list[str]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap_servers, acks="all")
    await producer.start()
    try:
        for cid in ids:
            c = accepted_conclusion(cid)
            await producer.send(
                settings.topic(Topic.CONCLUDED),
                value=c.value,
                key=c.wire_key(),
                headers=list(c.wire_headers()),
            )
        await producer.flush()
    finally:
        await producer.stop()


async def committed(settings: Settings, group: str) -> dict[TopicPartition, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers)
    await admin.start()
    try:
        found = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return {tp: meta.offset for tp, meta in found.items() if meta.offset >= 0}


async def read(settings: Settings, topic: Topic) -> list:
    return await consume_all(
        settings.bootstrap_servers,
        settings.topic(topic),
        timeout=20,
        isolation_level="read_committed",
    )


async def test_a_batch_that_runs_out_of_memory_is_halved_and_delivered_exactly_once(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    settings = Settings(
        bootstrap_servers=kafka_bootstrap, topic_prefix=topic_prefix, partitions=2, batch_size=64
    )
    await create_topics(KafkaConnection(kafka_bootstrap), topic_prefix, settings.partitions, 1)
    ids = [f"split-{i:02d}" for i in range(N)]
    await send_conclusions(settings, ids)

    store = ChangelogStore(settings.topic(Topic.OUTCOMES))
    stage = Cramped(store)
    worker = StageLoop(
        stage,  # type: ignore[arg-type]
        settings,
        StageContext(policy=load_policy(None)),
        StageTelemetry(stage.name, settings.topic(Topic.CONCLUDED)),
        store=store,
        give_up_s=PATIENCE_S,
    )
    source = settings.topic(Topic.CONCLUDED)

    async def all_committed() -> bool:
        if worker_task.done():
            return True
        try:
            return sum((await committed(settings, worker.group_id)).values()) >= N
        except KafkaError:  # a broker just started: no group coordinator yet
            return False

    worker_task = asyncio.create_task(worker.run())
    try:
        await until(all_committed, timeout=PATIENCE_S * 4)
        if worker_task.done():  # gave up (the old loop: RetriesExhausted), or crashed
            pytest.fail(f"the worker ended: {worker_task.exception()!r}")
    finally:
        worker_task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):  # reported above
            await worker_task

    assert max(stage.sizes) > FITS, stage.sizes  # a batch did run out of memory
    decided = [n for n in stage.sizes if n <= FITS]
    assert sum(decided) >= N, stage.sizes

    offsets = await committed(settings, worker.group_id)
    ends = Counter(
        TopicPartition(source, r.partition) for r in await read(settings, Topic.CONCLUDED)
    )
    assert sum(ends.values()) == N
    assert offsets == dict(ends)  # every input, nothing past it

    records = [loads(r.value) for r in await read(settings, Topic.DECISIONS)]
    outcomes = Counter(r["candidate_id"] for r in records if r["stage"] == "outcome")
    assert outcomes == Counter(ids)  # exactly one outcome each
    assert not [r for r in records if r["stage"] != "outcome"]  # none superseded

    delivered = Counter(
        loads(r.value)["candidate"]["id"] for r in await read(settings, Topic.STATE)
    )
    assert delivered == Counter(ids)

    ledger = Counter(r.key.decode() for r in await read(settings, Topic.OUTCOMES))
    assert ledger == Counter(ids)
