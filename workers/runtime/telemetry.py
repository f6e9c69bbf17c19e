"""Tracing and metrics with the OpenTelemetry SDK.

One span per stage batch, counters of emits by topic, a histogram of batch latency, and a
gauge per endpoint breaker. Spans and metrics are exported over OTLP/HTTP when
GROUNDSTREAM_OTLP_ENDPOINT is set; otherwise nothing leaves the process. Raw answer text
never goes into an attribute.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Iterator, Sequence

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

from workers.stages.kit import Emit

_configured = False


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


class StageTelemetry:
    """Spans and metrics of one stage; `counts` is also kept in-process for the dashboard."""

    def __init__(self, stage: str) -> None:
        self.stage = stage
        self.tracer = trace.get_tracer("groundstream")
        meter = metrics.get_meter("groundstream")
        self._emits = meter.create_counter(
            "groundstream.emits", description="messages sent, by topic"
        )
        self._latency = meter.create_histogram(
            "groundstream.batch.duration", unit="ms", description="stage batch latency"
        )
        self.counts: Counter[str] = Counter()

    @contextlib.contextmanager
    def batch(self, size: int) -> Iterator[None]:
        started = time.perf_counter()
        with self.tracer.start_as_current_span(f"stage.{self.stage}") as span:
            span.set_attribute("groundstream.stage", self.stage)
            span.set_attribute("groundstream.batch_size", size)
            yield
        self._latency.record((time.perf_counter() - started) * 1000.0, {"stage": self.stage})

    def count(self, emits: Sequence[Emit]) -> None:
        for emit in emits:
            self.counts[emit.topic.value] += 1
            self._emits.add(1, {"stage": self.stage, "topic": emit.topic.value})
