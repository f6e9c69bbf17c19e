"""The outcome ledger's rule: the first outcome of a candidate id wins.

Stages inside the ladder are allowed to run a candidate twice (a worker killed after its
outputs were written but before its input offsets were, a replica fenced mid-batch), and a
second run need not decide the same way: a judge answers differently, a breaker has
opened, the session latch has moved. Only the terminal writer turns a stage's conclusion
into a terminal message and an `outcome` record, and it asks `admit` first, against the
ledger entry it keeps per candidate id (a compacted topic, so the rule survives restarts).

One exception, and only one: a candidate parked in `escalations.review` waits for a
person, and a person's verdict is the one later outcome that may follow it. The review
queue is the ladder asking a person; the verdict is the answer it asked for. Should that
verdict's path park the candidate in review again (rules hold what the person has not
seen), it waits for a person again; any other outcome is final.

Pure: no Kafka, no clock. The entry is a plain dict because it travels on a topic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

REVIEW_TOPIC = "escalations.review"


class Admission(StrEnum):
    """What the terminal writer does with one conclusion."""

    DELIVER = "deliver"
    """First outcome of this id (or a person's verdict on a parked one): write it."""
    SUPERSEDED = "superseded"
    """The id already has its outcome: record the attempt on `decisions`, deliver nothing."""


@dataclass(frozen=True, slots=True)
class Attempt:
    """One conclusion a stage reached for a candidate."""

    candidate_id: str
    topic: str
    human: bool = False
    """True when the conclusion carries a person's verdict (the review path)."""


def admit(entry: Mapping[str, Any] | None, attempt: Attempt) -> Admission:
    """Whether `attempt` may reach its terminal topic, given the id's ledger `entry`."""
    if entry is None:
        return Admission.DELIVER
    if entry.get("topic") == REVIEW_TOPIC and attempt.human:
        return Admission.DELIVER
    return Admission.SUPERSEDED


def ledger_entry(
    attempt: Attempt,
    *,
    outcome_hash: str,
    decided_at: str,
    outcome: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ledger value written with a delivered outcome. With the `outcome` record itself,
    an agent's client answers "what became of id X" from the compacted ledger alone."""
    entry = {
        "candidate_id": attempt.candidate_id,
        "topic": attempt.topic,
        "human": attempt.human,
        "outcome_hash": outcome_hash,
        "decided_at": decided_at,
    }
    if outcome is not None:
        entry["outcome"] = dict(outcome)
    return entry
