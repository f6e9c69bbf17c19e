"""What fills the dashboard and acts for it: the Kafka feed of `decisions` (and the control
topic, for the kill-switch banner) and the review / kill-switch operations."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Protocol

from pipeline.policy.document import Policy
from pipeline.stages.review import HumanVerdict
from topics.names import Topic
from topics.schema import Candidate
from workers.runtime.settings import Settings
from workers.web.state import DashboardState

log = logging.getLogger("groundstream.dashboard")

REVIEW_TIMEOUT = 30.0
"""Seconds an operation (a review read, a verdict, the kill switch) may take."""
MAX_TEXT = 4000
"""Characters of each raw text (question, context chunk, answer) a reviewer's page gets."""
TEXTS = "texts"
"""The key of a review item's raw texts: served only to a request with a credential."""

# ------------------------------------------------------------------------ feed --


class Feed(Protocol):
    """What fills the state: `run` feeds it until cancelled."""

    async def run(self, state: DashboardState) -> None: ...

    def status(self) -> dict[str, Any]: ...


class KafkaFeed:
    """Follows `decisions` and `control` without a consumer group, from the beginning.

    A record at an offset already read is skipped, so a restarted consumer or a changed
    partition assignment (both read again from the beginning) never counts twice.
    """

    def __init__(self, settings: Settings, retry: float = 2.0) -> None:
        self.settings = settings
        self.retry = retry
        self.decisions = settings.topic(Topic.DECISIONS)
        self.control = settings.topic(Topic.CONTROL)
        self.connected = False
        self.last_error: str | None = None
        self._next: dict[tuple[str, int], int] = {}
        self._lag = 0

    def status(self) -> dict[str, Any]:
        return {
            "kind": "kafka",
            "topic": self.decisions,
            "connected": self.connected,
            "lag": self._lag,
            "last_error": self.last_error,
        }

    def _behind(self, consumer: Any) -> int:
        """Records of `decisions` not read yet, as of the last fetch."""
        lag = 0
        for tp in consumer.assignment():
            if tp.topic == self.decisions:
                end = consumer.highwater(tp) or 0
                lag += max(0, end - self._next.get((tp.topic, tp.partition), 0))
        return lag

    async def run(self, state: DashboardState) -> None:
        from workers.runtime.kafka_tools import reader

        while True:
            consumer = reader(
                self.settings, self.decisions, self.control, client_id="groundstream-dashboard"
            )
            try:
                await consumer.start()
                self.connected, self.last_error = True, None
                while True:
                    batches = await consumer.getmany(timeout_ms=500, max_records=2000)
                    for tp, records in batches.items():
                        key = (tp.topic, tp.partition)
                        for rec in records:
                            if rec.offset < self._next.get(key, 0):
                                continue
                            self._next[key] = rec.offset + 1
                            if tp.topic == self.control:
                                state.apply_control(rec.key, rec.value)
                            else:
                                state.ingest_bytes(rec.value)
                    self._lag = self._behind(consumer)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the broker may come and go: keep trying
                self.connected, self.last_error = False, type(exc).__name__
                log.warning("decisions feed restarting after %s", type(exc).__name__)
                await asyncio.sleep(self.retry)
            finally:
                self.connected = False
                with contextlib.suppress(Exception):
                    await consumer.stop()


# ---------------------------------------------------------------- operations --


class Operations(Protocol):
    """The state-changing and queue-reading calls, so tests can run without Kafka."""

    async def pending(self) -> list[dict[str, Any]]:
        """Review summaries, each with its raw `TEXTS` (the handler strips them for
        requests without the token)."""
        ...

    async def decide(
        self, candidate_id: str, verdict: HumanVerdict, by: str, note: str
    ) -> dict[str, Any]: ...

    async def kill_switch(self, on: bool, by: str) -> dict[str, Any]: ...


def _cut(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + f" … [{len(text) - MAX_TEXT} more]"


def review_texts(candidate: Candidate) -> dict[str, Any]:
    """What a reviewer reads to decide: the question, the context chunks, the answer."""
    return {
        "question": _cut(candidate.question),
        "context": [_cut(chunk) for chunk in (candidate.context_chunks or ())[:20]],
        "response": _cut(candidate.response),
    }


class KafkaOperations:
    """`workers.stages.review` and `workers.runtime.control` against the configured broker."""

    def __init__(self, settings: Settings, policy: Policy) -> None:
        self.settings, self.policy = settings, policy

    async def pending(self) -> list[dict[str, Any]]:
        from workers.runtime.review import pending

        items = await pending(self.settings, timeout=REVIEW_TIMEOUT / 2)
        return [
            item.summary() | {"gate": item.gate, TEXTS: review_texts(item.envelope.candidate)}
            for item in items
        ]

    async def decide(
        self, candidate_id: str, verdict: HumanVerdict, by: str, note: str
    ) -> dict[str, Any]:
        from workers.runtime.review import decide

        return await decide(self.settings, self.policy, candidate_id, verdict, by, note)

    async def kill_switch(self, on: bool, by: str) -> dict[str, Any]:
        from workers.runtime.control import publish_kill_switch

        topic = self.settings.topic(Topic.CONTROL)
        return await publish_kill_switch(self.settings.kafka(), topic, on, by)
