"""Worker entry points: one stage per process, or every stage as child processes."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from typing import Any

from aiokafka.errors import KafkaError

from topics.admin import missing_topics
from workers.runtime.kafka_app import build_app, run_worker
from workers.runtime.ready import announce_ready, clear_ready, not_ready
from workers.runtime.settings import Settings
from workers.runtime.telemetry import configure
from workers.stages.kit import StageContext
from workers.stages.ladder import STAGE_NAMES, row

log = logging.getLogger("groundstream.runner")


class TopicsMissing(RuntimeError):
    """The broker cannot be reached or the ladder's topics do not exist: a worker would sit
    idle (faust ignores missing source topics), so it refuses to start instead."""


def require_topics(settings: Settings) -> None:
    try:
        missing = asyncio.run(missing_topics(settings.bootstrap_servers, settings.topic_prefix))
    except KafkaError as exc:
        raise TopicsMissing(
            f"cannot reach Kafka at {settings.bootstrap_servers} "
            f"(GROUNDSTREAM_BOOTSTRAP_SERVERS): {type(exc).__name__}"
        ) from None
    if missing:
        raise TopicsMissing(
            f"topics missing on {settings.bootstrap_servers}: {', '.join(missing)}; "
            "run `groundstream topics create` first"
        )


def run_stage(name: str, settings: Settings) -> None:
    """Build the stage's faust app and run it until SIGINT/SIGTERM."""
    policy = settings.load_policy()
    configure(f"groundstream-{name}", settings.otlp_endpoint)
    spec = row(name)
    stage = spec.build(settings)
    ctx = StageContext(
        policy=policy,
        default_route=settings.default_route,
        max_candidate_bytes=settings.max_candidate_bytes,
        stage_key=settings.stage_key.encode() or None,
    )
    if spec.needs_encoder:
        from workers.clients.encoder import stage_encoder

        # Load the model before joining the group, not on the first batch.
        stage_encoder(ctx, settings.encoder_backend)
    app = build_app(stage, settings, ctx, stateful=spec.stateful)
    announce_on_assignment(app, settings, name, settings.topic(stage.source))
    clear_ready(settings, name)
    try:
        run_worker(app, settings.log_level)
    finally:
        clear_ready(settings, name, pid=os.getpid())


def announce_on_assignment(app: Any, settings: Settings, stage: str, source: str) -> None:
    """Say ready (see `ready.py`) the first time faust has the assignment in hand and its
    tables restored, i.e. when it resumes the streams: its `on_rebalance_complete`."""
    said = False

    async def ready(_sender: Any, **_kwargs: Any) -> None:
        nonlocal said
        if said:
            return
        said = True
        held = [tp.partition for tp in app.consumer.assignment() if tp.topic == source]
        announce_ready(settings, stage, app.conf.id, held)

    app.on_rebalance_complete.connect(ready, weak=False)


def run_all(settings: Settings, policy: str | None) -> int:
    """Start every stage as its own process; stop all when one exits or on a signal.
    Once every child has said it is ready, say so once: "all stages ready"."""
    cmd = [sys.executable, "-m", "workers.cli", "--log-level", settings.log_level, "worker"]
    extra = ["--policy", policy] if policy else []
    for name in STAGE_NAMES:
        clear_ready(settings, name)
    children = {name: subprocess.Popen([*cmd, name, *extra]) for name in STAGE_NAMES}
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
        if not all_ready and not stopping and not not_ready(settings, STAGE_NAMES, pids):
            all_ready = True
            print(f"groundstream: all {len(pids)} stages ready", file=sys.stderr, flush=True)
        time.sleep(0.2)
    return code
