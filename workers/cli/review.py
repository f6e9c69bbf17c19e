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
@click.option(
    "--by",
    default=None,
    help="Who decides, recorded in the audit trail: a name the operator asserts, needed "
    "unless GROUNDSTREAM_REVIEWER_TOKENS_FILE is set; with it, the reviewer is the name "
    "GROUNDSTREAM_REVIEWER_TOKEN matches there.",
)
@click.option("--note", default="", help="Why (recorded in the audit trail).")
@policy_option
def review_decide(
    candidate_id: str, verdict: str, by: str | None, note: str, policy: str | None
) -> None:
    """Record a person's verdict: accept goes through rules to state, reject ends it."""
    from pipeline.stages.review import HumanVerdict
    from workers.runtime.review import decide

    settings = load_settings(policy)
    reviewer = _reviewer(settings.reviewer_tokens_file, settings.reviewer_token, by)
    try:
        record = run_kafka(
            decide(
                settings, load_policy(settings), candidate_id, HumanVerdict(verdict), reviewer, note
            )
        )
    except (LookupError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{record['candidate_id']}: {record['action']} by {reviewer}")


def _reviewer(tokens_file: str, token: str, by: str | None) -> str:
    """Who a CLI verdict is recorded under. With a tokens file, the name the reviewer's
    own token matches (so a typo cannot name someone else); without one, `--by`, which
    proves no more than the Kafka credentials the command runs with."""
    if not tokens_file:
        if by is None:
            raise click.UsageError(
                "review decide needs --by (who decides), or GROUNDSTREAM_REVIEWER_TOKENS_FILE "
                "with your own GROUNDSTREAM_REVIEWER_TOKEN"
            )
        return by
    from workers.runtime.reviewers import ReviewerFileError, load_reviewers

    if not token:
        raise click.ClickException(
            "GROUNDSTREAM_REVIEWER_TOKENS_FILE is set: put your own reviewer token in "
            "GROUNDSTREAM_REVIEWER_TOKEN"
        )
    try:
        name = load_reviewers(tokens_file).match(token)
    except ReviewerFileError as exc:
        raise click.ClickException(str(exc)) from None
    if name is None:
        raise click.ClickException(
            f"GROUNDSTREAM_REVIEWER_TOKEN matches no reviewer in {tokens_file}"
        )
    if by is not None and by != name:
        raise click.ClickException(f"--by {by} is not the token's reviewer ({name})")
    return name


@review.command("add-reviewer")
@click.argument("name")
@click.option(
    "--file",
    "tokens_file",
    default=None,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The reviewer tokens file (made if missing); default GROUNDSTREAM_REVIEWER_TOKENS_FILE.",
)
def add_reviewer(name: str, tokens_file: Path | None) -> None:
    """Give a reviewer their own token: appends `NAME:<sha256 of the token>` to the tokens
    file and prints the token, once, on stdout (the file keeps only its digest)."""
    import os

    from workers.runtime.reviewers import SETTING, ReviewerFileError, add_reviewer

    path = tokens_file or os.environ.get(SETTING)
    if not path:
        raise click.UsageError(f"add-reviewer needs --file or {SETTING}")
    try:
        token = add_reviewer(path, name)
    except ReviewerFileError as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:
        raise click.ClickException(f"{path}: {exc.strerror or exc}") from None
    click.echo(f"added {name} to {path}; their token (shown only now):", err=True)
    click.echo(token)
