"""The breaker state of each route's endpoint is exported as an OpenTelemetry gauge."""

from __future__ import annotations

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from pipeline.policy.routing import RouteConfig
from workers.clients.endpoints import EndpointPool


def _gauge(reader: InMemoryMetricReader, name: str) -> dict[str, int]:
    data = reader.get_metrics_data()
    out: dict[str, int] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    for point in metric.data.data_points:
                        out[point.attributes["route"]] = point.value
    return out


async def test_gauge_reports_each_route_breaker() -> None:
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("test")
    # Port 1 on loopback refuses at once: a transport failure, which counts for the breaker.
    pool = EndpointPool("judge", "http://127.0.0.1:1/v1", "m", meter=meter)
    fragile = pool.for_route(RouteConfig(name="fragile", breaker_threshold=1))
    sturdy = pool.for_route(RouteConfig(name="sturdy", breaker_threshold=5))
    try:
        assert _gauge(reader, "groundstream.breaker.judge.open") == {"fragile": 0, "sturdy": 0}
        for endpoint in (fragile, sturdy):
            result = await endpoint.complete({"model": "m", "messages": []}, timeout=2.0)
            assert result.kind.value == "transport"
        assert _gauge(reader, "groundstream.breaker.judge.open") == {"fragile": 1, "sturdy": 0}
    finally:
        await pool.close()
