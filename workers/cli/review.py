"""`review`: the human review queue (list, show, decide, export)."""

from __future__ import annotations

from pathlib import Path

import click

from pipeline.stages.review import HumanVerdict
from workers.cli.base import load_policy, load_settings, policy_option, run_kafka


@click.group()
def review() -> None:
    """The human review queue (escalations.review)."""


@review.command("list")
@click.option("--json", "as_json", is_flag=True, help="JSON lines instead of a table.")
@click.option("--texts", is_flag=True, help="With --json: each item's question, context, answer.")
def review_list(as_json: bool, texts: bool) -> None:
    """List candidates waiting for a person's verdict."""
    from workers.runtime.review import pending

    items = run_kafka(pending(load_settings()))
    if as_json:
        from topics.codec import dumps

        for item in items:
            line = item.summary() | ({"texts": item.texts()} if texts else {})
            click.echo(dumps(line).decode())
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("candidate", "session", "turn", "stage", "reason", title=f"{len(items)} waiting")
    for item in items:
        s = item.summary()
        table.add_row(
            s["candidate_id"], s["session_id"], str(s["turn"]), str(s["stage"]), s["reason"]
        )
    Console().print(table)


@review.command("export")
@click.option(
    "--out",
    "out_file",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="JSON lines to write: each judged candidate, labelled by its verdict.",
)
@click.option("--since", default=None, help="Verdicts from this ISO time or epoch.")
@click.option("--route", default=None, help="Verdicts on this route only.")
def review_export(out_file: Path, since: str | None, route: str | None) -> None:
    """Write reviewers' verdicts with the candidates they judged as a labelled file, for
    `train --reviewed`, `calibrate --route` or `eval`."""
    from workers.eval.reviewed import export_reviewed, parse_since

    try:
        start = None if since is None else parse_since(since)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    written, missing = run_kafka(
        export_reviewed(load_settings(), out_file, since=start, route=route)
    )
    left_out = f"; left out: {missing} candidate(s) not found" if missing else ""
    click.echo(f"wrote {written} reviewed candidates to {out_file}{left_out}")


@review.command("show")
@click.argument("candidate_id")
def review_show(candidate_id: str) -> None:
    """What the reviewer decides on: the question, each context chunk (with its source)
    and the answer, as raw text; plus why it waits and who has claimed it."""
    from workers.runtime.review import pending

    items = {p.envelope.candidate.id: p for p in run_kafka(pending(load_settings()))}
    if candidate_id not in items:
        raise click.ClickException(f"{candidate_id!r} is not waiting for review")
    summary, texts = items[candidate_id].summary(), items[candidate_id].texts()
    click.echo(f"{candidate_id} [{summary['session_id']}] turn {summary['turn']}")
    click.echo(f"waiting because: {summary['reason']}")
    if "claimed_by" in summary:
        click.echo(f"claimed by {summary['claimed_by']} (routing not finished)")
    click.echo(f"\nquestion:\n  {texts['question']}")
    for i, (chunk, source) in enumerate(zip(texts["context"], texts["sources"], strict=True)):
        click.echo(f"\ncontext [{i}] ({source}):\n  {chunk}")
    click.echo(f"\nanswer:\n  {texts['answer']}")


@review.command("decide")
@click.argument("candidate_id")
@click.argument("verdict", type=click.Choice([v.value for v in HumanVerdict]), metavar="VERDICT")
@click.option("--by", required=True, help="Who decides (recorded in the audit trail).")
@click.option("--note", default="", help="Why (recorded in the audit trail).")
@policy_option
def review_decide(candidate_id: str, verdict: str, by: str, note: str, policy: str | None) -> None:
    """Record a person's verdict: accept goes through rules to state, reject ends it."""
    from pipeline.stages.review import HumanVerdict
    from workers.runtime.review import decide

    settings = load_settings(policy)
    try:
        record = run_kafka(
            decide(settings, load_policy(settings), candidate_id, HumanVerdict(verdict), by, note)
        )
    except (LookupError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{record['candidate_id']}: {record['action']} by {by}")
