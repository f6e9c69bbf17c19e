"""What every command group shares: settings and policy read once with one-line errors,
the root group that turns a user's mistake into one line instead of a traceback, and the
way one-shot Kafka tools run."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

import click

from pipeline.errors import EXIT_KAFKA, EXIT_REFUSED, PolicyError
from topics.clients import KafkaConnection
from workers.runtime.settings import Settings

T = TypeVar("T")


class LazyChoice(click.Choice):
    """A `click.Choice` whose choices come from the code's own table, read on first use
    (its command's parsing or help), so that `groundstream --help` loads no stage."""

    def __init__(self, load: Callable[[], Sequence[str]]) -> None:
        self._load = load
        self.case_sensitive = True

    @functools.cached_property
    def choices(self) -> Sequence[str]:  # type: ignore[override]
        return tuple(self._load())


policy_option = click.option(
    "--policy", type=click.Path(exists=True, dir_okay=False), help="Policy TOML."
)
"""`--policy FILE`, as every command that loads a policy takes it."""


def bad_setting(exc: PolicyError) -> click.ClickException:
    """A bad setting or policy file: one line naming it, exit 2 (no usage text: the
    command line was fine)."""
    error = click.ClickException(str(exc))
    error.exit_code = 2
    return error


reader_option = click.option(
    "--reader",
    default=None,
    help="The claim reader's directory for this run, as GROUNDSTREAM_READER (a reader"
    " `groundstream reader export` or `train claims` wrote); it has a say only where the"
    " policy's grounding model gives it weight (`calibrate --reader`).",
)
"""`--reader DIR`, as every command that scores candidates takes it."""


def load_settings(policy: str | None = None, reader: str | None = None) -> Settings:
    """Settings from the environment; `--log-level`, when given, wins over it, and so does
    `--reader` (checked as GROUNDSTREAM_READER is)."""
    ctx = click.get_current_context(silent=True)
    log_level = ctx.find_root().params.get("log_level") if ctx is not None else None
    env = None if reader is None else {**os.environ, "GROUNDSTREAM_READER": reader}
    try:
        return Settings.from_env(env, policy=policy, log_level=log_level)
    except PolicyError as exc:
        raise bad_setting(exc) from None


def use_reader(reader: str | None) -> None:
    """`calibrate --reader DIR`: the reader whose P(supported) is fitted as the grounding
    model's `claim_reader` feature, for this run, exactly as GROUNDSTREAM_READER=DIR would
    (checked the same way; a bad one is one line)."""
    if reader is None:
        return
    load_settings(reader=reader)  # refused here, before minutes of encoding
    from pipeline.policy.defaults import default_claim_reader

    os.environ["GROUNDSTREAM_READER"] = reader  # this one-shot process's setting, as if given
    default_claim_reader.cache_clear()


def reader_weights(grounding: Any) -> str | None:
    """A line naming the reader the fit read and the weight it gave it (None without one)."""
    from pipeline.claims.readers import READER_ENV, reader_name
    from pipeline.scores.grounding import CLAIM_READER

    if not os.environ.get(READER_ENV) or not isinstance(grounding, dict):
        return None
    features, coefficients = grounding.get("features", []), grounding.get("coefficients", [])
    weights = dict(zip(features, coefficients, strict=True))
    short, long = weights.get(CLAIM_READER, 0.0), weights.get(f"{CLAIM_READER}:long", 0.0)
    verdict = "it has a say" if short or long else "no weight: it will not be run"
    return (
        f"reader {reader_name(os.environ[READER_ENV])}: weight {short:.3f} on short answers, "
        f"{long:+.3f} more on long-form ones ({verdict})"
    )


def reader_note(settings: Settings, policy: Any) -> str | None:
    """A line for stderr when a reader is set but no grounding model of the policy weighs
    it: the reader is then not run (None when it is, or none is set)."""
    return settings.reader_note(policy)


def load_policy(settings: Settings):
    try:
        return settings.load_policy()
    except PolicyError as exc:
        raise bad_setting(exc) from None


def _bootstrap() -> str:
    """The broker a failed command was talking to, for its one-line message."""
    try:
        return Settings.from_env().bootstrap_servers
    except PolicyError:
        return os.environ.get("GROUNDSTREAM_BOOTSTRAP_SERVERS", "?")


def _connection() -> KafkaConnection | None:
    """The connection a failed command used (None when the settings do not read)."""
    try:
        return Settings.from_env().kafka()
    except PolicyError:
        return None


def one_line(exc: BaseException) -> tuple[str, int] | None:
    """The one line and exit status for an error a user can cause, else None (a bug,
    which keeps its traceback). An absent broker or missing topics exit 2, an input
    groundstream refuses on purpose (bad file, bad setting, not waiting) and an
    unreadable path exit 1."""
    from aiokafka.errors import KafkaError

    from pipeline.errors import GroundstreamError
    from workers.runtime.kafka_tools import UnknownTopic
    from workers.runtime.refusals import TROUBLESHOOTING, kafka_refusal
    from workers.runtime.runner import TopicsMissing

    if isinstance(exc, UnknownTopic | TopicsMissing):
        return exc.args[0], EXIT_KAFKA
    if isinstance(exc, KafkaError):
        # The clients the failed call left unclosed complain at exit; the line says it all.
        logging.getLogger("asyncio").setLevel(logging.CRITICAL)
        refused = kafka_refusal(exc, _bootstrap(), _connection())
        if refused is not None:
            return refused, EXIT_KAFKA
        return (
            f"cannot reach Kafka at {_bootstrap()} (GROUNDSTREAM_BOOTSTRAP_SERVERS): "
            f"{type(exc).__name__}; see {TROUBLESHOOTING}#cannot-reach-kafka",
            EXIT_KAFKA,
        )
    if isinstance(exc, GroundstreamError):
        return str(exc), EXIT_REFUSED
    if isinstance(exc, OSError):  # a path that is missing, unreadable or not a model
        return (f"{exc.filename}: {exc.strerror}" if exc.filename else str(exc)), EXIT_REFUSED
    return None


class Cli(click.Group):
    """The root group: every failure a user can cause is one line on stderr and a
    non-zero exit, never a traceback (tests/unit/test_cli_failures.py runs every command
    against an unreachable broker and a malformed file)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as exc:
            if isinstance(exc, click.ClickException | click.exceptions.Exit | click.Abort):
                raise
            found = one_line(exc)
            if found is None:
                raise
            click.echo(f"groundstream: {found[0]}", err=True)
            sys.exit(found[1])


def quiet_kafka() -> None:
    """For one-shot tools: aiokafka's own log lines about the connection stay quiet unless
    --log-level is info or debug; a failure is reported once, as one line, by `Cli`."""
    from workers.runtime.refusals import remember_connect_errors

    # Quiet, aiokafka's records reach no handler but the one that keeps why a connection
    # failed, for the one line.
    remember_connect_errors(quiet=logging.getLogger().getEffectiveLevel() > logging.INFO)


def run_kafka(call: Coroutine[Any, Any, T]) -> T:
    """Run a one-shot Kafka tool (see `quiet_kafka`)."""
    quiet_kafka()
    return asyncio.run(call)


def require_broker(settings: Settings, stage: str | None = None) -> None:
    """A service refuses to start without its broker and topics (it would sit idle, or
    log a retry every few seconds); later outages are its own to ride out."""
    from workers.runtime.refusals import forget_connect_errors
    from workers.runtime.runner import require_topics

    quiet_kafka()
    try:
        require_topics(settings, stage)  # TopicsMissing: one line, by `Cli`
    finally:
        forget_connect_errors()  # the running service logs the client as before
