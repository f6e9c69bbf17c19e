"""The terminal writer's rule: the first conclusion of a candidate id is its outcome.

Each conclusion a rung reaches is checked against the id's entry in the outcome ledger
(`pipeline.trail.ledger.admit`): the first is delivered and becomes the entry; any later one (a
stage that ran a candidate twice, a replica fenced too late) is recorded as a
`superseded` attempt and delivered nowhere. A person's verdict on a candidate parked in
review is the one later outcome the ledger lets through. Why one writer decides this is
argued in `workers.stages.terminal`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.trail.ledger import Admission, Attempt, admit, ledger_entry
from pipeline.trail.records import SUPERSEDED_STAGE, make_record


@dataclass(frozen=True, slots=True)
class Delivery:
    """Deliver (with the id's new ledger `entry`), or record the attempt as `superseded`."""

    entry: dict[str, Any] | None = None
    superseded: dict[str, Any] | None = None


def decide(
    entry: Mapping[str, Any] | None, attempt: Attempt, outcome: Mapping[str, Any], now: float
) -> Delivery:
    """What becomes of one conclusion (`attempt`, with its `outcome` record) given the id's
    ledger `entry` (None: the id has none yet)."""
    if admit(entry, attempt) is Admission.DELIVER:
        return Delivery(
            entry=ledger_entry(
                attempt,
                outcome_hash=str(outcome.get("hash", "")),
                decided_at=str(outcome.get("decided_at", "")),
                outcome=outcome,  # for the agent client (workers.clients.agent)
            )
        )
    assert entry is not None  # admit delivers every id without an entry
    turn = outcome.get("turn", 0)
    record = make_record(
        candidate_id=attempt.candidate_id,
        session_id=str(outcome.get("session_id", "")),
        turn=turn if isinstance(turn, int) else 0,
        stage=SUPERSEDED_STAGE,
        action=str(outcome.get("action", "")),
        write_to_state=False,
        reason=(
            f"superseded: the candidate already ended in {entry.get('topic')} "
            f"at {entry.get('decided_at')}"
        ),
        policy_version=str(outcome.get("policy_version", "")),
        decided_at=now,
        mode=str(outcome.get("mode", "")),
        route=str(outcome.get("route", "")),
        prev_hash=str(outcome.get("hash", "")),
        evidence={
            "attempted_topic": attempt.topic,
            "first_topic": entry.get("topic"),
            "first_outcome_hash": entry.get("outcome_hash"),
            "attempted_reason": outcome.get("reason"),
        },
    )
    return Delivery(superseded=record)
