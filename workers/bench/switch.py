"""`bench switch`: the switch stage vs a bare batched aiokafka loop on the same envelopes.

Scored envelopes are made in this process (the geometry stage's own code on a pool of
unique candidates, each copied under fresh candidate and session ids up to N) and written
to `<prefix>scored` once. Then both read that same topic from the start, each in its own
process and group: the bare loop (`workers.bench.bare`, forward and commit) and
`groundstream worker switch`. A side's rate is its steady rate, from the timestamps its
outputs were written with: (outputs − 1) / (last − first). The figure is switch / bare
(goal >= 0.5). `--profile` runs the switch worker under cProfile and prints where its
event loop spends the time.
"""

from __future__ import annotations

import asyncio
import pstats
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from topics.codec import dumps, loads
from topics.names import Topic
from workers.bench.data import unique_candidates
from workers.bench.kafka import Watch, candidate_id, decided_by, produce
from workers.bench.procs import REPO_ROOT, Bench, bench
from workers.bench.report import Result

GOAL = 0.5
POOL = 256


@dataclass(frozen=True)
class Options:
    bootstrap: str
    n: int = 20_000
    timeout: float = 900.0
    profile: Path | None = None
    batch_size: int | None = None  # GROUNDSTREAM_BATCH_SIZE of the switch worker


@cache
def scored_envelopes(n: int) -> list[tuple[bytes, bytes]]:
    """`n` (key, value) scored envelopes, as the geometry stage writes them (once per
    process: `--tls` runs the bench four times on the same envelopes); at most `POOL`
    candidates are scored, and no more than `n`."""
    from workers.interfaces import Emit
    from workers.runtime.embedded import EmbeddedBus
    from workers.runtime.settings import Settings
    from workers.runtime.verify import make_context
    from workers.stages.geometry import GeometryStage

    settings = Settings.from_env({})
    ctx = make_context(settings, settings.load_policy())
    bus = EmbeddedBus([GeometryStage()], ctx)
    for c in unique_candidates(min(n, POOL), "switch-pool"):
        bus.publish(Emit(Topic.CANDIDATES, c["session_id"].encode(), dumps(c)))
    asyncio.run(bus.drain())
    pool = [loads(item.value) for item in bus.queues[Topic.SCORED]]
    out = []
    for i in range(n):
        env = pool[i % len(pool)]
        session = f"switch-s{i}"
        env = {**env, "candidate": {**env["candidate"], "id": f"switch-{i}", "session_id": session}}
        out.append((session.encode(), dumps(env)))
    return out


def steady_rate(stamps: dict[str, float]) -> float:
    times = sorted(stamps.values())
    return (len(times) - 1) / max(times[-1] - times[0], 1e-9)


async def _bare(b: Bench, source: str, dest: str, n: int, timeout: float) -> float:
    async with Watch(b.bootstrap, [dest], candidate_id) as w:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "workers.bench.bare", b.bootstrap, source, dest, str(n),
            cwd=REPO_ROOT, env=b.env,
        )  # fmt: skip
        await w.until(n, timeout)
        await proc.wait()
    return steady_rate(w.written)


async def _switch(b: Bench, n: int, timeout: float, wrap: list[str]) -> float:
    decisions = b.prefix + Topic.DECISIONS
    async with Watch(b.bootstrap, [decisions], decided_by("switch")) as w:
        reading = asyncio.create_task(w.until(n, timeout))
        await asyncio.to_thread(b.start, "switch", wrap=wrap)
        await reading
    return steady_rate(w.written)


def run(opts: Options) -> Result:
    envelopes = scored_envelopes(opts.n)
    with bench(opts.bootstrap) as b:
        source, dest = b.prefix + Topic.SCORED, b.prefix + "bench-bare"
        asyncio.run(_create(b.bootstrap, dest, b.partitions))
        asyncio.run(produce(b.bootstrap, source, envelopes))
        bare = asyncio.run(_bare(b, source, dest, opts.n, opts.timeout))
        print(f"bare aiokafka loop: {bare:,.0f}/s", flush=True)
        wrap = ["-m", "cProfile", "-o", str(opts.profile)] if opts.profile else []
        if opts.batch_size:
            b.extra_env["GROUNDSTREAM_BATCH_SIZE"] = str(opts.batch_size)
        switch = asyncio.run(_switch(b, opts.n, opts.timeout, wrap))
        print(f"switch stage: {switch:,.0f}/s", flush=True)
        b.stop()
        peaks = dict(b.peaks)
    if opts.profile:
        pstats.Stats(str(opts.profile)).sort_stats("tottime").print_stats(25)
    return Result(
        "switch",
        switch / bare,
        GOAL,
        "x",
        rates={"switch/s": switch, "bare aiokafka/s": bare},
        notes={"n": opts.n, "batch_size": opts.batch_size or "default"},
        peaks=peaks,
    )


async def _create(bootstrap: str, name: str, partitions: int) -> None:
    from aiokafka.admin import NewTopic

    from topics import clients
    from workers.bench.procs import connection

    admin = clients.admin(connection(bootstrap))
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        await admin.close()
