"""Who may end a candidate where, and who may sign which decision record.

The terminal writer delivers a conclusion only when the stage that signed it holds the
authority for the conclusion's terminal topic. The authority is what the ladder already
says, written out once as a table so the writer can check it:

* Only ``rules`` concludes to ``state``: every path to state passes the rules
  (:mod:`pipeline.bounds.authority`: a person's accept, a judge's yes and the switch's
  accept all go on to rules, never to state).
* Each rung concludes to the escalations its own rows of the routing table
  (``workers/stages/routes.py``) send a candidate to, plus what every rung may serve:
  ``escalations.fallback`` (the safe path ``off`` and ``shadow`` serve every terminal
  outcome on), ``escalations.review`` (the deadline gate, and the kill switch's row for an
  outcome bound for state) and ``deadletter`` (a message it could not use, or a candidate
  that failed alone).
* ``review`` (a person, through the CLI or the dashboard) concludes only a reject, or the
  safe path; its accept goes on to rules. It reads no topic message by message, so it
  never dead-letters.
* The terminal writer, the recorder and ``attach`` conclude nothing through the writer.

So a taken-over geometry pod, the stage that parses untrusted input, can end a candidate
on ``deadletter``, ``escalations.fallback`` or ``escalations.review`` — what it may do
anyway — and never put one in ``state``. ``tests/unit/test_conclusion_authority.py``
derives the table from the routing table and runs the real stages against it.

Decision records are signed by the stage they name (`stage`), except the two the
terminal writer writes for a candidate (``outcome``, ``superseded``) and the dead letters
``attach`` writes itself (their ``outcome``, bound for ``deadletter``).

Pure: strings only (``pipeline`` does not import ``topics``), no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = [
    "MAY_CONCLUDE",
    "SIGNERS",
    "TERMINAL_TOPICS",
    "may_conclude",
    "may_record",
    "refusal",
]

STATE = "state"
FALLBACK = "escalations.fallback"
REGENERATE = "escalations.regenerate"
REJECT = "escalations.reject"
REVIEW = "escalations.review"
DEADLETTER = "deadletter"

TERMINAL_TOPICS: frozenset[str] = frozenset(
    {STATE, FALLBACK, REGENERATE, REJECT, REVIEW, DEADLETTER}
)
"""The logical topics a candidate ends in (``topics.names.TERMINAL``, as strings)."""

_EVERY_RUNG = frozenset({FALLBACK, REVIEW, DEADLETTER})
"""What every rung that reads its topic message by message may conclude: the safe path,
a person (deadline, kill switch), a dead letter."""

MAY_CONCLUDE: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        "geometry": _EVERY_RUNG,
        "switch": _EVERY_RUNG | {REGENERATE, REJECT},
        "consistency": _EVERY_RUNG,
        "judge": _EVERY_RUNG | {REGENERATE, REJECT},
        "rules": _EVERY_RUNG | {STATE, REJECT},
        "review": frozenset({REJECT, FALLBACK}),
    }
)
"""Signer → the terminal topics it may conclude a candidate to."""

TERMINAL_WRITER = "terminal"
ATTACH = "attach"
OUTCOME = "outcome"
SUPERSEDED = "superseded"

SIGNERS: tuple[str, ...] = (*MAY_CONCLUDE, TERMINAL_WRITER, ATTACH)
"""Every process that signs what it writes, each with a key of its own (`review` is
the person's tool: the CLI and the dashboard)."""


def may_conclude(signer: str, topic: str) -> bool:
    """Whether `signer` may end a candidate on terminal `topic`."""
    return topic in MAY_CONCLUDE.get(signer, frozenset())


def refusal(signer: str | None, topic: str) -> str | None:
    """Why the writer must not deliver a conclusion for `topic` signed by `signer` (None:
    unchecked, no keys configured), or None when it may. One line each."""
    if topic not in TERMINAL_TOPICS:
        return f"conclusion names {topic!r}, not a terminal topic"
    if signer is not None and not may_conclude(signer, topic):
        return f"{signer} may not conclude to {topic}"
    return None


def may_record(signer: str, record: Mapping[str, object]) -> bool:
    """Whether a decision record signed by `signer` is one `signer` may write: the stage
    it names, the writer's outcome and superseded records, attach's own dead letters."""
    stage = record.get("stage")
    if stage == signer:
        return True
    if stage in (OUTCOME, SUPERSEDED) and signer == TERMINAL_WRITER:
        return True
    return stage == OUTCOME and signer == ATTACH and record.get("topic") == DEADLETTER
