"""`groundstream outcomes`: the `decisions` topic as one readable line per candidate.

A candidate leaves one decision record per stage it passed, then one `outcome` record
naming the topic it ended in (a message too malformed to be a candidate leaves one
`deadletter` record instead); a later attempt at a candidate that already has its outcome
(the same id produced again, or a batch redone upstream) ends in the terminal writer's
`superseded` record instead. Read raw, ten candidates are thirty-odd JSON lines. This
folds them, in topic order, into ``id [session] geometry:accept → switch:accept →
rules:accept ⇒ state``. Pure: records in, lines out; the Kafka read is `kafka_tools`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline.trail.records import OUTCOME_STAGE, SUPERSEDED_STAGE
from topics.names import Topic

ARROW = " → "
ENDS = " ⇒ "


@dataclass
class Trails:
    """Stage records per candidate until its outcome arrives."""

    steps: dict[str, list[str]] = field(default_factory=dict)
    sessions: dict[str, str] = field(default_factory=dict)
    done: int = 0
    superseded: int = 0
    """Later attempts at candidates that already had their outcome: delivered nowhere."""

    def add(self, record: Any) -> str | None:
        """Fold one decision record; the candidate's line once this is its outcome."""
        if not isinstance(record, Mapping) or not isinstance(record.get("candidate_id"), str):
            return None
        cid = record["candidate_id"]
        self.sessions.setdefault(cid, str(record.get("session_id", "")))
        stage, action = str(record.get("stage", "?")), str(record.get("action", "?"))
        if stage == SUPERSEDED_STAGE:  # this attempt ends here; the first outcome stands
            self.superseded += 1
            first = (record.get("evidence") or {}).get("first_topic", "?")
            steps = self.steps.pop(cid, [])
            return f"{_line(cid, self.sessions.pop(cid), steps)}{ENDS}superseded (ended in {first})"
        if stage != OUTCOME_STAGE:
            self.steps.setdefault(cid, []).append(f"{stage}:{action}")
        if "topic" not in record:  # a stage's record; the outcome (or dead letter) follows
            return None
        self.done += 1
        end = str(record["topic"])
        if end == Topic.DEADLETTER.value:  # unparsable: no outcome record, the reason says why
            end += f" ({record.get('reason', '')})"
        return f"{_line(cid, self.sessions.pop(cid), self.steps.pop(cid, []))}{ENDS}{end}"

    def pending(self) -> list[str]:
        """Candidates seen without an outcome yet (still in the ladder, or waiting)."""
        return [
            f"{_line(cid, self.sessions.get(cid, ''), steps)}{ENDS}(no outcome yet)"
            for cid, steps in self.steps.items()
        ]


def _line(cid: str, session: str, steps: list[str]) -> str:
    return f"{cid} [{session}] {ARROW.join(steps) or '(no stage record)'}"
