"""The Kafka shell: one faust app per stage, all driven by one run loop.

The loop takes a batch of raw events (`take_events`, so acks are held until the batch is
done), hands it to the stage, sends every emit, and waits for the broker to acknowledge
all of them before the batch is acked — at-least-once: an input offset is committed only
after its outputs are durable. A stage error dead-letters the batch's raw messages with
the reason instead of crashing the worker. Agents run with concurrency 1 (faust #606).
"""

from __future__ import annotations

import asyncio
import logging

import faust

from topics.codec import loads
from topics.names import MAX_MESSAGE_BYTES, Topic
from workers.runtime.control import ControlListener
from workers.runtime.metrics import StageMetrics, expose
from workers.runtime.settings import Settings
from workers.runtime.telemetry import StageTelemetry
from workers.stages.kit import Emit, Inbound, Stage, StageContext, deadletter

log = logging.getLogger("groundstream.worker")


def broker_url(servers: str) -> str:
    return ";".join(f"kafka://{s.strip()}" for s in servers.split(","))


def build_app(
    stage: Stage, settings: Settings, ctx: StageContext, *, stateful: bool = False
) -> faust.App:
    """A faust app (its own consumer group) running `stage` over its source topic."""
    settings.data_path(stage.name).mkdir(parents=True, exist_ok=True)
    app = faust.App(
        f"{settings.topic_prefix}groundstream-{stage.name}",
        broker=broker_url(settings.bootstrap_servers),
        store="memory://",
        autodiscover=False,
        datadir=str(settings.data_path(stage.name)),
        web_enabled=settings.web_enabled,
        web_host=settings.web_host,  # faust would otherwise listen on every interface
        web_port=settings.web_port,
        web_bind=settings.web_host,
        topic_partitions=settings.partitions,
        topic_replication_factor=settings.replication,
        producer_max_request_size=MAX_MESSAGE_BYTES,
        consumer_max_fetch_size=MAX_MESSAGE_BYTES,
        producer_acks=-1,
        stream_wait_empty=False,
        table_standby_replicas=0,
    )
    out = {
        t: app.topic(
            settings.topic(t),
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
        )
        for t in Topic
    }
    source = out[stage.source]
    # Telemetry hooks: Prometheus /metrics (opt-in port), spans per batch and per decision.
    prometheus = StageMetrics(stage.name, settings.topic(stage.source))
    prometheus.follow(ctx, stage)
    telemetry = StageTelemetry(stage.name, settings.topic(stage.source), prometheus)
    expose(app, prometheus, settings)
    if stateful:
        # Keyed by the raw session-id bytes, like the source topic, so the producer's
        # partitioner puts each changelog entry on its session's partition.
        ctx.sessions = app.Table(
            "sessions",
            default=None,
            # key_type too: without it faust sets the changelog key serializer to json,
            # and recovery after a restart fails to decode the raw session-id keys.
            key_type=bytes,
            schema=faust.Schema(key_type=bytes, key_serializer="raw", value_serializer="json"),
            partitions=settings.partitions,
            use_partitioner=True,
        )

    async def send_all(emits: list[Emit]) -> None:
        futures = [
            await out[e.topic].send(key=e.key, value=e.value, headers=list(e.headers))
            for e in emits
        ]
        await asyncio.gather(*futures)

    @app.agent(source, concurrency=1, name=f"{stage.name}-agent")
    async def run(stream: faust.StreamT) -> None:
        # Not before the control topic is read: the first batch would meet the startup hold.
        await listener.wait_caught_up(listener.read_timeout)
        async for events in stream.take_events(settings.batch_size, within=settings.batch_within):
            batch = [_inbound(e) for e in events]
            with telemetry.batch(batch):
                try:
                    emits = await stage.process(batch, ctx)
                except Exception as exc:  # never crash on a message: park the batch, keep going
                    log.exception("stage %s failed on a batch of %d", stage.name, len(batch))
                    reason = f"stage error: {type(exc).__name__}"
                    emits = [
                        e
                        for item in batch
                        for e in deadletter(item, reason, stage.name, ctx.clock())
                    ]
                telemetry.record(batch, emits)
                await send_all(emits)

    if stateful:
        # The same app follows the decisions stream (co-partitioned with its source by the
        # session key), so an escalation decided further up the ladder latches the turn too.
        @app.agent(out[Topic.DECISIONS], concurrency=1, name=f"{stage.name}-outcomes")
        async def follow_outcomes(stream: faust.StreamT) -> None:
            async for events in stream.take_events(
                settings.batch_size, within=settings.batch_within
            ):
                for event in events:
                    try:
                        record = loads(event.value)
                    except ValueError:
                        continue
                    if isinstance(record, dict):
                        stage.observe(record, ctx)  # type: ignore[attr-defined]

    listener = ControlListener(
        settings.bootstrap_servers,
        settings.topic(Topic.CONTROL),
        ctx.control,
        settings.control_poll,
    )

    @app.task
    async def follow_control() -> None:
        await listener.start()

    return app


def _inbound(event: faust.EventT) -> Inbound:
    message = event.message
    headers = message.headers or []
    items = headers.items() if isinstance(headers, dict) else headers
    return Inbound(
        key=event.key,
        value=event.value,
        topic=message.topic,
        partition=message.partition,
        offset=message.offset,
        headers=tuple((k, v) for k, v in items),
    )


def run_worker(app: faust.App, loglevel: str) -> None:
    """Run a faust app in this process until it is stopped (SIGINT/SIGTERM)."""
    worker = faust.Worker(app, loglevel=loglevel, quiet=True)
    worker.spinner = None  # its escape codes would garble the ready line (ready.py)
    worker.execute_from_commandline()
