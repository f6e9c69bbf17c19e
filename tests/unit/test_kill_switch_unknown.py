"""The kill switch's third state (issue 23, item 5): when the control topic cannot be read
the switch is *unknown*, and a batch waits uncommitted until it is known, instead of being
decided under the held switch (which sent every accept to a person's queue)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import orjson
import pytest

from pipeline.policy.document import load_policy
from tests.fixtures.fakes import FakeProducer
from topics.clients import KafkaConnection
from topics.names import Topic
from workers.interfaces import ControlState, Emit, Inbound, StageContext
from workers.runtime import loop as loop_module
from workers.runtime.control import KILL_SWITCH_KEY, ControlGate, ControlListener
from workers.runtime.loop import ControlUnknown, StageLoop
from workers.runtime.metrics import StageMetrics
from workers.runtime.settings import Settings
from workers.runtime.telemetry import StageTelemetry
from workers.stages.terminal import TerminalStage


class Stage:
    """Decides nothing; notes what it saw, and may lose the control topic mid-batch."""

    name = "rules"
    source = Topic.RULES

    def __init__(self, gate: ControlGate | None = None) -> None:
        self.seen: list[str] = []
        self.gate = gate

    async def process(self, batch: Sequence[Inbound], ctx: StageContext) -> list[Emit]:
        self.seen.append(ctx.control.state)
        if self.gate is not None:
            self.gate.unreadable("ConnectionError")
        return [Emit(Topic.DECISIONS, b"s", b"{}")]

    async def close(self) -> None:
        return None


class Record:
    topic, partition, key, value, headers, timestamp = "p.rules", 0, b"s", b"{}", (), None

    def __init__(self, offset: int) -> None:
        self.offset = offset


def stage_loop(stage: Any, control: ControlState, metrics: StageMetrics | None = None) -> StageLoop:
    ctx = StageContext(policy=load_policy(None), control=control)
    return StageLoop(
        stage, Settings(topic_prefix="p."), ctx, StageTelemetry(stage.name, "p.x"), metrics=metrics
    )


def switch_off() -> tuple[bytes, bytes]:
    return KILL_SWITCH_KEY, orjson.dumps({"schema_version": 1, "on": False, "by": "ops", "at": 1})


class TestGate:
    def test_unknown_until_read_then_known_then_unknown_again(self, caplog) -> None:
        state = ControlState()
        gate = ControlGate(state)
        assert state.state == "unknown" and state.kill_switch  # held ON meanwhile
        gate.apply(*switch_off())
        gate.caught_up()
        assert state.state == "off"
        with caplog.at_level(logging.WARNING, "groundstream.control"):
            gate.unreadable("TimeoutError")
            assert state.state == "unknown" and state.kill_switch
            gate.caught_up()
        assert state.state == "off" and state.unknown_spells == 2
        assert [r.getMessage() for r in caplog.records] == [
            "control topic unreadable (TimeoutError): kill switch state unknown",
            "control topic readable again: kill switch off",
        ]

    def test_an_operators_on_is_on_not_unknown(self) -> None:
        state = ControlState()
        gate = ControlGate(state)
        gate.apply(KILL_SWITCH_KEY, orjson.dumps({"on": True, "by": "ops", "at": 1.0}))
        gate.caught_up()
        assert state.state == "on" and state.known


class TestLoopHolds:
    async def test_a_batch_waits_uncommitted_until_the_state_is_known(self, caplog) -> None:
        state = ControlState()
        gate = ControlGate(state)
        stage, producer = Stage(), FakeProducer()
        metrics = StageMetrics("rules", "p.rules")
        loop = stage_loop(stage, state, metrics)
        with caplog.at_level(logging.WARNING, "groundstream.worker"):
            task = asyncio.create_task(loop._batch(producer, [Record(4)]))  # type: ignore[arg-type]
            await asyncio.sleep(0.5)
            assert stage.seen == [] and producer.calls == []  # held: nothing decided or sent
            gate.apply(*switch_off())
            gate.caught_up()
            await asyncio.wait_for(task, 5)
        assert stage.seen == ["off"]
        assert [call[0] for call in producer.calls] == ["begin", "send", "offsets", "commit"]
        assert metrics.control_holds.labels("rules")._value.get() == 1
        assert metrics.control_held.labels("rules")._value.get() >= 0.5
        messages = [r.getMessage() for r in caplog.records]
        assert (
            messages[0]
            == "stage rules: kill switch state unknown: holding a batch of 1 uncommitted"
        )
        assert messages[1].startswith("stage rules: kill switch state known (off) after ")

    async def test_a_batch_decided_while_the_state_turned_unknown_is_not_committed(self) -> None:
        state = ControlState()
        gate = ControlGate(state)
        gate.caught_up()
        stage, producer = Stage(gate), FakeProducer()
        with pytest.raises(ControlUnknown):
            await stage_loop(stage, state)._batch(producer, [Record(4)])  # type: ignore[arg-type]
        assert producer.calls == []

    async def test_the_hold_gives_up_and_starts_the_session_over(self, monkeypatch) -> None:
        monkeypatch.setattr(loop_module, "HOLD_LIMIT_S", 0.2)
        state = ControlState()
        ControlGate(state)
        producer = FakeProducer()
        with pytest.raises(ControlUnknown, match="unknown for"):
            await stage_loop(Stage(), state)._batch(producer, [Record(4)])  # type: ignore[arg-type]
        assert producer.calls == []

    async def test_the_terminal_writer_does_not_wait_for_the_switch(self) -> None:
        state = ControlState()
        ControlGate(state)
        producer = FakeProducer()
        stage = TerminalStage({})
        record = Record(4)
        record.topic = "p.concluded"
        await asyncio.wait_for(stage_loop(stage, state)._batch(producer, [record]), 5)  # type: ignore[arg-type]
        assert producer.calls[-1] == ("commit",)

    def test_the_unknown_state_is_a_metric(self) -> None:
        state = ControlState()
        metrics = StageMetrics("rules", "p.rules")
        metrics.follow(StageContext(policy=load_policy(None), control=state), Stage())
        gate = ControlGate(state)
        assert (
            metrics.registry.get_sample_value("groundstream_control_unknown", {"stage": "rules"})
            == 1
        )
        gate.caught_up()
        assert (
            metrics.registry.get_sample_value("groundstream_control_unknown", {"stage": "rules"})
            == 0
        )


class StuckOnce:
    """A control consumer whose first instance never finishes seeking (aiokafka's seek
    waits for a partition leader without end); later ones read an `off`."""

    made = 0

    def __init__(self) -> None:
        StuckOnce.made += 1
        self.stuck, self.read = StuckOnce.made == 1, False

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    def assign(self, partitions: list) -> None:
        return None

    async def seek_to_beginning(self, *partitions: Any) -> None:
        if self.stuck:
            await asyncio.Event().wait()

    async def end_offsets(self, partitions: list) -> dict:
        return {partitions[0]: 1}

    async def position(self, partition: Any) -> int:
        return 1 if self.read else 0

    async def getmany(self, *partitions: Any, timeout_ms: int = 0) -> dict:
        await asyncio.sleep(0.01)
        if self.read:
            return {}
        self.read = True
        key, value = switch_off()
        return {partitions[0]: [type("Rec", (), {"key": key, "value": value})()]}


async def test_a_listener_stuck_in_its_seek_starts_over_and_learns_the_state() -> None:
    StuckOnce.made = 0
    state = ControlState()
    listener = ControlListener(
        KafkaConnection("x:1"),
        "control",
        state,
        poll=0.05,
        read_timeout=0.3,
        consumer_factory=StuckOnce,
    )
    await listener.start()  # gives up on the first read after read_timeout
    try:
        assert await listener.wait_caught_up(5.0)
        assert state.state == "off" and StuckOnce.made >= 2
    finally:
        await listener.stop()


class CancelsOnStop(StuckOnce):
    """The first consumer fails its read, then its `stop` raises CancelledError, as
    aiokafka's does when it awaits its own cancelled offset requests."""

    async def end_offsets(self, partitions: list) -> dict:
        if self.stuck:
            raise ConnectionError("broker away")
        return await super().end_offsets(partitions)

    async def seek_to_beginning(self, *partitions: Any) -> None:
        return None

    async def stop(self) -> None:
        if self.stuck:
            raise asyncio.CancelledError


async def test_a_cancellation_inside_the_kafka_client_does_not_end_the_listener() -> None:
    StuckOnce.made = 0
    state = ControlState()
    listener = ControlListener(
        KafkaConnection("x:1"),
        "control",
        state,
        poll=0.05,
        read_timeout=0.3,
        consumer_factory=CancelsOnStop,
    )
    await listener.start()
    try:
        assert await listener.wait_caught_up(5.0)
        assert state.state == "off"
    finally:
        await listener.stop()
    assert listener._task is not None and listener._task.cancelled()  # our stop still stops it
