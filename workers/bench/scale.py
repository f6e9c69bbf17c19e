"""`bench scale`: the geometry stage on one, two and three replicas, and how long a
replica's partitions stand still when it dies or stops with no replacement.

Rates: each replica is its own `groundstream worker geometry` process (its own instance
id) on a 6-partition topic, its encoder on one thread (OMP_NUM_THREADS=1), so each replica
can use one core; the same number of unique candidates goes through one, then two, then
three (each joins the group and is warmed up before the clock starts). The machine's
cores are part of the result: replicas past the core count share cores and add little.

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
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

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
    sent: dict[str, tuple[int, float]] = {}
    client = producer(bootstrap)
    await client.start()
    count = 0

    async def probe() -> set[str]:
        nonlocal count
        rows = unique_candidates(PARTITIONS, f"{tag}-{count}")
        count += 1
        acks = []
        for partition, row in enumerate(rows):
            sent[row["id"]] = (partition, time.perf_counter())
            key = row["session_id"].encode()
            acks.append(await client.send(source, dumps(row), key=key, partition=partition))
        await asyncio.gather(*acks)
        return {row["id"] for row in rows}

    async def decided(ids: set[str], watch: Watch, what: str) -> None:
        deadline = time.perf_counter() + timeout
        while not ids <= watch.arrivals.keys():
            if time.perf_counter() > deadline:
                late = {sent[i][0] for i in ids - watch.arrivals.keys()}
                raise BenchError(f"{tag}: partitions {sorted(late)} not decided {what}")
            await asyncio.sleep(0.02)

    written = Watch(bootstrap, [decisions], decided_by("geometry"), isolation="read_uncommitted")
    seen = Watch(bootstrap, [decisions], decided_by("geometry"))
    async with written, seen:

        async def follow(watch: Watch) -> None:
            while True:
                await watch.poll(50)

        readers = [asyncio.create_task(follow(w)) for w in (written, seen)]
        try:
            for _ in range(rounds):
                await decided(await probe(), seen, "before the signal")
                await asyncio.sleep(every)
            since = time.perf_counter()
            act()
            marks = await probe()
            await decided(marks, seen, f"within {timeout:g} s of the signal")
            await decided(marks, written, f"within {timeout:g} s of the signal")
        finally:
            for reader in readers:
                reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*readers)
            await client.stop()
    resumed = flowing_after(sent, written.arrivals, since)
    visible = flowing_after(sent, seen.arrivals, since)
    return max(resumed.values()) - since, max(visible.values()) - since


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
        for k in REPLICAS:
            # Its own instance id: its own transactional id and static member.
            b.start("geometry", f"geometry[{k}]", GROUNDSTREAM_INSTANCE_ID=str(k))
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
