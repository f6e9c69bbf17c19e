"""`produce`, `consume`, `outcomes` and `topics create`: one-shot tools on the ladder's topics."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from pipeline.errors import EXIT_REFUSED
from topics.names import Topic
from workers.cli.base import load_settings, run_kafka

MAX_LISTED = 20
"""Bad lines `produce` lists one by one before it only counts them."""


@click.command()
@click.argument("input_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--topic", default="candidates", show_default=True, help="Logical topic name.")
@click.option(
    "--no-check",
    is_flag=True,
    help="Send every line as it is, even those the geometry stage would dead-letter.",
)
def produce(input_file: Path, topic: str, no_check: bool) -> None:
    """Send each line of a JSONL file to a topic (key = its session_id).

    Lines for `candidates` are first checked with the geometry stage's own parser and
    size limit: a line it would dead-letter is named with the reason and not sent, and the
    command exits 1 once the good lines are sent (--no-check sends everything)."""
    from workers.runtime.kafka_tools import check_candidates, numbered_lines, produce_file

    settings = load_settings()
    bad: dict[int, str] = {}
    if topic == Topic.CANDIDATES.value and not no_check:
        bad = check_candidates(numbered_lines(input_file), settings.max_candidate_bytes)
    for n, reason in list(bad.items())[:MAX_LISTED]:
        click.echo(f"{input_file}:{n}: would be dead-lettered: {reason}", err=True)
    if len(bad) > MAX_LISTED:
        click.echo(f"… and {len(bad) - MAX_LISTED} more", err=True)
    sent = run_kafka(produce_file(settings, input_file, topic, leave_out=bad))
    click.echo(f"produced {sent} messages to {settings.topic_prefix}{topic}", err=True)
    if bad:
        click.echo(
            f"left out {len(bad)} line(s) the ladder would dead-letter (--no-check sends them)",
            err=True,
        )
        sys.exit(EXIT_REFUSED)


@click.command()
@click.argument("topic")
@click.option("--max", "max_messages", type=int, default=None, help="Stop after N messages.")
@click.option(
    "--timeout",
    type=float,
    default=10.0,
    show_default=True,
    help="Stop after S seconds without a message.",
)
def consume(topic: str, max_messages: int | None, timeout: float) -> None:
    """Print a topic from the beginning as JSON lines (value, key, headers, offset).

    An unknown topic is one line naming the known ones, exit 2. For `decisions`,
    `groundstream outcomes` is the readable view."""
    from workers.runtime.kafka_tools import consume_topic

    settings = load_settings()
    run_kafka(consume_topic(settings, topic, max_messages, timeout, sys.stdout))


@click.command()
@click.option(
    "--timeout",
    type=float,
    default=10.0,
    show_default=True,
    help="Stop after S seconds without a decision.",
)
@click.option("--follow", is_flag=True, help="Keep following `decisions` until interrupted.")
def outcomes(timeout: float, follow: bool) -> None:
    """One line per candidate from `decisions`: its trail (stage:action → …) and the topic
    it ended in; candidates still in the ladder are listed last."""
    from workers.runtime.kafka_tools import print_outcomes

    settings = load_settings()
    trails = run_kafka(print_outcomes(settings, None if follow else timeout, sys.stdout))
    for line in trails.pending():
        click.echo(line)
    again = f", {trails.superseded} superseded attempt(s)" if trails.superseded else ""
    click.echo(
        f"{trails.done} outcome(s){again}, {len(trails.steps)} still in the ladder", err=True
    )


@click.group()
def topics() -> None:
    """Topic administration."""


@topics.command("create")
@click.option(
    "--also",
    "extra",
    multiple=True,
    help="Also create this topic by its full name (e.g. a source to try `attach` on).",
)
def topics_create(extra: tuple[str, ...]) -> None:
    """Create the ladder's topics (partitions and replication from settings)."""
    from topics.admin import create_topics

    settings = load_settings()
    report = run_kafka(
        create_topics(
            settings.kafka(),
            settings.topic_prefix,
            settings.partitions,
            settings.replication,
            extra=extra,
        )
    )
    for name, status in sorted(report.items()):
        click.echo(f"{status:8} {name}")
