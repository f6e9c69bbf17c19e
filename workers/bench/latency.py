"""`bench latency`: produce → `state` on the accept path, at a fixed offered rate.

Candidates the in-process ladder sends to `state` under the active policy (the shipped one
unless GROUNDSTREAM_POLICY names another) are picked first, one per context, then produced
under fresh ids at `--rate` per second for `--seconds` into `worker all` (every stage its
own process); each one's latency runs from its send to its arrival on `state`
(read_committed).

The pool (`draw`): with RAGTruth's dev split (present beside the checkout, or `--data
ragtruth`), its candidates that reach state come first; synthetic candidates built to be
grounded (`workers.bench.data.grounded_candidates`) fill the rest, drawn and checked
in-process until there are enough. RAGTruth alone is not enough: the shipped policy with no
judge sends about 6% of its right answers to state, a handful of distinct contexts, while
its accept path is the same code for any answer that reaches it. `notes` say how many of
each were sent.

The goal is relative to the model, per candidate: its latency <= 2 x one encode of that
candidate + 50 ms. One encode is the encoder time the geometry stage spends on that
candidate alone, measured in this process before the workers start: the candidate scored
as the stage scores it (`pipeline.scores.batch.score_batch`, the shipped policy and claim head)
with an empty cache, timing only the encoder's model calls. (Until 2026-12-01 it was one
`encode_uncached` of all the candidate's texts at once: one model batch padded to its
longest window, about three times what the stage spends, since the stage encodes the
answer's short claims in a call of their own.) The figure is the p99 over candidates of
latency / (2 x encode + 50 ms), goal <= 1; p50/p99 in milliseconds come with it, and what
the ladder adds beyond each candidate's encode (its Kafka hops and every stage's own work).
Over fewer than 100 candidates the p99 is the largest one: the p90 of the ratio comes with
it as the steadier tail (`notes` give the count).

Every candidate sent, warm-up included, has a context and an answer no other one has: a
text the geometry worker has embedded before comes from its cache, and the figure would
measure the ladder without the encode the goal is measured against. When the pool holds
fewer such candidates than the rate and duration ask for (synthetic ones run out only if
the policy accepts almost none of them), fewer are sent (`notes`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from pipeline.encoding.chunks import context_chunks
from topics.names import Topic
from workers.bench.data import grounded_candidates, retag
from workers.bench.kafka import through
from workers.bench.ladder import candidates, source_name
from workers.bench.procs import BenchError, bench
from workers.bench.report import Result

POOL = 800
"""RAGTruth rows the in-process ladder decides to find those that reach state."""
DRAWS = 4
"""Rounds of synthetic grounded candidates drawn, each twice what is still missing."""
WARMUP = 5
SLACK_MS = 50.0


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


def policy_version() -> str:
    from workers.runtime.settings import Settings

    return Settings.from_env().load_policy().version


def encode_ms(rows: list[dict]) -> dict[str, float]:
    """Milliseconds of encoder time the geometry stage spends on each candidate alone, by id."""
    from pipeline.encoding.encoder import load_encoder
    from pipeline.guards.domain import task_of
    from pipeline.scores.batch import score_batch
    from topics.schema import candidate_from_dict
    from workers.clients.claims import load_head
    from workers.runtime.settings import Settings

    settings = Settings.from_env()
    policy = settings.load_policy()
    encoder = load_encoder(policy.encoder_model, settings.encoder_backend)
    encoder.encode_uncached(["warm-up: the first call pays one-time costs"])
    out = {}
    for row in rows:
        # Parsed and routed as the geometry stage does: its chunks, its route's model.
        c = candidate_from_dict(row)
        task = task_of(c.metadata)
        route = policy.route_name(c.route, task, settings.default_route)
        encoder.clear_cache()
        before = encoder.model_seconds
        score_batch(
            [(c.question, c.context_chunks, c.response)],
            encoder,
            None,
            policy.grounding_for(route),
            [task],
            load_head(),
        )
        out[c.id] = (encoder.model_seconds - before) * 1000
    return out


def one_per_context(rows: list[dict]) -> list[dict]:
    """Candidates none of whose context chunks, and not whose answer, an earlier one has:
    the encoder would serve a repeated text from its cache (RAGTruth's QA contexts share
    passages)."""
    seen: set[str] = set()
    out = []
    for row in rows:
        texts = set(context_chunks(row.get("context")) or ())
        texts.add("\0answer " + str(row.get("response")))
        if not texts & seen:
            seen |= texts
            out.append(row)
    return out


def draw(data: str, wanted: int) -> tuple[list[dict], dict[str, int]]:
    """Up to `wanted` candidates of distinct contexts that reach state in-process, and how
    many came from each source (module docstring)."""
    pool: list[dict] = []
    counts: dict[str, int] = {}
    if source_name(data) != "synthetic":
        pool = one_per_context(accepted(candidates(POOL, data, "latency-pool")))[:wanted]
        counts[source_name(data)] = len(pool)
    drawn = 0
    for _ in range(DRAWS):
        missing = wanted - len(pool)
        if missing <= 0:
            break
        fresh = grounded_candidates(drawn + 2 * missing, "latency-grounded")[drawn:]
        drawn += len(fresh)
        pool = one_per_context(pool + accepted(fresh))[:wanted]
    if drawn:
        counts["synthetic grounded"] = len(pool) - counts.get(source_name(data), 0)
    return pool, counts


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run(opts: Options) -> Result:
    wanted = int(opts.rate * opts.seconds)
    pool, drawn = draw(opts.data, WARMUP + wanted)
    if len(pool) <= WARMUP:
        raise BenchError(
            f"{len(pool)} candidates of distinct contexts reach state in-process: the policy"
            f" accepts too few without a judge to measure the accept path ({drawn})"
        )
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
    latencies = {k: (arrived[k] - sent[k]) * 1000 for k in sent}
    over_goal = [latencies[k] / (2 * encode[k] + SLACK_MS) for k in latencies]
    values = list(latencies.values())
    ladder = [latencies[k] - encode[k] for k in latencies]  # what the ladder adds to the encode
    return Result(
        "latency",
        percentile(over_goal, 0.99),
        1.0,
        "x",
        lower_is_better=True,
        rates={
            "p50 ms": percentile(values, 0.5),
            "p99 ms": percentile(values, 0.99),
            "max ms": max(values),
            "one encode p50 ms": percentile(list(encode.values()), 0.5),
            "one encode p99 ms": percentile(list(encode.values()), 0.99),
            "latency/goal p50": percentile(over_goal, 0.5),
            "latency/goal p90": percentile(over_goal, 0.9),
            "ladder beyond the encode p50 ms": percentile(ladder, 0.5),
            "ladder beyond the encode p99 ms": percentile(ladder, 0.99),
        },
        notes={
            "rate": opts.rate,
            "candidates": total,
            "asked": wanted,
            "data": ", ".join(f"{name} {n}" for name, n in drawn.items()),
            "policy": policy_version(),
        },
        peaks=peaks,
    )
