"""Topic names and specs: one Enum of logical topics, each with a frozen spec.

Every physical name is `<prefix><logical name>`; the prefix (GROUNDSTREAM_TOPIC_PREFIX)
lets tests and tenants isolate themselves on one cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

MAX_MESSAGE_BYTES = 8 * 1024 * 1024
"""Broker-side limit on our topics: large enough that an oversize candidate can still be
dead-lettered whole instead of being refused by the broker."""


class Topic(StrEnum):
    """Logical topics of the ladder."""

    CANDIDATES = "candidates"
    SCORED = "scored"
    CONSISTENCY = "consistency"
    JUDGE = "judge"
    RULES = "rules"
    STATE = "state"
    FALLBACK = "escalations.fallback"
    REGENERATE = "escalations.regenerate"
    REJECT = "escalations.reject"
    REVIEW = "escalations.review"
    DECISIONS = "decisions"
    DEADLETTER = "deadletter"
    CONTROL = "control"

    def full(self, prefix: str = "") -> str:
        return f"{prefix}{self.value}"


TERMINAL: tuple[Topic, ...] = (
    Topic.STATE,
    Topic.FALLBACK,
    Topic.REGENERATE,
    Topic.REJECT,
    Topic.REVIEW,
    Topic.DEADLETTER,
)
"""Topics a candidate ends in, each with an `outcome` decision record; the one definition
of the set, in the order reports and the dashboard list them."""


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """How a topic is created: partitions come from settings unless fixed here."""

    topic: Topic
    compacted: bool = False
    fixed_partitions: int | None = None
    configs: dict[str, str] = field(default_factory=dict)

    def kafka_configs(self) -> dict[str, str]:
        base = {"max.message.bytes": str(MAX_MESSAGE_BYTES)}
        if self.compacted:
            base["cleanup.policy"] = "compact"
        return base | self.configs


TOPIC_SPECS: tuple[TopicSpec, ...] = tuple(
    TopicSpec(t, compacted=True, fixed_partitions=1) if t is Topic.CONTROL else TopicSpec(t)
    for t in Topic
)
