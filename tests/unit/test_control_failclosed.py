"""The kill switch fails closed: held ON until the control topic has been read to its
end, ON while it cannot be read, and a malformed control message never stops the
listener (issue 9, item 5)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import orjson
from aiokafka import TopicPartition

from topics.clients import KafkaConnection
from workers.interfaces import ControlState
from workers.runtime.control import (
    KILL_SWITCH_KEY,
    NOT_READ_YET,
    UNREADABLE,
    ControlGate,
    ControlListener,
    apply_control,
    read_control,
)


def switch(on: object, **extra: object) -> bytes:
    return orjson.dumps({"schema_version": 1, "on": on, "by": "ops", "at": 1.0, **extra})


@dataclass
class Rec:
    key: bytes | None
    value: bytes | None


class FakeControlTopic:
    """A one-partition control topic in memory; `fail` makes every broker call raise."""

    def __init__(self, records: list[Rec]) -> None:
        self.records = records
        self.fail = False
        self.starts = 0
        self.fetches = 0

    def consumer(self) -> FakeConsumer:
        return FakeConsumer(self)


class FakeConsumer:
    def __init__(self, topic: FakeControlTopic) -> None:
        self.topic, self.pos = topic, 0

    def _check(self) -> None:
        if self.topic.fail:
            raise ConnectionError("broker away")

    async def start(self) -> None:
        self._check()
        self.topic.starts += 1

    async def stop(self) -> None:
        pass

    def assign(self, partitions: list[TopicPartition]) -> None:
        pass

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self.pos = 0

    async def end_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        self._check()
        return {partitions[0]: len(self.topic.records)}

    async def position(self, partition: TopicPartition) -> int:
        return self.pos

    async def getmany(self, *partitions: TopicPartition, timeout_ms: int = 0) -> dict:
        self._check()
        await asyncio.sleep(0)
        self.topic.fetches += 1
        batch, self.pos = self.topic.records[self.pos : self.pos + 2], self.pos + 2
        self.pos = min(self.pos, len(self.topic.records))
        return {partitions[0]: batch} if batch else {}


async def until(predicate, steps: int = 500) -> None:
    for _ in range(steps):
        if predicate():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("condition never held")


def listener(topic: FakeControlTopic, state: ControlState) -> ControlListener:
    return ControlListener(
        KafkaConnection("unused:9092"),
        "control",
        state,
        poll=0.001,
        read_timeout=1.0,
        consumer_factory=topic.consumer,
    )


class TestReadControl:
    def test_on_and_off(self):
        assert read_control(KILL_SWITCH_KEY, switch(True)).kill_switch is True
        assert read_control(KILL_SWITCH_KEY, switch(False)).kill_switch is False

    def test_other_keys_and_tombstones_set_nothing(self):
        assert read_control(b"other", switch(True)) is None
        assert read_control(KILL_SWITCH_KEY, None) is None

    def test_malformed_messages_are_skipped(self):
        for bad in (b"{nope", b"[1]", switch("yes"), b"\xff\xfe", b"[" * 5000 + b"]" * 5000):
            assert read_control(KILL_SWITCH_KEY, bad) is None

    def test_a_bad_timestamp_no_longer_raises(self):
        # The message that used to send the listener back to the start forever.
        assert read_control(KILL_SWITCH_KEY, switch(False, at="yesterday")) is None

    def test_on_with_bad_metadata_is_honoured(self):
        read = read_control(KILL_SWITCH_KEY, switch(True, at="yesterday", by=7))
        assert (read.kill_switch, read.kill_switch_by, read.kill_switch_at) == (True, "", 0.0)

    def test_dashboard_fold_follows_the_topic(self):
        state = ControlState()
        apply_control(state, KILL_SWITCH_KEY, switch(True))
        apply_control(state, KILL_SWITCH_KEY, b"garbage")
        assert state.kill_switch is True


class TestGate:
    def test_held_on_from_construction(self):
        state = ControlState()
        ControlGate(state)
        assert (state.kill_switch, state.kill_switch_by) == (True, NOT_READ_YET)

    def test_an_off_message_before_the_end_keeps_it_on(self):
        state = ControlState()
        gate = ControlGate(state)
        gate.apply(KILL_SWITCH_KEY, switch(False))
        assert state.kill_switch is True
        gate.caught_up()
        assert state.kill_switch is False

    def test_unreadable_holds_on_until_caught_up_again(self):
        state = ControlState()
        gate = ControlGate(state)
        gate.caught_up()
        gate.unreadable("KafkaTimeoutError")
        assert (state.kill_switch, state.kill_switch_by) == (True, UNREADABLE)
        gate.caught_up()
        assert state.kill_switch is False

    def test_topic_switch_on_is_served_once_read(self):
        state = ControlState()
        gate = ControlGate(state)
        gate.apply(KILL_SWITCH_KEY, switch(True))
        gate.caught_up()
        assert (state.kill_switch, state.kill_switch_by) == (True, "ops")


class TestListener:
    async def test_serves_the_topic_only_after_reading_to_its_end(self):
        topic = FakeControlTopic([Rec(KILL_SWITCH_KEY, switch(i % 2 == 0)) for i in range(5)])
        state = ControlState()
        lst = listener(topic, state)
        assert state.kill_switch is True  # before start: closed
        await lst.start()  # returns once the topic is read to its end
        try:
            assert (state.kill_switch, state.kill_switch_by) == (True, "ops")  # last is on
            topic.records.append(Rec(KILL_SWITCH_KEY, switch(False)))
            await until(lambda: state.kill_switch is False)
        finally:
            await lst.stop()

    async def test_malformed_message_is_skipped_and_later_switches_apply(self):
        records = [
            Rec(KILL_SWITCH_KEY, switch(False)),
            Rec(KILL_SWITCH_KEY, switch(False, at="yesterday")),
            Rec(KILL_SWITCH_KEY, b"\x00not json"),
        ]
        topic = FakeControlTopic(records)
        state = ControlState()
        lst = listener(topic, state)
        await lst.start()
        try:
            assert await lst.wait_caught_up(1.0)
            assert state.kill_switch is False
            topic.records.append(Rec(KILL_SWITCH_KEY, switch(True)))
            await until(lambda: state.kill_switch is True and state.kill_switch_by == "ops")
            assert topic.starts == 1  # never went back to the beginning
        finally:
            await lst.stop()

    async def test_unreadable_topic_counts_as_switch_on(self):
        topic = FakeControlTopic([Rec(KILL_SWITCH_KEY, switch(False))])
        topic.fail = True
        state = ControlState()
        lst = listener(topic, state)
        await lst.start()
        try:
            assert not await lst.wait_caught_up(0.05)
            assert (state.kill_switch, state.kill_switch_by) == (True, UNREADABLE)
            topic.fail = False
            await until(lambda: state.kill_switch is False)
            topic.fail = True
            await until(lambda: state.kill_switch_by == UNREADABLE)
            assert state.kill_switch is True
        finally:
            await lst.stop()
