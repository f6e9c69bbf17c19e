"""Operator controls on the compacted `control` topic: the kill switch.

Every worker runs a `ControlListener`: a group-less consumer that reads the whole control
topic from the beginning and then follows it, so each process (not one per consumer
group) sees every control message within `poll` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from topics.codec import dumps, loads
from workers.stages.kit import ControlState

log = logging.getLogger("groundstream.control")
KILL_SWITCH_KEY = b"kill_switch"


def apply_control(state: ControlState, key: bytes | None, value: bytes | None) -> None:
    """Fold one control message into `state`; unknown or malformed messages are ignored."""
    if key != KILL_SWITCH_KEY or value is None:
        return
    try:
        data = loads(value)
    except ValueError:
        log.warning("ignoring a malformed control message")
        return
    if isinstance(data, dict) and isinstance(data.get("on"), bool):
        state.kill_switch = data["on"]
        state.kill_switch_by = str(data.get("by", ""))
        state.kill_switch_at = float(data.get("at", 0.0) or 0.0)
        log.warning(
            "kill switch %s by %s", "ON" if state.kill_switch else "off", state.kill_switch_by
        )


class ControlListener:
    """Follows the control topic in the background and updates a shared ControlState."""

    def __init__(self, bootstrap: str, topic: str, state: ControlState, poll: float = 0.5) -> None:
        self.bootstrap, self.topic, self.state, self.poll = bootstrap, topic, state, poll
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="groundstream-control")

    async def _run(self) -> None:
        while True:
            consumer = AIOKafkaConsumer(
                bootstrap_servers=self.bootstrap, enable_auto_commit=False, group_id=None
            )
            try:
                await consumer.start()
                tp = TopicPartition(self.topic, 0)
                consumer.assign([tp])
                await consumer.seek_to_beginning(tp)
                while True:
                    batches = await consumer.getmany(timeout_ms=int(self.poll * 1000))
                    for records in batches.values():
                        for rec in records:
                            apply_control(self.state, rec.key, rec.value)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a broker hiccup must not end the listener
                log.warning("control listener restarting after %s", type(exc).__name__)
                await asyncio.sleep(self.poll)
            finally:
                with contextlib.suppress(Exception):
                    await consumer.stop()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


async def publish_kill_switch(bootstrap: str, topic: str, on: bool, by: str) -> dict:
    """Write the kill switch state to the control topic; returns the message sent."""
    message = {"schema_version": 1, "on": on, "by": by, "at": time.time()}
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(topic, dumps(message), key=KILL_SWITCH_KEY, partition=0)
    finally:
        await producer.stop()
    return message
