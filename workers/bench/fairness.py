"""`bench fairness`: do a few expensive candidates hold up everyone else?

Ordinary candidates (synthetic, every text unique) are produced at `--rate` per second into
`worker all`, four ways in one run: alone; with five 900 KB answers mixed in (under the
1 MiB size limit, so they pass validation); with five answers of 200 claims each mixed in;
and with five candidates just under the work caps (the most an admitted candidate costs).
Each ordinary candidate's latency runs from its send to its `outcome` record on
`decisions`. The sets alternate in rounds (`rounds`), so a drift of this shared machine
falls on every set alike. Printed: the ordinary candidates' p50/p90 per set, and last the
figure: the largest ratio, hostile over alone, of p50 or p90 across the two hostile sets
the issue names, 900 KB and 200 claims (goal <= 1.5); the at-caps ratios are printed
beside it, the bound README's fairness paragraph states. Every
expensive candidate must get its outcome too, or the bench fails.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from pipeline.claims.units import split_claims
from pipeline.guards.admission import WorkCaps
from topics.names import Topic
from workers.bench.data import TextSource, candidate, unique_candidates
from workers.bench.kafka import decided_by, through
from workers.bench.latency import percentile
from workers.bench.procs import bench
from workers.bench.report import Result
from workers.bench.rounds import parts

BIG_BYTES = 900_000
CLAIMS = 200
HOSTILE = 5
WARMUP = 20


@dataclass(frozen=True)
class Options:
    bootstrap: str
    n: int = 200
    rate: float = 1.5
    rounds: int = 2
    timeout: float = 900.0


def big_answer(tag: str, i: int) -> dict:
    """A 900 KB answer on a short context: what one hostile producer can send."""
    question, context, sentence = TextSource(f"{tag}-{i}").triple()
    filler, k = [sentence], 0
    while sum(len(t) + 1 for t in filler) < BIG_BYTES:
        k += 1
        filler.append(f"{sentence[:-1]} in year {1000 + k % 1000} and step {k}.")
    return candidate(tag, i, question, context, " ".join(filler))


def many_claims(tag: str, i: int) -> dict:
    """An answer of `CLAIMS` short claims (1,200 words)."""
    question, context, _ = TextSource(f"{tag}-{i}").triple()
    claims = " ".join(f"Record {k} names the year {1000 + k}." for k in range(CLAIMS))
    return candidate(tag, i, question, context, claims)


def at_caps(tag: str, i: int) -> dict:
    """The most a candidate may cost: an answer and a source just under the default work
    caps (`pipeline.guards.admission`), realistic sentences, every text unique. What it adds to
    the ordinary candidates' latency is the bound item 2 of issue 23 asks to state."""
    caps = WorkCaps()
    source = TextSource(f"{tag}-{i}")
    question, first, answer = source.triple()
    context = [first]
    while sum(len(c.split()) for c in context) < 0.95 * caps.source_words:
        context.append(source.triple()[1])
    while len(answer.split()) < 0.95 * caps.response_words:
        more = f"{answer} {source.triple()[2]}"
        if len(split_claims(more)) > caps.claims:
            break
        answer = more
    chunks = [" ".join(context[k::10]) for k in range(10)]  # ten retrieved chunks
    return candidate(tag, i, question, chunks, answer)


def mixed(ordinary: list[dict], hostile: Callable[[str, int], dict], tag: str) -> list[dict]:
    """`ordinary` with `HOSTILE` expensive candidates spread evenly through it."""
    out = list(ordinary)
    for k in reversed(range(HOSTILE)):  # from the back, so earlier positions hold
        out.insert((2 * k + 1) * len(ordinary) // (2 * HOSTILE), hostile(tag, k))
    return out


def run(opts: Options) -> Result:
    per = ["alone", "900KB", "claims", "at-caps"]
    ordinary = {name: unique_candidates(opts.n, f"fair-{name}") for name in per}
    makers = {"900KB": big_answer, "claims": many_claims, "at-caps": at_caps}
    latencies: dict[str, list[float]] = {name: [] for name in per}
    with bench(opts.bootstrap) as b:
        source, decisions = b.prefix + Topic.CANDIDATES, b.prefix + Topic.DECISIONS

        def send(rows: list[dict]) -> tuple[dict[str, float], dict[str, float]]:
            _, sent, arrived = asyncio.run(
                through(
                    b.bootstrap, source, rows, [decisions], decided_by("outcome"),
                    rate=opts.rate, timeout=opts.timeout,
                )
            )  # fmt: skip
            return sent, arrived

        b.start("all")
        send(unique_candidates(WARMUP, "fair-warm"))
        cuts = {name: parts(rows, opts.rounds) for name, rows in ordinary.items()}
        for r in range(opts.rounds):
            order = per if r % 2 == 0 else list(reversed(per))
            for name in order:
                rows = cuts[name][r]
                if name in makers:
                    rows = mixed(rows, makers[name], f"fair-{name}-big-{r}")
                sent, arrived = send(rows)  # every id, the expensive ones too, or BenchError
                ids = {row["id"] for row in cuts[name][r]}
                latencies[name] += [arrived[k] - sent[k] for k in ids]
                print(f"round {r} {name}: p50 {percentile(latencies[name], 0.5):.2f}s", flush=True)
        b.stop()
        peaks = dict(b.peaks)
    rates: dict[str, float] = {}
    for name in per:
        rates[f"{name} p50 s"] = percentile(latencies[name], 0.5)
        rates[f"{name} p90 s"] = percentile(latencies[name], 0.9)
    ratios = {
        f"{name}/alone {q}": rates[f"{name} {q} s"] / rates[f"alone {q} s"]
        for name in makers
        for q in ("p50", "p90")
    }
    rates.update(ratios)
    return Result(
        "fairness",
        max(v for k, v in ratios.items() if not k.startswith("at-caps")),
        1.5,
        "x",
        lower_is_better=True,
        rates=rates,
        notes={"n": opts.n, "rate": opts.rate, "rounds": opts.rounds, "hostile": HOSTILE},
        peaks=peaks,
    )
