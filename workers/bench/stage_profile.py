"""Where the geometry stage's time goes, without Kafka: its `process` under cProfile.

    python -m workers.bench.stage_profile [--backend onnx-int8] [--n 384] [--per-context 1]

The stage decides `bench geometry`'s candidates (or, with `--per-context 5`, `bench
cache`'s shared contexts) in batches of 64, in this process, with the worker's own
encoder; its encoder thread (`asyncio.to_thread`) runs inline so that cProfile sees it.
The raw encoder (`encode_uncached`, a second encoder instance, on the texts the stage
embeds) is timed on the same candidates first. Printed: both rates, and the stage's time
cut into the parts the issue asks about (model calls, tokenising, the claim head's and
the grounding model's lexical work, windows, records), each a share of the whole.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import re
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from topics.codec import dumps
from workers.bench.data import shared_context_candidates, texts_per_stage_batch, unique_candidates

BATCH = 64
PARTS = {
    "model calls (encode_uncached)": r"pipeline/encoding/encoder\.py:encode_uncached$",
    "  of which the transformer (ORT run / torch forward)": (
        r"onnxruntime_pybind11_state\.\w+' objects>|^~:<built-in method onnxruntime.*run>"
        r"|sentence_transformers/base/model\.py:forward$"
    ),
    "  of which tokenising for the model": (
        r"encode_batch' of 'tokenizers|sentence_transformers/base/model\.py:preprocess$"
    ),
    "windows (offsets tokenising, first sight)": r"pipeline/encoding/encoder\.py:_split$",
    "claim head (lexical pair features, ranking)": r"pipeline/claims/head\.py:assess$",
    "grounding features (answer support)": r"pipeline/scores/grounding\.py:grounding_features$",
    "records (conclude)": r"workers/stages/kit\.py:conclude$",
}
"""Parts of the stage's time: a regex over cProfile's `file:function` names."""


class _Inline(ThreadPoolExecutor):
    """Runs what `asyncio.to_thread` hands it in the caller's thread, where cProfile is."""

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[no-untyped-def]
        done: Future = Future()
        done.set_result(fn(*args, **kwargs))
        return done


@dataclass(frozen=True)
class Profile:
    raw_rate: float
    stage_rate: float
    seconds: float
    shares: dict[str, float]


def _seconds(stats: pstats.Stats, pattern: str) -> float:
    """Cumulative seconds of the functions whose `file:function` matches `pattern`
    (cProfile counts a recursive function's time once)."""
    return sum(
        cumulative
        for (file, _, func), (_, _, _, cumulative, _) in stats.stats.items()  # type: ignore[attr-defined]
        if re.search(pattern, f"{file}:{func}")
    )


def profile(backend: str = "onnx-int8", n: int = 384, per_context: int = 1) -> Profile:
    from pipeline.encoding.encoder import SentenceEncoder
    from workers.bench.geometry import raw_seconds
    from workers.clients.encoder import stage_encoder
    from workers.interfaces import Inbound
    from workers.runtime.settings import Settings
    from workers.runtime.verify import make_context
    from workers.stages.geometry import GeometryStage

    settings = Settings.from_env({**os.environ, "GROUNDSTREAM_ENCODER_BACKEND": backend})
    ctx = make_context(settings, settings.load_policy())
    stage = GeometryStage()
    if per_context == 1:
        rows = unique_candidates(n, "geometry")
        warm = unique_candidates(BATCH, "geometry-warm")
    else:
        rows = shared_context_candidates(n, per_context, "cache-shared")
        warm = shared_context_candidates(BATCH, 1, "cache-warm")

    def inbound(part: list[dict]) -> list[Inbound]:
        return [
            Inbound(r["session_id"].encode(), dumps(r), "candidates", 0, i)
            for i, r in enumerate(part)
        ]

    async def decide(part: list[dict]) -> None:
        asyncio.get_running_loop().set_default_executor(_Inline(1))
        await stage.process(inbound(part), ctx)

    stage_encoder(ctx)
    asyncio.run(decide(warm))
    other = SentenceEncoder(backend=backend)  # its own caches: the stage sees every text first
    with ThreadPoolExecutor(1) as pool:
        raw = raw_seconds(other, texts_per_stage_batch(other, rows, BATCH), pool)
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    for k in range(0, n, BATCH):
        asyncio.run(decide(rows[k : k + BATCH]))
    profiler.disable()
    seconds = time.perf_counter() - started
    stats = pstats.Stats(profiler)
    shares = {label: _seconds(stats, pattern) / seconds for label, pattern in PARTS.items()}
    return Profile(n / raw, n / seconds, seconds, shares)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("torch", "onnx", "onnx-int8"), default="onnx-int8")
    parser.add_argument("--n", type=int, default=384)
    parser.add_argument("--per-context", type=int, default=1)
    args = parser.parse_args()
    p = profile(args.backend, args.n, args.per_context)
    print(
        f"{args.backend}: raw {p.raw_rate:.1f}/s, stage in-process {p.stage_rate:.1f}/s "
        f"(stage/raw {p.stage_rate / p.raw_rate:.3f}, under cProfile), {p.seconds:.2f} s:"
    )
    for label, share in p.shares.items():
        print(f"  {label:52s} {share:6.1%}")


if __name__ == "__main__":
    main()
