"""The kill switch fails closed on the real broker: a listener serves nothing but ON
until it has read the control topic to its end, skips malformed messages and goes on,
and holds ON while the topic cannot be read (issue 9, item 5)."""

from __future__ import annotations

import asyncio

import orjson

from topics.clients import KafkaConnection
from workers.interfaces import ControlState
from workers.runtime.control import (
    KILL_SWITCH_KEY,
    NOT_READ_YET,
    UNREADABLE,
    ControlListener,
    publish_kill_switch,
)


def switch(on: bool, by: str) -> bytes:
    return orjson.dumps({"schema_version": 1, "on": on, "by": by, "at": 1.0})


async def until(predicate, timeout: float = 15.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, "condition never held"
        await asyncio.sleep(0.05)


async def test_listener_fails_closed_until_read_and_skips_malformed(
    kafka_bootstrap, topic_prefix, kafka_helpers
):
    topic = f"{topic_prefix}control"
    await kafka_helpers.create_topics(
        kafka_bootstrap, [topic], config={"cleanup.policy": "compact"}
    )
    history = [(KILL_SWITCH_KEY, switch(i % 2 == 1, f"op{i}")) for i in range(200)]
    history += [(KILL_SWITCH_KEY, switch(True, "last-on"))]
    history += [(KILL_SWITCH_KEY, b'{"on": false, "at": "yesterday"}')]  # malformed: skipped
    await kafka_helpers.produce(kafka_bootstrap, topic, history)

    state = ControlState()
    listener = ControlListener(
        KafkaConnection(kafka_bootstrap), topic, state, poll=0.1, read_timeout=10.0
    )
    assert (state.kill_switch, state.kill_switch_by) == (True, NOT_READ_YET)
    await listener.start()
    try:
        assert await listener.wait_caught_up(20.0)
        assert (state.kill_switch, state.kill_switch_by) == (True, "last-on")

        await publish_kill_switch(KafkaConnection(kafka_bootstrap), topic, False, "alice")
        await until(lambda: state.kill_switch is False)
        await kafka_helpers.produce(kafka_bootstrap, topic, [(KILL_SWITCH_KEY, b"\x00garbage")])
        await publish_kill_switch(KafkaConnection(kafka_bootstrap), topic, True, "bob")
        await until(lambda: state.kill_switch_by == "bob")
        assert state.kill_switch is True
    finally:
        await listener.stop()


async def test_a_control_topic_that_cannot_be_read_counts_as_switch_on(
    kafka_bootstrap, topic_prefix
):
    state = ControlState()
    listener = ControlListener(
        KafkaConnection(kafka_bootstrap),
        f"{topic_prefix}no-such-control",
        state,
        poll=0.1,
        read_timeout=2.0,
    )
    await listener.start()
    try:
        assert not await listener.wait_caught_up(3.0)
        await until(lambda: state.kill_switch_by == UNREADABLE)
        assert state.kill_switch is True
    finally:
        await listener.stop()
