"""`bench ladder`: the whole ladder over Kafka (`worker all`: every stage its own process)
vs `groundstream verify`'s embedded ladder in this process, on the same candidates.

Both sides are warmed up first (model loaded, first batches done). The Kafka side's time
runs from the first produce to the last `outcome` record on `decisions`; the figure is its
rate over the in-process rate (no goal: what the broker and the process boundaries cost).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from topics.names import Topic
from workers.bench.data import RAGTRUTH_DEV, ragtruth, retag, unique_candidates
from workers.bench.kafka import decided_by, through
from workers.bench.procs import bench
from workers.bench.report import Result


@dataclass(frozen=True)
class Options:
    bootstrap: str
    n: int = 2000
    data: str = "auto"  # ragtruth (the shared dev split), synthetic, or auto: ragtruth if present
    timeout: float = 1800.0
    warmup: int = 64  # candidates each side decides before it is timed


def candidates(n: int, data: str, tag: str) -> list[dict]:
    """`n` candidates under ids unique to `tag`; RAGTruth rows repeat when `n` exceeds them."""
    if data == "synthetic" or (data == "auto" and not RAGTRUTH_DEV.is_file()):
        return unique_candidates(n, tag)
    return retag(list(ragtruth()), n, tag)


def source_name(data: str) -> str:
    ragtruth_used = data == "ragtruth" or (data == "auto" and RAGTRUTH_DEV.is_file())
    return "ragtruth dev" if ragtruth_used else "synthetic"


def in_process_seconds(rows: list[dict], warm: list[dict]) -> float:
    from workers.runtime.settings import Settings
    from workers.runtime.verify import run_lines

    settings = Settings.from_env()
    policy = settings.load_policy()
    run_lines(warm, settings, policy, progress=False)
    started = time.perf_counter()
    run_lines(rows, settings, policy, progress=False)
    return time.perf_counter() - started


def run(opts: Options) -> Result:
    rows = candidates(opts.n, opts.data, "ladder")
    verify_s = in_process_seconds(rows, candidates(opts.warmup, opts.data, "ladder-warm-verify"))
    print(f"verify in-process: {opts.n / verify_s:.1f}/s ({verify_s:.1f}s)", flush=True)
    with bench(opts.bootstrap) as b:
        source, decisions = b.prefix + Topic.CANDIDATES, b.prefix + Topic.DECISIONS

        def seconds(batch: list[dict]) -> float:
            s, _, _ = asyncio.run(
                through(
                    b.bootstrap, source, batch, [decisions], decided_by("outcome"),
                    timeout=opts.timeout,
                )
            )  # fmt: skip
            return s

        b.start("all")
        seconds(candidates(opts.warmup, opts.data, "ladder-warm"))
        kafka_s = seconds(rows)
        print(f"ladder over Kafka: {opts.n / kafka_s:.1f}/s ({kafka_s:.1f}s)", flush=True)
        b.stop()
        peaks = dict(b.peaks)
    return Result(
        "ladder",
        verify_s / kafka_s,
        None,
        "x",
        rates={"kafka ladder/s": opts.n / kafka_s, "verify in-process/s": opts.n / verify_s},
        notes={"n": opts.n, "data": source_name(opts.data)},
        peaks=peaks,
    )
