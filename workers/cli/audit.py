"""`audit`: run the audit recorder, and verify the chained decision log."""

from __future__ import annotations

import sys

import click

from pipeline.errors import EXIT_REFUSED
from workers.cli.base import load_policy, load_settings, policy_option, quiet_kafka, require_broker


@click.group()
def audit() -> None:
    """The decision log that proves itself: record the audit chain, verify it."""


@audit.command("record")
@policy_option
def audit_record(policy: str | None) -> None:
    """Run the audit recorder: decisions → audit (chained) and decisions.public.
    `worker all` runs it too."""
    from workers.runtime.audit import key_from_env
    from workers.runtime.recorder import run_recorder

    settings = load_settings(policy)
    load_policy(settings)
    require_broker(settings)
    run_recorder(settings, key_from_env())


@audit.command("verify")
@click.option("--session", default=None, help="Verify this session's chain only.")
@click.option("--from", "start", default=None, help="Start at this offset or ISO time.")
@click.option(
    "--grace",
    type=float,
    default=60.0,
    show_default=True,
    help="Trails newer than this (seconds before the newest record) are in flight.",
)
@click.option("--json", "as_json", is_flag=True, help="The report as JSON on stdout.")
def audit_verify(session: str | None, start: str | None, grace: float, as_json: bool) -> None:
    """Check the audit log; exit 0 only when it is intact (GROUNDSTREAM_AUDIT_KEY if keyed)."""
    from pipeline.trail.replay import parse_position
    from topics.codec import dumps
    from workers.runtime.audit import (
        AuditScope,
        audit_verify,
        key_from_env,
        render_report,
        report_dict,
    )

    try:
        position = None if start is None else parse_position(start)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    quiet_kafka()
    try:
        report = audit_verify(load_settings(), AuditScope(position, session, grace), key_from_env())
    except LookupError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(dumps(report_dict(report)).decode())
    render_report(report)
    sys.exit(0 if report.intact else EXIT_REFUSED)
