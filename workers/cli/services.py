"""`worker`, `wait-ready`, `dashboard` and `attach`: the long-running processes, and
the wait for them to be consuming."""

from __future__ import annotations

import sys

import click

from pipeline.policy.attach import PRESETS
from workers.cli.base import (
    LazyChoice,
    load_policy,
    load_settings,
    policy_option,
    require_broker,
    run_kafka,
)


def _stages() -> tuple[str, ...]:
    from workers.runtime.ladder import STAGE_NAMES

    return ("all", *STAGE_NAMES)


@click.command()
@click.argument("stage", type=LazyChoice(_stages), metavar="STAGE")
@policy_option
def worker(stage: str, policy: str | None) -> None:
    """Run one stage's stream processor (or `all`, one process per stage)."""
    from workers.runtime.runner import run_all, run_stage

    settings = load_settings(policy)
    load_policy(settings)  # fail at start-up on a bad policy, naming the setting
    if stage != "all":
        from workers.runtime.signing import require_keys

        # No key, no start on SSL/SASL_*, said before connecting; the writer checks too.
        require_keys(settings, stage, signs=True, trusts=stage == "terminal")
    require_broker(settings, None if stage == "all" else stage)
    if stage == "all":
        sys.exit(run_all(settings, policy))
    run_stage(stage, settings)


@click.command("wait-ready")
@click.option("--timeout", type=float, default=120.0, show_default=True, help="Give up after S.")
@click.option(
    "--stage",
    "stages",
    multiple=True,
    help="Wait for this stage only (repeatable; default every stage).",
)
def wait_ready_command(timeout: float, stages: tuple[str, ...]) -> None:
    """Wait until the workers (`worker all` or single stages) are consuming; exit 1 if not.

    Run it after starting workers in the background and before producing: a candidate
    produced earlier is only decided once its stage has joined its group."""
    from workers.runtime.ladder import STAGE_NAMES
    from workers.runtime.ready import wait_ready

    unknown = sorted(set(stages) - set(STAGE_NAMES))
    if unknown:
        raise click.BadParameter(f"{', '.join(unknown)}: expected one of {', '.join(STAGE_NAMES)}")
    wanted = stages or STAGE_NAMES
    settings = load_settings()
    waiting = wait_ready(settings, wanted, timeout)
    if waiting:
        raise click.ClickException(f"not ready after {timeout:g}s: {', '.join(waiting)}")
    # The ready files say the processes joined; a broker gone since would still read ready.
    require_broker(settings)
    click.echo(f"ready: {', '.join(wanted)}", err=True)


@click.command()
@policy_option
def dashboard(policy: str | None) -> None:
    """Serve the live decisions dashboard (GROUNDSTREAM_WEB_HOST:PORT, 127.0.0.1 by default)."""
    from workers.runtime.signing import require_keys
    from workers.web.app import run_dashboard

    settings = load_settings(policy)
    load_policy(settings)
    if settings.reviewer_tokens_file:  # a bad line stops it here, before the broker
        from workers.runtime.reviewers import ReviewerFileError, load_reviewers

        try:
            load_reviewers(settings.reviewer_tokens_file)
        except ReviewerFileError as exc:
            error = click.ClickException(str(exc))
            error.exit_code = 2
            raise error from None
    # A person's verdict is signed with the review key; the pending list trusts only that.
    require_keys(settings, "review", signs=True, trusts=True)
    require_broker(settings)
    run_dashboard(settings)


@click.command()
@click.option("--source", required=True, help="The topic to gate (its full name).")
@click.option(
    "--preset",
    type=click.Choice(list(PRESETS)),
    default=None,
    help="Read the source as this shape (default: the policy's [attach] mapping).",
)
@click.option("--pass-through", "pass_through", default=None, help="Default <source>.passthrough.")
@click.option("--group", default=None, help="Consumer group (default <prefix>groundstream-attach).")
@click.option("--until-idle", type=float, default=None, help="Stop after S idle seconds.")
@policy_option
def attach(
    source: str,
    preset: str | None,
    pass_through: str | None,
    group: str | None,
    until_idle: float | None,
    policy: str | None,
) -> None:
    """Gate an existing topic: its answers become candidates, the rest passes through."""
    from pipeline.policy.attach import AttachMapping
    from workers.runtime.attach import attach as run_attach

    settings = load_settings(policy)
    if preset is not None:
        mapping = AttachMapping.parse({"preset": preset})
    else:
        mapping = load_policy(settings).attach
    if mapping is None:
        raise click.UsageError("no [attach] mapping in the policy: add one, or pass --preset")
    try:
        counts = run_kafka(
            run_attach(
                settings,
                source,
                mapping,
                pass_through=pass_through,
                group=group,
                until_idle=until_idle,
            )
        )
    except LookupError as exc:
        raise click.ClickException(str(exc)) from None
    names = ("candidates", "pass_through", "deadletter", "duplicate")
    click.echo("attached: " + " ".join(f"{n}={counts[n]}" for n in names), err=True)
