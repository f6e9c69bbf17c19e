"""Replay's pure half: what was recorded for a candidate, and how a re-run differs from it.

An auditor replays a range of `candidates` through the embedded ladder and compares each
candidate's new outcome with the one `decisions` holds. This module owns everything of
that which needs no Kafka and no model: where a range starts (`parse_position`), each
candidate's recorded trail (`RecordedTrail`, `trails`), the encoder the recording used,
the refusal when a policy would embed with another one (`check_encoder`), and the
comparison (`compare`, `summarize`).

A replay that recomputes geometry with a different encoder compares two different
scoring functions, not two policies: its "changes" would be noise. So it is refused
unless the auditor says that is what they want.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from pipeline.errors import GroundstreamError
from pipeline.trail.records import OUTCOME_STAGE, SUPERSEDED_STAGE

DEADLETTER_TOPIC = "deadletter"
UNRECORDED = "unrecorded"
"""The outcome of a candidate the recording holds no outcome for (in flight, or lost)."""


class EncoderChanged(GroundstreamError, ValueError):
    """The replay's policy embeds with another encoder than the recording did."""


@dataclass(frozen=True, slots=True)
class Position:
    """Where a range of a topic starts or ends: an offset on every partition, or a time."""

    offset: int | None = None
    epoch_ms: int | None = None

    def __post_init__(self) -> None:
        if (self.offset is None) == (self.epoch_ms is None):
            raise ValueError("a position is an offset or a time, exactly one of them")


def message_ids(value: bytes | None, topic: str, partition: int, offset: int) -> tuple[str, ...]:
    """The ids a `candidates` message may be recorded under: its own id when it carries
    one (a dead letter may be named by it too), then its topic/partition/offset."""
    position = f"{topic}/{partition}/{offset}"
    try:
        data = orjson.loads(value) if value else None
    except (orjson.JSONDecodeError, RecursionError):
        data = None
    cid = data.get("id") if isinstance(data, dict) else None
    return (cid, position) if isinstance(cid, str) and cid.strip() else (position,)


def parse_position(text: str) -> Position:
    """`123` (an offset on every partition) or an ISO 8601 time with a zone."""
    value = text.strip()
    if value.isdigit():
        return Position(offset=int(value))
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{text!r} is neither an offset (digits) nor an ISO 8601 time with a zone"
        ) from None
    if when.tzinfo is None:
        raise ValueError(f"{text!r} needs a time zone (e.g. 2026-11-30T10:00:00Z)")
    return Position(epoch_ms=math.floor(when.timestamp() * 1000))


@dataclass(frozen=True, slots=True)
class RecordedTrail:
    """One candidate's recorded decisions: its first record of each stage, its outcome."""

    candidate_id: str
    by_stage: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    outcome: Mapping[str, Any] | None = None

    def record(self, stage: str) -> Mapping[str, Any] | None:
        return self.by_stage.get(stage)

    def time_of(self, stage: str) -> float | None:
        """When `stage` decided, as recorded (epoch seconds); None if it never did."""
        rec = self.by_stage.get(stage)
        return None if rec is None else record_time(rec)

    def last_time(self) -> float | None:
        """The latest time recorded for the candidate: its outcome's, else any stage's."""
        times = [record_time(r) for r in (*self.by_stage.values(), self.outcome) if r]
        return max(times) if times else None


def record_time(record: Mapping[str, Any]) -> float:
    """A record's `decided_at` (ISO, milliseconds) back to epoch seconds."""
    return datetime.fromisoformat(str(record["decided_at"])).timestamp()


def trails(records: Iterable[Mapping[str, Any]]) -> dict[str, RecordedTrail]:
    """Recorded trails by candidate id. The first record of a stage counts (a stage that
    ran a candidate twice wrote the same decision or a superseded one), and the first
    outcome: the ledger's rule."""
    stages: dict[str, dict[str, Mapping[str, Any]]] = {}
    outcomes: dict[str, Mapping[str, Any]] = {}
    for rec in records:
        cid, stage = str(rec.get("candidate_id")), str(rec.get("stage"))
        if stage == SUPERSEDED_STAGE:
            continue
        if stage == OUTCOME_STAGE:
            outcomes.setdefault(cid, rec)
            continue
        stages.setdefault(cid, {}).setdefault(stage, rec)
        if rec.get("topic") == DEADLETTER_TOPIC:
            outcomes.setdefault(cid, rec)  # a dead letter's own record names its end
    return {
        cid: RecordedTrail(cid, stages.get(cid, {}), outcomes.get(cid))
        for cid in stages.keys() | outcomes.keys()
    }


def recorded_encoders(records: Iterable[Mapping[str, Any]]) -> set[str]:
    """Every encoder the recording's geometry stage names in its evidence."""
    found = set()
    for rec in records:
        evidence = rec.get("evidence")
        if rec.get("stage") == "geometry" and isinstance(evidence, Mapping):
            encoder = evidence.get("encoder")
            if isinstance(encoder, str):
                found.add(encoder)
    return found


def check_encoder(recorded: set[str], replay: str, *, allow_change: bool) -> None:
    """Refuse a replay whose encoder differs from the recording's (see module docstring)."""
    other = sorted(recorded - {replay})
    if other and not allow_change:
        raise EncoderChanged(
            f"the recording was scored with encoder {', '.join(other)}, the replay's policy "
            f"uses {replay}: geometry would change with the encoder, not with the policy. "
            "Replay with the recording's encoder, or pass --allow-encoder-change."
        )


def verdict_of(outcome: Mapping[str, Any] | None) -> str:
    """An outcome in one word: `accept`, the escalation action, or `deadletter`."""
    if outcome is None:
        return UNRECORDED
    if outcome.get("topic") == DEADLETTER_TOPIC:
        return "deadletter"
    return str(outcome.get("action"))


@dataclass(frozen=True, slots=True)
class Change:
    """One candidate's recorded and replayed outcome."""

    candidate_id: str
    recorded: str
    replayed: str
    recorded_topic: str | None
    replayed_topic: str | None
    replayed_reason: str = ""
    stages: tuple[str, ...] = ()
    """Stages whose action differs between the recording and the replay."""
    near_cut: tuple[str, ...] = ()
    """Cuts the recorded or the replayed switch score lay within `SCORE_EPSILON` of."""

    @property
    def differs(self) -> bool:
        return (self.recorded, self.recorded_topic) != (self.replayed, self.replayed_topic)

    @property
    def changed(self) -> bool:
        """A different outcome that is not float noise at a cut (see `near_cut_change`)."""
        return self.differs and not self.near_cut

    @property
    def near_cut_change(self) -> bool:
        """A different outcome where a score lay within `SCORE_EPSILON` of a cut: the
        side it fell on depends on the encoder's build, not on the policy."""
        return self.differs and bool(self.near_cut)

    @property
    def transition(self) -> str:
        return f"{self.recorded} → {self.replayed}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "candidate_id": self.candidate_id,
            "changed": self.changed,
            "recorded": self.recorded,
            "replayed": self.replayed,
            "recorded_topic": self.recorded_topic,
            "replayed_topic": self.replayed_topic,
            "replayed_reason": self.replayed_reason,
            "stages_changed": list(self.stages),
            "near_cut": list(self.near_cut),
        }


def compare(
    recorded: RecordedTrail | None, replayed: Iterable[Mapping[str, Any]], candidate_id: str
) -> Change:
    """The recorded outcome of `candidate_id` against the records a replay produced."""
    replay = trails(replayed).get(candidate_id, RecordedTrail(candidate_id))
    before = recorded or RecordedTrail(candidate_id)
    differing = tuple(
        stage
        for stage in sorted(before.by_stage.keys() | replay.by_stage.keys())
        if _action(before.record(stage)) != _action(replay.record(stage))
    )
    return Change(
        candidate_id=candidate_id,
        recorded=verdict_of(before.outcome),
        replayed=verdict_of(replay.outcome),
        recorded_topic=None if before.outcome is None else before.outcome.get("topic"),
        replayed_topic=None if replay.outcome is None else replay.outcome.get("topic"),
        replayed_reason="" if replay.outcome is None else str(replay.outcome.get("reason", "")),
        stages=differing,
        near_cut=tuple(sorted(_near_cut(before) | _near_cut(replay))),
    )


def _near_cut(trail: RecordedTrail) -> set[str]:
    """The cuts a trail's switch record says its score lay within `SCORE_EPSILON` of."""
    evidence = (trail.record("switch") or {}).get("evidence")
    near = evidence.get("near_cut") if isinstance(evidence, Mapping) else None
    return {str(name) for name in near} if isinstance(near, list) else set()


def _action(record: Mapping[str, Any] | None) -> tuple[Any, ...] | None:
    if record is None:
        return None
    return (record.get("action"), record.get("gate"), record.get("served_action"))


@dataclass(frozen=True, slots=True)
class ReplaySummary:
    """What a replay found: totals and changed outcomes by transition."""

    total: int
    changed: int
    transitions: Mapping[str, int]
    unrecorded: int
    near_cut: int = 0
    """Outcomes that differ only where a score lay within `SCORE_EPSILON` of a cut."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "changed": self.changed,
            "near_cut": self.near_cut,
            "unchanged": self.total - self.changed - self.near_cut,
            "unrecorded": self.unrecorded,
            "transitions": dict(self.transitions),
        }


def summarize(changes: Iterable[Change]) -> ReplaySummary:
    items = list(changes)
    moved = [c for c in items if c.changed]
    return ReplaySummary(
        total=len(items),
        changed=len(moved),
        transitions=dict(Counter(c.transition for c in moved).most_common()),
        unrecorded=sum(1 for c in items if c.recorded == UNRECORDED),
        near_cut=sum(1 for c in items if c.near_cut_change),
    )
