"""Operator controls on the compacted `control` topic: the kill switch.

Every worker runs a `ControlListener`: a group-less consumer that reads the whole control
topic from the beginning and then follows it, so each process (not one per consumer
group) sees every control message within `poll` seconds.

Failure posture: the kill switch fails closed. Its state is *unknown* from the moment a
listener is built until it has read the control topic to its end (so a restarted worker
cannot auto-accept before it has seen an operator's switch), and again whenever the topic
cannot be read (broker away, topic missing); both edges are logged. While unknown the
switch is held ON, and the Kafka loop holds its batches uncommitted until the state is
known again (`workers.runtime.loop`), so a broker restart delays candidates rather than
sending what the policy would accept to a person's queue. A malformed
control message is skipped with a warning and the listener goes on from the next one; a
message that turns the switch ON is honoured even when its `by` or `at` are unreadable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable
from typing import Any, Protocol

from aiokafka import TopicPartition

from topics import clients
from topics.clients import KafkaConnection
from topics.codec import dumps, loads
from workers.interfaces import ControlState

log = logging.getLogger("groundstream.control")
KILL_SWITCH_KEY = b"kill_switch"
NOT_READ_YET = "groundstream: control topic not read to its end yet"
UNREADABLE = "groundstream: control topic unreadable"


def read_control(key: bytes | None, value: bytes | None) -> ControlState | None:
    """The kill-switch state one control message sets, or None when it sets nothing.

    Messages under other keys and tombstones set nothing; a malformed kill-switch message
    is skipped (None) with a warning, except that an unmistakable ``"on": true`` is
    honoured with whatever metadata can be read, since skipping it would fail open.
    """
    if key != KILL_SWITCH_KEY or value is None:
        return None
    try:
        data = loads(value)
    except ValueError:
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("on"), bool):
        log.warning("skipping a malformed control message (no boolean 'on')")
        return None
    by, at = data.get("by", ""), data.get("at", 0.0)
    valid_at = isinstance(at, int | float) and not isinstance(at, bool) and math.isfinite(at)
    if not isinstance(by, str) or not valid_at:
        if not data["on"]:
            log.warning("skipping a malformed kill-switch-off message (bad 'by' or 'at')")
            return None
        log.warning("kill-switch-on message with a bad 'by' or 'at': honoured anyway")
    return ControlState(
        kill_switch=data["on"],
        kill_switch_by=by if isinstance(by, str) else "",
        kill_switch_at=float(at) if valid_at else 0.0,
    )


def apply_control(state: ControlState, key: bytes | None, value: bytes | None) -> None:
    """Fold one control message into `state` as the topic says it (the dashboard's view,
    which shows the topic rather than gating on it); never raises."""
    read = read_control(key, value)
    if read is not None:
        state.kill_switch = read.kill_switch
        state.kill_switch_by, state.kill_switch_at = read.kill_switch_by, read.kill_switch_at


class ControlGate:
    """What the worker's stages see: the topic's last switch once it is known and
    readable, the switch held ON (with the reason in `kill_switch_by`) otherwise."""

    def __init__(self, state: ControlState) -> None:
        self.state = state
        self.topic = ControlState()
        self.readable = False
        self.reason = NOT_READ_YET
        self._publish()

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """Fold one control message into the topic's view; never raises."""
        read = read_control(key, value)
        if read is None:
            return
        if read.kill_switch != self.topic.kill_switch:
            log.warning(
                "kill switch %s by %s", "ON" if read.kill_switch else "off", read.kill_switch_by
            )
        self.topic = read
        self._publish()

    def caught_up(self) -> None:
        """The topic has been read to its end: from now on it alone decides."""
        if not self.readable and self.reason == UNREADABLE:
            log.warning(
                "control topic readable again: kill switch %s",
                "ON" if self.topic.kill_switch else "off",
            )
        self.readable, self.reason = True, ""
        self._publish()

    def unreadable(self, why: str) -> None:
        """The topic cannot be read: the switch's state is unknown (held ON) until the
        topic can be read to its end."""
        if self.readable:
            log.warning("control topic unreadable (%s): kill switch state unknown", why)
        self.readable, self.reason = False, UNREADABLE
        self._publish()

    def _publish(self) -> None:
        if self.state.known and not self.readable:
            self.state.unknown_spells += 1
        self.state.known = self.readable
        if self.readable:
            self.state.kill_switch = self.topic.kill_switch
            self.state.kill_switch_by = self.topic.kill_switch_by
            self.state.kill_switch_at = self.topic.kill_switch_at
        else:
            self.state.kill_switch, self.state.kill_switch_by = True, self.reason
            self.state.kill_switch_at = 0.0


class ControlConsumer(Protocol):
    """The slice of `AIOKafkaConsumer` the listener uses (a fake stands in for tests)."""

    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    def assign(self, partitions: list[TopicPartition]) -> None: ...
    async def seek_to_beginning(self, *partitions: TopicPartition) -> None: ...
    async def end_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]: ...
    async def position(self, partition: TopicPartition) -> int: ...
    async def getmany(self, *partitions: TopicPartition, timeout_ms: int = 0) -> dict[Any, Any]: ...


class ControlListener:
    """Follows the control topic in the background; see the module docstring.

    Each cycle asks the broker for the topic's end offset (within `read_timeout`) and
    reads up to it; only then is the topic's own switch served. A cycle that fails marks
    the topic unreadable (switch ON) and starts over from the beginning.
    """

    def __init__(
        self,
        kafka: KafkaConnection,
        topic: str,
        state: ControlState,
        poll: float = 0.5,
        *,
        read_timeout: float = 10.0,
        consumer_factory: Callable[[], ControlConsumer] | None = None,
    ) -> None:
        self.kafka, self.topic, self.poll = kafka, topic, poll
        self.read_timeout = read_timeout
        self.gate = ControlGate(state)
        self._factory = consumer_factory or self._kafka_consumer
        self._caught_up = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def _kafka_consumer(self) -> ControlConsumer:
        return clients.consumer(
            self.kafka,
            enable_auto_commit=False,
            group_id=None,
            request_timeout_ms=max(1000, int(self.read_timeout * 1000)),
        )

    async def start(self) -> None:
        """Start following, and return once the topic has been read to its end (or after
        `read_timeout`, the switch then held ON): a worker that starts its streams after
        this decides its first batch on the operator's switch, not on the startup hold, so
        a candidate replayed after a restart is decided as it was the first time."""
        self._task = asyncio.create_task(self._run(), name="groundstream-control")
        await self.wait_caught_up(self.read_timeout)

    async def wait_caught_up(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the first full read; True once it happened."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._caught_up.wait(), timeout)
        return self._caught_up.is_set()

    async def _run(self) -> None:
        while True:
            consumer = self._factory()
            try:
                tp = TopicPartition(self.topic, 0)
                # Bounded like the reads: aiokafka's seek waits for the partition's leader
                # without end, and a listener stuck there kept the state unknown for good
                # after a broker restart (seen in tests/faults/test_kill_switch_restart.py).
                async with asyncio.timeout(self.read_timeout):
                    await consumer.start()
                    consumer.assign([tp])
                    await consumer.seek_to_beginning(tp)
                while True:
                    async with asyncio.timeout(self.read_timeout):  # wait_for can eat a cancel
                        await self._read_to_end(consumer, tp)
                    self.gate.caught_up()
                    self._caught_up.set()
                    self._apply(await consumer.getmany(tp, timeout_ms=int(self.poll * 1000)))
            except asyncio.CancelledError:
                if stopping():
                    raise
                self._restart("CancelledError")  # aiokafka's own, not ours
                await asyncio.sleep(self.poll)
            except Exception as exc:  # a broker hiccup must not end the listener
                self._restart(type(exc).__name__)
                await asyncio.sleep(self.poll)
            finally:
                await self._close(consumer)

    def _restart(self, why: str) -> None:
        self.gate.unreadable(why)
        log.warning("control listener restarting after %s", why)

    async def _close(self, consumer: ControlConsumer) -> None:
        """Stop `consumer`, bounded. aiokafka's `stop` re-raises the cancellation of its
        own pending offset requests after a broker outage; let through, that ended the
        listener for good and left the switch's state unknown (seen in
        tests/faults/test_kill_switch_restart.py). Only a stop of ours ends it."""
        try:
            await asyncio.wait_for(consumer.stop(), self.read_timeout)
        except asyncio.CancelledError:
            if stopping():
                raise
        except Exception:  # closing a consumer of a broker that is away may fail; go on
            pass

    async def _read_to_end(self, consumer: ControlConsumer, tp: TopicPartition) -> None:
        end = (await consumer.end_offsets([tp]))[tp]
        while await consumer.position(tp) < end:
            self._apply(await consumer.getmany(tp, timeout_ms=int(self.poll * 1000)))

    def _apply(self, batches: dict[Any, Any]) -> None:
        for records in batches.values():
            for rec in records:
                self.gate.apply(rec.key, rec.value)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def stopping() -> bool:
    """Whether the running task itself is being cancelled (a stop of ours), as opposed
    to a CancelledError escaping a library's internal task."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def publish_kill_switch(kafka: KafkaConnection, topic: str, on: bool, by: str) -> dict:
    """Write the kill switch state to the control topic; returns the message sent."""
    message = {"schema_version": 1, "on": on, "by": by, "at": time.time()}
    producer = clients.producer(kafka, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(topic, dumps(message), key=KILL_SWITCH_KEY, partition=0)
    finally:
        await producer.stop()
    return message
