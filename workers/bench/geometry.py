"""`bench geometry`: the stage over Kafka vs the raw encoder on the same texts, per backend.

For each encoder backend (torch, then onnx): A, the raw encoder in this process
(`encode_uncached` on exactly the texts the stage embeds, per stage batch, on a worker
thread as the stage's `asyncio.to_thread`); B, one `groundstream worker geometry` with
GROUNDSTREAM_ENCODER_BACKEND set, from the first produce to the last `geometry` decision
record; then A again. The figure is B/A of the first backend (goal >= 0.95); the other
backend's rates, its speed against the first and each worker's peak memory come with it.
Every text is unique (the stage's cache cannot help), the same texts for both backends.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from topics.names import Topic
from workers.bench.data import retag, texts_per_stage_batch, unique_candidates
from workers.bench.kafka import decided_by, through
from workers.bench.procs import bench
from workers.bench.report import Result

GOAL = 0.95


@dataclass(frozen=True)
class Options:
    bootstrap: str
    n: int = 1000
    warmup: int = 128
    batch_size: int = 64
    threads: int = 2
    backends: tuple[str, ...] = ("torch", "onnx")
    timeout: float = 900.0


def raw_seconds(encoder, batches: Sequence[Sequence[str]], pool: ThreadPoolExecutor) -> float:
    def run() -> float:
        started = time.perf_counter()
        for texts in batches:
            encoder.encode_uncached(texts)
        return time.perf_counter() - started

    return pool.submit(run).result()


def run(opts: Options) -> Result:
    from pipeline.encoder import SentenceEncoder

    measured = unique_candidates(opts.n, "geometry")
    warm = unique_candidates(opts.warmup, "geometry-warm")
    rates: dict[str, float] = {}
    ratios: dict[str, float] = {}
    env = {"GROUNDSTREAM_BATCH_SIZE": str(opts.batch_size)}
    with bench(opts.bootstrap, **env) as b, ThreadPoolExecutor(1) as pool:
        source, decisions = b.prefix + Topic.CANDIDATES, b.prefix + Topic.DECISIONS
        for backend in opts.backends:
            encoder = SentenceEncoder(backend=backend, batch_size=opts.batch_size)
            batches = texts_per_stage_batch(encoder, measured, opts.batch_size)
            raw_seconds(encoder, texts_per_stage_batch(encoder, warm, opts.batch_size), pool)
            a1 = raw_seconds(encoder, batches, pool)
            tag = f"geometry[{backend}]"
            b.start("geometry", tag, GROUNDSTREAM_ENCODER_BACKEND=backend)
            asyncio.run(
                through(
                    b.bootstrap, source, retag(warm, len(warm), f"w{backend}"), [decisions],
                    decided_by("geometry"), timeout=opts.timeout,
                )
            )  # fmt: skip
            seconds, _, _ = asyncio.run(
                through(
                    b.bootstrap, source, retag(measured, opts.n, backend), [decisions],
                    decided_by("geometry"), timeout=opts.timeout,
                )
            )  # fmt: skip
            b.stop(tag)
            a2 = raw_seconds(encoder, batches, pool)
            raw = opts.n / statistics.fmean((a1, a2))
            rates[f"raw {backend}/s"] = raw
            rates[f"stage {backend}/s"] = opts.n / seconds
            ratios[backend] = (opts.n / seconds) / raw
            print(
                f"{backend}: raw {raw:.1f}/s (A {a1:.1f}s, {a2:.1f}s), "
                f"stage {opts.n / seconds:.1f}/s ({seconds:.1f}s), "
                f"stage/raw {ratios[backend]:.3f}",
                flush=True,
            )
            del encoder
        peaks = dict(b.peaks)
    first = opts.backends[0]
    notes: dict[str, object] = {
        "n": opts.n,
        "threads": opts.threads,
        "batch_size": opts.batch_size,
        "texts_per_candidate": round(sum(map(len, batches)) / opts.n, 2),
        **{f"stage/raw {k}": round(v, 3) for k, v in ratios.items()},
    }
    for other in opts.backends[1:]:
        rates[f"stage/raw {other}"] = ratios[other]
        rates[f"stage {other}/{first}"] = rates[f"stage {other}/s"] / rates[f"stage {first}/s"]
    return Result("geometry", ratios[first], GOAL, "x", rates=rates, notes=notes, peaks=peaks)
