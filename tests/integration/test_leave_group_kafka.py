"""A static member's LeaveGroup on the real broker: after its consumer closed, the group
keeps its partitions for it until the session timeout; `leave_group` hands them to the
other member at once, and a second leave for the same instance id is refused by name."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from aiokafka import AIOKafkaConsumer

from topics import clients
from topics.clients import KafkaConnection
from workers.runtime.membership import LeaveRefused, leave_group

pytestmark = pytest.mark.integration

SESSION_S = 10.0  # the workers' session timeout (StageLoop._session)


def _member(conn: KafkaConnection, group: str, instance: str) -> AIOKafkaConsumer:
    return clients.consumer(
        conn,
        group_id=group,
        group_instance_id=instance,
        session_timeout_ms=int(SESSION_S * 1000),
        heartbeat_interval_ms=2_000,
        auto_offset_reset="earliest",
    )


async def _until_holds(consumer: AIOKafkaConsumer, n: int, timeout: float) -> float:
    """Poll `consumer` until it holds `n` partitions; the seconds it took."""
    start = time.monotonic()
    while len(consumer.assignment()) != n:
        assert time.monotonic() - start < timeout, consumer.assignment()
        await consumer.getmany(timeout_ms=100)
    return time.monotonic() - start


@pytest.mark.parametrize("leaves", [True, False])
async def test_a_stopped_static_member_hands_its_partitions_on_only_when_it_leaves(
    kafka_bootstrap: str, topic_prefix: str, kafka_helpers: SimpleNamespace, leaves: bool
) -> None:
    conn = KafkaConnection(kafka_bootstrap)
    topic, group = topic_prefix + "leave", topic_prefix + "group"
    await kafka_helpers.create_topics(kafka_bootstrap, [topic], partitions=2)
    stays, goes = _member(conn, group, "stays"), _member(conn, group, "goes")
    await stays.start()
    await goes.start()
    try:
        stays.subscribe([topic])
        goes.subscribe([topic])
        start = time.monotonic()
        while len(stays.assignment()) != 1 or len(goes.assignment()) != 1:
            assert time.monotonic() - start < 60, (stays.assignment(), goes.assignment())
            await stays.getmany(timeout_ms=100)
            await goes.getmany(timeout_ms=100)
        await goes.stop()  # aiokafka sends no LeaveGroup for a static member
        if leaves:
            await leave_group(conn, group, "goes")
            assert await _until_holds(stays, 2, SESSION_S) < SESSION_S / 2
            with pytest.raises(LeaveRefused, match="UnknownMemberId"):
                await leave_group(conn, group, "goes")
        else:
            waited = await _until_holds(stays, 2, 3 * SESSION_S)
            assert waited > SESSION_S / 2  # held for the session timeout, then moved
    finally:
        await stays.stop()
