"""Scale-out under faults: several replicas of a stage, each under its own
GROUNDSTREAM_INSTANCE_ID (a Deployment's pods), on more partitions than replicas, while
candidates flow. For the terminal writer (which writes the outcomes themselves), the
geometry stage, the switch (its `sessions` changelog), the rules (the one stage that
concludes to `state`) and the judge (in flow: many calls open at once), at once:

* two or three replicas start (`SCALED`), and one more joins;
* one is paused (SIGSTOP) for PAUSE_S, past its 10 s session, so its partitions move to
  the others, and is then resumed (SIGCONT) before the broker would abort its open
  transaction (30 s): a zombie with a batch in hand. A stage by batch is paused inside a
  transaction that has not yet added the group's offsets (the broker's
  DescribeTransactions shows it open, without `__consumer_offsets`), so what it does on
  waking is commit them; the judge inside any transaction, with calls open beside it,
  whose conclusions it commits on waking;
* one is killed with SIGKILL and not restarted (terminal, geometry, switch), one stops
  cleanly with SIGTERM (terminal, rules, judge): the terminal writer takes all four.

Asserted: every candidate exactly one outcome, in one terminal topic; the broker refused
each resumed replica's stale commit (its one log line: `topics.fencing`, KIP-447); every
replica still running (the resumed one and the one that joined) holds partitions at the
end. Printed (`-s`): the audit, when each fault happened, the longest time without a new
outcome, and the test's wall time.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise
from pathlib import Path

import pytest
from aiokafka.coordinator.protocol import ConsumerProtocol

from tests.fakes.openai_server import serve_in_thread
from tests.faults.chaos import (
    POLICY,
    OutcomeWatch,
    audit,
    candidates,
    pause_in_a_transaction,
    produce_paced,
    wait_for_outcomes,
)
from tests.faults.test_judge_in_flight import Latency
from tests.integration.harness import Workers, cli, worker_env
from topics import clients
from topics.clients import KafkaConnection
from workers.runtime.ladder import STAGE_NAMES
from workers.runtime.loop import group_id, member_prefix

pytestmark = pytest.mark.timeout(600)

N = 1200
PARTITIONS = 6
PRODUCE_S = 80.0
SCALED = {"terminal": 3, "geometry": 2, "switch": 2, "rules": 2, "judge": 2}
"""Replicas of each scaled stage at the start (one more joins): `-0` is killed or stopped,
`-1` paused and resumed, `-2` of the terminal writer stopped."""
KILLED = {"terminal": 0, "geometry": 0, "switch": 0}
TERMINATED = {"terminal": 2, "rules": 0, "judge": 0}
PAUSED = 1
START_S = 600.0
"""Patience for a worker's start on a busy two-core machine (the encoder's load)."""
PAUSE_S = 22.0
"""Past the consumer's 10 s session (the partitions move), short of the 30 s transaction
timeout (the broker has not aborted the paused transaction: only the fence stops it)."""
REFUSED = "stale commit refused by the broker"
FLOW = {"judge"}
"""Stages in flow: a zombie's work in hand is its calls open, not one transaction. Woken,
such a worker may instead drop that work uncommitted: its kill-switch listener's read
timed out during the pause (the switch's state unknown), and decisions concluded then
are redone (`ControlUnknown`), racing the refused commit."""
DROPPED = 'ControlUnknown("the kill switch\'s state turned unknown"); nothing committed'


class Stage:
    """The replicas of one stage, `<stage>-<n>` each."""

    def __init__(self, env: dict[str, str], name: str, tmp: Path) -> None:
        self.env, self.name, self.tmp = env, name, tmp
        self.replicas: list[Workers] = []

    def add(self) -> Workers:
        n = len(self.replicas)
        env = {**self.env, "GROUNDSTREAM_INSTANCE_ID": f"{self.name}-{n}"}
        worker = Workers(env, self.name, self.tmp / f"{self.name}-{n}.log")
        self.replicas.append(worker)
        return worker

    def start(self) -> None:
        in_parallel([lambda w=w: w.start(timeout=START_S) for w in self.replicas if w.proc is None])

    def live(self) -> list[Workers]:
        return [w for w in self.replicas if w.proc is not None and w.proc.poll() is None]

    def log(self, n: int) -> str:
        return self.replicas[n].log_path.read_text(errors="replace")


def in_parallel(calls: list[Callable[[], object]]) -> None:
    with ThreadPoolExecutor(len(calls)) as pool:
        for done in [pool.submit(call) for call in calls]:
            done.result()


async def holdings(bootstrap: str, group: str) -> dict[str, int]:
    """Partitions each member of `group` holds, by member id, once the group is stable
    (a static member's id starts with its instance id); {} while it rebalances."""
    admin = clients.admin(KafkaConnection(bootstrap))
    await admin.start()
    try:
        [response] = await admin.describe_consumer_groups([group])
    finally:
        await admin.close()
    [described] = response.groups
    _, _, state, _, _, members, *_ = described
    if state != "Stable":
        return {}
    held = {}
    for member_id, *_, assignment in members:
        partitions = ConsumerProtocol.ASSIGNMENT.decode(assignment).partitions()
        held[member_id] = len(partitions)
    return held


async def settled(bootstrap: str, prefix: str, stage: str, instances: list[str]) -> dict[str, int]:
    """Partitions held by each of `instances` once the stage's group has exactly those
    members, or what the group shows after 60 s."""
    group, named = group_id(prefix, stage), member_prefix(prefix, stage)
    deadline = time.monotonic() + 60
    while True:
        held = await holdings(bootstrap, group)
        by_instance = {
            i: sum(n for m, n in held.items() if m.startswith(f"{named}{i}-")) for i in instances
        }
        if len(held) == len(instances) and all(by_instance.values()):
            return by_instance
        if time.monotonic() > deadline:
            return {**by_instance, "members": len(held)}
        await asyncio.sleep(1.0)


def test_replicas_join_die_pause_and_stop_while_every_candidate_gets_one_outcome(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    began = time.monotonic()
    items = candidates(N)
    ids = [cid for cid, _, _ in items]
    with serve_in_thread(default=Latency(0.2, 1.5)) as judge:
        env = worker_env(
            kafka_bootstrap, topic_prefix, tmp_path / "data",
            GROUNDSTREAM_POLICY=str(POLICY), GROUNDSTREAM_BATCH_SIZE="16",
            GROUNDSTREAM_PARTITIONS=str(PARTITIONS),
            GROUNDSTREAM_JUDGE_URL=judge.base_url, GROUNDSTREAM_JUDGE_MODEL="slow-judge",
        )  # fmt: skip
        cli(env, "topics", "create")
        stages = {name: Stage(env, name, tmp_path) for name in STAGE_NAMES}
        for name, stage in stages.items():
            for _ in range(SCALED.get(name, 1)):
                stage.add()
        scaled = [stages[name] for name in SCALED]
        watch = OutcomeWatch(kafka_bootstrap, topic_prefix)
        at: dict[str, float] = {}
        watch.start()
        try:
            in_parallel([s.start for s in stages.values()])
            started_s = time.monotonic() - began
            t0 = time.monotonic()
            producer = produce_paced(kafka_bootstrap, f"{topic_prefix}candidates", items, PRODUCE_S)
            for s in scaled:
                s.add()  # one more replica joins each, while the faults go on

            failed: list[BaseException] = []

            def join() -> None:
                try:
                    in_parallel([s.start for s in scaled])
                except BaseException as exc:  # raised in the test's thread, below
                    failed.append(exc)
                at["joined"] = time.monotonic() - t0

            joining = threading.Thread(target=join)
            joining.start()
            time.sleep(15)
            for name, n in KILLED.items():
                stages[name].replicas[n].kill()
            at["killed"] = time.monotonic() - t0
            time.sleep(5)
            tries: dict[str, int] = {}

            def zombie(s: Stage) -> None:
                """Pause the replica inside a transaction, for PAUSE_S, then resume it."""
                worker = s.replicas[PAUSED]
                pid = worker.proc.pid  # type: ignore[union-attr]
                txn = (
                    f"{member_prefix(topic_prefix, s.name)}{worker.env['GROUNDSTREAM_INSTANCE_ID']}"
                )
                try:
                    tries[s.name] = asyncio.run(
                        pause_in_a_transaction(kafka_bootstrap, txn, pid, s.name not in FLOW)
                    )
                except BaseException as exc:  # raised in the test's thread, below
                    failed.append(exc)
                    return
                at[f"paused {s.name}"] = time.monotonic() - t0
                time.sleep(PAUSE_S)
                os.kill(pid, signal.SIGCONT)
                at[f"resumed {s.name}"] = time.monotonic() - t0

            zombies = [threading.Thread(target=zombie, args=(s,)) for s in scaled]
            for thread in zombies:
                thread.start()
            time.sleep(10)
            stopping = [
                threading.Thread(target=stages[name].replicas[n].stop)
                for name, n in TERMINATED.items()
            ]
            for thread in stopping:
                thread.start()
            at["terminated"] = time.monotonic() - t0
            for thread in [*zombies, *stopping, joining]:
                thread.join()
            if failed:
                raise failed[0]
            producer.join()
            at["produced"] = time.monotonic() - t0
            done = asyncio.run(wait_for_outcomes(kafka_bootstrap, topic_prefix, ids, timeout=240))
            at["concluded"] = time.monotonic() - t0
            live = {s.name: [w.env["GROUNDSTREAM_INSTANCE_ID"] for w in s.live()] for s in scaled}
            held = {
                name: asyncio.run(settled(kafka_bootstrap, topic_prefix, name, instances))
                for name, instances in live.items()
            }
            singles_alive = all(stages[n].live() for n in STAGE_NAMES if n not in SCALED)
        finally:
            for stage in stages.values():
                for worker in stage.replicas:
                    if worker.proc is not None and worker.proc.poll() is None:
                        os.kill(worker.proc.pid, signal.SIGCONT)
                    worker.stop()
            watch.stop()
    figures = asyncio.run(audit(kafka_bootstrap, topic_prefix, ids))
    refused = {s.name: s.log(PAUSED).count(REFUSED) for s in scaled}
    dropped = {s.name: s.log(PAUSED).count(DROPPED) for s in scaled if s.name in FLOW}
    seen = sorted(watch.seen.values())
    stall = max((b - a for a, b in pairwise(seen)), default=0.0)
    print(
        f"\nscale-out: {figures.render()}\nworkers ready {started_s:.0f}s after the start;"
        f" faults at (s after the first candidate) { ({k: round(v) for k, v in at.items()}) };"
        f" pauses tried {tries}; refused stale commits {refused}, dropped for the kill"
        f" switch {dropped}; live replicas' partitions {held};"
        f" longest wait between outcomes {stall:.1f}s;"
        f" wall {time.monotonic() - began:.0f}s"
    )
    assert done == N
    figures.assert_exactly_once()  # one outcome each, none in two terminal topics
    # Each zombie's stale commit refused by the broker (in flow: or its work dropped first).
    assert all(refused[s] or dropped.get(s) for s in refused), (refused, dropped)
    for name, instances in live.items():
        gone = {KILLED.get(name), TERMINATED.get(name)} - {None}
        kept = [f"{name}-{n}" for n in range(SCALED[name] + 1) if n not in gone]
        assert instances == kept, live  # the resumed replica rejoined, the joiner holds
        assert all(held[name].get(i, 0) > 0 for i in instances), held
        assert "members" not in held[name], held
    assert singles_alive
