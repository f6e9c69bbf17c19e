"""`calibrate`: fit a policy's cuts and grounding model, from labelled files or from
reviewers' verdicts on `decisions`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from pipeline.errors import PolicyError
from workers.cli.base import load_settings, reader_option, reader_weights, run_kafka, use_reader

DEFAULT_MAX_ACCEPT_ERROR = 0.05
"""`--max-accept-error` when none is given (a band's own default: `default_band_error`)."""

if TYPE_CHECKING:
    from pipeline.fit.judge_share import JudgeShare


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
    " instead of DATA: refit the cuts, and the model given enough verdicts. With DATA and"
    " --judge-share: estimate the judge's accuracy from the candidates both a person and"
    " the judge ruled on, and fit the band on DATA with it.",
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
    default=None,
    help="Largest share of ungrounded answers among those auto-accepted (default 0.05);"
    " with --judge-share, of state under the band (default: a third of the judge's error"
    " rate, at least 0.015).",
)
@click.option(
    "--max-accept-error-long",
    type=float,
    default=None,
    help="The bound for long-form answers (several sentences, or a source longer than one"
    " encoder window) when it differs; default: --max-accept-error.",
)
@click.option(
    "--judge-share",
    type=float,
    default=None,
    help="Fit the route's band of P(grounded) the judge is asked about: at most this share"
    " of the answers, accept above it and on_reject below it unjudged, the most right"
    " answers in state within --max-accept-error. Prints the frontier.",
)
@click.option(
    "--judge-accuracy",
    type=float,
    default=None,
    help="With --judge-share: the share of answers the judge gets right (default 1.0;"
    " --from-decisions estimates it).",
)
@click.option(
    "--band-only",
    is_flag=True,
    help="With --judge-share: fit only the band, on the model and cuts the policy at --out"
    " already has (the default route's, or --route's), and change nothing else in it.",
)
@click.option("--limit", type=int, default=None, help="Read at most N records per file.")
@reader_option
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
    judge_share: float | None,
    judge_accuracy: float | None,
    band_only: bool,
    limit: int | None,
    reader: str | None,
) -> None:
    """Fit thresholds, μ̂ and the grounding model from labelled DATA; write a policy file.

    With --route, fit one route's own model and cuts into an existing policy; with
    --from-decisions, refit them on the verdicts reviewers gave; with --judge-share, fit
    the band the route's judge is asked about (the default route's, or --route's)."""
    from rich.progress import Progress

    from pipeline.encoding.encoder import OnFirstUse
    from pipeline.fit.calibrate import check_accept_error
    from workers.eval.calibration import JUDGE_SHARE_ROUTE, calibrate_band, calibrate_route
    from workers.eval.calibration import calibrate as fit

    command = "groundstream calibrate " + " ".join(sys.argv[2:])
    band_error = max_accept_error  # None: the band's judge-aware default
    if max_accept_error is None:
        max_accept_error = DEFAULT_MAX_ACCEPT_ERROR
    for name, bound in (
        ("--max-accept-error", max_accept_error),
        ("--max-accept-error-long", max_accept_error_long),
    ):
        try:  # before minutes of encoding, not after
            check_accept_error(name, max_accept_error if bound is None else bound)
        except PolicyError as exc:
            raise click.BadParameter(str(exc), param_hint=name) from None
    if from_decisions and judge_share is not None:
        # The judge's accuracy from decisions, the band fitted on DATA.
        if judge_accuracy is not None:
            raise click.UsageError(
                "--judge-accuracy and --from-decisions both give the judge's accuracy: give one"
            )
        if not data:
            raise click.UsageError(
                "--judge-share with --from-decisions fits on DATA: give labelled files"
                " (the decisions give the judge's accuracy)"
            )
        _judge_share(judge_share, None)  # a bad share is refused before reading Kafka
        judge_accuracy = _judge_accuracy_from_decisions(route, since)
        from_decisions = False
    band = _judge_share(judge_share, judge_accuracy, band_error is None)
    use_reader(reader)  # its P(supported) is fitted as the claim_reader feature
    if from_decisions:
        if max_accept_error_long is not None:
            raise click.UsageError("--max-accept-error-long applies to fits on DATA")
        if band is not None:
            raise click.UsageError("--judge-share applies to fits on DATA")
        if data:
            raise click.UsageError("--from-decisions takes its labels from Kafka, not DATA")
        _calibrate_from_decisions(out_file, route, since, max_accept_error, command)
        return
    if not data:
        raise click.UsageError("give labelled DATA files, or --from-decisions")
    if band_only:
        if band is None:
            raise click.UsageError("--band-only fits the judge's band: give --judge-share")
        if reference is not None:
            raise click.UsageError("--band-only keeps the policy's model: --reference fits one")
        try:
            table = calibrate_band(
                list(data),
                out_file,
                route,
                judge_share=band,
                max_accept_error=max_accept_error,
                max_accept_error_long=max_accept_error_long,
                limit=limit,
                encoder=OnFirstUse(),  # loaded once DATA and the policy have been read
                command=command,
                tasks=tasks,
            )
        except PolicyError as exc:
            raise click.UsageError(str(exc)) from None
        name = route or JUDGE_SHARE_ROUTE
        click.echo(f"wrote the judge band of route {name} into {out_file}")
        _echo_frontier(name, table["calibration"]["judge_band"])
        return
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
                encoder=OnFirstUse(),  # loaded once DATA has been read
                command=command,
                tasks=tasks,
                max_accept_error_long=max_accept_error_long,
                judge_share=band,
            )
        except PolicyError as exc:
            raise click.UsageError(str(exc)) from None
        cuts = sections["thresholds"]
        click.echo(f"wrote route {route} into {out_file}")
        click.echo("thresholds: " + ", ".join(f"{k}={v:.4f}" for k, v in cuts.items()))
        _echo_fit_figures(sections.get("grounding", {}).get("metrics", {}))
        if line := reader_weights(sections.get("grounding")):
            click.echo(line)
        _echo_without_reader(sections.get("grounding"))
        if band is not None:
            _echo_frontier(route, sections["calibration"]["judge_band"])
            _echo_frontier_without_reader(sections.get("grounding"), route)
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
            encoder=OnFirstUse(),  # loaded once DATA has been read
            command=command,
            progress=progress,
            max_accept_error_long=max_accept_error_long,
            judge_share=band,
        )
    t = policy["thresholds"]
    click.echo(f"wrote {out_file} (policy {policy['policy']['version']})")
    click.echo("thresholds: " + ", ".join(f"{k}={v:.4f}" for k, v in t.items()))
    _echo_fit_figures(policy.get("grounding", {}).get("metrics", {}))
    if line := reader_weights(policy.get("grounding")):
        click.echo(line)
    _echo_without_reader(policy.get("grounding"))
    if band is not None:
        route_table = policy["routes"][JUDGE_SHARE_ROUTE]
        _echo_frontier(JUDGE_SHARE_ROUTE, route_table["calibration"]["judge_band"])
        _echo_frontier_without_reader(policy.get("grounding"), JUDGE_SHARE_ROUTE)


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
        if name + ".cv_familiar" in metrics:
            line += f"; {metrics[name + '.cv_familiar']:.1%} familiar out of fold"
        if name + ".familiar_in_sample" in metrics:
            line += f", {metrics[name + '.familiar_in_sample']:.1%} as fitted"
        click.echo(line)
    if "familiarity_cut" in metrics:
        click.echo(
            f"familiarity: cut {metrics['familiarity_cut']:.4f} (a candidate farther from the"
            f" calibration data is not accepted on geometry's word);"
            f" {metrics['cv_familiar']:.1%} of the calibration data familiar out of fold"
            + (
                f", {metrics['familiar_in_sample']:.1%} under the fitted test (as the stage"
                " reads it)"
                if "familiar_in_sample" in metrics
                else ""
            )
        )


def _echo_without_reader(grounding: dict | None) -> None:
    """With --reader: per data file, the cross-validated figures (folds grouped by source)
    of the fit with the reader and of the same fit without it, side by side (nothing
    without a reader); first, when the figures gave the reader no say, one line saying so
    and why."""
    grounding = grounding or {}
    record = grounding.get("reader") or {}
    if "without" not in record:
        return
    dropped = record.get("weighed") is False
    with_it = (record.get("with", {}) if dropped else grounding).get("metrics", {})
    without = record["without"].get("metrics", {})
    if dropped:
        click.echo(
            f"reader {record['name']} measured and given no say: {record.get('verdict')};"
            f" the policy is the fit without it (weight 0), so it is not run or asked for"
            f" at start-up"
        )
    elif record.get("verdict"):
        click.echo(f"reader {record['name']} given its weight: {record['verdict']}")
    click.echo(
        f"with reader {record['name']} | without it, cross-validated (folds grouped by source)"
        + (": the policy keeps the fit without it" if dropped else ":")
    )
    heads = f"{'AUROC':>7}{'grounded acc.':>15}{'acc. wrong':>12}"
    click.echo(f"  {'data':<24}{heads} |{heads}")
    suffix = ".cv_auroc"
    for name in sorted(k.removesuffix(suffix) for k in with_it if k.endswith(suffix)):
        cells = []
        for m in (with_it, without):
            auc = m.get(name + suffix)
            cells.append(
                (f"{auc:>7.3f}" if auc is not None else f"{'n/a':>7}")
                + f"{m.get(name + '.cv_accept_rate_grounded', 0.0):>15.1%}"
                + f"{m.get(name + '.cv_accept_error', 0.0):>12.1%}"
            )
        click.echo(f"  {name:<24}{cells[0]} |{cells[1]}")
    if "auroc_in_sample" in with_it and "auroc_in_sample" in without:
        click.echo(
            f"  in-sample AUROC {with_it['auroc_in_sample']:.3f} with the reader,"
            f" {without['auroc_in_sample']:.3f} without"
        )


def _echo_frontier_without_reader(grounding: dict | None, route: str) -> None:
    """With --reader and --judge-share: the frontier of the same fit without the reader
    (of the fit with it when the reader was given no say: the policy's is without it)."""
    record = (grounding or {}).get("reader") or {}
    if record.get("weighed") is False and "judge_share" in record.get("with", {}):
        # The frontier printed above is the kept fit's, without the reader.
        click.echo(f"with reader {record['name']} (given no say):")
        _echo_frontier(route, record["with"]["judge_share"])
    elif "judge_share" in record.get("without", {}):
        click.echo(f"without reader {record['name']}:")
        _echo_frontier(route, record["without"]["judge_share"])


def _judge_share(
    share: float | None, accuracy: float | None, default_bound: bool = False
) -> JudgeShare | None:
    """The judge share asked for, checked before minutes of encoding; None without one.
    With `default_bound` (no --max-accept-error given) the band is held to the judge-aware
    default (`default_band_error`), the rest of the fit to `DEFAULT_MAX_ACCEPT_ERROR`."""
    if share is None:
        if accuracy is not None:
            raise click.UsageError("--judge-accuracy needs --judge-share")
        return None
    from pipeline.fit.judge_share import JudgeShare, default_band_error

    accuracy = 1.0 if accuracy is None else accuracy
    try:
        bound = default_band_error(accuracy) if default_bound else None
        return JudgeShare(share, accuracy, bound)
    except PolicyError as exc:
        raise click.BadParameter(str(exc), param_hint=exc.field) from None


FIGURES = (("right", "right→state"), ("wrong", "state wrong"), ("asked", "asked"))
"""The frontier's columns, in-sample then cross-validated: the share of right answers that
reach state, the share of state that is wrong, the share of answers the judge is asked."""


def _echo_frontier(route: str, record: dict) -> None:
    """The fitted band and the frontier it was chosen from: per data file and over every
    answer, a row per judge share (the chosen one starred), in-sample and cross-validated,
    then asking the judge about every answer, then what the chosen band lets into state
    with the judge unavailable."""
    click.echo(
        f"judge share {record['judge_share']:.2f} on route {route}: a judge right"
        f" {record['judge_accuracy']:.0%} of the time, at most {record['max_accept_error']:.1%}"
        f" of state wrong ({record['max_accept_error_long']:.1%} long-form)"
        + (
            f" at {record['bound_z']:g} standard errors (Wilson upper bound)"
            if record.get("bound_z")
            else ""
        )
    )
    for regime, cuts in record["band"].items():
        kind = "long-form" if regime == "long" else regime
        veto = f"; a yes below {cuts['veto']:.4f} to a person" if "veto" in cuts else ""
        click.echo(
            f"  {kind} answers: to state at P(grounded) >= {cuts['accept']:.4f}, to the"
            f" judge from {cuts['reject']:.4f}, on_reject below{veto}"
        )
    columns = [key for key, _ in FIGURES]
    if any(row.get("to_person") for rows in record["frontier"].values() for row in rows):
        columns.append("to_person")
    titles = dict(FIGURES, to_person="to a person")
    heads = "".join(f"{titles[c]:>13}" for c in columns)
    frontier = record["frontier"]
    for name, rows in frontier.items():
        if name == "all" and len(frontier) == 2:
            continue  # one data file: "all" repeats it
        cv = "cv_right" in rows[0]
        every = rows[-1]
        click.echo(
            f"{name}: {every['n']} answers, {every['n_right']} right; in-sample"
            + (" | cross-validated" if cv else "")
        )
        click.echo(f"  {'judge share':<14}{heads}" + (f" |{heads}" if cv else ""))
        for row in rows:
            if row.get("every_answer"):
                label = "every answer"
            else:
                chosen = row["share"] == record["judge_share"]
                label = f"{row['share']:.2f}" + (" *" if chosen else "")
            cells = "".join(f"{row[c]:>13.1%}" for c in columns)
            if cv:
                cells += " |" + "".join(f"{row.get('cv_' + c, row[c]):>13.1%}" for c in columns)
            click.echo(f"  {label:<14}{cells}")
        down = record["judge_down"][name]
        click.echo(
            f"  judge unavailable at {record['judge_share']:.2f} (the band to a person):"
            f" {down['right']:.1%} of right answers to state, {down['wrong']:.1%} of state wrong"
            + (f" | {down['cv_right']:.1%}, {down['cv_wrong']:.1%}" if cv else "")
        )


def _judge_accuracy_from_decisions(route: str | None, since: str | None) -> float:
    """The judge's accuracy estimated from the candidates both a person and the judge
    ruled on (`workers.eval.reviewed.judge_accuracy`), printed with its count."""
    from workers.eval.reviewed import parse_since, read_judge_accuracy

    try:
        start = None if since is None else parse_since(since)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    estimate = run_kafka(read_judge_accuracy(load_settings(), since=start, route=route))
    if estimate.accuracy is None:
        raise click.ClickException(
            "no candidate on `decisions` was ruled on by both a person and the judge"
            + (f" on route {route}" if route else "")
            + ": give --judge-accuracy instead of --from-decisions"
        )
    click.echo(estimate.render())
    if estimate.accuracy < 0.5:
        raise click.ClickException(
            f"the judge agreed with people on {estimate.accuracy:.1%} of {estimate.n}"
            " candidates, less than a coin: a band cannot be fitted for it"
        )
    return estimate.accuracy


def _calibrate_from_decisions(
    out_file: Path, route: str | None, since: str | None, max_accept_error: float, command: str
) -> None:
    from pipeline.encoding.encoder import OnFirstUse
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
                encoder=OnFirstUse(),  # loaded once the decisions are read
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
