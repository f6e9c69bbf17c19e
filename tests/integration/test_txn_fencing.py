"""Generation-fenced transactional offset commits (`topics.fencing`, KIP-447) against the
real broker: a commit under the group's current generation counts; once the group has
moved on (another member joined, so a new generation), the same member's old metadata is
refused, the transaction aborts (its records never seen at read_committed) and the
committed offset stays; aiokafka's own v0 commit of the very same offsets is accepted,
which is the gap the fence closes. A member id the group does not know, and another
member under a static instance id, are refused too, the latter as instance-fenced."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from tests.integration.conftest import consume_all, create_topics
from topics import clients
from topics.clients import KafkaConnection
from topics.fencing import GroupFenced, GroupFencedProducer, GroupMetadata, stable_offsets

pytestmark = pytest.mark.timeout(120)


async def member(conn: KafkaConnection, topic: str, group: str, instance: str) -> AIOKafkaConsumer:
    consumer = clients.consumer(
        conn,
        topic,
        group_id=group,
        group_instance_id=instance,
        enable_auto_commit=False,
        isolation_level="read_committed",
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
    )
    await consumer.start()
    return consumer


async def polled_until(consumers: list[AIOKafkaConsumer], done, timeout: float = 60.0) -> None:
    """Poll every consumer (so each takes part in the rebalance) until `done()`."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "the group did not settle"
        await asyncio.gather(*(c.getmany(timeout_ms=200) for c in consumers))


async def committed(conn: KafkaConnection, group: str, tp: TopicPartition) -> int | None:
    admin = clients.admin(conn)
    await admin.start()
    try:
        found = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    at = found.get(tp)
    return None if at is None else at.offset


@pytest.fixture
async def setup(kafka_bootstrap: str, topic_prefix: str) -> AsyncIterator[tuple]:
    conn = KafkaConnection(kafka_bootstrap)
    source, out = f"{topic_prefix}in", f"{topic_prefix}out"
    await create_topics(kafka_bootstrap, [source, out], partitions=2)
    producer = clients.producer(
        conn, transactional_id=f"{topic_prefix}tx", enable_idempotence=True, acks="all"
    )
    await producer.start()
    try:
        yield conn, source, out, f"{topic_prefix}group", producer
    finally:
        await producer.stop()


async def commit(producer: GroupFencedProducer, out: str, offsets: dict, group) -> None:
    """One transaction: a record to `out` and `offsets` for `group` (an id or metadata)."""
    await producer.begin_transaction()
    try:
        await producer.send_and_wait(out, b"x", partition=0)
        await producer.send_offsets_to_transaction(offsets, group)
    except BaseException:
        await producer.abort_transaction()
        raise
    await producer.commit_transaction()


async def test_a_stale_generation_is_refused_and_its_transaction_aborted(setup) -> None:
    conn, source, out, group, producer = setup
    tp = TopicPartition(source, 0)
    a = await member(conn, source, group, "a")
    b: AIOKafkaConsumer | None = None
    try:
        await polled_until([a], lambda: bool(a.assignment()))
        old = GroupMetadata.of(a)
        assert old.generation_id >= 1 and old.member_id and old.group_instance_id == "a"

        started = time.perf_counter()
        await commit(producer, out, {tp: 5}, old)
        fenced_s = time.perf_counter() - started
        assert await committed(conn, group, tp) == 5

        b = await member(conn, source, group, "b")  # a new generation
        await polled_until([a, b], lambda: bool(a.assignment() and b.assignment()))
        assert GroupMetadata.of(a).generation_id > old.generation_id

        with pytest.raises(GroupFenced) as refused:
            await commit(producer, out, {tp: 9}, old)
        assert refused.value.error == "ILLEGAL_GENERATION" and not refused.value.instance_fenced
        assert await committed(conn, group, tp) == 5

        # The producer goes on: the current generation commits.
        await commit(producer, out, {tp: 9}, GroupMetadata.of(a))
        assert await committed(conn, group, tp) == 9

        # aiokafka's own v0 commit, without the generation, moves the offset back.
        started = time.perf_counter()
        await commit(producer, out, {tp: 7}, group)
        plain_s = time.perf_counter() - started
        assert await committed(conn, group, tp) == 7
        # The refused transaction was aborted on the broker, not merely dropped here (an
        # open one would have been committed by the next: four records).
        seen = await consume_all(conn.bootstrap_servers, out, isolation_level="read_committed")
        assert len(seen) == 3
        print(
            f"\ntransaction, offsets by v3: {fenced_s * 1e3:.0f} ms, by v0: {plain_s * 1e3:.0f} ms"
        )
    finally:
        for consumer in (a, b):
            if consumer is not None:
                await consumer.stop()


async def test_an_unknown_member_and_another_s_instance_id_are_refused(setup) -> None:
    conn, source, out, group, producer = setup
    tp = TopicPartition(source, 1)
    a = await member(conn, source, group, "a")
    try:
        await polled_until([a], lambda: bool(a.assignment()))
        now = GroupMetadata.of(a)
        stranger = GroupMetadata(group, now.generation_id, "nobody", None)
        with pytest.raises(GroupFenced) as refused:
            await commit(producer, out, {tp: 3}, stranger)
        assert refused.value.error == "UNKNOWN_MEMBER_ID"
        impostor = GroupMetadata(group, now.generation_id, "someone-else", "a")
        with pytest.raises(GroupFenced) as refused:
            await commit(producer, out, {tp: 3}, impostor)
        assert refused.value.error == "FENCED_INSTANCE_ID" and refused.value.instance_fenced
        assert await committed(conn, group, tp) is None
    finally:
        await a.stop()


async def test_a_member_taking_over_waits_for_offsets_a_transaction_holds_pending(setup) -> None:
    """KIP-447's other half: a cut-off member's transaction that has added its offsets but
    not ended (paused between the two) must not let its successor start from the older
    offsets; with `stable_offsets` the successor's fetch waits for the transaction."""
    conn, source, out, group, producer = setup
    tp = TopicPartition(source, 0)
    a = await member(conn, source, group, "a")
    # Of the group but subscribed to nothing (no rebalance): they only fetch its offsets.
    plain, stable = (clients.consumer(conn, group_id=group, enable_auto_commit=False) for _ in "ps")
    await plain.start()
    await stable.start()
    stable_offsets(stable)
    try:
        await polled_until([a], lambda: bool(a.assignment()))
        await producer.begin_transaction()
        await producer.send_and_wait(out, b"x", partition=0)
        await producer.send_offsets_to_transaction({tp: 5}, GroupMetadata.of(a))

        assert await plain._coordinator.fetch_committed_offsets([tp]) == {}  # the old view
        waiting = asyncio.create_task(stable._coordinator.fetch_committed_offsets([tp]))
        await asyncio.sleep(1.0)
        assert not waiting.done()
        await producer.commit_transaction()
        fetched = await asyncio.wait_for(waiting, 30)
        assert fetched[tp].offset == 5
    finally:
        for consumer in (a, plain, stable):
            await consumer.stop()
