"""A batch the stage runs out of memory on is halved, each half committed in a transaction
of its own with the offsets of exactly its records (issue 33, item 6); only memory splits
a batch, and only a single candidate out of memory is left to the loop's patience."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaTimeoutError

from pipeline.policy.document import load_policy
from pipeline.trail.records import make_record
from tests.fixtures.fakes import FakeProducer
from topics.conclusion import Conclusion
from topics.names import Topic
from workers.interfaces import Emit, Inbound, StageContext
from workers.runtime.loop import ControlUnknown, StageLoop, halves, memory_class
from workers.runtime.settings import Settings
from workers.runtime.store import ChangelogStore
from workers.runtime.telemetry import StageTelemetry
from workers.stages.terminal import TerminalStage

SOURCE = "p.concluded"


def item(partition: int, offset: int, topic: str = SOURCE) -> Inbound:
    return Inbound(b"k", b"{}", topic, partition, offset)


class TestHalves:
    def test_each_half_is_a_run_of_every_partition_in_fetch_order(self) -> None:
        batch = [item(0, 4), item(0, 5), item(0, 7), item(1, 2), item(1, 3)]
        assert halves(batch) == (batch[:2], batch[2:])

    def test_one_candidate_or_none_is_not_split(self) -> None:
        assert halves([item(0, 1)]) is None
        assert halves([]) is None

    def test_a_batch_out_of_offset_order_is_not_split(self) -> None:
        # The first half's offsets would pass over a record of the second.
        assert halves([item(0, 5), item(1, 1), item(0, 4), item(1, 2)]) is None
        assert halves([item(0, 5), item(0, 5)]) is None


def named(module: str, qualname: str, base: type[Exception] = Exception) -> type[Exception]:
    """A class as another library names it, without importing that library."""
    cls = type(qualname.rsplit(".", 1)[-1], (base,), {})
    cls.__module__, cls.__qualname__ = module, qualname
    return cls


class TestMemoryClass:
    def test_running_out_of_memory_splits(self) -> None:
        assert memory_class(MemoryError())
        assert memory_class(type("Bigger", (MemoryError,), {})())
        assert memory_class(named("torch", "OutOfMemoryError", RuntimeError)("CUDA"))
        assert memory_class(named("torch.cuda", "OutOfMemoryError", RuntimeError)("CUDA"))
        onnx = named("onnxruntime.capi.onnxruntime_pybind11_state", "RuntimeException")
        assert memory_class(onnx("Failed to allocate memory for requested buffer"))

    def test_nothing_a_smaller_batch_cannot_cure_splits(self) -> None:
        onnx = named("onnxruntime.capi.onnxruntime_pybind11_state", "RuntimeException")
        for exc in (
            onnx("Invalid input shape"),  # permanent: the candidate's own
            KafkaTimeoutError(),  # the broker
            ConnectionError("reset"),  # an endpoint
            ControlUnknown("held"),  # retryable, the loop's own start over
            KeyError("bad"),  # permanent: isolation dead-letters it
        ):
            assert not memory_class(exc), exc


class Cramped:
    """The terminal writer, out of memory (after writing its ledger) on more than `fits`
    candidates, or on any batch holding a candidate in `never`."""

    name, source, reads_control = "terminal", Topic.CONCLUDED, False

    def __init__(
        self, ledger: ChangelogStore, fits: int, never: frozenset[str] = frozenset()
    ) -> None:
        self.inner, self.fits, self.never = TerminalStage(ledger), fits, never
        self.sizes: list[int] = []

    async def process(self, batch: Sequence[Inbound], ctx: StageContext) -> list[Emit]:
        self.sizes.append(len(batch))
        emits = await self.inner.process(batch, ctx)
        if len(batch) > self.fits or any(i.key.decode() in self.never for i in batch):
            raise MemoryError()
        return emits

    async def close(self) -> None:
        return None


class Record:
    """A fetched conclusion of candidate `cid`, as aiokafka hands it to the loop."""

    def __init__(self, cid: str, partition: int, offset: int, topic: str = SOURCE) -> None:
        outcome = make_record(
            candidate_id=cid,
            session_id="s",
            turn=1,
            stage="outcome",
            action="accept",
            write_to_state=True,
            reason="r",
            policy_version="p",
            decided_at=1.0,
            mode="evaluate",
            route="default",
            prev_hash="h0",
            topic="state",
        )
        c = Conclusion(cid, "state", b"s", b"{}", outcome)
        self.topic, self.partition, self.offset, self.timestamp = topic, partition, offset, None
        self.key, self.value, self.headers = c.wire_key(), c.value, c.wire_headers()


def worker(stage: Cramped, store: ChangelogStore) -> StageLoop:
    return StageLoop(
        stage,  # type: ignore[arg-type]
        Settings(topic_prefix="p."),
        StageContext(policy=load_policy(None)),
        StageTelemetry("terminal", SOURCE),
        store=store,
    )


def transactions(producer: FakeProducer) -> list[dict[str, Any]]:
    """Per committed transaction: its ledger keys and its offsets."""
    out: list[dict[str, Any]] = []
    for call in producer.calls:
        if call[0] == "begin":
            out.append({"ledger": [], "offsets": None})
        elif call[0] == "send" and call[1] == "p.outcomes":
            out[-1]["ledger"].append(call[2].decode())
        elif call[0] == "offsets":
            out[-1]["offsets"] = call[1]
    return out


def tp(partition: int, topic: str = SOURCE) -> TopicPartition:
    return TopicPartition(topic, partition)


async def test_halves_commit_apart_with_their_own_offsets_and_state() -> None:
    store = ChangelogStore("p.outcomes")
    stage = Cramped(store, fits=2)
    rider = Record("seen", 0, 9, topic="p.decisions")  # a followed record, observed
    fetched = [Record("a", 0, 4), Record("b", 0, 5), Record("c", 0, 6), Record("d", 1, 0)]
    producer = FakeProducer()
    await worker(stage, store)._batch(producer, [*fetched, rider])  # type: ignore[arg-type]
    assert stage.sizes == [4, 2, 2]
    assert transactions(producer) == [
        {"ledger": ["a", "b"], "offsets": {tp(0): 6, tp(0, "p.decisions"): 10}},
        {"ledger": ["c", "d"], "offsets": {tp(0): 7, tp(1): 1}},
    ]
    assert store.changes() == [] and set(store) == {b"a", b"b", b"c", b"d"}


async def test_one_candidate_out_of_memory_alone_raises_after_the_rest_commits() -> None:
    store = ChangelogStore("p.outcomes")
    stage = Cramped(store, fits=4, never=frozenset({"d"}))
    fetched = [Record("a", 0, 0), Record("b", 0, 1), Record("c", 0, 2), Record("d", 0, 3)]
    producer = FakeProducer()
    with pytest.raises(MemoryError):
        await worker(stage, store)._batch(producer, fetched)  # type: ignore[arg-type]
    assert stage.sizes == [4, 2, 2, 1, 1]
    assert transactions(producer) == [
        {"ledger": ["a", "b"], "offsets": {tp(0): 2}},
        {"ledger": ["c"], "offsets": {tp(0): 3}},
    ]  # d's offset is not committed: the next session starts at it


async def test_an_error_memory_cannot_explain_retries_the_whole_batch() -> None:
    class Unreachable(Cramped):
        async def process(self, batch: Sequence[Inbound], ctx: StageContext) -> list[Emit]:
            self.sizes.append(len(batch))
            raise ConnectionError("endpoint reset")

    store = ChangelogStore("p.outcomes")
    stage = Unreachable(store, fits=4)
    producer = FakeProducer()
    fetched = [Record("a", 0, 0), Record("b", 0, 1)]
    with pytest.raises(ConnectionError):
        await worker(stage, store)._batch(producer, fetched)  # type: ignore[arg-type]
    assert stage.sizes == [2] and producer.calls == []
