"""`replay`: re-decide a range of `candidates` and compare with what was recorded."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from workers.cli.base import load_policy, load_settings, quiet_kafka


@click.command()
@click.option("--from", "start", required=True, help="First offset (every partition) or ISO time.")
@click.option("--to", "end", default=None, help="End offset or ISO time, exclusive (default now).")
@click.option(
    "--policy",
    type=click.Path(exists=True, dir_okay=False),
    help="Policy TOML to replay under (default GROUNDSTREAM_POLICY or the shipped one).",
)
@click.option(
    "--out",
    "out_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write one JSON line per candidate: recorded and replayed outcome.",
)
@click.option("--live", is_flag=True, help="Ask the judge and sampler again, not the recording.")
@click.option(
    "--allow-encoder-change", is_flag=True, help="Replay even if the policy's encoder differs."
)
def replay(
    start: str,
    end: str | None,
    policy: str | None,
    out_file: Path | None,
    live: bool,
    allow_encoder_change: bool,
) -> None:
    """Re-decide a range of `candidates` and compare with what `decisions` recorded."""
    from pipeline.trail.replay import EncoderChanged, parse_position
    from workers.runtime.replay import render_summary, replay, write_changes

    try:
        first, last = parse_position(start), None if end is None else parse_position(end)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    settings = load_settings(policy)
    quiet_kafka()
    try:
        run = replay(
            settings,
            load_policy(settings),
            first,
            last,
            live=live,
            allow_encoder_change=allow_encoder_change,
            progress=sys.stderr.isatty(),
        )
    except (EncoderChanged, LookupError) as exc:
        raise click.ClickException(str(exc)) from None
    if out_file is not None:
        out_file.parent.mkdir(parents=True, exist_ok=True)
        with out_file.open("wb") as out:
            write_changes(run, out)
    render_summary(run)
