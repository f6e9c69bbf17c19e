"""`groundstream bench NAME`: each bench starts what it needs and prints its result last.

Not tests: they never fail on a slow machine; the last line says whether the goal was met.
Imports stay inside the commands so `groundstream --help` loads no model and no Kafka client.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import click

from workers.bench.procs import BenchError
from workers.bench.report import Result


def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _threads(n: int) -> None:
    """Torch (and ONNX Runtime) threads here and in every worker started: before torch loads."""
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(n)


def _finish(run: Callable[[], Result], json_path: Path | None) -> None:
    try:
        result = run()
    except BenchError as exc:
        raise click.ClickException(str(exc)) from None
    result.save(json_path)
    click.echo(result.line())  # the last line, by contract


bootstrap_option = click.option(
    "--bootstrap",
    default=lambda: os.environ.get("GROUNDSTREAM_BOOTSTRAP_SERVERS", "127.0.0.1:9092"),
    show_default="GROUNDSTREAM_BOOTSTRAP_SERVERS or 127.0.0.1:9092",
    help="Broker; started with deploy/kafka/local.sh when none answers (never stopped).",
)
tls_option = click.option(
    "--tls",
    is_flag=True,
    help="Run it over plaintext and over SASL_SSL (a secured broker of its own), side by"
    " side, alternating; the figure is the secured rate over the plaintext one.",
)
json_option = click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Append the result here as one JSON line (input of `bench plot`).",
)
n_option = click.option("--n", type=int, default=1000, show_default=True, help="Candidates.")
threads_option = click.option(
    "--threads", type=int, default=None, help="Encoder threads per process (default: CPUs)."
)


@click.group()
def bench() -> None:
    """Benchmarks, the figures of docs/benchmarks.md (broker and workers started here)."""


@bench.command()
@bootstrap_option
@n_option
@threads_option
@click.option(
    "--backend",
    "backends",
    multiple=True,
    type=click.Choice(["onnx-int8", "onnx", "torch"]),
    help="Encoder backends, in order (default: onnx-int8 then onnx); the first gives the figure.",
)
@json_option
def geometry(
    bootstrap: str, n: int, threads: int | None, backends: tuple[str, ...], json_path: Path | None
) -> None:
    """The geometry stage over Kafka vs a plain sentence-transformers loop (goal >= 1.3x) and
    vs its own raw encoder (goal >= 0.95), on the same texts."""
    _threads(threads or _cpus())
    from workers.bench import geometry as g

    opts = g.Options(
        bootstrap, n, threads=threads or _cpus(), backends=backends or ("onnx-int8", "onnx")
    )
    _finish(lambda: g.run(opts), json_path)


@bench.command()
@bootstrap_option
@click.option("--n", type=int, default=500, show_default=True, help="Candidates per set.")
@json_option
def cache(bootstrap: str, n: int, json_path: Path | None) -> None:
    """Five candidates per context vs unique contexts through geometry (goal >= 3x)."""
    from workers.bench import cache as c

    _finish(lambda: c.run(c.Options(bootstrap, n)), json_path)


@bench.command()
@click.option("--n", type=int, default=300, show_default=True, help="Answers per side.")
@threads_option
@click.option(
    "--backend",
    type=click.Choice(["torch", "onnx"]),
    default="torch",
    show_default=True,
    help="Encoder backend of both sides.",
)
@json_option
def claims(n: int, threads: int | None, backend: str, json_path: Path | None) -> None:
    """Geometry scoring with claim support vs without, same answers, in-process (goal >= 1/3)."""
    _threads(threads or _cpus())
    from workers.bench import claims as c

    _finish(lambda: c.run(c.Options(n, backend=backend)), json_path)


@bench.command()
@bootstrap_option
@click.option("--n", type=int, default=20_000, show_default=True, help="Scored envelopes.")
@click.option(
    "--profile",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Run the switch worker under cProfile, write the stats here and print the top.",
)
@click.option("--batch-size", type=int, default=None, help="The switch worker's batch size.")
@tls_option
@json_option
def switch(
    bootstrap: str,
    n: int,
    profile: Path | None,
    batch_size: int | None,
    tls: bool,
    json_path: Path | None,
) -> None:
    """The switch stage vs a bare aiokafka consume-produce loop, same envelopes (goal >= 0.5);
    with --tls, the switch stage's rate over SASL_SSL against plaintext (goal >= 0.85)."""
    from dataclasses import replace

    from workers.bench import switch as s

    opts = s.Options(bootstrap, n, profile=profile, batch_size=batch_size)
    if not tls:
        _finish(lambda: s.run(opts), json_path)
        return
    from workers.bench.tls import side_by_side

    def one(at: str) -> Result:
        return s.run(replace(opts, bootstrap=at))

    _finish(
        lambda: side_by_side("switch", bootstrap, one, lambda r: r.rates["switch/s"]), json_path
    )


data_option = click.option(
    "--data",
    type=click.Choice(["auto", "ragtruth", "synthetic"]),
    default="auto",
    show_default=True,
    help="Candidates: RAGTruth's dev split (../shared/data, read in place) or synthetic; "
    "auto takes RAGTruth when present.",
)


@bench.command()
@bootstrap_option
@click.option("--rate", type=float, default=5.0, show_default=True, help="Candidates per second.")
@click.option("--seconds", type=float, default=60.0, show_default=True, help="How long.")
@data_option
@tls_option
@json_option
def latency(
    bootstrap: str, rate: float, seconds: float, data: str, tls: bool, json_path: Path | None
) -> None:
    """Produce to `state` on the accept path, p50/p99 (goal p99 <= 2 x encode + 50 ms);
    with --tls, 1/p50 over SASL_SSL against plaintext (goal >= 0.85)."""
    from workers.bench import latency as lat

    opts = lat.Options(bootstrap, rate, seconds, data)
    if not tls:
        _finish(lambda: lat.run(opts), json_path)
        return
    from workers.bench.tls import side_by_side

    def one(at: str) -> Result:
        return lat.run(lat.Options(at, rate, seconds, data))

    _finish(
        lambda: side_by_side("latency", bootstrap, one, lambda r: 1000 / r.rates["p50 ms"]),
        json_path,
    )


@bench.command()
@bootstrap_option
@click.option(
    "--n",
    type=click.IntRange(min=1),
    default=300,
    show_default=True,
    help="Candidates per replica count.",
)
@click.option(
    "--warmup",
    type=click.IntRange(min=1),
    default=60,
    show_default=True,
    help="Candidates before each rate.",
)
@json_option
def scale(bootstrap: str, n: int, warmup: int, json_path: Path | None) -> None:
    """Geometry on 1, 2 and 3 replicas (one thread each, 6 partitions), and the seconds until
    a replica's partitions are decided again after kill -9 (goal <= 15 s) and SIGTERM."""
    from workers.bench import scale as sc

    _finish(lambda: sc.run(sc.Options(bootstrap, n, warmup)), json_path)


@bench.command()
@bootstrap_option
@click.option("--n", type=int, default=2000, show_default=True, help="Candidates.")
@data_option
@json_option
def ladder(bootstrap: str, n: int, data: str, json_path: Path | None) -> None:
    """The whole ladder over Kafka (a process per stage) vs `verify` in-process."""
    from workers.bench import ladder as la

    _finish(lambda: la.run(la.Options(bootstrap, n, data)), json_path)


@bench.command()
@bootstrap_option
@click.option("--n", type=int, default=200, show_default=True, help="Ordinary candidates per set.")
@click.option("--rate", type=float, default=1.5, show_default=True, help="Candidates per second.")
@click.option("--rounds", type=int, default=2, show_default=True, help="Sets alternate in rounds.")
@json_option
def fairness(bootstrap: str, n: int, rate: float, rounds: int, json_path: Path | None) -> None:
    """Ordinary candidates alone vs with five 900 KB / five 200-claim answers (goal <= 1.5x)."""
    from workers.bench import fairness as fa

    _finish(lambda: fa.run(fa.Options(bootstrap, n, rate, rounds)), json_path)


@bench.command("judge-throughput")
@bootstrap_option
@click.option("--n", type=int, default=1000, show_default=True, help="Answers in the burst.")
@click.option(
    "--in-flight",
    type=click.IntRange(1, 128),
    default=64,
    show_default=True,
    help="The worker's GROUNDSTREAM_JUDGE_MAX_IN_FLIGHT.",
)
@click.option(
    "--endpoint-limit",
    type=click.IntRange(min=1),
    default=64,
    show_default=True,
    help="Calls the scripted judge answers at once; more wait in its queue.",
)
@click.option(
    "--p50",
    type=click.FloatRange(min=0.001),
    default=1.0,
    show_default=True,
    help="Median seconds of a judge call.",
)
@click.option(
    "--p99",
    type=click.FloatRange(min=0.001),
    default=4.0,
    show_default=True,
    help="99th percentile seconds of a judge call (at least --p50).",
)
@click.option(
    "--rate",
    type=click.FloatRange(min=0.1),
    default=25.0,
    show_default=True,
    help="Answers per second in the latency runs.",
)
@click.option(
    "--seconds",
    type=click.FloatRange(min=1),
    default=20.0,
    show_default=True,
    help="How long each latency run paces answers.",
)
@click.option("--seed", type=int, default=35, show_default=True, help="The latencies' draw.")
@json_option
def judge_throughput(
    bootstrap: str,
    n: int,
    in_flight: int,
    endpoint_limit: int,
    p50: float,
    p99: float,
    rate: float,
    seconds: float,
    seed: int,
    json_path: Path | None,
) -> None:
    """A judge worker against a slow scripted judge: answers/s vs the ideal (goal >= 0.8),
    p99 with 2% of calls taking 8 s vs without (goal <= 1.5x)."""
    from workers.bench import judge_throughput as jt

    if p99 < p50:
        raise click.BadParameter("must be at least --p50", param_hint="--p99")
    opts = jt.Options(bootstrap, n, in_flight, endpoint_limit, p50, p99, rate, seconds, seed=seed)
    _finish(lambda: jt.run(opts), json_path)


@bench.command()
@click.argument(
    "data", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@click.option(
    "--judge-accuracy",
    type=click.FloatRange(0.5, 1.0),
    default=0.85,
    show_default=True,
    help="The share of answers the scripted judge gets right.",
)
@click.option(
    "--judge-share",
    type=click.FloatRange(0.0, 1.0),
    default=0.5,
    show_default=True,
    help="The judge share starred in the frontier (the tokens are counted on its band).",
)
@click.option(
    "--max-accept-error",
    type=click.FloatRange(0.0, 1.0, min_open=True, max_open=True),
    default=None,
    help="The bound the bands are fitted within: largest share of state wrong (default as"
    " calibrate's: a third of the judge's error rate, at least 0.015).",
)
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Records per file.")
@click.option(
    "--backend",
    type=click.Choice(["onnx", "torch"]),
    default="onnx",
    show_default=True,
    help="Encoder backend of the scoring.",
)
@click.option(
    "--policy",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Policy whose grounding model scores the answers (default: the shipped one).",
)
@click.option(
    "--max-context-tokens",
    type=click.IntRange(min=1),
    default=None,
    help="The judge's [judge] max_context_tokens (default: the policy's).",
)
@click.option("--kafka", is_flag=True, help="Also two judge workers on the broker at --bootstrap.")
@click.option(
    "--kafka-only",
    is_flag=True,
    help="Only the part on the broker, on unscored candidates (no minutes of scoring).",
)
@bootstrap_option
@click.option(
    "--kafka-n",
    type=click.IntRange(min=1),
    default=300,
    show_default=True,
    help="With --kafka: candidates produced (the documented figure is 1000).",
)
@click.option(
    "--produce-seconds",
    type=click.FloatRange(0.0, min_open=True),
    default=20.0,
    show_default=True,
    help="With --kafka: produced within this many seconds.",
)
@click.option(
    "--calls-per-minute",
    type=click.IntRange(min=1),
    default=60,
    show_default=True,
    help="With --kafka: the route's judge budget.",
)
@json_option
def judge(
    data: tuple[Path, ...],
    judge_accuracy: float,
    judge_share: float,
    max_accept_error: float | None,
    limit: int | None,
    backend: str,
    policy: Path | None,
    max_context_tokens: int | None,
    kafka: bool,
    kafka_only: bool,
    bootstrap: str,
    kafka_n: int,
    produce_seconds: float,
    calls_per_minute: int,
    json_path: Path | None,
) -> None:
    """The judge on labelled DATA with a scripted judge: the judge-share frontier, tokens
    with and without context windows (goal <= 0.60x), cache hits on a resubmitted run; with
    --kafka, a route budget across two judge workers (goal: none over it in any 60 s)."""
    from pipeline.fit.judge_share import default_band_error
    from workers.bench import judge as jd

    opts = jd.Options(
        data,
        accuracy=judge_accuracy,
        share=judge_share,
        max_error=default_band_error(judge_accuracy)
        if max_accept_error is None
        else max_accept_error,
        limit=limit,
        backend=backend,
        policy=policy,
        max_context_tokens=max_context_tokens,
        kafka=kafka or kafka_only,
        kafka_only=kafka_only,
        bootstrap=bootstrap,
        kafka_n=kafka_n,
        produce_seconds=produce_seconds,
        calls_per_minute=calls_per_minute,
    )
    _finish(lambda: jd.run(opts), json_path)


@bench.command()
@click.argument("results", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The PNG to write.",
)
def plot(results: tuple[Path, ...], out: Path) -> None:
    """Draw the latest result of each bench (JSON lines from --json) against its goal."""
    from workers.bench.plot import plot_results

    plot_results(list(results), out)
    click.echo(f"wrote {out}", err=True)


if __name__ == "__main__":
    sys.exit(bench())
