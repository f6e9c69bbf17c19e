"""`acls`: the Kafka ACLs a principal needs to run groundstream's stages and tools, as
`kafka-acls.sh` lines or a Strimzi `KafkaUser`, or created on the cluster (`--apply`)."""

from __future__ import annotations

import click

from workers.cli.base import load_settings, run_kafka


def usage(message: str) -> click.ClickException:
    """A wrong option value: one line naming the option, exit 2."""
    error = click.ClickException(message)
    error.exit_code = 2
    return error


@click.command()
@click.option(
    "--stage",
    "stages",
    multiple=True,
    required=True,
    help="What the principal runs (repeatable): geometry, switch, consistency, judge, rules,"
    " terminal, recorder, review, dashboard, attach (with --source), client (an agent) or"
    " topics (`topics create`).",
)
@click.option("--principal", required=True, help="Kafka principal, Type:name (User:geometry).")
@click.option("--source", default=None, help="With --stage attach: the topic it gates.")
@click.option(
    "--pass-through",
    default=None,
    help="With --stage attach: its pass-through topic, if not `attach`'s default.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["kafka-acls", "strimzi"]),
    default="kafka-acls",
    show_default=True,
    help="kafka-acls.sh command lines, or a Strimzi KafkaUser (YAML).",
)
@click.option(
    "--strimzi-cluster",
    default="my-cluster",
    show_default=True,
    help="With --format strimzi: the Kafka resource the KafkaUser belongs to.",
)
@click.option(
    "--apply",
    "apply_now",
    is_flag=True,
    help="Create the bindings on GROUNDSTREAM_BOOTSTRAP_SERVERS (one CreateAcls request).",
)
def acls(
    stages: tuple[str, ...],
    principal: str,
    source: str | None,
    pass_through: str | None,
    fmt: str,
    strimzi_cluster: str,
    apply_now: bool,
) -> None:
    """The exact ACLs (least privilege) PRINCIPAL needs to run the given stages, derived
    from the stage table, the routing table and the topic names (GROUNDSTREAM_TOPIC_PREFIX
    included). Prints them; --apply also creates them."""
    from workers.runtime.acls import (
        STAGES,
        Names,
        apply,
        for_stages,
        kafka_acls,
        kafka_user,
        yaml_text,
    )

    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        raise usage(f"--stage {unknown[0]!r}: expected one of {', '.join(STAGES)}")
    settings = load_settings()
    if "attach" not in stages and (source or pass_through):
        raise usage("--source and --pass-through are attach's: give --stage attach")
    if "attach" in stages and source is None:
        raise usage("--stage attach needs --source, the topic it gates")
    try:
        bindings = for_stages(stages, principal, Names.of(settings, source, pass_through))
        user = kafka_user(bindings, principal, strimzi_cluster) if fmt == "strimzi" else None
    except ValueError as exc:  # a name refused (`check_names`, `kafka_user`), in one line
        raise usage(str(exc)) from None
    if apply_now:
        created = run_kafka(apply(settings, bindings))
        click.echo(f"created {created} ACL bindings for {principal}", err=True)
    if user is not None:
        click.echo(yaml_text(user), nl=False)
    else:
        for line in kafka_acls(bindings, settings.bootstrap_servers):
            click.echo(line)
