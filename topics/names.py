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
    """Candidate answers producers send, keyed by session id: the ladder's input."""
    SCORED = "scored"
    """Envelopes the geometry stage scored, for the switch."""
    CONSISTENCY = "consistency"
    """Envelopes the switch escalated, for the consistency stage."""
    JUDGE = "judge"
    """Envelopes sent to the LLM judge (by the switch or consistency)."""
    RULES = "rules"
    """Envelopes a verdict accepted, for the rules stage: every path to `state` passes it."""
    STATE = "state"
    """Accepted answers: the only topic agent and RAG state should read."""
    FALLBACK = "escalations.fallback"
    """Candidates whose caller should fall back to a safe answer."""
    REGENERATE = "escalations.regenerate"
    """Candidates whose caller should regenerate the answer."""
    REJECT = "escalations.reject"
    """Candidates rejected outright."""
    REVIEW = "escalations.review"
    """Candidates a person decides (`groundstream review`, the dashboard)."""
    DECISIONS = "decisions"
    """Every stage's decision record and each candidate's `outcome`, hash-chained."""
    DEADLETTER = "deadletter"
    """Messages no stage could use: the raw bytes and the reason."""
    CONTROL = "control"
    """The kill switch and reviewers' claims (the first claim wins): one partition, compacted."""
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
    """The recorder's numbered, chained entries over `decisions`, kept until deleted."""
    AUDIT_HEADS = "audit.heads"
    """Internal, compacted: the recorder's chain heads, one per session."""
    DECISIONS_PUBLIC = "decisions.public"
    """The public projection of each decision record (`pipeline.trail.disclosure`)."""

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

    def kept_configs(self) -> dict[str, str]:
        """The settings a topic made by someone else must still have, or lose data: a
        table's compaction (delete would drop its entries with age, and `compact,delete`
        too), no compaction of a stream (it would drop all but the last record of a key:
        candidates of a session, links of the chain), and the retention this spec sets
        (`audit`: kept until deleted)."""
        policy = {"cleanup.policy": "compact" if self.compacted else "delete"}
        return policy | {k: v for k, v in self.configs.items() if k.startswith("retention.")}


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
