"""`bench latency`: produce → `state` on the accept path, at a fixed offered rate.

Candidates the in-process ladder sends to `state` are picked first (RAGTruth's dev split
when present, else synthetic), one per context, then produced under fresh ids at `--rate`
per second for `--seconds` into `worker all` (every stage its own process); each one's
latency runs from its send to its arrival on `state` (read_committed). The goal is relative
to the model: p99 <= 2 x one in-process encode of that candidate + 50 ms, the encode being
the median over the candidates sent of one `encode_uncached` of all the texts geometry
embeds for it.

Every candidate sent, warm-up included, has a context and an answer no other one has: a
text the geometry worker has embedded before comes from its cache, and the figure would
measure the ladder without the encode the goal is measured against. When the pool holds
fewer such candidates than the rate and duration ask for, fewer are sent (`notes`).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass

from topics.names import Topic
from workers.bench.data import retag, texts_per_stage_batch
from workers.bench.kafka import through
from workers.bench.ladder import candidates, source_name
from workers.bench.procs import BenchError, bench
from workers.bench.report import Result

POOL = 800
WARMUP = 5


@dataclass(frozen=True)
class Options:
    bootstrap: str
    rate: float = 5.0
    seconds: float = 60.0
    data: str = "auto"
    timeout: float = 600.0


def accepted(pool: list[dict]) -> list[dict]:
    """The candidates of `pool` that the in-process ladder writes to `state`."""
    from workers.runtime.settings import Settings
    from workers.runtime.verify import run_lines

    settings = Settings.from_env()
    outcomes = run_lines(pool, settings, settings.load_policy(), progress=False).outcomes()
    return [c for c in pool if outcomes.get(c["id"], {}).get("write_to_state")]


def encode_ms(rows: list[dict]) -> float:
    """Median milliseconds of one uncached encode of each candidate's texts."""
    from pipeline.encoder import load_encoder
    from workers.runtime.settings import Settings

    settings = Settings.from_env()
    encoder = load_encoder(settings.load_policy().encoder_model, settings.encoder_backend)
    times = []
    encoder.encode_uncached(["warm-up: the first call pays one-time costs"])
    for c in rows:
        (texts,) = texts_per_stage_batch(encoder, [c], 1)
        started = time.perf_counter()
        encoder.encode_uncached(texts)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def one_per_context(rows: list[dict]) -> list[dict]:
    """Candidates none of whose context chunks, and not whose answer, an earlier one has:
    the encoder would serve a repeated text from its cache (RAGTruth's QA contexts share
    passages)."""
    seen: set[str] = set()
    out = []
    for row in rows:
        context = row.get("context") or ()
        texts = {*((context,) if isinstance(context, str) else map(str, context))}
        texts.add("\0answer " + str(row.get("response")))
        if not texts & seen:
            seen |= texts
            out.append(row)
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run(opts: Options) -> Result:
    pool = one_per_context(accepted(candidates(POOL, opts.data, "latency-pool")))
    if len(pool) <= WARMUP:
        raise BenchError(f"{len(pool)} candidates of distinct contexts reach state in-process")
    wanted = int(opts.rate * opts.seconds)
    total = min(wanted, len(pool) - WARMUP)
    warm, rows = retag(pool[:WARMUP], WARMUP, "warm"), retag(pool[WARMUP:], total, "lat")
    encode = encode_ms(rows)
    with bench(opts.bootstrap) as b:
        source, state = b.prefix + Topic.CANDIDATES, b.prefix + Topic.STATE
        b.start("all")
        asyncio.run(through(b.bootstrap, source, warm, [state], timeout=opts.timeout))
        _, sent, arrived = asyncio.run(
            through(b.bootstrap, source, rows, [state], rate=opts.rate, timeout=opts.timeout)
        )
        b.stop()
        peaks = dict(b.peaks)
    latencies = [(arrived[k] - sent[k]) * 1000 for k in sent]
    p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
    goal = 2 * encode + 50
    return Result(
        "latency",
        p99,
        round(goal, 1),
        "ms",
        lower_is_better=True,
        rates={"p50 ms": p50, "p99 ms": p99, "max ms": max(latencies), "one encode ms": encode},
        notes={
            "rate": opts.rate,
            "candidates": total,
            "asked": wanted,
            "data": source_name(opts.data),
        },
        peaks=peaks,
    )
