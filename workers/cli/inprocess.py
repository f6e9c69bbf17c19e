"""`verify` and `check`: the ladder in-process, on a file or on one answer; no Kafka."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from workers.cli.base import load_policy, load_settings, reader_note, reader_option


@click.command()
@click.argument("input_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--out",
    "out_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write records here (default stdout).",
)
@click.option(
    "--policy",
    type=click.Path(exists=True, dir_okay=False),
    help="Policy TOML (default GROUNDSTREAM_POLICY or the shipped one).",
)
@reader_option
def verify(input_file: Path, out_file: Path | None, policy: str | None, reader: str | None) -> None:
    """Run the ladder in-process on a JSONL file of candidates; one decision record per line."""
    from workers.runtime.verify import verify_file

    settings = load_settings(policy, reader)
    loaded = load_policy(settings)
    note = reader_note(settings, loaded)
    if note:
        click.echo(note, err=True)
    counts = verify_file(input_file, out_file, settings, loaded)
    summary = ", ".join(f"{topic}={n}" for topic, n in sorted(counts.items()))
    click.echo(f"verified: {summary}", err=True)


def _check_input(
    line: str | None, question: str | None, context: tuple[str, ...], response: str | None
) -> tuple[str, str | list[str] | None, str]:
    """(question, context or None, response) from the options or one JSON line."""
    if line is not None:
        if question or context or response:
            raise click.UsageError("give a JSON line or --question/--context/--response, not both")
        from topics.codec import loads

        try:
            data = loads(sys.stdin.read() if line == "-" else line)
        except ValueError as exc:
            raise click.ClickException(f"LINE is not a JSON line: {exc}") from None
        if not isinstance(data, dict):
            raise click.ClickException("LINE is not a JSON object")
        question, response, found = data.get("question"), data.get("response"), data.get("context")
        context = tuple([found] if isinstance(found, str) else found or ())
    for name, value in (("question", question), ("response", response)):
        if not isinstance(value, str) or not value.strip():
            raise click.ClickException(f"{name} is missing or empty")
    if not all(isinstance(c, str) and c.strip() for c in context):
        raise click.ClickException("every context chunk must be non-empty text")
    assert question is not None and response is not None
    return question, (list(context) or None), response


@click.command("check")
@click.argument("line", required=False)
@click.option("--question", "-q", help="The question the answer replies to.")
@click.option("--context", "-c", multiple=True, help="A context chunk (repeatable; none: DGI).")
@click.option("--response", "-r", help="The answer to check.")
def check_command(
    line: str | None, question: str | None, context: tuple[str, ...], response: str | None
) -> None:
    """Check one answer at the terminal, as the geometry stage and the switch would:
    `groundstream check -q Q -c CONTEXT -r ANSWER`, or one JSON line
    ('{"question": …, "context": …, "response": …}', or - to read it from stdin).
    Prints check(score).render(), the switch's decision and P(grounded), under the active
    policy (GROUNDSTREAM_POLICY, else the shipped one)."""
    import pipeline

    q, chunks, r = _check_input(line, question, context, response)
    load_policy(load_settings())  # verify's start-up refusal: a policy's reader not served
    score = pipeline.score_candidate(q, r, chunks)
    decision = pipeline.GroundingSwitch().decide(score)
    click.echo(pipeline.check(score).render())
    click.echo(
        f"switch: {decision.action.value} (write_to_state={decision.write_to_state}): "
        f"{decision.reason}"
    )
    if isinstance(score, pipeline.GroundingScore):
        click.echo(f"P(grounded) {score.value:.3f} (SGI {score.sgi.value:.3f})")
    else:
        click.echo(f"P(grounded) n/a: no grounding model for {score.method.upper()} scores")
