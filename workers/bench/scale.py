"""`bench scale`: one vs two geometry worker processes on a 4-partition topic.

Each worker runs its encoder on one thread (OMP_NUM_THREADS=1), so two processes can use
two cores. The same number of unique candidates goes through one worker, then through two
(the second joins the group; both warmed up before the clock starts). The figure is the
two-process rate over the one-process rate (goal >= 1.7).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from topics.names import Topic
from workers.bench.data import unique_candidates
from workers.bench.kafka import decided_by, through
from workers.bench.procs import bench
from workers.bench.report import Result

GOAL = 1.7
PARTITIONS = 4


@dataclass(frozen=True)
class Options:
    bootstrap: str
    n: int = 600
    warmup: int = 128
    timeout: float = 900.0


def run(opts: Options) -> Result:
    one_thread = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
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

        b.start("geometry", "geometry[1 of 1]", GROUNDSTREAM_INSTANCE_ID="1")
        rate("scale-warm-1", opts.warmup)
        one = rate("scale-one", opts.n)
        print(f"one worker: {one:.1f}/s", flush=True)
        # Its own transactional id: two processes of a stage must not fence each other.
        b.start("geometry", "geometry[2 of 2]", GROUNDSTREAM_INSTANCE_ID="2")
        rate("scale-warm-2", opts.warmup)
        two = rate("scale-two", opts.n)
        print(f"two workers: {two:.1f}/s", flush=True)
        b.stop()
        peaks = dict(b.peaks)
    return Result(
        "scale",
        two / one,
        GOAL,
        "x",
        rates={"one worker/s": one, "two workers/s": two},
        notes={"n": opts.n, "partitions": PARTITIONS, "threads_per_worker": 1},
        peaks=peaks,
    )
