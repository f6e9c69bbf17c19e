"""Geometry stage over the real broker vs the raw encoder on the same texts, same run.

    python -m tests.benchmarks.geometry_throughput [--n 2000] [--repeat 1] [--json PATH]

Not a test: it prints the two throughputs and their ratio (goal: the stage reaches at least
0.9 of the raw encoder's candidates per second) and never fails on a slow machine.

* A, the baseline: ``SentenceEncoder.encode_uncached`` in this process over exactly the
  texts the stage embeds (per stage batch of ``GROUNDSTREAM_BATCH_SIZE`` candidates: the
  question, the response's windows and each context chunk's windows, deduplicated the way
  ``compute_sgi_batch`` does), one call per stage batch, made on a worker thread as the
  stage's ``asyncio.to_thread`` does (``--baseline-in main`` for the main thread: with
  OpenMP's default spin-waiting that is much slower on a busy machine).
* B, the stage: one ``groundstream worker geometry`` subprocess on the local broker (started
  with ``deploy/kafka/local.sh`` when none answers, and stopped again afterwards), warmed
  up on other candidates; B is the time from the first produce of N candidates until the
  N-th envelope is on ``<prefix>scored``.

Every candidate's texts are unique (the stage's embedding cache cannot help), generated
from templates and random words with a fixed seed. Runs interleave A, B, A (and B, A again
for each ``--repeat``) because the machine is shared; the ratio uses the mean of the A
runs. Both sides use the same number of torch threads (``--threads``; the worker gets it
as ``OMP_NUM_THREADS``/``MKL_NUM_THREADS``). Besides wall-clock rates the table shows CPU
milliseconds per candidate (A: this process; B: the worker process, broker excluded), which
moves less with other people's load on a shared machine.

``--instrument`` runs the worker through ``tests.benchmarks._instrumented_worker`` (the
same CLI with timers around the stage's parts) and prints where a batch's time goes, the
batch sizes the stage actually received and the gaps between batches; ``--faust`` passes
extra faust.App settings to it, ``--cprofile`` profiles the worker's event loop and
scoring thread during the measured window.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tests.integration.harness import (
    REPO_ROOT,
    BrokerStartError,
    Workers,
    cli,
    local_broker,
    worker_env,
)

GOAL = 0.9
SEED = 20240611

# ---------------------------------------------------------------- synthetic candidates --

_SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ren",
    "tor",
    "vel",
    "sa",
    "dun",
    "bri",
    "go",
    "ha",
    "zel",
    "qui",
    "mar",
    "ost",
    "pel",
    "ric",
    "an",
    "ve",
    "tho",
    "lin",
    "dra",
    "mus",
    "kor",
    "bel",
    "tan",
    "fi",
    "gor",
    "nel",
    "sur",
]
_NOUNS = [
    "bridge",
    "harbour",
    "archive",
    "treaty",
    "engine",
    "orchard",
    "library",
    "canal",
    "festival",
    "lighthouse",
    "observatory",
    "mill",
    "railway",
    "theatre",
    "garden",
    "fortress",
    "monastery",
    "market",
    "glacier",
    "vineyard",
    "museum",
    "reservoir",
    "cathedral",
    "tunnel",
    "quarry",
    "foundry",
    "clinic",
    "academy",
    "ferry",
    "aqueduct",
    "telescope",
    "manuscript",
    "compass",
    "furnace",
    "granary",
    "tapestry",
    "chronicle",
    "lantern",
    "ledger",
]
_ADJECTIVES = [
    "northern",
    "ancient",
    "wooden",
    "coastal",
    "forgotten",
    "restored",
    "narrow",
    "crowded",
    "quiet",
    "famous",
    "hidden",
    "western",
    "copper",
    "granite",
    "sunken",
    "painted",
    "circular",
    "seasonal",
    "royal",
    "modest",
    "flooded",
    "vast",
    "eastern",
    "tiny",
]
_VERBS = [
    "built",
    "repaired",
    "designed",
    "funded",
    "mapped",
    "restored",
    "surveyed",
    "opened",
    "closed",
    "expanded",
    "described",
    "measured",
    "painted",
    "sold",
    "inherited",
    "defended",
    "catalogued",
    "translated",
    "photographed",
    "rebuilt",
]
_PLACES = [
    "the river valley",
    "the old quarter",
    "the southern coast",
    "the mountain pass",
    "the capital",
    "the island colony",
    "the border town",
    "the lake district",
    "the desert oasis",
    "the port city",
    "the upper plateau",
    "the fishing village",
]
_OCCUPATIONS = [
    "engineer",
    "merchant",
    "astronomer",
    "painter",
    "surveyor",
    "historian",
    "sailor",
    "architect",
    "botanist",
    "printer",
    "weaver",
    "physician",
    "cartographer",
    "brewer",
    "mason",
]


def _name(rng: random.Random) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()


def _candidate(rng: random.Random) -> tuple[str, str, str]:
    """One (question, context, response): 2-3 context sentences, the facts shared."""
    who, other = _name(rng), _name(rng)
    year = rng.randint(1500, 2020)
    count = rng.randint(2, 900)
    noun, noun2 = rng.sample(_NOUNS, 2)
    adj, adj2 = rng.sample(_ADJECTIVES, 2)
    verb, verb2 = rng.sample(_VERBS, 2)
    place, place2 = rng.sample(_PLACES, 2)
    job = rng.choice(_OCCUPATIONS)
    question = rng.choice(
        (
            f"Which {noun} did {who} {verb.removesuffix('ed')} in {place} around {year}?",
            f"What did the {job} {who} do with the {adj} {noun} in {year}?",
            f"When was the {adj} {noun} near {place} {verb} by {who}?",
            f"Who {verb} the {noun} of {place}, and how many workers helped?",
        )
    )
    sentences = [
        f"{who} was a {adj2} {job} from {place2} who moved to {place} as a young adult.",
        f"In {year}, {who} {verb} the {adj} {noun} with the help of {count} workers.",
        f"Years later, {other} {verb2} the nearby {noun2}, which still stands today.",
        f"Records from {year + rng.randint(1, 40)} mention the {noun} {rng.randint(2, 60)} times.",
    ]
    context = " ".join(sentences[: rng.choice((2, 3, 3))])
    response = rng.choice(
        (
            f"{who} {verb} the {adj} {noun} in {place} in {year}, with {count} workers.",
            f"According to the records, the {noun} was {verb} by {who} in {year}.",
            f"It was {other}, not {who}, who {verb2} the {noun2} near {place}.",
            f"The {job} {who} {verb} the {noun} around {year} using {count} helpers.",
        )
    )
    return question, context, response


def make_candidates(n: int, seed: int, tag: str, seen: set[str]) -> list[dict[str, Any]]:
    """`n` candidates whose question, context and response texts appear nowhere else."""
    rng = random.Random(f"{seed}:{tag}")
    out: list[dict[str, Any]] = []
    while len(out) < n:
        question, context, response = _candidate(rng)
        if {question, context, response} & seen or len({question, context, response}) < 3:
            continue
        seen.update((question, context, response))
        i = len(out)
        out.append(
            {
                "id": f"{tag}-{i}",
                "session_id": f"{tag}-s{i}",
                "question": question,
                "context": context,
                "response": response,
            }
        )
    return out


# ---------------------------------------------------------------------------- side A --


def stage_texts(
    encoder: Any, candidates: Sequence[dict[str, Any]], batch_size: int
) -> list[list[str]]:
    """The texts the stage embeds, one list per stage batch (as `compute_sgi_batch`)."""
    batches = []
    for start in range(0, len(candidates), batch_size):
        texts: dict[str, None] = {}
        for c in candidates[start : start + batch_size]:
            texts[c["question"]] = None
            texts.update(dict.fromkeys(encoder.windows(c["response"])))
            chunks = [c["context"]] if isinstance(c["context"], str) else c["context"]
            for chunk in chunks:
                texts.update(dict.fromkeys(encoder.windows(chunk)))
        batches.append(list(texts))
    return batches


def run_baseline(encoder: Any, batches: Sequence[Sequence[str]]) -> tuple[float, float]:
    """Wall seconds and this process's CPU seconds (all threads) to encode `batches`."""
    cpu = time.process_time()
    started = time.perf_counter()
    for texts in batches:
        encoder.encode_uncached(texts)
    return time.perf_counter() - started, time.process_time() - cpu


def _cpu(stat: Path) -> float:
    fields = stat.read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), from /proc."""
    return _cpu(Path(f"/proc/{pid}/stat"))


def thread_cpu_seconds(pid: int) -> dict[int, float]:
    """utime + stime of each live thread of a process."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            out[int(task.name)] = _cpu(task / "stat")
    return out


def split_worker_cpu(
    pid: int, before: dict[int, float], after: dict[int, float]
) -> dict[str, float]:
    """CPU seconds of the event-loop (main) thread, the busiest two others, and the rest."""
    delta = {t: after[t] - before.get(t, 0.0) for t in after}
    others = sorted((v for t, v in delta.items() if t != pid), reverse=True)
    return {
        "event_loop_thread": round(delta.get(pid, 0.0), 2),
        "busiest_other_threads (encoder + OpenMP)": round(sum(others[:2]), 2),
        "remaining_threads": round(sum(others[2:]), 2),
    }


# ---------------------------------------------------------------------------- side B --


@dataclass
class StageRun:
    seconds: float
    produce_seconds: float
    wall_start: float
    wall_end: float
    missing: int = 0


async def run_stage(
    bootstrap: str, prefix: str, candidates: Sequence[dict[str, Any]], timeout: float
) -> StageRun:
    """Produce `candidates`; time until as many envelopes are on `<prefix>scored`."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    from topics.codec import dumps, loads
    from topics.names import MAX_MESSAGE_BYTES

    source, scored = f"{prefix}candidates", f"{prefix}scored"
    payload = [(c["session_id"].encode(), dumps(c)) for c in candidates]
    want = {c["id"] for c in candidates}
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", linger_ms=5, max_request_size=MAX_MESSAGE_BYTES
    )
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        fetch_max_wait_ms=50,
        max_partition_fetch_bytes=MAX_MESSAGE_BYTES,
    )
    await producer.start()
    await consumer.start()
    try:
        tps = [TopicPartition(scored, p) for p in sorted(await producer.partitions_for(scored))]
        consumer.assign(tps)
        for tp, offset in (await consumer.end_offsets(tps)).items():
            consumer.seek(tp, offset)
        for tp in tps:
            await consumer.position(tp)
        received: list[bytes] = []

        async def drain() -> float:
            seen_ids: set[str] = set()
            while not want <= seen_ids:
                batch = await consumer.getmany(timeout_ms=200)
                now = time.perf_counter()
                for records in batch.values():
                    for r in records:
                        received.append(r.value)
                        if len(received) >= len(want):
                            # cheap check first; parse only once enough arrived
                            seen_ids = {loads(v)["candidate"]["id"] for v in received}
            return now

        wall_start = time.time()
        started = time.perf_counter()
        task = asyncio.create_task(drain())
        futures = [await producer.send(source, value, key=key) for key, value in payload]
        await asyncio.gather(*futures)
        produced = time.perf_counter()
        try:
            finished = await asyncio.wait_for(task, timeout)
        except TimeoutError:
            got = {loads(v)["candidate"]["id"] for v in received}
            return StageRun(
                time.perf_counter() - started,
                produced - started,
                wall_start,
                time.time(),
                len(want - got),
            )
        return StageRun(
            finished - started, produced - started, wall_start, wall_start + finished - started
        )
    finally:
        await consumer.stop()
        await producer.stop()


class BenchWorker(Workers):
    """`Workers`, optionally through the instrumented entry point."""

    def __init__(self, env: dict[str, str], log: Path, module: str) -> None:
        super().__init__(env, "geometry", log)
        self.module = module

    def start(self, timeout: float = 180.0) -> BenchWorker:
        if self.module == "workers.cli":
            super().start(timeout)
            return self
        # Same as Workers.start, with another module in front of the same CLI arguments.
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", self.module, "worker", self.stage],
            env=self.env, cwd=REPO_ROOT, stdout=self._log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while self.ready_count() < 1:
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited early:\n{self.tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"worker not ready in {timeout}s:\n{self.tail()}")
            time.sleep(0.5)
        return self


# ---------------------------------------------------------------------------- broker --


async def delete_topics(bootstrap: str, prefix: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        names = [t for t in await admin.list_topics() if t.startswith(prefix)]
        if names:
            await admin.delete_topics(names)
    finally:
        await admin.close()


# ---------------------------------------------------------------------------- report --


@dataclass
class Run:
    side: str
    set: int
    candidates: int
    seconds: float
    cpu_seconds: float
    load: float
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.candidates / self.seconds if self.seconds > 0 else 0.0

    @property
    def cpu_ms(self) -> float:
        return 1000 * self.cpu_seconds / self.candidates


def summarise_trace(path: Path, wall_start: float, wall_end: float) -> dict[str, Any]:
    """Where the worker's time went during one B window, from the instrumented trace."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r["t1"] >= wall_start - 0.01 and r["t0"] <= wall_end + 0.01]
    if not rows:
        return {}
    sizes = [r["n"] for r in rows]
    window = max(wall_end - wall_start, 1e-9)
    gaps = [b["t0"] - a["t1"] for a, b in itertools.pairwise(rows)]
    first_wait = rows[0]["t0"] - wall_start
    total = {k: sum(r.get(k, 0.0) for r in rows) for k in (*_PARTS, "wall")}
    out: dict[str, Any] = {
        "batches": len(rows),
        "batch_sizes": {
            "min": min(sizes),
            "median": statistics.median(sizes),
            "mean": round(statistics.fmean(sizes), 1),
            "max": max(sizes),
            "full": sum(1 for s in sizes if s == max(sizes)),
        },
        "texts_encoded": sum(r.get("texts", 0) for r in rows),
        "candidates_per_s_of_encode_uncached_alone": round(
            sum(sizes) / max(sum(r.get("encode_uncached", 0.0) for r in rows), 1e-9), 1
        ),
        "torch_threads": rows[-1].get("torch_threads"),
        "seconds": {k: round(v, 3) for k, v in total.items()},
        "share_of_window": {k: round(v / window, 3) for k, v in total.items()},
        "first_batch_after_s": round(first_wait, 3),
        "gaps_between_batches_s": round(sum(gaps), 3),
        "mean_gap_ms": round(1000 * statistics.fmean(gaps), 1) if gaps else 0.0,
        "last_batch_end_to_window_end_s": round(wall_end - rows[-1]["t1"], 3),
    }
    # Derived: the parts the timers do not cover directly.
    s = total
    out["derived_seconds"] = {
        "send_all+count (batch wall - process)": round(s["wall"] - s["process"], 3),
        "to_thread dispatch (to_thread - score)": round(s["to_thread"] - s["score"], 3),
        "SGI + grounding features (score - encode - windows)": round(
            s["score"] - s["encode"] - s["windows"], 3
        ),
        "windows() inside score": round(s["windows"], 3),
        "encode cache/hash/stack (encode - uncached)": round(s["encode"] - s["encode_uncached"], 3),
        "process rest (route, envelope, check, to_dict)": round(
            s["process"] - s["parse"] - s["to_thread"] - s["conclude"], 3
        ),
    }
    return out


_PARTS = (
    "process",
    "parse",
    "to_thread",
    "score",
    "encode",
    "encode_uncached",
    "windows",
    "conclude",
)


def print_profile(directory: Path, top: int = 25) -> None:
    import pstats

    for name in ("loop.prof", "score.prof"):
        path = directory / name
        if path.exists() and path.stat().st_size:
            print(f"\n--- cProfile {name} (top {top} by tottime) ---")
            pstats.Stats(str(path)).sort_stats("tottime").print_stats(top)


def format_breakdown(w: dict[str, Any], window: float) -> str:
    """The instrumented worker's view of one B window, as a few lines."""
    sizes = w["batch_sizes"]
    pct = lambda seconds: f"{100 * seconds / window:.1f}%"  # noqa: E731
    d = w["derived_seconds"]
    parts = {
        "send_all (awaiting acks)": d["send_all+count (batch wall - process)"],
        "windows()": d["windows() inside score"],
        "SGI+grounding": d["SGI + grounding features (score - encode - windows)"],
        "cache/hash": d["encode cache/hash/stack (encode - uncached)"],
        "to_thread dispatch": d["to_thread dispatch (to_thread - score)"],
        "parse": w["seconds"]["parse"],
        "conclude": w["seconds"]["conclude"],
        "rest of process": d["process rest (route, envelope, check, to_dict)"],
        "waiting for batches": w["gaps_between_batches_s"] + w["first_batch_after_s"],
    }
    return (
        f"  worker: {w['batches']} batches (size min/median/max "
        f"{sizes['min']}/{sizes['median']}/{sizes['max']}), scoring-thread torch threads "
        f"{w['torch_threads']}\n"
        f"  encode_uncached busy {pct(w['seconds']['encode_uncached'])} of the window "
        f"(alone it would do {w['candidates_per_s_of_encode_uncached_alone']} candidates/s)\n"
        "  the rest: " + ", ".join(f"{k} {pct(v)}" for k, v in parts.items())
    )


def neighbour_ratios(runs: Sequence[Run]) -> list[float]:
    """Each B's rate over the mean rate of the A runs just before and after it."""
    out = []
    for i, r in enumerate(runs):
        if r.side != "B":
            continue
        near = [x.rate for x in (runs[i - 1 : i] + list(runs[i + 1 : i + 2])) if x.side == "A"]
        if near:
            out.append(r.rate / statistics.fmean(near))
    return out


def print_table(
    runs: Sequence[Run], ratio: float, cpu_ratio: float, settings: dict[str, Any]
) -> None:
    print()
    head = f"{'side':<18} {'set':>3} {'candidates':>10} {'seconds':>8} {'candidates/s':>12}"
    print(f"{head} {'cpu ms/cand':>11} {'load1':>6}")
    for r in runs:
        label = "A raw encoder" if r.side == "A" else "B geometry stage"
        row = f"{label:<18} {r.set:>3} {r.candidates:>10} {r.seconds:>8.2f} {r.rate:>12.1f}"
        print(f"{row} {r.cpu_ms:>11.1f} {r.load:>6.2f}")
    for side in "AB":
        rates = [r.rate for r in runs if r.side == side]
        cpu = [r.cpu_ms for r in runs if r.side == side]
        mean = f"{statistics.fmean(rates):>12.1f} {statistics.fmean(cpu):>11.1f}"
        print(f"{side + ' mean':<18} {'':>3} {'':>10} {'':>8} {mean}")
    verdict = "meets" if ratio >= GOAL else "BELOW"
    pairs = neighbour_ratios(runs)
    print(f"\nratio B/A = {ratio:.3f}  ({verdict} the goal >= {GOAL})")
    print(
        "each B against the mean of the A runs either side: "
        + ", ".join(f"{x:.3f}" for x in pairs)
        + f" (median {statistics.median(pairs):.3f})"
    )
    print(f"CPU-time ratio (A cpu per candidate / B worker cpu per candidate) = {cpu_ratio:.3f}")
    print(
        "(load1: 1-minute load average at the end of the run; the worker's CPU excludes the broker)"
    )
    print("settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()))


# ------------------------------------------------------------------------------- main --


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    from workers.runtime.settings import Settings

    defaults = Settings()
    p = argparse.ArgumentParser(
        prog="python -m tests.benchmarks.geometry_throughput", description=__doc__.split("\n")[0]
    )
    p.add_argument("--n", type=int, default=2000, help="candidates per measured run (default 2000)")
    p.add_argument(
        "--repeat", type=int, default=1, help="B runs, each followed by an A run (default 1)"
    )
    p.add_argument(
        "--warmup",
        type=int,
        default=None,
        help="warm-up candidates for the worker (default 2 batches)",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=int(os.environ.get("GROUNDSTREAM_BATCH_SIZE", defaults.batch_size)),
    )
    p.add_argument(
        "--within",
        type=float,
        default=float(os.environ.get("GROUNDSTREAM_BATCH_WITHIN", defaults.batch_within)),
    )
    p.add_argument(
        "--partitions",
        type=int,
        default=int(os.environ.get("GROUNDSTREAM_PARTITIONS", defaults.partitions)),
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads on both sides (default: CPUs available)",
    )
    p.add_argument(
        "--baseline-in",
        choices=("thread", "main"),
        default="thread",
        help="where side A calls the encoder: a worker thread, as the stage does (default), "
        "or the main thread (with OpenMP's default spin-waiting this is much slower on a "
        "busy machine, so it would flatter the stage)",
    )
    p.add_argument("--bootstrap", default=f"127.0.0.1:{os.environ.get('KAFKA_PORT', '9092')}")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for one B run")
    p.add_argument(
        "--policy",
        default=os.environ.get("GROUNDSTREAM_POLICY"),
        help="policy TOML for the worker (default: GROUNDSTREAM_POLICY or the shipped one)",
    )
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--json", type=Path, default=None, help="write the results here as JSON")
    p.add_argument(
        "--instrument",
        action="store_true",
        help="time the worker's parts (instrumented entry point)",
    )
    p.add_argument(
        "--faust",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra faust.App setting (implies --instrument)",
    )
    p.add_argument(
        "--worker-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra worker environment variable",
    )
    p.add_argument(
        "--cprofile",
        action="store_true",
        help="cProfile the worker during the last B run (implies --instrument)",
    )
    p.add_argument(
        "--keep-logs",
        type=Path,
        default=None,
        help="copy the worker log (and trace) to this directory",
    )
    args = p.parse_args(argv)
    if args.faust or args.cprofile:
        args.instrument = True
    if args.threads is None:
        args.threads = (
            len(os.sched_getaffinity(0))
            if hasattr(os, "sched_getaffinity")
            else os.cpu_count() or 1
        )
    if args.warmup is None:
        args.warmup = 2 * args.batch_size
    return args


def _pairs(items: Sequence[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"expected KEY=VALUE, got {item!r}")
        out[key] = value
    return out


def _faust_value(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    threads = str(args.threads)
    # Before torch is imported anywhere in this process.
    os.environ["OMP_NUM_THREADS"] = threads
    os.environ["MKL_NUM_THREADS"] = threads

    import torch

    torch.set_num_threads(args.threads)
    from pipeline.encoder import load_encoder
    from workers.runtime.settings import Settings

    policy = Settings(policy=args.policy or "").load_policy()
    with (
        local_broker(args.bootstrap) as started_broker,
        tempfile.TemporaryDirectory(prefix="gs-bench-") as tmp,
    ):
        tmpdir = Path(tmp)
        prefix = f"bench-{uuid.uuid4().hex[:8]}."
        extra = {
            "GROUNDSTREAM_PARTITIONS": str(args.partitions),
            "GROUNDSTREAM_BATCH_SIZE": str(args.batch_size),
            "GROUNDSTREAM_BATCH_WITHIN": str(args.within),
            "OMP_NUM_THREADS": threads,
            "MKL_NUM_THREADS": threads,
            **({"GROUNDSTREAM_POLICY": str(Path(args.policy).resolve())} if args.policy else {}),
            **_pairs(args.worker_env),
        }
        trace = tmpdir / "trace.jsonl"
        profile_dir = tmpdir / "cprofile"
        if args.instrument:
            profile_dir.mkdir()
            extra["GS_BENCH_TRACE"] = str(trace)
            extra["GS_BENCH_FAUST"] = json.dumps(
                {k: _faust_value(v) for k, v in _pairs(args.faust).items()}
            )
            if args.cprofile:
                extra["GS_BENCH_CPROFILE"] = str(profile_dir)
        env = worker_env(args.bootstrap, prefix, tmpdir / "data", **extra)
        probe = subprocess.run(
            [sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        worker_threads = int(probe.stdout.strip())
        cli(env, "topics", "create")

        print(f"loading the encoder here (torch threads {torch.get_num_threads()})...", flush=True)
        encoder = load_encoder(policy.encoder_model)
        seen: set[str] = set()
        warm = make_candidates(args.warmup, args.seed, "warmup", seen)
        sets = [make_candidates(args.n, args.seed, f"set{k + 1}", seen) for k in range(args.repeat)]
        text_batches = [stage_texts(encoder, s, args.batch_size) for s in sets]
        # Like the stage (asyncio.to_thread after loading the model on the main thread), the
        # baseline encodes on a worker thread; see --baseline-in.
        pool = ThreadPoolExecutor(1, "baseline") if args.baseline_in == "thread" else None

        def baseline(batches: Sequence[Sequence[str]]) -> tuple[float, float]:
            if pool is None:
                return run_baseline(encoder, batches)
            return pool.submit(run_baseline, encoder, batches).result()

        baseline(stage_texts(encoder, warm, args.batch_size))  # first-call costs
        bench_threads = (
            torch.get_num_threads() if pool is None else pool.submit(torch.get_num_threads).result()
        )

        runs: list[Run] = []
        log = tmpdir / "worker.log"
        module = "tests.benchmarks._instrumented_worker" if args.instrument else "workers.cli"
        worker = BenchWorker(env, log, module)
        print(f"starting `groundstream worker geometry` (prefix {prefix})...", flush=True)
        try:
            worker.start()
            warmed = asyncio.run(run_stage(args.bootstrap, prefix, warm, args.timeout))
            if warmed.missing:
                raise RuntimeError(
                    f"warm-up: {warmed.missing} candidates not scored:\n{worker.tail()}"
                )
            print(f"worker warm ({args.warmup} candidates in {warmed.seconds:.1f}s)", flush=True)

            def side_a(k: int) -> None:
                seconds, cpu = baseline(text_batches[k])
                texts = sum(len(b) for b in text_batches[k])
                runs.append(
                    Run("A", k + 1, args.n, seconds, cpu, os.getloadavg()[0], {"texts": texts})
                )
                print(f"A set {k + 1}: {seconds:.2f}s ({args.n / seconds:.1f}/s)", flush=True)

            side_a(0)
            for k in range(args.repeat):
                last = k == args.repeat - 1
                if args.cprofile and last:
                    (profile_dir / "on").touch()
                assert worker.proc is not None
                cpu = process_cpu_seconds(worker.proc.pid)
                threads_before = thread_cpu_seconds(worker.proc.pid)
                stage = asyncio.run(run_stage(args.bootstrap, prefix, sets[k], args.timeout))
                cpu = process_cpu_seconds(worker.proc.pid) - cpu
                worker_cpu = split_worker_cpu(
                    worker.proc.pid, threads_before, thread_cpu_seconds(worker.proc.pid)
                )
                if args.cprofile and last:
                    (profile_dir / "on").unlink()
                if stage.missing:
                    raise RuntimeError(
                        f"B set {k + 1}: {stage.missing} candidates not scored:\n{worker.tail()}"
                    )
                info: dict[str, Any] = {
                    "produce_seconds": round(stage.produce_seconds, 3),
                    "worker_cpu_seconds": worker_cpu,
                }
                if args.instrument:
                    time.sleep(0.5)  # let the last trace line land
                    info["worker"] = summarise_trace(trace, stage.wall_start, stage.wall_end)
                runs.append(Run("B", k + 1, args.n, stage.seconds, cpu, os.getloadavg()[0], info))
                print(
                    f"B set {k + 1}: {stage.seconds:.2f}s ({args.n / stage.seconds:.1f}/s)",
                    flush=True,
                )
                side_a(k)
            if args.cprofile:
                time.sleep(0.5)  # the worker dumps its profiles once the switch file is gone
        finally:
            worker.stop()
            if pool is not None:
                pool.shutdown()
            if args.keep_logs:
                args.keep_logs.mkdir(parents=True, exist_ok=True)
                for f in (log, trace):
                    if f.exists():
                        (args.keep_logs / f.name).write_bytes(f.read_bytes())
            with contextlib.suppress(Exception):
                asyncio.run(delete_topics(args.bootstrap, prefix))

        a_mean = statistics.fmean(r.rate for r in runs if r.side == "A")
        b_mean = statistics.fmean(r.rate for r in runs if r.side == "B")
        ratio = b_mean / a_mean
        cpu_ratio = statistics.fmean(r.cpu_ms for r in runs if r.side == "A") / statistics.fmean(
            r.cpu_ms for r in runs if r.side == "B"
        )
        settings = {
            "N": args.n,
            "repeat": args.repeat,
            "warmup": args.warmup,
            "batch_size": args.batch_size,
            "within": args.within,
            "partitions": args.partitions,
            "torch_threads_bench": bench_threads,
            "torch_threads_worker": worker_threads,
            "texts_per_candidate": round(sum(len(b) for b in text_batches[0]) / args.n, 2),
            "encoder_batch_size": encoder.batch_size,
            "baseline_in": args.baseline_in,
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(unset)"),
            "policy": f"{args.policy or '(shipped)'} v{policy.version}",
            "grounding_model": policy.grounding is not None,
            "worker": module,
            "broker_started_here": started_broker,
            "cpus": os.cpu_count(),
        }
        if args.faust:
            settings["faust"] = _pairs(args.faust)
        if args.worker_env:
            settings["worker_env"] = _pairs(args.worker_env)
        print_table(runs, ratio, cpu_ratio, settings)
        for r in runs:
            if r.side == "B":
                print(
                    f"\nB set {r.set}: produce took {r.extra['produce_seconds']}s; worker CPU "
                    f"{r.cpu_seconds:.1f}s: {json.dumps(r.extra['worker_cpu_seconds'])}"
                )
                if r.extra.get("worker"):
                    print(format_breakdown(r.extra["worker"], r.seconds))
        if args.cprofile:
            print_profile(profile_dir)
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            result = {
                "runs": [
                    {**asdict(r), "candidates_per_s": r.rate, "cpu_ms_per_candidate": r.cpu_ms}
                    for r in runs
                ],
                "a_mean_per_s": a_mean,
                "b_mean_per_s": b_mean,
                "ratio": ratio,
                "cpu_ratio": cpu_ratio,
                "neighbour_ratios": neighbour_ratios(runs),
                "goal": GOAL,
                "settings": settings,
            }
            args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokerStartError as exc:
        sys.exit(str(exc))
