"""`bench geometry`: the stage over Kafka vs the raw encoder on the same texts, per backend.

For each encoder backend (torch, then onnx), one `groundstream worker geometry` with
GROUNDSTREAM_ENCODER_BACKEND set, and the candidates cut into rounds. In each round, side A
is the raw encoder in this process (`encode_uncached`, with the stage's own model batching,
on exactly the texts the stage embeds, per stage batch, on a worker thread as the stage's
`asyncio.to_thread`); side B is the worker on the same round's candidates, produced in one
transaction so that it sees them all at once, timed from then to the last `geometry`
decision record. The sides alternate (A B, B A, …: `workers.bench.rounds`) so the
machine's drift falls on both. The figure is B/A over all rounds of the first backend
(goal >= 0.95); each round's ratio, the other backend's rates and its speed against the
first, and each worker's peak memory come with it. Every text is unique (the stage's cache
cannot help), the same texts for both backends.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

from topics.names import Topic
from workers.bench.data import retag, texts_per_stage_batch, unique_candidates
from workers.bench.kafka import decided_by, through
from workers.bench.procs import bench
from workers.bench.report import Result
from workers.bench.rounds import alternate, parts

GOAL = 0.95


@dataclass(frozen=True)
class Options:
    bootstrap: str
    n: int = 1000
    warmup: int = 128
    rounds: int = 4
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
    cut = parts(measured, opts.rounds)
    rates: dict[str, float] = {}
    ratios: dict[str, float] = {}
    spread: dict[str, list[float]] = {}
    env = {"GROUNDSTREAM_BATCH_SIZE": str(opts.batch_size)}
    with bench(opts.bootstrap, **env) as b, ThreadPoolExecutor(1) as pool:
        source, decisions = b.prefix + Topic.CANDIDATES, b.prefix + Topic.DECISIONS

        def stage_seconds(rows: list[dict], tag: str) -> float:
            seconds, _, _ = asyncio.run(
                through(
                    b.bootstrap, source, retag(rows, len(rows), tag), [decisions],
                    decided_by("geometry"), atomic=True, timeout=opts.timeout,
                )
            )  # fmt: skip
            return seconds

        def raw_round(encoder: SentenceEncoder, batches: list[list], r: int) -> float:
            return raw_seconds(encoder, batches[r], pool)

        def stage_round(backend: str, r: int) -> float:
            return stage_seconds(cut[r], f"{backend}{r}")

        for backend in opts.backends:
            # The worker's own model batching (`pipeline.encoder.ENCODE_BATCH`), not the
            # stage batch: the raw side encodes as the stage's encoder does.
            encoder = SentenceEncoder(backend=backend)
            batches = [texts_per_stage_batch(encoder, part, opts.batch_size) for part in cut]
            raw_seconds(encoder, texts_per_stage_batch(encoder, warm, opts.batch_size), pool)
            tag = f"geometry[{backend}]"
            b.start("geometry", tag, GROUNDSTREAM_ENCODER_BACKEND=backend)
            stage_seconds(warm, f"w{backend}")
            raw, stage = alternate(
                opts.rounds,
                partial(raw_round, encoder, batches),
                partial(stage_round, backend),
            )
            b.stop(tag)
            rates[f"raw {backend}/s"] = opts.n / sum(raw)
            rates[f"stage {backend}/s"] = opts.n / sum(stage)
            ratios[backend] = sum(raw) / sum(stage)
            spread[backend] = [a / s for a, s in zip(raw, stage, strict=True)]
            print(
                f"{backend}: raw {opts.n / sum(raw):.1f}/s, stage {opts.n / sum(stage):.1f}/s, "
                f"stage/raw {ratios[backend]:.3f} (rounds: "
                + ", ".join(f"{x:.2f}" for x in spread[backend])
                + ")",
                flush=True,
            )
            del encoder
        peaks = dict(b.peaks)
    first = opts.backends[0]
    notes: dict[str, object] = {
        "n": opts.n,
        "threads": opts.threads,
        "batch_size": opts.batch_size,
        "rounds": opts.rounds,
        "texts_per_candidate": round(sum(len(t) for r in batches for t in r) / opts.n, 2),
        **{f"stage/raw {k}": round(v, 3) for k, v in ratios.items()},
        **{f"rounds {k}": [round(x, 3) for x in v] for k, v in spread.items()},
    }
    for other in opts.backends[1:]:
        rates[f"stage/raw {other}"] = ratios[other]
        rates[f"stage {other}/{first}"] = rates[f"stage {other}/s"] / rates[f"stage {first}/s"]
    return Result("geometry", ratios[first], GOAL, "x", rates=rates, notes=notes, peaks=peaks)
