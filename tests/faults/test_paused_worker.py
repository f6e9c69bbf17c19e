"""A terminal writer paused (SIGSTOP) inside an open transaction, replaced, then resumed
(SIGCONT): what Kubernetes does to a pod on a node that stops answering, and what the
StatefulSets' stable identity (deploy/k8s, GROUNDSTREAM_INSTANCE_ID = the pod's name) is
for.

The terminal writer is the stage to pause: it writes the outcomes themselves (`state`,
the `outcome` record on `decisions`, the `outcomes` ledger), so a stale transaction of
its would be a duplicate outcome that no later stage can supersede. The worker is paused
once the broker shows its transaction open and not yet holding the group's offsets
(DescribeTransactions), and still so a moment later: it has consumed a batch and written
part of its outputs, and has neither sent its offsets nor committed.

Two variants, each on a fresh topic prefix:

* `same`: the replacement starts under the paused worker's GROUNDSTREAM_INSTANCE_ID, as a
  StatefulSet's pod of the same name does. Its producer's start fences the paused one
  (the broker aborts the open transaction) and its consumer takes the static member's
  partitions at once. Asserted: every candidate one outcome; the replacement's outcomes
  are visible before the paused worker is resumed; the resumed worker is fenced and exits
  (`Fenced`, status 3) instead of fencing its successor in turn.
* `new`: the replacement starts under a new id, as a Deployment's new pod does. It gets
  the partitions only once the paused member's session (10 s) has timed out. The paused
  worker is resumed HOLD_S after the replacement's first commit, long before the broker
  would abort the paused transaction (`transaction_timeout_ms`, 30 s): nothing fences
  its producer, but its offsets carry the generation it was assigned the partitions in
  (`topics.fencing`, KIP-447) and the group has moved on. Asserted: the broker refuses
  the stale commit (the worker's one log line), no candidate gets a second outcome, none
  is lost, and the resumed worker rejoins and goes on running.

Timings printed (`-s`): replacement start to its first committed batch, and to the first
new outcome a read_committed consumer sees. docs/delivery.md records a run.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from tests.faults.chaos import (
    InThread,
    OutcomeWatch,
    accepted_conclusion,
    audit,
    pause_in_a_transaction,
)
from tests.integration.harness import Workers, cli, worker_env
from topics.names import Topic
from workers.runtime.loop import group_id, member_prefix

pytestmark = pytest.mark.timeout(300)

PAD = 48 * 1024
"""Bytes of each candidate's terminal message: a batch's transaction takes long enough
(hundreds of ms of sends) to be caught open."""
BATCH = 16
PERIOD_S = 0.3
TAKEOVER_S = 90.0
HOLD_S = 3.0
"""The paused worker stays paused this long after its replacement's first commit: what
a read_committed consumer sees meanwhile is the replacement's doing alone. Far below
the 30 s `transaction_timeout_ms` after which the broker would abort the paused
transaction itself."""
GRACE_S = 5.0
"""After the last outcome: time for a resumed worker's stale commit to show."""


class Feed(InThread):
    """Conclusions to `concluded` in bursts of BATCH every PERIOD_S, in a thread of its own,
    until stopped (so the worker's transactions hold whole batches); `sent` holds the ids
    whose send was acknowledged."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__()
        self.bootstrap, self.topic = bootstrap, topic
        self.sent: list[str] = []

    async def _run(self) -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap, acks="all", enable_idempotence=True
        )
        await producer.start()
        try:
            while not self._stop.is_set():
                burst = [
                    accepted_conclusion(f"p-{len(self.sent) + i:05d}", PAD) for i in range(BATCH)
                ]
                await asyncio.gather(
                    *[
                        await producer.send(
                            self.topic, c.value, key=c.wire_key(), headers=list(c.wire_headers())
                        )
                        for c in burst
                    ]
                )
                self.sent += [c.candidate_id for c in burst]
                await asyncio.sleep(PERIOD_S)
        finally:
            await producer.stop()


class OpenTransactions:
    """Whether a transaction is open on a topic: its last stable offset (the end a
    read_committed consumer sees) is behind its end, on some partition."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.consumers: dict[str, AIOKafkaConsumer] = {}

    async def start(self) -> None:
        for isolation in ("read_committed", "read_uncommitted"):
            consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, isolation_level=isolation)
            await consumer.start()
            consumer.assign([TopicPartition(self.topic, p) for p in range(self.partitions)])
            self.consumers[isolation] = consumer

    async def stop(self) -> None:
        for consumer in self.consumers.values():
            await consumer.stop()

    async def now(self) -> int:
        """Records written and not yet committed (0: no transaction open)."""
        ends = {
            isolation: await c.end_offsets(list(c.assignment()))
            for isolation, c in self.consumers.items()
        }
        written = ends["read_uncommitted"].items()
        return sum(end - ends["read_committed"][tp] for tp, end in written)


async def _committed(bootstrap: str, group: str) -> int:
    """The sum of the group's committed offsets (0 when none)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        found = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return sum(meta.offset for meta in found.values() if meta.offset >= 0)


async def pause_inside_a_transaction(
    bootstrap: str, transactional_id: str, pid: int, probe: OpenTransactions
) -> tuple[int, int]:
    """SIGSTOP process `pid` inside a transaction, before its offsets; returns the tries
    it took and the records that transaction holds where `probe` looks."""
    tries = await pause_in_a_transaction(bootstrap, transactional_id, pid, before_offsets=True)
    await probe.start()
    try:
        return tries, await probe.now()
    finally:
        await probe.stop()


@dataclass
class Run:
    """What one variant measured."""

    tries: int
    held: int
    """Ledger entries in the paused worker's open transaction: candidates it had delivered."""
    takeover_s: float
    """Replacement started → its first batch committed (the group's offsets moved)."""
    visible_s: float
    """Replacement started → the first new outcome a read_committed consumer sees."""
    resumed_at_s: float
    """Replacement started → the paused worker resumed."""
    sent: int
    duplicates: int
    lost: int
    superseded: int
    fenced_logged: bool
    refused_logged: bool
    """The old worker logged its stale commit refused by the broker."""
    old_exit: int | None
    """The paused worker's exit status at the end; None: still running."""
    wall_s: float


def run_variant(bootstrap: str, prefix: str, tmp: Path, same_identity: bool) -> Run:
    began = time.monotonic()
    env = worker_env(
        bootstrap, prefix, tmp / "data", GROUNDSTREAM_BATCH_SIZE=str(BATCH),
        GROUNDSTREAM_INSTANCE_ID="groundstream-terminal-0",
    )  # fmt: skip
    cli(env, "topics", "create")
    ledger = Topic.OUTCOMES.full(prefix)
    group = group_id(prefix, "terminal")
    old = Workers(env, "terminal", tmp / "old.log").start()
    new_id = "groundstream-terminal-0" if same_identity else "groundstream-terminal-x7k2q"
    new = Workers({**env, "GROUNDSTREAM_INSTANCE_ID": new_id}, "terminal", tmp / "new.log")
    feed = Feed(bootstrap, Topic.CONCLUDED.full(prefix))
    watch = OutcomeWatch(bootstrap, prefix)
    watch.start()
    feed.start()
    try:
        assert old.proc is not None
        probe = OpenTransactions(bootstrap, ledger, int(env["GROUNDSTREAM_PARTITIONS"]))
        txn = f"{member_prefix(prefix, 'terminal')}groundstream-terminal-0"
        tries, held = asyncio.run(pause_inside_a_transaction(bootstrap, txn, old.proc.pid, probe))
        feed.stop()
        before = asyncio.run(_committed(bootstrap, group))
        started = time.monotonic()
        new.start(timeout=TAKEOVER_S)
        while asyncio.run(_committed(bootstrap, group)) <= before:
            assert time.monotonic() - started < TAKEOVER_S, "the replacement committed nothing"
            time.sleep(0.2)
        took_over = time.monotonic()
        time.sleep(HOLD_S)
        os.kill(old.proc.pid, signal.SIGCONT)
        resumed = time.monotonic()
        deadline = resumed + TAKEOVER_S
        while len(set(feed.sent) - set(watch.seen)) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(GRACE_S)
        firsts = watch.after(started)
        old_exit = old.proc.poll()
    finally:
        feed.stop()
        for worker in (old, new):
            if worker.proc is not None and worker.proc.poll() is None:
                os.kill(worker.proc.pid, signal.SIGCONT)
            worker.stop()
        watch.stop()
    figures = asyncio.run(audit(bootstrap, prefix, feed.sent))
    print(f"\n{'same' if same_identity else 'new'} identity: {figures.render()}")
    old_log = (tmp / "old.log").read_text(errors="replace")
    return Run(
        tries=tries,
        held=held,
        takeover_s=took_over - started,
        visible_s=(firsts[0] - started) if firsts else float("inf"),
        resumed_at_s=resumed - started,
        sent=len(feed.sent),
        duplicates=len(figures.duplicates),
        lost=len(figures.lost),
        superseded=figures.superseded,
        fenced_logged="fenced as " in old_log,
        refused_logged="stale commit refused by the broker" in old_log,
        old_exit=old_exit,
        wall_s=time.monotonic() - began,
    )


def report(name: str, run: Run) -> None:
    print(
        f"{name} identity: paused after {run.tries} tries holding {run.held} deliveries;"
        f" replacement committed"
        f" {run.takeover_s:.1f}s after it started, first new outcome visible at"
        f" read_committed after {run.visible_s:.1f}s, old worker resumed at"
        f" {run.resumed_at_s:.1f}s; {run.sent} sent, {run.duplicates} duplicated,"
        f" {run.lost} lost, {run.superseded} superseded; old worker fenced"
        f" {run.fenced_logged}, stale commit refused {run.refused_logged},"
        f" exit status {run.old_exit}; wall {run.wall_s:.1f}s"
    )


def test_a_paused_worker_is_fenced_by_its_replacement_under_the_same_identity(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    run = run_variant(kafka_bootstrap, topic_prefix, tmp_path, same_identity=True)
    report("same", run)
    assert run.lost == 0 and run.duplicates == 0
    assert run.visible_s < run.resumed_at_s  # the successor's outcomes need no help
    assert run.fenced_logged and run.old_exit == 3  # `Fenced`: gone, not fencing back


def test_under_a_new_identity_a_resumed_worker_s_stale_commit_is_refused(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    run = run_variant(kafka_bootstrap, topic_prefix, tmp_path, same_identity=False)
    report("new", run)
    assert run.lost == 0
    assert run.duplicates == 0  # the paused batch is not delivered twice
    assert run.refused_logged  # because the broker refused its stale offsets
    assert not run.fenced_logged and run.old_exit is None  # it rejoined, and runs on
