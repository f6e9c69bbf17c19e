"""The stage loop's commit: outputs, state writes and input offsets in one transaction,
and nothing committed when any send fails."""

from __future__ import annotations

import time
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaTimeoutError, MessageSizeTooLargeError, ProducerFenced

from pipeline.failures import ErrorAction
from pipeline.policy.document import load_policy
from tests.fixtures.fakes import FakeBatch, FakeProducer
from topics.fencing import GroupFenced, GroupMetadata
from topics.names import Topic
from workers.interfaces import Emit, StageContext
from workers.runtime import loop as loop_module
from workers.runtime.isolation import ProcessingStopped, always
from workers.runtime.loop import (
    CARRY_S,
    BrokerUnavailable,
    Fenced,
    RebalanceGate,
    RetriesExhausted,
    StageLoop,
    StaleBatch,
    send_batched,
)
from workers.runtime.runner import build_loop
from workers.runtime.settings import Settings
from workers.runtime.store import ChangelogStore
from workers.runtime.telemetry import StageTelemetry
from workers.stages.terminal import TerminalStage


class Record:
    def __init__(self, partition: int, offset: int) -> None:
        self.topic, self.partition, self.offset = "p.concluded", partition, offset


def loop(store: ChangelogStore) -> StageLoop:
    settings = Settings(topic_prefix="p.")
    return StageLoop(
        TerminalStage(store),
        settings,
        StageContext(policy=load_policy(None)),
        StageTelemetry("terminal", "p.concluded"),
        store=store,
    )


EMITS = [Emit(Topic.DECISIONS, b"s", b"{}"), Emit(Topic.STATE, b"s", b"{}")]


async def test_outputs_state_and_offsets_commit_together_after_every_send() -> None:
    store = ChangelogStore("p.outcomes")
    store[b"c1"] = {"topic": "state"}
    producer = FakeProducer()
    await loop(store)._commit(producer, EMITS, [Record(0, 4), Record(0, 5), Record(1, 9)])
    assert [c[0] for c in producer.calls] == ["begin", "send", "send", "send", "offsets", "commit"]
    assert producer.calls[3][1] == "p.outcomes"
    offsets = {TopicPartition("p.concluded", 0): 6, TopicPartition("p.concluded", 1): 10}
    assert producer.calls[4] == ("offsets", offsets, "p.groundstream-terminal")
    assert store.changes() == [] and store[b"c1"] == {"topic": "state"}


async def test_a_failed_send_commits_no_offset_and_drops_the_state_writes() -> None:
    store = ChangelogStore("p.outcomes")
    store[b"c1"] = {"topic": "state"}
    producer = FakeProducer(fail_on="p.state")
    with pytest.raises(MessageSizeTooLargeError):
        await loop(store)._commit(producer, EMITS, [Record(0, 4)])
    assert not [c for c in producer.calls if c[0] in ("offsets", "commit")]
    assert b"c1" not in store


async def test_an_unreachable_broker_ends_the_worker_without_a_commit() -> None:
    stuck = loop(ChangelogStore("p.outcomes"))
    stuck.give_up_s = 0.0
    attempts = []

    async def session() -> None:
        attempts.append(1)
        raise KafkaTimeoutError()

    stuck._session = session  # type: ignore[method-assign]
    stuck.settings = Settings(topic_prefix="p.", bootstrap_servers="127.0.0.1:1")
    with pytest.raises(Exception, match="broker unusable"):
        await stuck.run()
    assert len(attempts) >= 2


class TestPatience:
    """The loop gives up after `give_up_s` without progress, whatever keeps failing: a
    batch that runs out of memory every time ends the worker as a broker outage does,
    instead of being retried without end while the broker answers its fetches."""

    def _failing(self, monkeypatch, error: Exception, progress: bool) -> tuple[StageLoop, list]:
        monkeypatch.setattr(loop_module, "BACKOFF_S", (0.0,))
        worker = loop(ChangelogStore("p.outcomes"))
        worker.settings = Settings(topic_prefix="p.", bootstrap_servers="127.0.0.1:1")
        attempts: list[int] = []

        async def session() -> None:
            attempts.append(1)
            if progress:
                worker._progress_at = time.monotonic()  # a batch completed, then this
            if len(attempts) == 5:
                raise ProcessingStopped("enough")  # ends a loop that never gives up
            raise error

        worker._session = session  # type: ignore[method-assign]
        return worker, attempts

    async def test_a_stage_error_that_never_clears_ends_the_worker(self, monkeypatch) -> None:
        worker, attempts = self._failing(monkeypatch, MemoryError(), progress=False)
        worker.give_up_s = 0.0
        with pytest.raises(RetriesExhausted, match="no batch completed") as raised:
            await worker.run()
        assert not isinstance(raised.value, BrokerUnavailable)
        assert "MemoryError" in str(raised.value) and len(attempts) == 2

    async def test_the_broker_s_error_names_the_broker(self, monkeypatch) -> None:
        worker, _ = self._failing(monkeypatch, KafkaTimeoutError(), progress=False)
        worker.give_up_s = 0.0
        with pytest.raises(BrokerUnavailable, match="broker unusable"):
            await worker.run()

    async def test_progress_between_failures_starts_a_new_count(self, monkeypatch) -> None:
        worker, attempts = self._failing(monkeypatch, MemoryError(), progress=True)
        worker.give_up_s = 0.0
        with pytest.raises(ProcessingStopped, match="enough"):
            await worker.run()  # every failure came after a completed batch: no give-up
        assert len(attempts) == 5

    async def test_a_fenced_worker_exits_at_once_instead_of_fencing_its_successor(
        self, monkeypatch
    ) -> None:
        """Starting over would run a new producer under the same transactional id: the
        successor that fenced this worker would be fenced in turn (seen on the real broker,
        tests/faults/test_paused_worker.py)."""
        worker, attempts = self._failing(monkeypatch, ProducerFenced(), progress=True)
        with pytest.raises(Fenced, match=r"fenced as p\.groundstream-terminal\."):
            await worker.run()
        assert len(attempts) == 1

    async def test_a_transaction_that_outlived_its_timeout_starts_over(self, monkeypatch) -> None:
        """The broker fences the producer of a transaction it aborted for its age (a lost
        coordinator, a long pause): no other worker holds the id, so start over."""
        worker, attempts = self._failing(monkeypatch, ProducerFenced(), progress=True)
        worker._txn_began = time.monotonic() - loop_module.TRANSACTION_TIMEOUT_S - 1
        with pytest.raises(ProcessingStopped, match="enough"):
            await worker.run()
        assert len(attempts) == 5


class TestStaleCommit:
    """A commit the group refuses because the partitions moved on (`fencing.GroupFenced`):
    the transaction is aborted, the batch and its state writes dropped, one line logged,
    and the session starts over (rejoins); refused for another member under this
    instance id, the worker exits as when its successor's producer fences it."""

    GROUP = GroupMetadata("p.groundstream-terminal", 4, "m-1", "p.groundstream-terminal.t-0")

    def _fenced(self, store: ChangelogStore) -> tuple[StageLoop, FakeProducer]:
        worker = loop(store)
        worker._gate = RebalanceGate()
        worker._gate.group = self.GROUP
        producer = FakeProducer()

        async def refuse(offsets: dict, group: object) -> None:
            producer.calls.append(("offsets", dict(offsets), group))
            raise GroupFenced(self.GROUP, "ILLEGAL_GENERATION")

        async def abort() -> None:
            producer.calls.append(("abort",))

        producer.send_offsets_to_transaction = refuse  # type: ignore[method-assign]
        producer.abort_transaction = abort  # type: ignore[attr-defined]
        return worker, producer

    async def test_the_offsets_carry_the_assignment_s_generation(self) -> None:
        worker = loop(ChangelogStore("p.outcomes"))
        worker._gate = RebalanceGate()
        worker._gate.group = self.GROUP
        producer = FakeProducer()
        await worker._commit(producer, EMITS, [Record(0, 4)])
        assert producer.calls[-2] == ("offsets", {TopicPartition("p.concluded", 0): 5}, self.GROUP)

    async def test_nothing_is_committed_before_an_assignment(self) -> None:
        worker = loop(ChangelogStore("p.outcomes"))
        worker._gate = RebalanceGate()
        producer = FakeProducer()
        with pytest.raises(StaleBatch):
            await worker._commit(producer, EMITS, [Record(0, 4)])
        assert not [c for c in producer.calls if c[0] in ("offsets", "commit")]

    async def test_a_refused_commit_aborts_and_drops_the_state_writes(self) -> None:
        store = ChangelogStore("p.outcomes")
        store[b"c1"] = {"topic": "state"}
        worker, producer = self._fenced(store)
        with pytest.raises(GroupFenced):
            await worker._commit(producer, EMITS, [Record(0, 4)])
        assert [c[0] for c in producer.calls][-2:] == ["offsets", "abort"]
        assert b"c1" not in store and store.changes() == []

    async def test_a_refused_commit_logs_one_line_and_rejoins(self, monkeypatch, caplog) -> None:
        monkeypatch.setattr(loop_module, "BACKOFF_S", (0.0,))
        worker = loop(ChangelogStore("p.outcomes"))
        worker.settings = Settings(topic_prefix="p.", bootstrap_servers="127.0.0.1:1")
        sessions: list[int] = []

        async def session() -> None:
            sessions.append(1)
            if len(sessions) == 2:
                raise ProcessingStopped("rejoined")
            raise GroupFenced(self.GROUP, "UNKNOWN_MEMBER_ID")

        worker._session = session  # type: ignore[method-assign]
        with (
            caplog.at_level("WARNING", logger="groundstream.worker"),
            pytest.raises(ProcessingStopped, match="rejoined"),
        ):
            await worker.run()
        lines = [r.getMessage() for r in caplog.records if r.name == "groundstream.worker"]
        assert len(lines) == 1 and "stale commit refused by the broker" in lines[0]
        assert "UNKNOWN_MEMBER_ID" in lines[0]

    async def test_another_member_under_this_instance_id_ends_the_worker(self, monkeypatch) -> None:
        worker = loop(ChangelogStore("p.outcomes"))
        worker.settings = Settings(topic_prefix="p.", bootstrap_servers="127.0.0.1:1")

        async def session() -> None:
            raise GroupFenced(self.GROUP, "FENCED_INSTANCE_ID")

        worker._session = session  # type: ignore[method-assign]
        with pytest.raises(Fenced, match="fenced as"):
            await worker.run()


class TestMemberId:
    """The transactional id fences a dead predecessor with the same id, and only it."""

    def test_defaults_to_the_stage_group_and_the_host(self, monkeypatch) -> None:
        monkeypatch.setattr("socket.gethostname", lambda: "node 7/a")
        member = loop(ChangelogStore("p.outcomes")).member_id
        assert member == "p.groundstream-terminal.node-7-a"  # Kafka's legal characters

    def test_an_instance_id_gives_two_processes_on_one_host_their_own(self) -> None:
        ids = set()
        for instance in ("geo-1", "geo-2"):
            settings = Settings(topic_prefix="p.", instance_id=instance)
            worker = StageLoop(
                TerminalStage(ChangelogStore("p.outcomes")),
                settings,
                StageContext(policy=load_policy(None)),
                StageTelemetry("terminal", "p.concluded"),
            )
            ids.add(worker.member_id)
        assert ids == {"p.groundstream-terminal.geo-1", "p.groundstream-terminal.geo-2"}


class Watching:
    """A stage that follows `decisions`: a followed record with "latch" writes its table."""

    name, source = "watch", Topic.SCORED

    async def process(self, batch: Any, ctx: StageContext) -> list[Emit]:
        return [Emit(Topic.DECISIONS, b"s", b"{}") for _ in batch]

    def observe(self, record: dict, ctx: StageContext) -> None:
        if record.get("latch"):
            ctx.sessions[b"s"] = {"latched": True}

    async def close(self) -> None:
        return None


class Message(Record):
    def __init__(self, topic: str, partition: int, offset: int, value: bytes = b"{}") -> None:
        self.topic, self.partition, self.offset, self.value = topic, partition, offset, value
        self.key, self.headers, self.timestamp = b"s", (), None


def watching() -> tuple[StageLoop, ChangelogStore]:
    store = ChangelogStore("p.sessions")
    worker = StageLoop(
        Watching(),  # type: ignore[arg-type]
        Settings(topic_prefix="p."),
        StageContext(policy=load_policy(None), sessions=store),
        StageTelemetry("watch", "p.scored"),
        follows=(Topic.DECISIONS,),
        store=store,
    )
    return worker, store


class TestFollowedRecordsThatChangeNothing:
    """The switch reads its own decision records back on `decisions`: those batches get no
    transaction of their own; their offsets ride with the next one."""

    async def test_ride_with_the_next_transaction(self) -> None:
        worker, _ = watching()
        producer = FakeProducer()
        await worker._batch(producer, [Message("p.decisions", 0, 7), Message("p.decisions", 1, 3)])
        assert producer.calls == []
        await worker._batch(producer, [Message("p.scored", 0, 41)])
        offsets = {
            TopicPartition("p.decisions", 0): 8,
            TopicPartition("p.decisions", 1): 4,
            TopicPartition("p.scored", 0): 42,
        }
        assert [c[0] for c in producer.calls] == ["begin", "send", "offsets", "commit"]
        assert producer.calls[2] == ("offsets", offsets, "p.groundstream-watch")
        assert worker._carried == {}

    async def test_a_state_write_commits_with_its_offsets_at_once(self) -> None:
        worker, store = watching()
        producer = FakeProducer()
        await worker._batch(producer, [Message("p.decisions", 0, 7, b'{"latch": true}')])
        assert [c[0] for c in producer.calls] == ["begin", "send", "offsets", "commit"]
        assert producer.calls[1] == ("send", "p.sessions", b"s")
        assert producer.calls[2][1] == {TopicPartition("p.decisions", 0): 8}
        assert store[b"s"] == {"latched": True} and store.changes() == []

    async def test_are_committed_once_they_have_waited_carry_s(self, monkeypatch) -> None:
        worker, _ = watching()
        producer = FakeProducer()
        now = [100.0]
        monkeypatch.setattr("workers.runtime.loop.time.monotonic", lambda: now[0])
        await worker._batch(producer, [Message("p.decisions", 0, 7)])
        now[0] += CARRY_S + 0.1
        await worker._batch(producer, [Message("p.decisions", 0, 8)])
        assert [c[0] for c in producer.calls] == ["begin", "offsets", "commit"]
        assert producer.calls[1][1] == {TopicPartition("p.decisions", 0): 9}

    async def test_a_failed_commit_keeps_nothing_carried_for_later(self) -> None:
        worker, _ = watching()
        await worker._batch(FakeProducer(), [Message("p.decisions", 0, 7)])
        failing = FakeProducer(fail_on="p.decisions")
        with pytest.raises(MessageSizeTooLargeError):
            await worker._batch(failing, [Message("p.scored", 0, 41)])
        assert not [c for c in failing.calls if c[0] in ("offsets", "commit")]
        assert worker._carried == {}


class TestSendBatched:
    async def test_one_batch_per_partition_in_order_and_a_new_one_when_full(self) -> None:
        class Full(FakeBatch):
            def append(self, **kw: Any) -> object | None:
                return None if len(self.keys) == 2 else super().append(**kw)

        class Producer(FakeProducer):
            def __init__(self) -> None:
                super().__init__()
                self.sent: list[tuple[str, int, list]] = []

            def _partition(self, topic: str, partition: Any, *args: Any) -> int:
                return args[2][-1] % 2  # the key's last byte

            def create_batch(self) -> FakeBatch:
                return Full()

            async def send_batch(self, batch: FakeBatch, topic: str, *, partition: int):
                self.sent.append((topic, partition, batch.keys))
                return await super().send_batch(batch, topic, partition=partition)

        producer = Producer()
        keys = [bytes([i]) for i in range(7)]
        futures = await send_batched(producer, [("p.t", k, b"v", ()) for k in keys])
        assert len(futures) == len(producer.sent) == 4
        for partition in (0, 1):
            mine = [k for t, p, batch in producer.sent if p == partition for k in batch]
            assert mine == [k for k in keys if k[-1] % 2 == partition]
        assert all(len(batch) <= 2 for _, _, batch in producer.sent)

    async def test_a_message_that_names_its_partition_goes_there(self) -> None:
        class Producer(FakeProducer):
            def __init__(self) -> None:
                super().__init__()
                self.sent: list[tuple[str, int, list]] = []

            def _partition(self, topic: str, partition: Any, *args: Any) -> int:
                return 0  # where every key would hash

            async def send_batch(self, batch: FakeBatch, topic: str, *, partition: int):
                self.sent.append((topic, partition, batch.keys))
                return await super().send_batch(batch, topic, partition=partition)

        producer = Producer()
        messages = [
            ("p.t", b"a", b"v", (), 3),
            ("p.t", b"b", b"v", (), None),
            ("p.t", b"c", b"v", ()),
        ]
        await send_batched(producer, messages)
        assert sorted((p, keys) for _, p, keys in producer.sent) == [(0, [b"b", b"c"]), (3, [b"a"])]

    async def test_a_placed_tables_writes_go_to_their_partition(self) -> None:
        store = ChangelogStore("p.judge.ledger", lambda key: int(key[:1]))
        store[b"2|x"] = {"n": 1}
        assert (store.partition_for(b"2|x"), store.partition_for(b"5|y")) == (2, 5)
        assert ChangelogStore("p.sessions").partition_for(b"2|x") is None

        sent: list[tuple[str, int | None]] = []

        async def capture(producer: Any, messages: Any) -> list:
            sent.extend((m[0], m[4] if len(m) > 4 else None) for m in messages)
            return []

        original = loop_module.send_batched
        loop_module.send_batched = capture  # type: ignore[assignment]
        try:
            await loop(store)._commit(FakeProducer(), EMITS, [Record(0, 1)])
        finally:
            loop_module.send_batched = original
        assert ("p.judge.ledger", 2) in sent and ("p.decisions", None) in sent

    async def test_a_message_no_batch_takes_fails_instead_of_vanishing(self) -> None:
        class Refusing(FakeBatch):
            def append(self, **kw: Any) -> object | None:
                return None

        class Producer(FakeProducer):
            def _partition(self, topic: str, partition: Any, *args: Any) -> int:
                return 0

            def create_batch(self) -> FakeBatch:
                return Refusing()

        with pytest.raises(ValueError, match="does not fit"):
            await send_batched(Producer(), [("p.t", b"k", b"v", ())])


class Breaking(Watching):
    """Writes its table for each message, and fails on one whose value says so."""

    async def process(self, batch: Any, ctx: StageContext) -> list[Emit]:
        for item in batch:
            ctx.sessions[item.key + b"-%d" % item.offset] = {"seen": True}
            if item.value == b'{"bad": true}':
                raise KeyError("bad")
        return await super().process(batch, ctx)


def breaking(choice: ErrorAction) -> tuple[StageLoop, ChangelogStore]:
    worker, store = watching()
    worker.stage = Breaking()  # type: ignore[assignment]
    worker.on_processing_error = always(choice)
    return worker, store


BATCH = [Message("p.scored", 0, 41), Message("p.scored", 0, 42, b'{"bad": true}')]


class TestOnProcessingError:
    """GROUNDSTREAM_ON_PROCESSING_ERROR at the loop: `deadletter` commits the batch with the
    bad candidate parked; `stop` commits nothing of it and ends the worker, not retried."""

    async def test_deadletter_commits_the_batch_past_the_bad_candidate(self) -> None:
        worker, store = breaking(ErrorAction.DEADLETTER)
        producer = FakeProducer()
        await worker._batch(producer, BATCH)
        assert [c[0] for c in producer.calls][-2:] == ["offsets", "commit"]
        assert producer.calls[-2][1] == {TopicPartition("p.scored", 0): 43}
        assert b"s-41" in store and b"s-42" not in store

    async def test_stop_commits_nothing_and_drops_the_batch_s_state(self) -> None:
        worker, store = breaking(ErrorAction.STOP)
        producer = FakeProducer()
        with pytest.raises(ProcessingStopped, match=r"stage watch stopped on p\.scored/0/42"):
            await worker._batch(producer, BATCH)
        assert producer.calls == []  # no transaction begun: the batch is redone on restart
        assert store.changes() == [] and b"s-41" not in store

    async def test_stop_ends_the_worker_without_a_retry(self) -> None:
        worker, _ = breaking(ErrorAction.STOP)
        worker.settings = Settings(topic_prefix="p.", bootstrap_servers="127.0.0.1:1")
        worker.give_up_s = 0.0  # a retry would end in BrokerUnavailable instead
        attempts = []

        async def session() -> None:
            attempts.append(1)
            raise ProcessingStopped("stage watch stopped")

        worker._session = session  # type: ignore[method-assign]
        with pytest.raises(ProcessingStopped):
            await worker.run()
        assert attempts == [1]

    def test_the_runner_gives_the_loop_the_setting_s_choice(self) -> None:
        for choice in ErrorAction:
            built = build_loop("rules", Settings(on_processing_error=choice))
            assert (
                built.on_processing_error("rules", Message("p.scored", 0, 1), KeyError()) is choice
            )
