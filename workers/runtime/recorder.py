"""`groundstream audit record`: the audit recorder as a worker.

The recorder stage (`workers/stages/recorder.py`) runs in the stages' transactional loop
(`loop.StageLoop`): its audit entries, its public projections, its chain heads
(`audit.heads`, a changelog keyed like `decisions`) and its input offsets on `decisions`
are committed in one Kafka transaction per batch. That is what makes the numbering exact:
a crash neither skips a sequence number (offsets committed without the entry) nor repeats
one (the entry written twice), and a restarted recorder fences the one it replaces.

Like every stage it serves its Prometheus metrics on `/metrics` when
GROUNDSTREAM_METRICS_PORT is set, on the port after the ladder's stages
(`workers.runtime.metrics.SERVED`): its batches, its emits to `audit` and
`decisions.public`, and its lag on `decisions`.
"""

from __future__ import annotations

import asyncio
import logging

from workers.runtime.loop import Fenced, RetriesExhausted, StageLoop
from workers.runtime.metrics import StageMetrics, serve_metrics
from workers.runtime.ready import announce_ready
from workers.runtime.settings import Settings
from workers.runtime.store import ChangelogStore
from workers.runtime.telemetry import StageTelemetry
from workers.runtime.verify import make_context
from workers.stages.recorder import RecorderStage

log = logging.getLogger("groundstream.recorder")


def build_recorder(settings: Settings, key: bytes | None) -> StageLoop:
    """The recorder's loop: its stage, its head table as the stage's state, its telemetry
    and metrics; it says "stage recorder ready" once it holds partitions with the heads
    restored."""
    stage = RecorderStage(key)
    store = ChangelogStore(settings.topic(stage.table))
    ctx = make_context(settings, settings.load_policy())
    ctx.sessions = store
    source = settings.topic(stage.source)
    prometheus = StageMetrics(stage.name, source)
    prometheus.follow(ctx, stage)
    telemetry = StageTelemetry(stage.name, source, prometheus)
    loop = StageLoop(stage, settings, ctx, telemetry, store=store, metrics=prometheus)
    loop.on_ready = lambda held: announce_ready(settings, stage.name, loop.group_id, held)
    return loop


def run_recorder(settings: Settings, key: bytes | None) -> None:
    """Run until stopped; exit 2, committing nothing, if the broker stays away (or a
    retryable error does not clear) past the loop's patience; exit 3 when fenced by a
    newer recorder under the same instance id."""
    loop = build_recorder(settings, key)
    serve_metrics(loop.metrics, settings)
    try:
        asyncio.run(loop.run())
    except RetriesExhausted as exc:
        log.error("%s", exc)
        raise SystemExit(2) from None
    except Fenced as exc:
        log.error("%s", exc)
        raise SystemExit(3) from None
