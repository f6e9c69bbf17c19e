"""`bench cache`: the geometry stage on five candidates per context vs unique contexts.

Agents ask several questions of one retrieved context, and a retried answer comes back on
the same one; the stage embeds a text once per process (content-hash cache). Both sets
have RAG-sized contexts (three chunks of facts) and unique questions and answers; in one,
every context is unique, in the other five candidates share each. One geometry worker,
the unique set first; the figure is the shared set's rate over the unique set's (goal >= 3).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from topics.names import Topic
from workers.bench.data import shared_context_candidates
from workers.bench.kafka import decided_by, through
from workers.bench.procs import bench
from workers.bench.report import Result

GOAL = 3.0
PER_CONTEXT = 5


@dataclass(frozen=True)
class Options:
    bootstrap: str
    n: int = 500
    warmup: int = 64
    timeout: float = 900.0


def run(opts: Options) -> Result:
    warm = shared_context_candidates(opts.warmup, 1, "cache-warm")
    unique = shared_context_candidates(opts.n, 1, "cache-unique")
    shared = shared_context_candidates(opts.n, PER_CONTEXT, "cache-shared")
    with bench(opts.bootstrap) as b:
        source, decisions = b.prefix + Topic.CANDIDATES, b.prefix + Topic.DECISIONS

        def rate(candidates: list[dict]) -> float:
            seconds, _, _ = asyncio.run(
                through(
                    b.bootstrap, source, candidates, [decisions], decided_by("geometry"),
                    timeout=opts.timeout,
                )
            )  # fmt: skip
            return len(candidates) / seconds

        b.start("geometry")
        rate(warm)
        unique_rate = rate(unique)
        print(f"unique contexts: {unique_rate:.1f}/s", flush=True)
        shared_rate = rate(shared)
        print(f"{PER_CONTEXT} per context: {shared_rate:.1f}/s", flush=True)
        b.stop()
        peaks = dict(b.peaks)
    return Result(
        "cache",
        shared_rate / unique_rate,
        GOAL,
        "x",
        rates={"unique contexts/s": unique_rate, f"{PER_CONTEXT} per context/s": shared_rate},
        notes={"n": opts.n, "per_context": PER_CONTEXT},
        peaks=peaks,
    )
