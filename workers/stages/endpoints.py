"""Model endpoints of a worker: one `ChatEndpoint` (with its own breaker) per route, so a
route's `breaker_threshold` and `breaker_cooldown_seconds` apply to its own traffic."""

from __future__ import annotations

from pipeline.breaker import BreakerConfig
from pipeline.routing import RouteConfig
from workers.llm_client import ChatEndpoint


class EndpointPool:
    def __init__(self, base_url: str, model: str, api_key: str = "") -> None:
        self.base_url, self.model, self.api_key = base_url, model, api_key
        self._by_route: dict[str, ChatEndpoint] = {}

    @property
    def configured(self) -> bool:
        return bool(self.base_url and self.model)

    def for_route(self, route: RouteConfig) -> ChatEndpoint:
        if route.name not in self._by_route:
            breaker = BreakerConfig(
                threshold=route.breaker_threshold, cooldown_seconds=route.breaker_cooldown_seconds
            )
            self._by_route[route.name] = ChatEndpoint(
                self.base_url, self.model, breaker, api_key=self.api_key or None
            )
        return self._by_route[route.name]

    async def close(self) -> None:
        for endpoint in self._by_route.values():
            await endpoint.close()


def time_left(deadline: float | None, now: float, cap: float) -> float:
    """Seconds a call may take: the stage's cap, or less when the deadline is nearer."""
    return cap if deadline is None else max(0.0, min(cap, deadline - now))
