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
    """Benchmarks against the goals of docs/performance.md (broker and workers started here)."""


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
@json_option
def switch(
    bootstrap: str, n: int, profile: Path | None, batch_size: int | None, json_path: Path | None
) -> None:
    """The switch stage vs a bare aiokafka consume-produce loop, same envelopes (goal >= 0.5)."""
    from workers.bench import switch as s

    opts = s.Options(bootstrap, n, profile=profile, batch_size=batch_size)
    _finish(lambda: s.run(opts), json_path)


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
@json_option
def latency(bootstrap: str, rate: float, seconds: float, data: str, json_path: Path | None) -> None:
    """Produce to `state` on the accept path, p50/p99 (goal p99 <= 2 x encode + 50 ms)."""
    from workers.bench import latency as lat

    opts = lat.Options(bootstrap, rate, seconds, data)
    _finish(lambda: lat.run(opts), json_path)


@bench.command()
@bootstrap_option
@click.option("--n", type=int, default=600, show_default=True, help="Candidates per side.")
@json_option
def scale(bootstrap: str, n: int, json_path: Path | None) -> None:
    """One vs two geometry workers, one thread each, 4 partitions (goal >= 1.7x)."""
    from workers.bench import scale as sc

    _finish(lambda: sc.run(sc.Options(bootstrap, n)), json_path)


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


@bench.command()
@click.argument("results", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True)
def plot(results: tuple[Path, ...], out: Path) -> None:
    """Draw the latest result of each bench (JSON lines from --json) against its goal."""
    from workers.bench.plot import plot_results

    plot_results(list(results), out)
    click.echo(f"wrote {out}", err=True)


if __name__ == "__main__":
    sys.exit(bench())
