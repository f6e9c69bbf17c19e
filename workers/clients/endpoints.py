"""Model endpoints of a worker: one `ChatEndpoint` (with its own breaker) per route, so a
route's `breaker_threshold` and `breaker_cooldown_seconds` apply to its own traffic."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Meter, Observation

from pipeline.policy.breaker import BreakerConfig, BreakerStatus
from pipeline.policy.routing import RouteConfig
from workers.clients.llm import ChatEndpoint


class EndpointPool:
    def __init__(
        self,
        kind: str,
        base_url: str,
        model: str,
        api_key: str = "",
        meter: Meter | None = None,
        max_in_flight: int | None = None,
    ) -> None:
        """`max_in_flight`: calls open at once to the server, over all routes (a local
        server serves a fixed number at a time); None: no limit."""
        self.kind, self.base_url, self.model, self.api_key = kind, base_url, model, api_key
        self._by_route: dict[str, ChatEndpoint] = {}
        self._slots = None if max_in_flight is None else asyncio.Semaphore(max_in_flight)
        (meter or metrics.get_meter("groundstream")).create_observable_gauge(
            f"groundstream.breaker.{kind}.open",
            callbacks=[self._observe],
            description="1 while the route's breaker to this endpoint is open or half-open",
        )

    def _observe(self, _options: CallbackOptions) -> Iterable[Observation]:
        for route, status in self.breakers().items():
            yield Observation(int(status is not BreakerStatus.CLOSED), {"route": route})

    def breakers(self) -> dict[str, BreakerStatus]:
        """Each route's breaker status, for the metrics endpoint and the OTel gauge."""
        return {route: e.breaker_state.status for route, e in self._by_route.items()}

    @property
    def configured(self) -> bool:
        return bool(self.base_url and self.model)

    def for_route(self, route: RouteConfig) -> ChatEndpoint:
        if route.name not in self._by_route:
            breaker = BreakerConfig(
                threshold=route.breaker_threshold, cooldown_seconds=route.breaker_cooldown_seconds
            )
            self._by_route[route.name] = ChatEndpoint(
                self.base_url, self.model, breaker, api_key=self.api_key or None, slots=self._slots
            )
        return self._by_route[route.name]

    async def close(self) -> None:
        for endpoint in self._by_route.values():
            await endpoint.close()


def rate_limit_patience(deadline: float | None, now: float, cap: float) -> float:
    """Seconds a call may wait for call slots and the endpoint's Retry-After: until the
    candidate's deadline, or RATE_LIMIT_PATIENCE_S past the call's own cap without one."""
    if deadline is None:
        return cap + RATE_LIMIT_PATIENCE_S
    return max(0.0, deadline - now)


RATE_LIMIT_PATIENCE_S = 60.0
"""A candidate without a deadline waits at most this long for an endpoint's rate limit."""


def time_left(deadline: float | None, now: float, cap: float) -> float:
    """Seconds a call may take: the stage's cap, or less when the deadline is nearer."""
    return cap if deadline is None else max(0.0, min(cap, deadline - now))
