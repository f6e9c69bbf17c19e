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
    CONCLUDED = "concluded"
    """Internal: a stage's conclusion on its way to the terminal writer (by candidate id)."""
    OUTCOMES = "outcomes"
    """Internal, compacted: the outcome ledger, one entry per candidate id (first wins)."""
    SESSIONS = "sessions"
    """Internal, compacted: the switch's per-session table (its changelog)."""
    JUDGE_LEDGER = "judge.ledger"
    """Internal, compacted: the judge's table (each partition's spend of the judge budgets
    and its verdict cache), co-partitioned with `judge`."""
    AUDIT = "audit"
    AUDIT_HEADS = "audit.heads"
    DECISIONS_PUBLIC = "decisions.public"

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


_SPECIAL: dict[Topic, TopicSpec] = {
    Topic.CONTROL: TopicSpec(Topic.CONTROL, compacted=True, fixed_partitions=1),
    # The audit chain is the record auditors prove things with: kept until deleted on
    # purpose. Its heads table is the recorder's state, one entry per session.
    Topic.AUDIT: TopicSpec(Topic.AUDIT, configs={"retention.ms": "-1"}),
    Topic.AUDIT_HEADS: TopicSpec(Topic.AUDIT_HEADS, compacted=True),
    # State tables of the ladder: the latest value per key is all a restore reads.
    Topic.OUTCOMES: TopicSpec(Topic.OUTCOMES, compacted=True),
    Topic.SESSIONS: TopicSpec(Topic.SESSIONS, compacted=True),
    Topic.JUDGE_LEDGER: TopicSpec(Topic.JUDGE_LEDGER, compacted=True),
}

TOPIC_SPECS: tuple[TopicSpec, ...] = tuple(_SPECIAL.get(t, TopicSpec(t)) for t in Topic)
