"""`bench scale`: the geometry stage on one, two and three replicas, and how long a
replica's partitions stand still when it dies or stops with no replacement.

Rates: each replica is its own `groundstream worker geometry` process (its own instance
id) on a 6-partition topic, its encoder on one thread (OMP_NUM_THREADS=1), so each replica
can use one core; the same number of unique candidates goes through one, then two, then
three (each joins the group and is warmed up before the clock starts). The machine's
cores are part of the result: replicas past the core count share cores and add little.

Scale-up: while the second and the third replica start and join, rounds of one candidate
per partition go on (each sent once the last is decided): the longest round while a
replica joins, against the usual round before, is what its rebalance cost the group.

Failover, with the rates' three replicas still running: one is killed (kill -9), then a
second is stopped (SIGTERM) and leaves its group, as every worker does by default; then
a replica started with GROUNDSTREAM_LEAVE_GROUP_ON_STOP=false is stopped the same way.
Before each signal, a few rounds of one candidate per partition keep every replica busy
without outrunning it (each round sent once the last is decided); right after the
signal, one more candidate goes to each partition. A failover's time is from the signal
until the last of those is decided by the geometry stage, as `read_committed` readers
(the rest of the ladder) see it. For the kill, also as the stage wrote it
(read_uncommitted: processing resumed on another replica): what the new owner writes
stays invisible to `read_committed` readers of the partitions the killed replica's open
transaction, if it had one, wrote to, until the broker aborts it (after the transaction
timeout, 30 s). For a stop, read_uncommitted could show the stopping replica's last,
aborted batch, so only `read_committed` is reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial

from topics.codec import dumps
from topics.names import Topic
from workers.bench.data import unique_candidates
from workers.bench.kafka import Watch, decided_by, producer, through
from workers.bench.procs import BenchError, bench
from workers.bench.report import Result

GOAL = 1.7
"""Two replicas over one, where two cores are free for them."""
FAILOVER_GOAL_S = 15.0
"""A killed replica's partitions decided again within this (the session timeout is 10 s)."""
PARTITIONS = 6
"""Divisible by 1, 2 and 3: each replica count gets an even share."""
REPLICAS = (1, 2, 3)


@dataclass(frozen=True)
class Options:
    bootstrap: str
    n: int = 300
    warmup: int = 60
    probe_every: float = 0.2
    probe_rounds: int = 5
    timeout: float = 900.0
    failover_timeout: float = 180.0


def cores() -> int:
    """The cores this process (and the workers it starts) may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def flowing_after(
    sent: Mapping[str, tuple[int, float]], arrivals: Mapping[str, float], since: float
) -> dict[int, float]:
    """Each partition's first arrival (by candidate id) of a candidate sent at or after
    `since`: `sent` maps a candidate id to its partition and send time."""
    first: dict[int, float] = {}
    for cid, arrived in arrivals.items():
        partition, at = sent.get(cid, (-1, -1.0))
        if partition >= 0 and at >= since and arrived < first.get(partition, float("inf")):
            first[partition] = arrived
    return first


class Probe:
    """Rounds of one candidate per partition of `source`, and the geometry stage's decision
    records of them on `decisions`: as written (read_uncommitted) and as `read_committed`
    readers see them, each stamped when read here."""

    def __init__(self, bootstrap: str, source: str, decisions: str, tag: str) -> None:
        self.source, self.tag = source, tag
        self.sent: dict[str, tuple[int, float]] = {}
        self.client = producer(bootstrap)
        match = decided_by("geometry")
        self.written = Watch(bootstrap, [decisions], match, isolation="read_uncommitted")
        self.seen = Watch(bootstrap, [decisions], match)
        self._rounds = 0
        self._readers: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> Probe:
        await self.client.start()
        for watch in (self.written, self.seen):
            await watch.__aenter__()
            self._readers.append(asyncio.create_task(self._follow(watch)))
        return self

    async def __aexit__(self, *exc: object) -> None:
        for reader in self._readers:
            reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self._readers)
        for watch in (self.written, self.seen):
            await watch.__aexit__()
        await self.client.stop()

    @staticmethod
    async def _follow(watch: Watch) -> None:
        while True:
            await watch.poll(50)

    async def round(self) -> set[str]:
        """Send one fresh candidate to each partition; their ids."""
        rows = unique_candidates(PARTITIONS, f"{self.tag}-{self._rounds}")
        self._rounds += 1
        acks = []
        for partition, row in enumerate(rows):
            self.sent[row["id"]] = (partition, time.perf_counter())
            key = row["session_id"].encode()
            acks.append(
                await self.client.send(self.source, dumps(row), key=key, partition=partition)
            )
        await asyncio.gather(*acks)
        return {row["id"] for row in rows}

    async def decided(self, ids: set[str], timeout: float, committed: bool = True) -> float:
        """Wait until every one of `ids` is decided; the seconds from the first's send to
        the last's arrival. BenchError naming the partitions still waiting at `timeout`."""
        watch = self.seen if committed else self.written
        deadline = time.perf_counter() + timeout
        while not ids <= watch.arrivals.keys():
            if time.perf_counter() > deadline:
                late = {self.sent[i][0] for i in ids - watch.arrivals.keys()}
                raise BenchError(f"{self.tag}: partitions {sorted(late)} not decided in time")
            await asyncio.sleep(0.02)
        return max(watch.arrivals[i] for i in ids) - min(self.sent[i][1] for i in ids)


async def failover(
    bootstrap: str,
    source: str,
    decisions: str,
    act: Callable[[], None],
    *,
    tag: str,
    every: float,
    rounds: int,
    timeout: float,
) -> tuple[float, float]:
    """`rounds` rounds of one candidate per partition of `source`, each sent `every`
    seconds after the last was decided (traffic that never outruns the stage, however slow
    the machine); then `act()`, and at once one more candidate per partition. The seconds
    from `act()` until the last of those is decided: as written (read_uncommitted), and as
    read_committed readers see it."""
    async with Probe(bootstrap, source, decisions, tag) as probe:
        for _ in range(rounds):
            await probe.decided(await probe.round(), timeout)
            await asyncio.sleep(every)
        since = time.perf_counter()
        act()
        marks = await probe.round()
        await probe.decided(marks, timeout)
        await probe.decided(marks, timeout, committed=False)
    resumed = flowing_after(probe.sent, probe.written.arrivals, since)
    visible = flowing_after(probe.sent, probe.seen.arrivals, since)
    return max(resumed.values()) - since, max(visible.values()) - since


async def join_pause(
    bootstrap: str,
    source: str,
    decisions: str,
    start: Callable[[], None],
    *,
    tag: str,
    every: float,
    rounds: int,
    timeout: float,
) -> tuple[float, float]:
    """Rounds of one candidate per partition (each sent `every` seconds after the last was
    decided) while `start()` runs on a thread (a replica starting and joining the group),
    and `rounds` more after it returned. A round's time is from its sends to its last
    decision; the median of `rounds` rounds before the start, and the longest round from
    the start on: the pause the join's rebalance cost, with the baseline to read it by."""
    async with Probe(bootstrap, source, decisions, tag) as probe:
        before = []
        for _ in range(rounds):
            before.append(await probe.decided(await probe.round(), timeout))
            await asyncio.sleep(every)
        joining = asyncio.create_task(asyncio.to_thread(start))
        during: list[float] = []
        after = 0
        while after < rounds:
            during.append(await probe.decided(await probe.round(), timeout))
            after += joining.done()
            await asyncio.sleep(every)
        await joining  # a start that failed says so here
    return statistics.median(before), max(during)


def run(opts: Options) -> Result:
    one_thread = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    n_cores = cores()
    with bench(opts.bootstrap, PARTITIONS, **one_thread) as b:
        source, decisions = b.prefix + Topic.CANDIDATES, b.prefix + Topic.DECISIONS

        def rate(tag: str, n: int) -> float:
            seconds, _, _ = asyncio.run(
                through(
                    b.bootstrap, source, unique_candidates(n, tag), [decisions],
                    decided_by("geometry"), timeout=opts.timeout,
                )
            )  # fmt: skip
            return n / seconds

        def timed(tag: str, act: Callable[[], None]) -> tuple[float, float]:
            return asyncio.run(
                failover(
                    b.bootstrap, source, decisions, act,
                    tag=tag, every=opts.probe_every, rounds=opts.probe_rounds,
                    timeout=opts.failover_timeout,
                )
            )  # fmt: skip

        print(f"{n_cores} cores, load {os.getloadavg()[0]:.1f}", flush=True)
        rates: dict[int, float] = {}
        pauses: dict[int, tuple[float, float]] = {}
        for k in REPLICAS:
            # Its own instance id: its own transactional id and static member.
            start = partial(b.start, "geometry", f"geometry[{k}]", GROUNDSTREAM_INSTANCE_ID=str(k))
            if k == 1:
                start()
            else:  # a scale-up: how long the group stands still while the replica joins
                pauses[k] = asyncio.run(
                    join_pause(
                        b.bootstrap, source, decisions, start, tag=f"join-{k}",
                        every=opts.probe_every, rounds=opts.probe_rounds,
                        timeout=opts.failover_timeout,
                    )
                )  # fmt: skip
                usual, longest = pauses[k]
                print(
                    f"replica {k} joining: a round took {usual:.1f} s before, at most"
                    f" {longest:.1f} s while it joined",
                    flush=True,
                )
            rate(f"scale-warm-{k}", opts.warmup)
            rates[k] = rate(f"scale-{k}", opts.n)
            print(f"{k} replica(s): {rates[k]:.1f}/s", flush=True)

        killed = timed("kill", lambda: b.signal("geometry[3]", signal.SIGKILL))
        b.stop("geometry[3]")
        print(f"kill -9: decided again {killed[0]:.1f} s, visible {killed[1]:.1f} s", flush=True)
        left = timed("leave", lambda: b.signal("geometry[2]", signal.SIGTERM))
        b.stop("geometry[2]")
        print(f"SIGTERM, leaving: {left[1]:.1f} s", flush=True)
        b.start(
            "geometry", "geometry[stays]",
            GROUNDSTREAM_INSTANCE_ID="stays", GROUNDSTREAM_LEAVE_GROUP_ON_STOP="false",
        )  # fmt: skip
        stayed = timed("stay", lambda: b.signal("geometry[stays]", signal.SIGTERM))
        b.stop("geometry[stays]")
        print(f"SIGTERM, staying: {stayed[1]:.1f} s", flush=True)
        b.stop()
        peaks = dict(b.peaks)
    return Result(
        "scale",
        killed[0],
        FAILOVER_GOAL_S,
        "s",
        lower_is_better=True,
        rates={
            "cores": n_cores,
            **{f"{k} replica{'s' if k > 1 else ''}/s": rates[k] for k in REPLICAS},
            **{f"join {k} round s": pauses[k][1] for k in REPLICAS[1:]},
            "usual round s": statistics.median(p[0] for p in pauses.values()),
            "kill -9 s": killed[0],
            "kill -9 visible s": killed[1],
            "SIGTERM leaving s": left[1],
            "SIGTERM staying s": stayed[1],
        },
        notes={
            "n": opts.n,
            "partitions": PARTITIONS,
            "threads_per_worker": 1,
            "cores": n_cores,
            "probe_every_s": opts.probe_every,
            "session_timeout_s": 10,
            "three_over_one": rates[3] / rates[1],
        },
        peaks=peaks,
        also={"two over one": (rates[2] / rates[1], GOAL)},
    )
