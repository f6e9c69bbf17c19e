"""`eval`: the embedded ladder over labelled data, for quality and throughput."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from pipeline.errors import EXIT_REFUSED, PolicyError
from workers.cli.base import load_policy, load_settings, policy_option, reader_note, reader_option
from workers.runtime.settings import Settings


@click.command("eval")
@click.argument("data", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--report",
    "report_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write metrics.json and PNG plots here.",
)
@policy_option
@click.option("--limit", type=int, default=None, help="Read at most N records.")
@click.option("--skip", type=int, default=0, help="Leave out the first N records (held-out split).")
@click.option(
    "--judge-url",
    default=None,
    help="Ask this OpenAI-compatible judge (overrides GROUNDSTREAM_JUDGE_URL for this run).",
)
@click.option(
    "--judge-model", default=None, help="The judge's model id (else GROUNDSTREAM_JUDGE_MODEL)."
)
@click.option(
    "--phrasing",
    type=click.Choice(["given", "assistant"]),
    default="given",
    show_default=True,
    help="assistant: rewrite every short answer as an assistant's sentence first.",
)
@reader_option
def eval_command(
    data: Path,
    report_dir: Path | None,
    policy: str | None,
    limit: int | None,
    skip: int,
    judge_url: str | None,
    judge_model: str | None,
    phrasing: str,
    reader: str | None,
) -> None:
    """Run the embedded ladder over labelled DATA and report quality and throughput.
    With a judge (option or environment) the ladder asks it as the workers would; with a
    reader (--reader or GROUNDSTREAM_READER), its claim and answer AUROC beside the head's."""
    from workers.eval.evaluation import evaluate
    from workers.eval.report import require_matplotlib
    from workers.eval.report_text import render_summary

    if report_dir is not None:
        try:  # before the run, not after it
            require_matplotlib()
        except ModuleNotFoundError as exc:
            raise click.ClickException(str(exc)) from None
    settings = load_settings(policy, reader)
    if judge_url is not None or judge_model is not None:
        env = {
            **os.environ,  # parsed and validated as if the variables had been set
            "GROUNDSTREAM_JUDGE_URL": judge_url or settings.judge_url,
            # No model: the one the endpoint serves, found at /models, or a one-line refusal.
            "GROUNDSTREAM_JUDGE_MODEL": judge_model or settings.judge_model,
            "GROUNDSTREAM_READER": settings.reader,
        }
        try:
            settings = Settings.from_env(env, policy=policy, log_level=settings.log_level)
        except PolicyError as exc:
            raise click.UsageError(str(exc)) from None
    loaded = load_policy(settings)
    note = reader_note(settings, loaded)
    if note:
        click.echo(note, err=True)
    metrics = evaluate(
        data,
        report_dir,
        settings,
        loaded,
        limit=limit,
        skip=skip,
        progress=sys.stderr.isatty(),
        phrasing=phrasing,
    )
    click.echo(render_summary(metrics))


def _csv_ints(_ctx: click.Context, _param: click.Parameter, value: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(v) for v in value.split(","))
    except ValueError:
        raise click.BadParameter(f"{value!r}: comma-separated integers, e.g. 1,7,64") from None
    if not sizes or min(sizes) < 1:
        raise click.BadParameter(f"{value!r}: every batch size must be >= 1")
    return sizes


@click.command("determinism")
@click.argument(
    "data", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@policy_option
@click.option(
    "--batch-sizes",
    default="1,7,64",
    show_default=True,
    callback=_csv_ints,
    help="Stage batch sizes to decide the candidates at.",
)
@click.option(
    "--backends",
    default="torch,onnx",
    show_default=True,
    help="Encoder backends to decide the candidates on (comma-separated).",
)
@click.option("--limit", type=int, default=None, help="Read at most N records per file.")
def determinism(
    data: tuple[Path, ...],
    policy: str | None,
    batch_sizes: tuple[int, ...],
    backends: str,
    limit: int | None,
) -> None:
    """Decide DATA's candidates at every batch size on every backend and compare: every
    decision must be the same (a flip within ε of a cut is named, not counted). Exits 1
    when a decision differs away from every cut."""
    from pipeline.encoding.encoder import BACKENDS
    from workers.eval.datasets import load_labelled
    from workers.eval.determinism import check_determinism

    chosen = tuple(b.strip() for b in backends.split(",") if b.strip())
    unknown = [b for b in chosen if b not in BACKENDS]
    if unknown or not chosen:
        raise click.BadParameter(
            f"{backends!r}: expected backends from {', '.join(BACKENDS)}", param_hint="--backends"
        )
    settings = load_settings(policy)
    candidates = [c.candidate for path in data for c in load_labelled(path, limit=limit)]
    report = check_determinism(candidates, load_policy(settings), chosen, batch_sizes)
    for line in report.lines():
        click.echo(line)
    if report.failures:
        sys.exit(EXIT_REFUSED)
