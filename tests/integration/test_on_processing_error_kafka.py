"""GROUNDSTREAM_ON_PROCESSING_ERROR on the real broker (issue 24, item 5): with `stop`, a
candidate its stage fails on alone ends the worker and nothing of its batch is committed,
so the group resumes before it (nothing lost); with `deadletter`, the default, the same
batch is committed with that candidate parked. A retryable error that never clears (the
encoder out of memory on every try) ends the worker after its patience, committing
nothing, instead of retrying without end while the broker answers."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from pipeline.failures import ErrorAction
from pipeline.policy.document import load_policy
from topics.admin import create_topics
from topics.clients import KafkaConnection
from topics.names import Topic
from workers.interfaces import Emit, StageContext
from workers.runtime.isolation import ProcessingStopped, always
from workers.runtime.loop import BrokerUnavailable, RetriesExhausted, StageLoop
from workers.runtime.settings import Settings
from workers.runtime.telemetry import StageTelemetry

from .conftest import produce, until


class Breaking:
    """Forwards a decision record per message; fails on one whose value says so."""

    name, source, reads_control = "breaking", Topic.SCORED, False

    async def process(self, batch: Any, ctx: StageContext) -> list[Emit]:
        if any(item.value == b'{"bad": true}' for item in batch):
            raise KeyError("bad")
        return [Emit(Topic.DECISIONS, item.key, b"{}") for item in batch]

    async def close(self) -> None:
        return None


class Starving(Breaking):
    """Runs out of memory on every batch: not the candidates' fault, so never parked."""

    name = "starving"

    async def process(self, batch: Any, ctx: StageContext) -> list[Emit]:
        raise MemoryError()


def worker(settings: Settings, choice: ErrorAction, stage: Any = None) -> StageLoop:
    return StageLoop(
        stage or Breaking(),
        settings,
        StageContext(policy=load_policy(None)),
        StageTelemetry((stage or Breaking()).name, settings.topic(Topic.SCORED)),
        on_processing_error=always(choice),
    )


async def committed(settings: Settings, group: str) -> dict[TopicPartition, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers)
    await admin.start()
    try:
        found = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return {tp: meta.offset for tp, meta in found.items() if meta.offset >= 0}


async def test_stop_commits_nothing_and_deadletter_moves_past_the_candidate(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    settings = Settings(bootstrap_servers=kafka_bootstrap, topic_prefix=topic_prefix)
    await create_topics(KafkaConnection(kafka_bootstrap), topic_prefix, 1, 1)
    source = settings.topic(Topic.SCORED)
    await produce(kafka_bootstrap, source, [(b"s", b"{}"), (b"s", b'{"bad": true}')])

    stopped = worker(settings, ErrorAction.STOP)
    with pytest.raises(ProcessingStopped, match=rf"stage breaking stopped on {source}/0/1 "):
        await stopped.run()
    assert await committed(settings, stopped.group_id) == {}

    moving = worker(settings, ErrorAction.DEADLETTER)
    running = asyncio.create_task(moving.run())
    try:
        done = await until(lambda: committed(settings, moving.group_id), timeout=60)
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
    assert done == {TopicPartition(source, 0): 2}


async def test_a_retryable_error_that_never_clears_ends_the_worker_uncommitted(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    settings = Settings(bootstrap_servers=kafka_bootstrap, topic_prefix=topic_prefix)
    await create_topics(KafkaConnection(kafka_bootstrap), topic_prefix, 1, 1)
    await produce(kafka_bootstrap, settings.topic(Topic.SCORED), [(b"s", b"{}")])
    starved = worker(settings, ErrorAction.DEADLETTER, Starving())
    starved.give_up_s = 3.0  # every fetch is answered; only the batch never completes
    with pytest.raises(RetriesExhausted, match=r"no batch completed.*MemoryError") as raised:
        await asyncio.wait_for(starved.run(), 120)
    assert not isinstance(raised.value, BrokerUnavailable)
    assert await committed(settings, starved.group_id) == {}
