"""Worker entry points: one stage per process, or every stage as child processes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from functools import partial
from pathlib import Path
from typing import Any

from aiokafka.errors import KafkaError

from pipeline.errors import EXIT_FENCED, EXIT_KAFKA, GroundstreamError
from topics.admin import missing_topics
from workers.interfaces import StageContext
from workers.runtime.isolation import always
from workers.runtime.ladder import STAGE_NAMES, row
from workers.runtime.loop import Fenced, RetriesExhausted, StageLoop
from workers.runtime.membership import leave_group
from workers.runtime.metrics import StageMetrics, serve_metrics
from workers.runtime.ready import announce_ready, clear_ready, not_ready
from workers.runtime.refusals import TROUBLESHOOTING, kafka_refusal
from workers.runtime.settings import PREFIX, Settings
from workers.runtime.signing import stage_keys
from workers.runtime.store import ChangelogStore
from workers.runtime.telemetry import StageTelemetry, configure

log = logging.getLogger("groundstream.runner")

LEAVE_TIMEOUT_S = 5.0
"""How long a stopping worker tries to leave its group: past it, its partitions move after
the session timeout instead, and the pod's grace period is not spent waiting."""


class TopicsMissing(GroundstreamError, RuntimeError):
    """The broker cannot be reached or the ladder's topics do not exist: a worker would sit
    idle (a consumer gets no partitions of a missing topic), so it refuses to start."""

    retryable = True


def require_topics(settings: Settings, stage: str | None = None) -> None:
    """Every topic of the ladder exists and is visible to this principal; else one line
    (`stage`: the one being started, named in the ACL command a refusal suggests)."""
    try:
        missing = asyncio.run(missing_topics(settings.kafka(), settings.topic_prefix))
    except KafkaError as exc:
        refused = kafka_refusal(exc, settings.bootstrap_servers, settings.kafka(), stage)
        raise TopicsMissing(
            refused
            or f"cannot reach Kafka at {settings.bootstrap_servers} "
            f"(GROUNDSTREAM_BOOTSTRAP_SERVERS): {type(exc).__name__}; "
            f"see {TROUBLESHOOTING}#cannot-reach-kafka"
        ) from None
    if missing:
        raise TopicsMissing(
            f"topics missing on {settings.bootstrap_servers}: {', '.join(missing)}; "
            f"run `groundstream topics create` first; see {TROUBLESHOOTING}#topics-missing"
        )


def build_loop(name: str, settings: Settings) -> StageLoop:
    """Stage `name`'s Kafka loop, ready to run: its stage and context, its state table
    (the switch's sessions, the judge's and the terminal writer's ledgers) and its
    telemetry."""
    spec = row(name)
    stage = spec.build(settings)
    policy = settings.load_policy()  # a policy whose reader is not served stops here
    if name == "geometry" and (note := settings.reader_note(policy)):
        log.warning(note)  # the stage that would run the reader says it will not
    if name in ("consistency", "judge") and not settings.judge_url:
        # Both send answers to the judge (consistency defers to it): said once, here.
        log.warning(
            "%s: no judge configured (GROUNDSTREAM_JUDGE_URL is not set): every answer this"
            " ladder sends to the judge goes to a person",
            name,
        )
    signer, trusted = stage_keys(settings, name)
    ctx = StageContext(
        policy=policy,
        default_route=settings.default_route,
        max_candidate_bytes=settings.max_candidate_bytes,
        caps=settings.work_caps(),
        encoder_backend=settings.encoder_backend,
        encoder_cache_rows=settings.encoder_cache_rows,
        stage_key=settings.stage_key.encode() or None,
        signer=signer,
        trusted=trusted,
    )
    if spec.preload_encoder(settings):
        from workers.clients.encoder import stage_encoder

        # Load the model before joining the group, not on the first batch.
        stage_encoder(ctx)
    store = None
    if spec.changelog is not None:
        store = ChangelogStore(settings.topic(spec.changelog), spec.placement)
        if hasattr(stage, "ledger"):
            stage.ledger = store
        else:
            ctx.sessions = store
    source = settings.topic(stage.source)
    prometheus = StageMetrics(name, source)
    prometheus.follow(ctx, stage)
    loop = StageLoop(
        stage,
        settings,
        ctx,
        StageTelemetry(name, source, prometheus),
        follows=spec.follows,
        store=store,
        metrics=prometheus,
        on_processing_error=always(settings.on_processing_error),
    )
    loop.on_ready = lambda held: announce_ready(settings, name, loop.group_id, held)
    return loop


def instance_settings(
    base: Settings, instance: str, *, partitions: int, batch_within: float = 0.02
) -> Settings:
    """`base`'s broker, topics, data directory, policy and judge, for one more worker
    instance `instance` run in this process (the judge bench and the fault tests run a
    ladder of loops, two judge instances in one group among them, in one process)."""
    return Settings.from_env(
        {},
        bootstrap_servers=base.bootstrap_servers,
        topic_prefix=base.topic_prefix,
        partitions=partitions,
        batch_within=batch_within,
        data_dir=base.data_dir,
        policy=base.policy,
        judge_url=base.judge_url,
        judge_model=base.judge_model,
        instance_id=instance,
    )


class NotReady(GroundstreamError, RuntimeError):
    """Loops run in this process (bench judge, the fault tests) did not all come up: one
    stopped, or time ran out. The bench says it as a BenchError."""


async def until_ready(
    loops: Mapping[str, StageLoop],
    partitions: int,
    *,
    tasks: Mapping[str, asyncio.Task[None]] | None = None,
    seconds: float = 180.0,
) -> None:
    """Wait until every loop in `loops` (named `stage` or `stage@instance`) is ready and
    the `judge@…` loops among them hold all `partitions` between them, so that what is
    produced next is read at once. NotReady names a loop whose task (`tasks`) stopped, or
    the loops not ready when `seconds` ran out."""
    judges = [loop for name, loop in loops.items() if name.startswith("judge@")]
    for _ in range(max(int(seconds / 0.1), 1)):
        for name, task in (tasks or {}).items():
            if task.done():
                raise NotReady(f"worker {name} stopped: {task.exception()!r}")
        held = [loop.store.partitions for loop in judges if loop.store is not None]
        every = all(loop.ready for loop in loops.values()) and all(held)
        if every and (not judges or sum(map(len, held)) == partitions):
            return
        await asyncio.sleep(0.1)
    waiting = sorted(name for name, loop in loops.items() if not loop.ready)
    raise NotReady(f"not ready after {seconds:.0f} s: {', '.join(waiting) or 'the judges'}")


def run_stage(name: str, settings: Settings) -> None:
    """Run stage `name`'s loop until SIGINT/SIGTERM; exit 2, committing nothing, if the
    broker stays away, or a retryable error does not clear, past the loop's patience;
    exit 3 when a newer worker under the same instance id fenced this one (`Fenced`).
    Stopped by a signal, it leaves its group (GROUNDSTREAM_LEAVE_GROUP_ON_STOP): never after
    `Fenced`, whose instance id now belongs to the newer worker."""
    configure(f"groundstream-{name}", settings.otlp_endpoint)
    loop = build_loop(name, settings)
    serve_metrics(loop.metrics, settings)
    clear_ready(settings, name)
    stopped = partial(leave, loop, settings) if settings.leave_group_on_stop else None
    try:
        asyncio.run(_until_signalled(loop.run(), stopped))
    except RetriesExhausted as exc:
        log.error("%s", exc)
        raise SystemExit(EXIT_KAFKA) from None
    except Fenced as exc:
        log.error("%s", exc)
        raise SystemExit(EXIT_FENCED) from None
    finally:
        clear_ready(settings, name, pid=os.getpid())


async def leave(loop: StageLoop, settings: Settings) -> None:
    """Take this stopped worker's static membership out of its group, so the group hands
    its partitions to the other replicas now rather than after the session timeout (a
    scale-down's replica never comes back; a restarted one rejoins under the same id). A
    failure is logged, never raised: the partitions then move after the session timeout."""
    try:
        await asyncio.wait_for(
            leave_group(settings.kafka(), loop.group_id, loop.member_id), LEAVE_TIMEOUT_S
        )
    except (KafkaError, OSError, TimeoutError) as exc:
        log.warning(
            "stage %s: could not leave group %s as %s (%r): its partitions move to"
            " the other replicas after the session timeout",
            loop.stage.name,
            loop.group_id,
            loop.member_id,
            exc,
        )
    else:
        log.info("stage %s: left group %s as %s", loop.stage.name, loop.group_id, loop.member_id)


async def _until_signalled(
    work: Coroutine[Any, Any, None], stopped: Callable[[], Awaitable[None]] | None = None
) -> None:
    """Run `work`; SIGTERM or SIGINT cancels it (an open transaction is then aborted by
    the broker or fenced by the next start, never half-committed), and then `stopped` runs.
    It runs here, in the loop, as soon as `work` has closed its clients: not after
    `asyncio.run`, which first waits for a call in hand on a worker thread (an encoder
    batch) to return."""
    task = asyncio.ensure_future(work)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await task
    if task.cancelled() and stopped is not None:
        await stopped()


RECORDER = "recorder"
"""The audit recorder's name among `worker all`'s children (its ready file says so too)."""


def child_env(settings: Settings, name: str) -> dict[str, str] | None:
    """`worker all`'s child `name` signs with its own key: `<name>.key` beside
    GROUNDSTREAM_SIGNING_KEY_FILE (`groundstream keys generate` writes them side by side);
    None (this process's environment) when no key is set or the child signs nothing."""
    if not settings.signing_key_file or name == RECORDER:
        return None
    own = Path(settings.signing_key_file).with_name(f"{name}.key")
    return {**os.environ, f"{PREFIX}SIGNING_KEY_FILE": str(own)}


def run_all(settings: Settings, policy: str | None) -> int:
    """Start every stage, and the audit recorder, as its own process (each stage with its
    own signing key, `child_env`); stop all when one
    exits or on a signal. Once every child has said it is ready, say so once: "all 6
    stages and the audit recorder ready". The recorder runs here because a stack without
    it leaves `decisions` unchained, and `audit verify` then cannot call anything intact."""
    base = [sys.executable, "-m", "workers.cli", "--log-level", settings.log_level]
    extra = ["--policy", policy] if policy else []
    commands = {name: [*base, "worker", name, *extra] for name in STAGE_NAMES}
    commands[RECORDER] = [*base, "audit", "record", *extra]
    for name in commands:
        clear_ready(settings, name)
    children = {
        name: subprocess.Popen(command, env=child_env(settings, name))
        for name, command in commands.items()
    }
    pids = {name: child.pid for name, child in children.items()}
    all_ready = False
    stopping = False

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        for child in children.values():
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    code = 0
    while any(c.poll() is None for c in children.values()):
        for name, child in children.items():
            if child.poll() is not None and not stopping:
                log.error("stage %s exited with %s; stopping the others", name, child.returncode)
                code = child.returncode or 1
                stop(signal.SIGTERM, None)
        if not all_ready and not stopping and not not_ready(settings, list(pids), pids):
            all_ready = True
            print(
                f"groundstream: all {len(STAGE_NAMES)} stages and the audit recorder ready",
                file=sys.stderr,
                flush=True,
            )
        time.sleep(0.2)
    return code
