"""Tracing and metrics: one trace per candidate, Prometheus and OpenTelemetry metrics.

Tracing follows the OpenTelemetry messaging conventions. `groundstream produce` starts each
candidate's trace with a `send` span and puts its `traceparent` in the message headers
(`send_span`); the stages carry that header along. Each stage batch is one `process`
span (kind CONSUMER) linked to the context of every message in it, and each decision gets
a short `decide` span whose parent is its candidate's context, so one trace holds the
candidate's path through every stage. Span attributes are ids, actions, scores and
levels, never question, context or response text.

Spans and OTel metrics leave over OTLP/HTTP only when GROUNDSTREAM_OTLP_ENDPOINT is set;
the Prometheus metrics (workers/runtime/metrics.py) are served only on their opt-in port.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Link, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from pipeline.trail.records import OUTCOME_STAGE
from topics.codec import loads
from topics.names import Topic
from workers.interfaces import Emit, Inbound

if TYPE_CHECKING:  # the produce tool uses this module without the stages' imports
    from workers.runtime.metrics import StageMetrics

_configured = False
_propagator = TraceContextTextMapPropagator()
TRACEPARENT = "traceparent"


def configure(service: str, otlp_endpoint: str = "") -> None:
    """Install SDK providers once per process (exporting only when an endpoint is set)."""
    global _configured
    if _configured:
        return
    resource = Resource.create({"service.name": service})
    provider = TracerProvider(resource=resource)
    if otlp_endpoint:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{otlp_endpoint.rstrip('/')}/v1/traces"))
        )
    trace.set_tracer_provider(provider)
    readers = []
    if otlp_endpoint:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        exporter = OTLPMetricExporter(endpoint=f"{otlp_endpoint.rstrip('/')}/v1/metrics")
        readers.append(PeriodicExportingMetricReader(exporter))
    metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=readers))
    _configured = True


def _messaging(operation: str, kind: str, topic: str) -> dict[str, Any]:
    return {
        "messaging.system": "kafka",
        "messaging.operation.name": operation,
        "messaging.operation.type": kind,
        "messaging.destination.name": topic,
    }


@contextlib.contextmanager
def send_span(topic: str, key: bytes | None) -> Iterator[list[tuple[str, bytes]]]:
    """A candidate's root span (PRODUCER, `send <topic>`); yields the headers that carry
    its context, to put on the message."""
    tracer = trace.get_tracer("groundstream")
    attributes = _messaging("send", "send", topic)
    if key is not None:
        attributes["messaging.kafka.message.key"] = key.decode("utf-8", "replace")
    # A fresh root: each candidate is its own trace, whatever span is current.
    with tracer.start_as_current_span(
        f"send {topic}",
        context=otel_context.Context(),
        kind=SpanKind.PRODUCER,
        attributes=attributes,
    ):
        carrier: dict[str, str] = {}
        _propagator.inject(carrier)
        yield [(k, v.encode("ascii")) for k, v in carrier.items()]


def _message_context(item: Inbound) -> otel_context.Context | None:
    for key, value in item.headers:
        if key == TRACEPARENT:
            ctx = _propagator.extract({TRACEPARENT: value.decode("ascii", "replace")})
            if trace.get_current_span(ctx).get_span_context().is_valid:
                return ctx
    return None


class StageTelemetry:
    """Spans and metrics of one stage worker."""

    def __init__(self, stage: str, topic: str, prometheus: StageMetrics | None = None) -> None:
        self.stage, self.topic, self.prometheus = stage, topic, prometheus
        self.tracer = trace.get_tracer("groundstream")
        meter = metrics.get_meter("groundstream")
        self._emits = meter.create_counter(
            "groundstream.emits", description="messages sent, by topic"
        )
        self._latency = meter.create_histogram(
            "groundstream.batch.duration", unit="ms", description="stage batch latency"
        )

    @contextlib.contextmanager
    def batch(self, items: Sequence[Inbound]) -> Iterator[None]:
        """The batch's `process` span, linked to every message's context; times the batch."""
        contexts = [_message_context(item) for item in items]
        links = [
            Link(trace.get_current_span(ctx).get_span_context())
            for ctx in contexts
            if ctx is not None
        ]
        attributes = _messaging("process", "process", self.topic)
        attributes["messaging.batch.message_count"] = len(items)
        attributes["groundstream.stage"] = self.stage
        started = time.perf_counter()
        with self.tracer.start_as_current_span(
            f"process {self.topic}", kind=SpanKind.CONSUMER, links=links, attributes=attributes
        ):
            yield
        seconds = time.perf_counter() - started
        self._latency.record(seconds * 1000.0, {"stage": self.stage})
        if self.prometheus is not None:
            self.prometheus.observe_batch(len(items), seconds)
            for item in items:
                if item.topic == self.topic:
                    self.prometheus.processed(item.partition, item.offset)

    def record(self, items: Sequence[Inbound], emits: Sequence[Emit]) -> None:
        """Count the batch's emits and decisions; one `decide` span per decision record,
        child of its candidate's context (matched by trace id)."""
        parents: dict[str, otel_context.Context] = {}
        for item in items:
            ctx = _message_context(item)
            if ctx is not None:
                trace_id = trace.get_current_span(ctx).get_span_context().trace_id
                parents[format(trace_id, "032x")] = ctx
        for emit in emits:
            self._emits.add(1, {"stage": self.stage, "topic": emit.topic.value})
            if self.prometheus is not None:
                self.prometheus.count_emit(emit.topic.value)
            if emit.topic is not Topic.DECISIONS:
                continue
            record = loads(emit.value)
            if self.prometheus is not None:
                self.prometheus.observe_record(record)
            parent = parents.get(record.get("trace_id") or "")
            if parent is not None and record.get("stage") != OUTCOME_STAGE:
                self._decide_span(record, parent)

    def _decide_span(self, record: dict[str, Any], parent: otel_context.Context) -> None:
        end = time.time_ns()
        ms = (record.get("timings") or {}).get(self.stage, 0.0)
        attributes = {
            "groundstream.stage": self.stage,
            "groundstream.candidate_id": record.get("candidate_id"),
            "groundstream.session_id": record.get("session_id"),
            "groundstream.action": record.get("action"),
            "groundstream.served_action": record.get("served_action"),
            "groundstream.score": record.get("score"),
            "groundstream.level": record.get("level"),
            "groundstream.mode": record.get("mode"),
        }
        span = self.tracer.start_span(
            "decide",
            context=parent,
            start_time=end - int(ms * 1_000_000),
            attributes={k: v for k, v in attributes.items() if v is not None},
        )
        span.end(end_time=end)
