"""The `groundstream` command: run workers, verify files in-process, and small Kafka tools."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

import click

from pipeline.errors import PolicyError
from workers.settings import Settings


def _settings(policy: str | None = None) -> Settings:
    try:
        return Settings.from_env(policy=policy)
    except PolicyError as exc:
        raise click.UsageError(str(exc)) from None


def _policy(settings: Settings):  # noqa: ANN202 - Policy, imported lazily
    try:
        return settings.load_policy()
    except PolicyError as exc:
        raise click.UsageError(str(exc)) from None


@click.group()
@click.option("--log-level", default=None, help="debug, info, warning or error.")
def main(log_level: str | None) -> None:
    """groundstream: keep bad LLM answers out of agent and RAG state."""
    logging.basicConfig(
        level=(log_level or "warning").upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )


@main.command()
@click.argument("input_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", "out_file", type=click.Path(dir_okay=False, path_type=Path), help="Write records here (default stdout).")
@click.option("--policy", type=click.Path(exists=True, dir_okay=False), help="Policy TOML (default GROUNDSTREAM_POLICY or the shipped one).")
def verify(input_file: Path, out_file: Path | None, policy: str | None) -> None:
    """Run the ladder in-process on a JSONL file of candidates; one decision record per line."""
    from workers.verify import verify_file

    settings = _settings(policy)
    counts = verify_file(input_file, out_file, settings, _policy(settings))
    summary = ", ".join(f"{topic}={n}" for topic, n in sorted(counts.items()))
    click.echo(f"verified: {summary}", err=True)


@main.command()
@click.argument("input_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--topic", default="candidates", show_default=True, help="Logical topic name.")
def produce(input_file: Path, topic: str) -> None:
    """Send each line of a JSONL file to a topic (key = its session_id)."""
    from workers.kafka_tools import produce_file

    settings = _settings()
    n = asyncio.run(produce_file(settings, input_file, topic))
    click.echo(f"produced {n} messages to {settings.topic_prefix}{topic}", err=True)


@main.command()
@click.argument("topic")
@click.option("--max", "max_messages", type=int, default=None, help="Stop after N messages.")
@click.option("--timeout", type=float, default=10.0, show_default=True, help="Stop after S seconds without a message.")
def consume(topic: str, max_messages: int | None, timeout: float) -> None:
    """Print a topic from the beginning as JSON lines (value, key, headers, offset)."""
    from workers.kafka_tools import consume_topic

    settings = _settings()
    asyncio.run(consume_topic(settings, topic, max_messages, timeout, sys.stdout))


@main.group()
def topics() -> None:
    """Topic administration."""


@topics.command("create")
def topics_create() -> None:
    """Create the ladder's topics (partitions and replication from settings)."""
    from topics.admin import create_topics

    settings = _settings()
    report = asyncio.run(
        create_topics(settings.bootstrap_servers, settings.topic_prefix, settings.partitions, settings.replication)
    )
    for name, status in sorted(report.items()):
        click.echo(f"{status:8} {name}")


@main.command()
@click.argument("stage")
@click.option("--policy", type=click.Path(exists=True, dir_okay=False), help="Policy TOML.")
def worker(stage: str, policy: str | None) -> None:
    """Run one stage's stream processor (or `all`, one process per stage)."""
    from workers.ladder import STAGE_NAMES
    from workers.runner import run_all, run_stage

    if stage != "all" and stage not in STAGE_NAMES:
        raise click.BadParameter(f"{stage!r}: expected all or one of {', '.join(STAGE_NAMES)}")
    settings = _settings(policy)
    _policy(settings)  # fail at start-up on a bad policy, naming the setting
    if stage == "all":
        sys.exit(run_all(policy))
    run_stage(stage, settings)


if __name__ == "__main__":
    main()
