"""`bench cache`: the geometry stage on five candidates per context vs unique contexts.

Agents ask several questions of one retrieved context, and a retried answer comes back on
the same one; the stage embeds a text once per process (content-hash cache). Both sets
have RAG-sized contexts (three chunks of facts) and unique questions and answers; in one,
every context is unique, in the other five candidates share each. One geometry worker; the
sets are cut into rounds that alternate (unique then shared, shared then unique, …:
`workers.bench.rounds`), each round's part produced in one transaction and timed from
then to its last `geometry` decision. The figure is the shared set's rate over the unique
set's over all rounds (goal >= 3).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from topics.names import Topic
from workers.bench.data import shared_context_candidates
from workers.bench.kafka import decided_by, through
from workers.bench.procs import bench
from workers.bench.report import Result
from workers.bench.rounds import alternate, parts

GOAL = 3.0
PER_CONTEXT = 5


@dataclass(frozen=True)
class Options:
    bootstrap: str
    n: int = 500
    warmup: int = 64
    rounds: int = 4
    timeout: float = 900.0


def run(opts: Options) -> Result:
    warm = shared_context_candidates(opts.warmup, 1, "cache-warm")
    unique = parts(shared_context_candidates(opts.n, 1, "cache-unique"), opts.rounds)
    shared = parts(
        shared_context_candidates(opts.n, PER_CONTEXT, "cache-shared"), opts.rounds, PER_CONTEXT
    )
    with bench(opts.bootstrap) as b:
        source, decisions = b.prefix + Topic.CANDIDATES, b.prefix + Topic.DECISIONS

        def seconds(candidates: list[dict]) -> float:
            taken, _, _ = asyncio.run(
                through(
                    b.bootstrap, source, candidates, [decisions], decided_by("geometry"),
                    atomic=True, timeout=opts.timeout,
                )
            )  # fmt: skip
            return taken

        b.start("geometry")
        seconds(warm)
        unique_s, shared_s = alternate(
            opts.rounds, lambda r: seconds(unique[r]), lambda r: seconds(shared[r])
        )
        b.stop()
        peaks = dict(b.peaks)
    unique_rate = sum(map(len, unique)) / sum(unique_s)
    shared_rate = sum(map(len, shared)) / sum(shared_s)
    rounds = [
        (len(s) / s_t) / (len(u) / u_t)
        for u, s, u_t, s_t in zip(unique, shared, unique_s, shared_s, strict=True)
    ]
    print(
        f"unique contexts: {unique_rate:.1f}/s, {PER_CONTEXT} per context: {shared_rate:.1f}/s "
        "(rounds: " + ", ".join(f"{x:.2f}" for x in rounds) + ")",
        flush=True,
    )
    return Result(
        "cache",
        shared_rate / unique_rate,
        GOAL,
        "x",
        rates={"unique contexts/s": unique_rate, f"{PER_CONTEXT} per context/s": shared_rate},
        notes={
            "n": opts.n,
            "per_context": PER_CONTEXT,
            "rounds": [round(x, 3) for x in rounds],
        },
        peaks=peaks,
    )
