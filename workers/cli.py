"""The `groundstream` command: run workers, verify files in-process, and small Kafka tools."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import click

from pipeline.errors import PolicyError
from topics.names import Topic
from workers.bench import commands as bench_commands
from workers.runtime.settings import Settings

T = TypeVar("T")


def _bad_setting(exc: PolicyError) -> click.ClickException:
    """A bad setting or policy file: one line naming it, exit 2 (no usage text: the
    command line was fine)."""
    error = click.ClickException(str(exc))
    error.exit_code = 2
    return error


def _settings(policy: str | None = None) -> Settings:
    """Settings from the environment; `--log-level`, when given, wins over it."""
    ctx = click.get_current_context(silent=True)
    log_level = ctx.find_root().params.get("log_level") if ctx is not None else None
    try:
        return Settings.from_env(policy=policy, log_level=log_level)
    except PolicyError as exc:
        raise _bad_setting(exc) from None


def _policy(settings: Settings):
    try:
        return settings.load_policy()
    except PolicyError as exc:
        raise _bad_setting(exc) from None


def _bootstrap() -> str:
    """The broker a failed command was talking to, for its one-line message."""
    try:
        return Settings.from_env().bootstrap_servers
    except PolicyError:
        return os.environ.get("GROUNDSTREAM_BOOTSTRAP_SERVERS", "?")


def _one_line(exc: BaseException) -> tuple[str, int] | None:
    """The one line and exit status for an error a user can cause, else None (a bug,
    which keeps its traceback). An absent broker or missing topics exit 2, an input
    groundstream refuses on purpose (bad file, bad setting, not waiting) and an
    unreadable path exit 1."""
    from aiokafka.errors import KafkaError

    from pipeline.errors import GroundstreamError
    from workers.runtime.kafka_tools import UnknownTopic
    from workers.runtime.runner import TopicsMissing

    if isinstance(exc, UnknownTopic | TopicsMissing):
        return exc.args[0], 2
    if isinstance(exc, KafkaError):
        # The clients the failed call left unclosed complain at exit; the line says it all.
        logging.getLogger("asyncio").setLevel(logging.CRITICAL)
        return (
            f"cannot reach Kafka at {_bootstrap()} (GROUNDSTREAM_BOOTSTRAP_SERVERS): "
            f"{type(exc).__name__}",
            2,
        )
    if isinstance(exc, GroundstreamError):
        return str(exc), 1
    if isinstance(exc, OSError):  # a path that is missing, unreadable or not a model
        return (f"{exc.filename}: {exc.strerror}" if exc.filename else str(exc)), 1
    return None


class _Cli(click.Group):
    """The root group: every failure a user can cause is one line on stderr and a
    non-zero exit, never a traceback (tests/unit/test_cli_failures.py runs every command
    against an unreachable broker and a malformed file)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as exc:
            if isinstance(exc, click.ClickException | click.exceptions.Exit | click.Abort):
                raise
            found = _one_line(exc)
            if found is None:
                raise
            click.echo(f"groundstream: {found[0]}", err=True)
            sys.exit(found[1])


@click.group(cls=_Cli)
@click.option(
    "--log-level",
    default=None,
    help="debug, info, warning or error (default GROUNDSTREAM_LOG_LEVEL, else warning; "
    "aiokafka's own start-up chatter shows from info down).",
)
def main(log_level: str | None) -> None:
    """groundstream: keep bad LLM answers out of agent and RAG state."""
    logging.basicConfig(
        level=(log_level or "warning").upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )


@main.command()
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
def verify(input_file: Path, out_file: Path | None, policy: str | None) -> None:
    """Run the ladder in-process on a JSONL file of candidates; one decision record per line."""
    from workers.runtime.verify import verify_file

    settings = _settings(policy)
    counts = verify_file(input_file, out_file, settings, _policy(settings))
    summary = ", ".join(f"{topic}={n}" for topic, n in sorted(counts.items()))
    click.echo(f"verified: {summary}", err=True)


def _quiet_kafka() -> None:
    """For one-shot tools: aiokafka's own log lines about the connection stay quiet unless
    --log-level is info or debug; a failure is reported once, as one line, by `_Cli`."""
    if logging.getLogger().getEffectiveLevel() > logging.INFO:
        logging.getLogger("aiokafka").setLevel(logging.CRITICAL)


def _kafka(call: Coroutine[Any, Any, T]) -> T:
    """Run a one-shot Kafka tool (see `_quiet_kafka`)."""
    _quiet_kafka()
    return asyncio.run(call)


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


@main.command("check")
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


MAX_LISTED = 20
"""Bad lines `produce` lists one by one before it only counts them."""


@main.command()
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

    settings = _settings()
    bad: dict[int, str] = {}
    if topic == Topic.CANDIDATES.value and not no_check:
        bad = check_candidates(numbered_lines(input_file), settings.max_candidate_bytes)
    for n, reason in list(bad.items())[:MAX_LISTED]:
        click.echo(f"{input_file}:{n}: would be dead-lettered: {reason}", err=True)
    if len(bad) > MAX_LISTED:
        click.echo(f"… and {len(bad) - MAX_LISTED} more", err=True)
    sent = _kafka(produce_file(settings, input_file, topic, leave_out=bad))
    click.echo(f"produced {sent} messages to {settings.topic_prefix}{topic}", err=True)
    if bad:
        click.echo(
            f"left out {len(bad)} line(s) the ladder would dead-letter (--no-check sends them)",
            err=True,
        )
        sys.exit(1)


@main.command()
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

    settings = _settings()
    _kafka(consume_topic(settings, topic, max_messages, timeout, sys.stdout))


@main.command()
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

    settings = _settings()
    trails = _kafka(print_outcomes(settings, None if follow else timeout, sys.stdout))
    for line in trails.pending():
        click.echo(line)
    again = f", {trails.superseded} superseded attempt(s)" if trails.superseded else ""
    click.echo(
        f"{trails.done} outcome(s){again}, {len(trails.steps)} still in the ladder", err=True
    )


@main.group()
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

    settings = _settings()
    report = _kafka(
        create_topics(
            settings.bootstrap_servers,
            settings.topic_prefix,
            settings.partitions,
            settings.replication,
            extra=extra,
        )
    )
    for name, status in sorted(report.items()):
        click.echo(f"{status:8} {name}")


@main.command()
@click.argument("stage")
@click.option("--policy", type=click.Path(exists=True, dir_okay=False), help="Policy TOML.")
def worker(stage: str, policy: str | None) -> None:
    """Run one stage's stream processor (or `all`, one process per stage)."""
    from workers.runtime.runner import run_all, run_stage
    from workers.stages.ladder import STAGE_NAMES

    if stage != "all" and stage not in STAGE_NAMES:
        raise click.BadParameter(f"{stage!r}: expected all or one of {', '.join(STAGE_NAMES)}")
    settings = _settings(policy)
    _policy(settings)  # fail at start-up on a bad policy, naming the setting
    _require_broker(settings)
    if stage == "all":
        sys.exit(run_all(settings, policy))
    run_stage(stage, settings)


def _require_broker(settings: Settings) -> None:
    """A service refuses to start without its broker and topics (it would sit idle, or
    log a retry every few seconds); later outages are its own to ride out."""
    from workers.runtime.runner import require_topics

    kafka_log = logging.getLogger("aiokafka")
    level = kafka_log.level
    _quiet_kafka()
    try:
        require_topics(settings)  # TopicsMissing: one line, by `_Cli`
    finally:
        kafka_log.setLevel(level)  # the running service logs the client as before


@main.command("wait-ready")
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
    from workers.runtime.ready import wait_ready
    from workers.stages.ladder import STAGE_NAMES

    unknown = sorted(set(stages) - set(STAGE_NAMES))
    if unknown:
        raise click.BadParameter(f"{', '.join(unknown)}: expected one of {', '.join(STAGE_NAMES)}")
    wanted = stages or STAGE_NAMES
    settings = _settings()
    waiting = wait_ready(settings, wanted, timeout)
    if waiting:
        raise click.ClickException(f"not ready after {timeout:g}s: {', '.join(waiting)}")
    # The ready files say the processes joined; a broker gone since would still read ready.
    _require_broker(settings)
    click.echo(f"ready: {', '.join(wanted)}", err=True)


@main.command()
@click.argument(
    "data", nargs=-1, required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@click.option(
    "--out",
    "out_file",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Policy TOML to write (with --route or --from-decisions: to update).",
)
@click.option(
    "--route",
    default=None,
    help="Fit this route's own model and cuts into the policy at --out, under [routes.NAME].",
)
@click.option(
    "--task",
    "tasks",
    multiple=True,
    help="With --route: fit on the answers of this task kind (metadata.task) only, and let"
    " the route serve that kind when a candidate names no route. Repeatable.",
)
@click.option(
    "--from-decisions",
    is_flag=True,
    help="Take the labels from the human verdicts on `decisions` (and their candidates)"
    " instead of DATA: refit the cuts, and the model given enough verdicts.",
)
@click.option(
    "--since", default=None, help="With --from-decisions: verdicts from this ISO time or epoch."
)
@click.option(
    "--reference",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Labelled no-context pairs to fit the DGI direction μ̂ from.",
)
@click.option(
    "--max-accept-error",
    type=float,
    default=0.05,
    show_default=True,
    help="Largest share of ungrounded answers among those auto-accepted.",
)
@click.option(
    "--max-accept-error-long",
    type=float,
    default=None,
    help="The bound for long-form answers (several sentences, or a source longer than one"
    " encoder window) when it differs; default: --max-accept-error.",
)
@click.option("--limit", type=int, default=None, help="Read at most N records per file.")
def calibrate(
    data: tuple[Path, ...],
    out_file: Path,
    route: str | None,
    tasks: tuple[str, ...],
    from_decisions: bool,
    since: str | None,
    reference: Path | None,
    max_accept_error: float,
    max_accept_error_long: float | None,
    limit: int | None,
) -> None:
    """Fit thresholds, μ̂ and the grounding model from labelled DATA; write a policy file.

    With --route, fit one route's own model and cuts into an existing policy; with
    --from-decisions, refit them on the verdicts reviewers gave."""
    from rich.progress import Progress

    from pipeline.encoder import default_encoder
    from pipeline.fit.calibrate import check_accept_error
    from workers.eval.calibration import calibrate as fit
    from workers.eval.calibration import calibrate_route

    command = "groundstream calibrate " + " ".join(sys.argv[2:])
    for name, bound in (
        ("--max-accept-error", max_accept_error),
        ("--max-accept-error-long", max_accept_error_long),
    ):
        try:  # before minutes of encoding, not after
            check_accept_error(name, max_accept_error if bound is None else bound)
        except PolicyError as exc:
            raise click.BadParameter(str(exc), param_hint=name) from None
    if from_decisions:
        if max_accept_error_long is not None:
            raise click.UsageError("--max-accept-error-long applies to fits on DATA")
        if data:
            raise click.UsageError("--from-decisions takes its labels from Kafka, not DATA")
        _calibrate_from_decisions(out_file, route, since, max_accept_error, command)
        return
    if not data:
        raise click.UsageError("give labelled DATA files, or --from-decisions")
    if tasks and route is None:
        raise click.UsageError("--task needs --route: the task kinds are the route's to serve")
    if route is not None:
        try:
            sections = calibrate_route(
                list(data),
                out_file,
                route,
                max_accept_error=max_accept_error,
                limit=limit,
                encoder=default_encoder(),
                command=command,
                tasks=tasks,
                max_accept_error_long=max_accept_error_long,
            )
        except PolicyError as exc:
            raise click.UsageError(str(exc)) from None
        cuts = sections["thresholds"]
        click.echo(f"wrote route {route} into {out_file}")
        click.echo("thresholds: " + ", ".join(f"{k}={v:.4f}" for k, v in cuts.items()))
        _echo_fit_figures(sections.get("grounding", {}).get("metrics", {}))
        return
    with Progress(transient=True, disable=not sys.stderr.isatty()) as bar:
        tasks: dict[str, int] = {}

        def progress(label: str, done: int, total: int) -> None:
            if label not in tasks:
                tasks[label] = bar.add_task(f"embedding ({label})", total=total)
            bar.update(tasks[label], completed=done)

        policy = fit(
            list(data),
            out_file,
            reference=reference,
            max_accept_error=max_accept_error,
            limit=limit,
            encoder=default_encoder(),
            command=command,
            progress=progress,
            max_accept_error_long=max_accept_error_long,
        )
    t = policy["thresholds"]
    click.echo(f"wrote {out_file} (policy {policy['policy']['version']})")
    click.echo("thresholds: " + ", ".join(f"{k}={v:.4f}" for k, v in t.items()))
    _echo_fit_figures(policy.get("grounding", {}).get("metrics", {}))


def _echo_fit_figures(metrics: dict) -> None:
    """Per data file: in-sample and cross-validated share accepted and accepted error."""
    suffix = ".accept_rate_grounded"
    for name in sorted(k.removesuffix(suffix) for k in metrics if k.endswith(suffix)):
        line = (
            f"{name}: in-sample {metrics[name + suffix]:.1%} of grounded accepted,"
            f" {metrics[name + '.accept_error']:.1%} of accepted ungrounded"
        )
        if name + ".cv_accept_rate_grounded" in metrics:
            line += (
                f"; cross-validated {metrics[name + '.cv_accept_rate_grounded']:.1%},"
                f" {metrics[name + '.cv_accept_error']:.1%}"
            )
        click.echo(line)


def _calibrate_from_decisions(
    out_file: Path, route: str | None, since: str | None, max_accept_error: float, command: str
) -> None:
    from pipeline.encoder import default_encoder
    from pipeline.errors import ScoringError
    from workers.eval.reviewed import calibrate_from_decisions, parse_since

    try:
        start = None if since is None else parse_since(since)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    settings = _settings()
    try:
        result, counts = _kafka(
            calibrate_from_decisions(
                settings,
                out_file,
                since=start,
                route=route,
                max_accept_error=max_accept_error,
                encoder=default_encoder(),
                command=command,
            )
        )
    except (PolicyError, ScoringError) as exc:
        raise click.ClickException(str(exc)) from None
    left_out = ", ".join(
        f"{n} {why.replace('_', ' ')}" for why, n in counts.items() if n and why != "verdicts"
    )
    click.echo(
        f"{counts['verdicts']} human verdicts read"
        + (f"; left out: {left_out}" if left_out else "")
    )
    click.echo(result.render())
    click.echo(f"wrote {out_file}")


_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)


@main.group(invoke_without_command=True)
@click.option("--ragtruth", type=_FILE, help="RAGTruth span-labelled answers.")
@click.option("--begin", type=_FILE, help="BEGIN dialogue replies.")
@click.option(
    "--halueval", type=_FILE, help="HaluEval QA file for the phrasing check (never trained on)."
)
@click.option(
    "--reviewed",
    multiple=True,
    type=_FILE,
    help="Reviewers' verdicts (`groundstream review export`) as extra examples. Repeatable.",
)
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--seed", type=int, default=0, show_default=True)
@click.pass_context
def train(
    ctx: click.Context,
    ragtruth: Path | None,
    begin: Path | None,
    halueval: Path | None,
    reviewed: tuple[Path, ...],
    out_dir: Path | None,
    seed: int,
) -> None:
    """Train the claim-support head (`train --ragtruth … --begin … --out DIR`), or the
    claim reader (`train claims …`); print held-out figures; write the artefact."""
    if ctx.invoked_subcommand is not None:
        return
    missing = [
        o
        for o, v in (("--ragtruth", ragtruth), ("--begin", begin), ("--out", out_dir))
        if v is None
    ]
    if missing:
        raise click.UsageError(f"train needs {', '.join(missing)}")
    from workers.eval.train import TrainConfig
    from workers.eval.train import train as fit

    command = "groundstream train " + " ".join(sys.argv[2:])
    assert ragtruth is not None and begin is not None and out_dir is not None
    config = TrainConfig(ragtruth, begin, halueval, out_dir, seed=seed, reviewed=reviewed)
    fit(config, command, echo=click.echo)
    click.echo(f"wrote {out_dir / 'head.npz'} and {out_dir / 'head.json'}")


@train.command("claims")
@click.option(
    "--claims",
    "claims_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="The shared labelled claim sets (pretraining).",
)
@click.option("--ragtruth", type=_FILE, help="RAGTruth span-labelled answers (fine-tuning).")
@click.option("--begin", type=_FILE, help="BEGIN dialogue replies (fine-tuning).")
@click.option(
    "--halueval", type=_FILE, help="HaluEval QA for the phrasing figures (never trained on)."
)
@click.option(
    "--reviewed",
    multiple=True,
    type=_FILE,
    help="Reviewers' verdicts (`groundstream review export`) to fine-tune on. Repeatable.",
)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--minutes", type=float, default=80.0, show_default=True, help="Training budget.")
@click.option(
    "--pretrain-share",
    type=float,
    default=0.5,
    show_default=True,
    help="Share of the budget for the shared sets; 0 fine-tunes only, 1 pretrains only.",
)
@click.option("--set", "sets", multiple=True, help="Pretrain on this shared set only. Repeatable.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--lr", type=float, default=5e-5, show_default=True)
@click.option("--max-tokens", type=int, default=192, show_default=True)
@click.option("--checkpoint-minutes", type=float, default=5.0, show_default=True)
@click.option("--eval-per-set", type=int, default=600, show_default=True)
@click.option("--resume", is_flag=True, help="Continue from OUT/checkpoint.pt.")
@click.option(
    "--measure-only", is_flag=True, help="Measure the reader already in OUT again; no training."
)
def train_claims(
    claims_dir,
    ragtruth,
    begin,
    halueval,
    reviewed,
    out_dir,
    minutes,
    pretrain_share,
    sets,
    seed,
    lr,
    max_tokens,
    checkpoint_minutes,
    eval_per_set,
    resume,
    measure_only,
) -> None:
    """Fine-tune the bundled encoder as the claim reader (CPU: bucketed, checkpointed)."""
    from workers.eval.reader_train import ReaderConfig, remeasure, train_reader

    config = ReaderConfig(
        out_dir=out_dir,
        claims_dir=claims_dir,
        ragtruth=ragtruth,
        begin=begin,
        halueval=halueval,
        reviewed=tuple(reviewed),
        minutes=minutes,
        pretrain_share=pretrain_share,
        seed=seed,
        lr=lr,
        max_tokens=max_tokens,
        checkpoint_minutes=checkpoint_minutes,
        eval_per_set=eval_per_set,
        sets=tuple(sets),
        resume=resume,
    )
    try:
        config.check()
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if measure_only:
        remeasure(config, echo=click.echo)
        click.echo(f"wrote {out_dir / 'reader.json'}")
        return
    command = "groundstream train claims " + " ".join(sys.argv[3:])
    train_reader(config, command, echo=click.echo)
    click.echo(f"wrote {out_dir / 'reader.onnx'} and {out_dir / 'reader.json'}")


@main.command("eval")
@click.argument("data", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--report",
    "report_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write metrics.json and PNG plots here.",
)
@click.option("--policy", type=click.Path(exists=True, dir_okay=False), help="Policy TOML.")
@click.option("--limit", type=int, default=None, help="Read at most N records.")
@click.option("--skip", type=int, default=0, help="Leave out the first N records (held-out split).")
@click.option(
    "--judge-url",
    default=None,
    help="Ask this OpenAI-compatible judge (overrides GROUNDSTREAM_JUDGE_URL for this run).",
)
@click.option(
    "--judge-model", default=None, help="The judge's model id (else GROUNDSTREAM_JUDGE_MODEL)."
)
@click.option(
    "--phrasing",
    type=click.Choice(["given", "assistant"]),
    default="given",
    show_default=True,
    help="assistant: rewrite every short answer as an assistant's sentence first.",
)
def eval_command(
    data: Path,
    report_dir: Path | None,
    policy: str | None,
    limit: int | None,
    skip: int,
    judge_url: str | None,
    judge_model: str | None,
    phrasing: str,
) -> None:
    """Run the embedded ladder over labelled DATA and report quality and throughput.
    With a judge (option or environment) the ladder asks it as the workers would."""
    from workers.eval.evaluation import evaluate
    from workers.eval.report import require_matplotlib
    from workers.eval.report_text import render_summary

    if report_dir is not None:
        try:  # before the run, not after it
            require_matplotlib()
        except ModuleNotFoundError as exc:
            raise click.ClickException(str(exc)) from None
    settings = _settings(policy)
    if judge_url is not None or judge_model is not None:
        env = {
            **os.environ,  # parsed and validated as if the variables had been set
            "GROUNDSTREAM_JUDGE_URL": judge_url or settings.judge_url,
            "GROUNDSTREAM_JUDGE_MODEL": judge_model or settings.judge_model or "judge",
        }
        try:
            settings = Settings.from_env(env, policy=policy, log_level=settings.log_level)
        except PolicyError as exc:
            raise click.UsageError(str(exc)) from None
    metrics = evaluate(
        data,
        report_dir,
        settings,
        _policy(settings),
        limit=limit,
        skip=skip,
        progress=sys.stderr.isatty(),
        phrasing=phrasing,
    )
    click.echo(render_summary(metrics))


@main.group()
def review() -> None:
    """The human review queue (escalations.review)."""


@review.command("list")
@click.option("--json", "as_json", is_flag=True, help="JSON lines instead of a table.")
@click.option("--texts", is_flag=True, help="With --json: each item's question, context, answer.")
def review_list(as_json: bool, texts: bool) -> None:
    """List candidates waiting for a person's verdict."""
    from workers.stages.review import pending

    items = _kafka(pending(_settings()))
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
    written, missing = _kafka(export_reviewed(_settings(), out_file, since=start, route=route))
    left_out = f"; left out: {missing} candidate(s) not found" if missing else ""
    click.echo(f"wrote {written} reviewed candidates to {out_file}{left_out}")


@review.command("show")
@click.argument("candidate_id")
def review_show(candidate_id: str) -> None:
    """What the reviewer decides on: the question, each context chunk (with its source)
    and the answer, as raw text; plus why it waits and who has claimed it."""
    from workers.stages.review import pending

    items = {p.envelope.candidate.id: p for p in _kafka(pending(_settings()))}
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
@click.argument("verdict", type=click.Choice(["accept", "reject"]))
@click.option("--by", required=True, help="Who decides (recorded in the audit trail).")
@click.option("--note", default="", help="Why (recorded in the audit trail).")
@click.option("--policy", type=click.Path(exists=True, dir_okay=False), help="Policy TOML.")
def review_decide(candidate_id: str, verdict: str, by: str, note: str, policy: str | None) -> None:
    """Record a person's verdict: accept goes through rules to state, reject ends it."""
    from pipeline.review import HumanVerdict
    from workers.stages.review import decide

    settings = _settings(policy)
    try:
        record = _kafka(
            decide(settings, _policy(settings), candidate_id, HumanVerdict(verdict), by, note)
        )
    except (LookupError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{record['candidate_id']}: {record['action']} by {by}")


@main.command()
@click.option("--policy", type=click.Path(exists=True, dir_okay=False), help="Policy TOML.")
def dashboard(policy: str | None) -> None:
    """Serve the live decisions dashboard (GROUNDSTREAM_WEB_HOST:PORT, 127.0.0.1 by default)."""
    from workers.web.app import run_dashboard

    settings = _settings(policy)
    _policy(settings)
    _require_broker(settings)
    run_dashboard(settings)


@main.group()
def control() -> None:
    """Operator controls on the control topic."""


@control.command("kill-switch")
@click.argument("state", type=click.Choice(["on", "off", "status"]))
@click.option("--by", help="Who flips it (recorded on the control topic; needed for on/off).")
def kill_switch(state: str, by: str | None) -> None:
    """Stop (on) or allow (off) all automatic acceptance, on every worker within seconds;
    or show (status) what the control topic says: on or off, by whom, when."""
    from workers.runtime.control import publish_kill_switch

    settings = _settings()
    if state == "status":
        from pipeline.records import iso_time
        from workers.runtime.kafka_tools import kill_switch_status

        now = _kafka(kill_switch_status(settings))
        if now is None:
            click.echo("kill switch off (never set)")
        else:
            at = iso_time(now.kill_switch_at) if now.kill_switch_at else "an unknown time"
            by_whom = now.kill_switch_by or "someone unnamed"
            click.echo(f"kill switch {'ON' if now.kill_switch else 'off'} (by {by_whom} at {at})")
        return
    if not by:
        raise click.UsageError("kill-switch on/off needs --by (who flips it)")
    _kafka(
        publish_kill_switch(
            settings.bootstrap_servers, settings.topic(Topic.CONTROL), state == "on", by
        )
    )
    click.echo(f"kill switch {state} (by {by})")


@main.command()
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
    from pipeline.replay import EncoderChanged, parse_position
    from workers.runtime.replay import render_summary, replay, write_changes

    try:
        first, last = parse_position(start), None if end is None else parse_position(end)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    settings = _settings(policy)
    _quiet_kafka()
    try:
        run = replay(
            settings,
            _policy(settings),
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


@main.group()
def encoder() -> None:
    """The sentence encoder (GROUNDSTREAM_ENCODER_BACKEND: torch, onnx or onnx-int8)."""


@encoder.command("export")
@click.option("--model", type=click.Path(exists=True, file_okay=False), help="Model directory.")
@click.option(
    "--quantize",
    type=click.Choice(["none", "int8"]),
    default="none",
    show_default=True,
    help="int8: also write the int8 graph the onnx-int8 backend loads.",
)
def encoder_export(model: str | None, quantize: str) -> None:
    """Export the encoder to ONNX once (needs torch and onnx), into ~/.cache/groundstream."""
    from pipeline.encoder import default_model_path
    from pipeline.onnx_encoder import export_onnx

    precision = "int8" if quantize == "int8" else "fp32"
    click.echo(export_onnx(Path(model) if model else default_model_path(), precision=precision))


@encoder.command("compare")
@click.argument("data", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--limit", type=click.IntRange(min=1), help="Records per file (default: all).")
@click.option(
    "--calibrate",
    type=click.Path(exists=True, dir_okay=False),
    help="Measure a static (QDQ) int8 graph calibrated on this file's texts (not DATA's).",
)
@click.option("--policy", type=click.Path(exists=True, dir_okay=False), help="Policy TOML.")
def encoder_compare(
    data: tuple[str, ...], limit: int | None, calibrate: str | None, policy: str | None
) -> None:
    """The int8 encoder against fp32 on labelled DATA: SGI, AUROC, the switch's decisions,
    raw rate. The last line is the verdict against the quality bar."""
    from workers.bench.quantized import CompareError, compare

    settings = _settings(policy)
    try:
        result = compare(
            [Path(p) for p in data],
            settings,
            _policy(settings),
            limit=limit,
            calibration=Path(calibrate) if calibrate else None,
            say=lambda line: click.echo(line, err=True),
        )
    except CompareError as exc:
        raise click.ClickException(str(exc)) from None
    for line in result.report():
        click.echo(line)


main.add_command(bench_commands.bench)


@main.command()
@click.option("--source", required=True, help="The topic to gate (its full name).")
@click.option(
    "--preset",
    type=click.Choice(["openai-chat", "openai-responses"]),
    default=None,
    help="Read the source as this shape (default: the policy's [attach] mapping).",
)
@click.option("--pass-through", "pass_through", default=None, help="Default <source>.passthrough.")
@click.option("--group", default=None, help="Consumer group (default <prefix>groundstream-attach).")
@click.option("--until-idle", type=float, default=None, help="Stop after S idle seconds.")
@click.option("--policy", type=click.Path(exists=True, dir_okay=False), help="Policy TOML.")
def attach(
    source: str,
    preset: str | None,
    pass_through: str | None,
    group: str | None,
    until_idle: float | None,
    policy: str | None,
) -> None:
    """Gate an existing topic: its answers become candidates, the rest passes through."""
    from pipeline.attach import AttachMapping
    from workers.runtime.attach import attach as run_attach

    settings = _settings(policy)
    if preset is not None:
        mapping = AttachMapping.parse({"preset": preset})
    else:
        mapping = _policy(settings).attach
    if mapping is None:
        raise click.UsageError("no [attach] mapping in the policy: add one, or pass --preset")
    try:
        counts = _kafka(
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


@main.group()
def audit() -> None:
    """The decision log that proves itself: record the audit chain, verify it."""


@audit.command("record")
@click.option("--policy", type=click.Path(exists=True, dir_okay=False), help="Policy TOML.")
def audit_record(policy: str | None) -> None:
    """Run the audit recorder: decisions → audit (chained) and decisions.public.
    `worker all` runs it too."""
    from workers.runtime.audit import key_from_env
    from workers.runtime.recorder import run_recorder

    settings = _settings(policy)
    _policy(settings)
    _require_broker(settings)
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
    from pipeline.replay import parse_position
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
    _quiet_kafka()
    try:
        report = audit_verify(_settings(), AuditScope(position, session, grace), key_from_env())
    except LookupError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(dumps(report_dict(report)).decode())
    render_report(report)
    sys.exit(0 if report.intact else 1)


if __name__ == "__main__":
    main()
