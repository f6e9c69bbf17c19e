"""`control`: operator controls on the control topic (the kill switch)."""

from __future__ import annotations

import click

from topics.names import Topic
from workers.cli.base import load_settings, run_kafka


@click.group()
def control() -> None:
    """Operator controls on the control topic."""


@control.command("kill-switch")
@click.argument("state", type=click.Choice(["on", "off", "status"]), metavar="STATE")
@click.option("--by", help="Who flips it (recorded on the control topic; needed for on/off).")
def kill_switch(state: str, by: str | None) -> None:
    """Stop (on) or allow (off) all automatic acceptance, on every worker within seconds;
    or show (status) what the control topic says: on or off, by whom, when."""
    from workers.runtime.control import publish_kill_switch

    settings = load_settings()
    if state == "status":
        from pipeline.trail.records import iso_time
        from workers.runtime.kafka_tools import kill_switch_status

        now = run_kafka(kill_switch_status(settings))
        if now is None:
            click.echo("kill switch off (never set)")
        else:
            at = iso_time(now.kill_switch_at) if now.kill_switch_at else "an unknown time"
            by_whom = now.kill_switch_by or "someone unnamed"
            click.echo(f"kill switch {'ON' if now.kill_switch else 'off'} (by {by_whom} at {at})")
        return
    if not by:
        raise click.UsageError("kill-switch on/off needs --by (who flips it)")
    run_kafka(
        publish_kill_switch(settings.kafka(), settings.topic(Topic.CONTROL), state == "on", by)
    )
    click.echo(f"kill switch {state} (by {by})")
