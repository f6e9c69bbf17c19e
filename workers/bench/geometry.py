"""`bench geometry`: the stage over Kafka vs the raw encoder and vs a plain
sentence-transformers loop, on the same texts, per backend.

For each encoder backend (onnx-int8, then onnx; torch when asked), one `groundstream
worker geometry` with GROUNDSTREAM_ENCODER_BACKEND set, and the candidates cut into
rounds. In each round, side A is the raw encoder in this process (`encode_uncached`, with
the stage's own model batching, on exactly the texts the stage embeds, per stage batch, on
a worker thread as the stage's `asyncio.to_thread`); side B is the worker on the same
round's candidates, produced in one transaction so that it sees them all at once, timed
from then to the last `geometry` decision record; side C is what a user would write
instead of the stage: one `SentenceTransformer(model_dir).encode(texts, batch_size=32)`
(fp32 torch, its default batch) over the same round's texts, on the same thread as A. The
sides alternate (A B C, C B A, …: `workers.bench.rounds`) so the machine's drift falls on
all three. The figure is B/C over all rounds of the first backend (goal >= 1.3), held with
B/A of the same backend (goal >= 0.95); each round's ratios, the other backend's rates,
and each worker's peak memory come with it. Every text is unique (the stage's cache cannot
help), the same texts for both backends and the plain loop.
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

GOAL = 1.3
"""The stage's rate over the plain sentence-transformers loop's."""
RAW_GOAL = 0.95
"""The stage's rate over its own backend's raw encoder's."""
PLAIN_BATCH = 32
"""`SentenceTransformer.encode`'s default batch size: what a user's loop runs with."""


@dataclass(frozen=True)
class Options:
    bootstrap: str
    n: int = 1000
    warmup: int = 128
    rounds: int = 4
    batch_size: int = 64
    threads: int = 2
    backends: tuple[str, ...] = ("onnx-int8", "onnx")
    timeout: float = 900.0


def raw_seconds(encoder, batches: Sequence[Sequence[str]], pool: ThreadPoolExecutor) -> float:
    def run() -> float:
        started = time.perf_counter()
        for texts in batches:
            encoder.encode_uncached(texts)
        return time.perf_counter() - started

    return pool.submit(run).result()


def plain_seconds(model, batches: Sequence[Sequence[str]], pool: ThreadPoolExecutor) -> float:
    """One `SentenceTransformer.encode` over the texts of all `batches` (the raw side's
    input), as a user's loop would call it."""
    texts = [t for batch in batches for t in batch]

    def run() -> float:
        started = time.perf_counter()
        model.encode(texts, batch_size=PLAIN_BATCH)
        return time.perf_counter() - started

    return pool.submit(run).result()


def plain_model():
    """The bundled model as a user loads it: sentence-transformers, fp32, on the CPU."""
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as hf_logging

    from pipeline.encoding.encoder import default_model_path

    hf_logging.disable_progress_bar()
    return SentenceTransformer(str(default_model_path()), device="cpu", local_files_only=True)


def run(opts: Options) -> Result:
    from pipeline.encoding.encoder import SentenceEncoder

    measured = unique_candidates(opts.n, "geometry")
    warm = unique_candidates(opts.warmup, "geometry-warm")
    cut = parts(measured, opts.rounds)
    plain = plain_model()
    rates: dict[str, float] = {}
    ratios: dict[str, float] = {}
    over_plain: dict[str, float] = {}
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

        def plain_round(batches: list[list], r: int) -> float:
            return plain_seconds(plain, batches[r], pool)

        def stage_round(backend: str, r: int) -> float:
            return stage_seconds(cut[r], f"{backend}{r}")

        for backend in opts.backends:
            # The raw side encodes as the stage's encoder does: one text a model call
            # (`pipeline.encoding.encoder`), whatever the stage batch.
            encoder = SentenceEncoder(backend=backend)
            batches = [texts_per_stage_batch(encoder, part, opts.batch_size) for part in cut]
            warm_texts = texts_per_stage_batch(encoder, warm, opts.batch_size)
            raw_seconds(encoder, warm_texts, pool)
            plain_seconds(plain, warm_texts, pool)
            tag = f"geometry[{backend}]"
            b.start("geometry", tag, GROUNDSTREAM_ENCODER_BACKEND=backend)
            stage_seconds(warm, f"w{backend}")
            raw, stage, user = alternate(
                opts.rounds,
                partial(raw_round, encoder, batches),
                partial(stage_round, backend),
                partial(plain_round, batches),
            )
            b.stop(tag)
            rates[f"stage {backend}/s"] = opts.n / sum(stage)
            rates[f"raw {backend}/s"] = opts.n / sum(raw)
            rates[f"plain ST ({backend} rounds)/s"] = opts.n / sum(user)
            ratios[backend] = sum(raw) / sum(stage)
            over_plain[backend] = sum(user) / sum(stage)
            spread[backend] = [a / s for a, s in zip(raw, stage, strict=True)]
            spread[f"{backend} over plain"] = [u / s for u, s in zip(user, stage, strict=True)]
            print(
                f"{backend}: stage {opts.n / sum(stage):.1f}/s, raw {opts.n / sum(raw):.1f}/s, "
                f"plain sentence-transformers {opts.n / sum(user):.1f}/s; "
                f"stage/raw {ratios[backend]:.3f} (rounds: "
                + ", ".join(f"{x:.2f}" for x in spread[backend])
                + f"), stage/plain {over_plain[backend]:.3f} (rounds: "
                + ", ".join(f"{x:.2f}" for x in spread[f"{backend} over plain"])
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
        "plain_batch_size": PLAIN_BATCH,
        "rounds": opts.rounds,
        "texts_per_candidate": round(sum(len(t) for r in batches for t in r) / opts.n, 2),
        **{f"stage/raw {k}": round(v, 3) for k, v in ratios.items()},
        **{f"stage/plain {k}": round(v, 3) for k, v in over_plain.items()},
        **{f"rounds {k}": [round(x, 3) for x in v] for k, v in spread.items()},
    }
    for other in opts.backends[1:]:
        rates[f"stage/plain {other}"] = over_plain[other]
        rates[f"stage/raw {other}"] = ratios[other]
    return Result(
        "geometry",
        over_plain[first],
        GOAL,
        "x",
        rates=rates,
        notes=notes,
        peaks=peaks,
        also={f"stage/raw {first}": (ratios[first], RAW_GOAL)},
    )
