"""`bench judge-throughput`: one judge worker against a slow judge, beside the ideal.

The judge is scripted and served over a real socket on 127.0.0.1 (aiohttp, in a thread of
this process): each call takes a latency drawn from a log-normal with the given median and
99th percentile, the server answers at most `--endpoint-limit` calls at once (a local
vLLM / llama.cpp server's batch; more wait in its queue), and it replies in the seed's
first-token protocol. One `groundstream worker judge` runs on the broker with
GROUNDSTREAM_JUDGE_MAX_IN_FLIGHT = `--in-flight`.

Two sides, measured in one run:

* **Throughput.** `--n` answers produced in one transaction; the stage's steady rate
  (judge decisions a second between the 10th and 90th percentile of their arrival
  times) against the ideal for the latencies the server drew (min(in-flight, endpoint
  limit) ÷ their mean). Goal: ≥ 0.8 of the ideal. The rate over the whole burst, fill
  and drain included, is printed beside it.
* **Latency with slow calls.** Answers paced at `--rate` for `--seconds`, twice: once with
  no slow calls, once with `--slow-share` of calls taking `--slow-s`. The p99 decision
  latency (sent → judge decision read) of the ordinary answers (those whose own call was
  not slow) with slow calls beside it without. Goal: ≤ 1.5×.
"""

from __future__ import annotations

import asyncio
import math
import random
import threading
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from aiohttp import web

from topics.names import Topic
from topics.schema import Envelope, candidate_from_dict
from workers.bench.judge_fake import YES, first_token_reply
from workers.bench.kafka import Watch, candidate_id, decided_by, produce
from workers.bench.procs import bench
from workers.bench.report import Result

PROMPT_TOKENS = 80
THROUGHPUT_GOAL = 0.8
P99_GOAL = 1.5
Z99 = 2.3263478740408408
"""The standard normal's 99th percentile: a log-normal's p99 is its median × e^(σ·Z99)."""


@dataclass(frozen=True)
class Options:
    bootstrap: str
    n: int = 1000
    in_flight: int = 64
    endpoint_limit: int = 64
    p50_s: float = 1.0
    p99_s: float = 4.0
    rate: float = 25.0
    seconds: float = 20.0
    slow_share: float = 0.02
    slow_s: float = 8.0
    seed: int = 35


@dataclass
class ScriptedJudge:
    """The server's script: a latency per call, at most `limit` calls answered at once."""

    p50_s: float
    p99_s: float
    limit: int
    seed: int
    slow_share: float = 0.0
    slow_s: float = 8.0
    drawn: list[float] = field(default_factory=list)
    slow: set[str] = field(default_factory=set)
    """Candidate tags whose call was made slow."""
    asked: list[str] = field(default_factory=list)
    """The candidate tag of every call, in arrival order."""

    def __post_init__(self) -> None:
        self.random = random.Random(self.seed)
        self.sigma = math.log(self.p99_s / self.p50_s) / Z99
        self.lock = threading.Lock()

    def latency(self, tag: str) -> float:
        with self.lock:
            if self.slow_share and self.random.random() < self.slow_share:
                self.slow.add(tag)
                pause = self.slow_s
            else:
                pause = self.p50_s * math.exp(self.random.gauss(0.0, self.sigma))
            self.drawn.append(pause)
        return pause

    def app(self) -> web.Application:
        slots = asyncio.Semaphore(self.limit)
        judge = self

        async def chat(request: web.Request) -> web.Response:
            body = await request.json()
            text = str(body.get("messages", ""))
            tag = text[text.find("[jt-") + 1 : text.find("]", text.find("[jt-"))]
            judge.asked.append(tag)
            async with slots:  # the server's own batch: the rest wait in its queue
                await asyncio.sleep(self.latency(tag))
            return web.json_response(first_token_reply(body, YES, PROMPT_TOKENS))

        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        return app


@contextmanager
def serving(judge: ScriptedJudge) -> Iterator[str]:
    """The scripted judge on a free port of 127.0.0.1, in a thread; its base URL."""
    ready, stop = threading.Event(), threading.Event()
    where: list[int] = []

    def run() -> None:
        async def main() -> None:
            runner = web.AppRunner(judge.app(), access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            where.append(runner.addresses[0][1])
            ready.set()
            while not stop.is_set():
                await asyncio.sleep(0.1)
            await runner.cleanup()

        asyncio.run(main())

    thread = threading.Thread(target=run, name="scripted-judge", daemon=True)
    thread.start()
    ready.wait(30)
    try:
        yield f"http://127.0.0.1:{where[0]}/v1"
    finally:
        stop.set()
        thread.join(10)


def envelopes(n: int, tag: str) -> list[tuple[bytes, bytes]]:
    """Judge-topic envelopes, each answer its own (no verdict comes from the cache)."""
    out = []
    for i in range(n):
        cid = f"jt-{tag}-{i:05d}"
        raw = {
            "id": cid,
            "session_id": f"{tag}-s{i % 97}",
            "question": f"Which river runs through the city? [{cid}]",
            "context": ["The river Arno runs through Florence."],
            "response": f"The Arno, answer {cid}.",
        }
        env = Envelope(candidate=candidate_from_dict(raw), route="default", mode="evaluate")
        out.append((raw["session_id"].encode(), env.encode()))
    return out


STEADY = (0.1, 0.9)
"""The part of a burst's decisions its steady rate is read over: the first tenth is the
worker filling its window, the last the calls left draining it (the slowest of the
last 64 draws of the latency, ~4 s at p99 4 s), neither the stage's rate under load."""


def steady_rate(arrivals: Iterable[float]) -> float:
    """Decisions a second between the STEADY quantiles of their arrival times."""
    ordered = sorted(arrivals)
    first, last = (int(q * (len(ordered) - 1)) for q in STEADY)
    return (last - first) / max(ordered[last] - ordered[first], 1e-9)


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]


async def _paced(
    bootstrap: str, prefix: str, items: list[tuple[bytes, bytes]], rate: float
) -> tuple[dict[str, float], dict[str, float]]:
    """Send `items` at `rate` a second; when each was sent and its judge decision read."""
    source, decisions = prefix + Topic.JUDGE, prefix + Topic.DECISIONS
    ids = {cid for _, v in items if (cid := candidate_id(v)) is not None}
    async with Watch(bootstrap, [decisions], decided_by("judge")) as w:
        reading = asyncio.create_task(w.until(ids, 600))
        sent = await produce(bootstrap, source, items, rate=rate)
        arrivals = await reading
    return sent, arrivals


def run(opts: Options) -> Result:
    judge = ScriptedJudge(opts.p50_s, opts.p99_s, opts.endpoint_limit, opts.seed)
    run_id = uuid.uuid4().hex[:6]
    with serving(judge) as url, bench(opts.bootstrap) as b:
        b.start(
            "judge",
            GROUNDSTREAM_JUDGE_URL=url,
            GROUNDSTREAM_JUDGE_MODEL="bench-judge",
            GROUNDSTREAM_JUDGE_MAX_IN_FLIGHT=str(opts.in_flight),
        )
        # Throughput: the whole input visible at once.
        asyncio.run(_paced(b.bootstrap, b.prefix, envelopes(32, f"w{run_id}"), 100.0))  # warm
        judge.drawn.clear()
        items = envelopes(opts.n, f"t{run_id}")

        async def burst() -> tuple[float, float]:
            async with Watch(b.bootstrap, [b.prefix + Topic.DECISIONS], decided_by("judge")) as w:
                reading = asyncio.create_task(w.until(opts.n, 900))
                sent = await produce(b.bootstrap, b.prefix + Topic.JUDGE, items, atomic=True)
                arrivals = await reading
            return max(arrivals.values()) - min(sent.values()), steady_rate(arrivals.values())

        judge.asked.clear()
        taken, steady = asyncio.run(burst())
        calls, again = len(judge.asked), len(judge.asked) - len(set(judge.asked))
        print(f"burst: {calls} calls for {opts.n} answers ({again} asked again)")
        whole = opts.n / taken
        drawn = len(judge.drawn)
        mean = sum(judge.drawn) / drawn
        ideal = min(opts.in_flight, opts.endpoint_limit) / mean
        # Latency: paced, without and then with slow calls.
        latencies: dict[str, list[float]] = {}
        sides = (("without slow calls", 0.0, "p"), ("with slow calls", opts.slow_share, "s"))
        for side, share, tag in sides:
            judge.slow_share, judge.slow = share, set()
            paced = envelopes(int(opts.rate * opts.seconds), f"{tag}{run_id}")
            sent, arrivals = asyncio.run(_paced(b.bootstrap, b.prefix, paced, opts.rate))
            latencies[side] = [
                arrivals[cid] - sent[cid] for cid in arrivals if cid not in judge.slow
            ]
            latencies[side + " (slow ones)"] = [arrivals[c] - sent[c] for c in judge.slow]
        b.stop()
        peaks = dict(b.peaks)
    base, slowed = p99(latencies["without slow calls"]), p99(latencies["with slow calls"])
    ratio = slowed / base
    rate, share = steady, steady / ideal
    print(
        f"throughput: {rate:.1f} answers/s steady (decisions {STEADY[0]:.0%}-{STEADY[1]:.0%} "
        f"of the burst; {whole:.1f}/s over the whole burst, {whole / ideal:.2f} of the "
        f"ideal, its fill and drain included), ideal {ideal:.1f}/s "
        f"(min({opts.in_flight} in flight, endpoint {opts.endpoint_limit}) / mean latency "
        f"{mean:.2f}s over {drawn} calls): {share:.2f} of the ideal",
        flush=True,
    )
    print(
        f"p99 decision latency of ordinary answers at {opts.rate:g}/s: {base:.2f}s without "
        f"slow calls, {slowed:.2f}s with {opts.slow_share:.0%} of calls taking "
        f"{opts.slow_s:g}s ({len(latencies['with slow calls (slow ones)'])} slow): "
        f"{ratio:.2f}x",
        flush=True,
    )
    return Result(
        "judge-throughput",
        share,
        THROUGHPUT_GOAL,
        "x",
        rates={"answers/s": rate, "whole burst answers/s": whole, "ideal answers/s": ideal},
        notes={
            "p99 without slow calls s": round(base, 3),
            "p99 with slow calls s": round(slowed, 3),
            "p99 ratio": round(ratio, 3),
            "p99 goal": P99_GOAL,
            "in flight": opts.in_flight,
            "endpoint limit": opts.endpoint_limit,
            "mean latency s": round(mean, 3),
            "burst calls": calls,
            "asked again": again,
            "slow calls": len(latencies["with slow calls (slow ones)"]),
            "slowest ordinary s": round(max(latencies["with slow calls"]), 3),
        },
        peaks=peaks,
        also={"p99 headroom (goal / ratio)": (P99_GOAL / ratio, 1.0)},
    )
