"""`calibrate`: fit a policy's cuts and grounding model, from labelled files or from
reviewers' verdicts on `decisions`."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from pipeline.errors import PolicyError
from workers.cli.base import load_settings, run_kafka


@click.command()
@click.argument(
    "data", nargs=-1, required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@click.option(
    "--out",
    "out_file",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Policy TOML to write (with --route or --from-decisions: to update).",
)
@click.option(
    "--route",
    default=None,
    help="Fit this route's own model and cuts into the policy at --out, under [routes.NAME].",
)
@click.option(
    "--task",
    "tasks",
    multiple=True,
    help="With --route: fit on the answers of this task kind (metadata.task) only, and let"
    " the route serve that kind when a candidate names no route. Repeatable.",
)
@click.option(
    "--from-decisions",
    is_flag=True,
    help="Take the labels from the human verdicts on `decisions` (and their candidates)"
    " instead of DATA: refit the cuts, and the model given enough verdicts.",
)
@click.option(
    "--since", default=None, help="With --from-decisions: verdicts from this ISO time or epoch."
)
@click.option(
    "--reference",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Labelled no-context pairs to fit the DGI direction μ̂ from.",
)
@click.option(
    "--max-accept-error",
    type=float,
    default=0.05,
    show_default=True,
    help="Largest share of ungrounded answers among those auto-accepted.",
)
@click.option(
    "--max-accept-error-long",
    type=float,
    default=None,
    help="The bound for long-form answers (several sentences, or a source longer than one"
    " encoder window) when it differs; default: --max-accept-error.",
)
@click.option("--limit", type=int, default=None, help="Read at most N records per file.")
def calibrate(
    data: tuple[Path, ...],
    out_file: Path,
    route: str | None,
    tasks: tuple[str, ...],
    from_decisions: bool,
    since: str | None,
    reference: Path | None,
    max_accept_error: float,
    max_accept_error_long: float | None,
    limit: int | None,
) -> None:
    """Fit thresholds, μ̂ and the grounding model from labelled DATA; write a policy file.

    With --route, fit one route's own model and cuts into an existing policy; with
    --from-decisions, refit them on the verdicts reviewers gave."""
    from rich.progress import Progress

    from pipeline.encoder import default_encoder
    from pipeline.fit.calibrate import check_accept_error
    from workers.eval.calibration import calibrate as fit
    from workers.eval.calibration import calibrate_route

    command = "groundstream calibrate " + " ".join(sys.argv[2:])
    for name, bound in (
        ("--max-accept-error", max_accept_error),
        ("--max-accept-error-long", max_accept_error_long),
    ):
        try:  # before minutes of encoding, not after
            check_accept_error(name, max_accept_error if bound is None else bound)
        except PolicyError as exc:
            raise click.BadParameter(str(exc), param_hint=name) from None
    if from_decisions:
        if max_accept_error_long is not None:
            raise click.UsageError("--max-accept-error-long applies to fits on DATA")
        if data:
            raise click.UsageError("--from-decisions takes its labels from Kafka, not DATA")
        _calibrate_from_decisions(out_file, route, since, max_accept_error, command)
        return
    if not data:
        raise click.UsageError("give labelled DATA files, or --from-decisions")
    if tasks and route is None:
        raise click.UsageError("--task needs --route: the task kinds are the route's to serve")
    if route is not None:
        try:
            sections = calibrate_route(
                list(data),
                out_file,
                route,
                max_accept_error=max_accept_error,
                limit=limit,
                encoder=default_encoder(),
                command=command,
                tasks=tasks,
                max_accept_error_long=max_accept_error_long,
            )
        except PolicyError as exc:
            raise click.UsageError(str(exc)) from None
        cuts = sections["thresholds"]
        click.echo(f"wrote route {route} into {out_file}")
        click.echo("thresholds: " + ", ".join(f"{k}={v:.4f}" for k, v in cuts.items()))
        _echo_fit_figures(sections.get("grounding", {}).get("metrics", {}))
        return
    with Progress(transient=True, disable=not sys.stderr.isatty()) as bar:
        tasks: dict[str, int] = {}

        def progress(label: str, done: int, total: int) -> None:
            if label not in tasks:
                tasks[label] = bar.add_task(f"embedding ({label})", total=total)
            bar.update(tasks[label], completed=done)

        policy = fit(
            list(data),
            out_file,
            reference=reference,
            max_accept_error=max_accept_error,
            limit=limit,
            encoder=default_encoder(),
            command=command,
            progress=progress,
            max_accept_error_long=max_accept_error_long,
        )
    t = policy["thresholds"]
    click.echo(f"wrote {out_file} (policy {policy['policy']['version']})")
    click.echo("thresholds: " + ", ".join(f"{k}={v:.4f}" for k, v in t.items()))
    _echo_fit_figures(policy.get("grounding", {}).get("metrics", {}))


def _echo_fit_figures(metrics: dict) -> None:
    """Per data file: in-sample and cross-validated share accepted and accepted error."""
    suffix = ".accept_rate_grounded"
    for name in sorted(k.removesuffix(suffix) for k in metrics if k.endswith(suffix)):
        line = (
            f"{name}: in-sample {metrics[name + suffix]:.1%} of grounded accepted,"
            f" {metrics[name + '.accept_error']:.1%} of accepted ungrounded"
        )
        if name + ".cv_accept_rate_grounded" in metrics:
            line += (
                f"; cross-validated {metrics[name + '.cv_accept_rate_grounded']:.1%},"
                f" {metrics[name + '.cv_accept_error']:.1%}"
            )
        click.echo(line)


def _calibrate_from_decisions(
    out_file: Path, route: str | None, since: str | None, max_accept_error: float, command: str
) -> None:
    from pipeline.encoder import default_encoder
    from pipeline.errors import ScoringError
    from workers.eval.reviewed import calibrate_from_decisions, parse_since

    try:
        start = None if since is None else parse_since(since)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    settings = load_settings()
    try:
        result, counts = run_kafka(
            calibrate_from_decisions(
                settings,
                out_file,
                since=start,
                route=route,
                max_accept_error=max_accept_error,
                encoder=default_encoder(),
                command=command,
            )
        )
    except (PolicyError, ScoringError) as exc:
        raise click.ClickException(str(exc)) from None
    left_out = ", ".join(
        f"{n} {why.replace('_', ' ')}" for why, n in counts.items() if n and why != "verdicts"
    )
    click.echo(
        f"{counts['verdicts']} human verdicts read"
        + (f"; left out: {left_out}" if left_out else "")
    )
    click.echo(result.render())
    click.echo(f"wrote {out_file}")
