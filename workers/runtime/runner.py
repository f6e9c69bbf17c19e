"""Worker entry points: one stage per process, or every stage as child processes."""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import sys
import time

from aiokafka.errors import KafkaError

from topics.admin import missing_topics
from workers.runtime.kafka_app import build_app, run_worker
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
    )
    if spec.needs_encoder:
        from workers.clients.encoder import stage_encoder

        stage_encoder(ctx)  # load the model before joining the group, not on the first batch
    app = build_app(stage, settings, ctx, stateful=spec.stateful)
    run_worker(app, settings.log_level)


def run_all(policy: str | None) -> int:
    """Start every stage as its own process; stop all when one exits or on a signal."""
    cmd = [sys.executable, "-m", "workers.cli", "worker"]
    extra = ["--policy", policy] if policy else []
    children = {name: subprocess.Popen([*cmd, name, *extra]) for name in STAGE_NAMES}
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
        time.sleep(0.2)
    return code
