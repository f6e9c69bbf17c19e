"""Human review's rule: a person's verdict is a decision like any other, and the first
verdict on a parking wins.

Accept sends the candidate through rules to state (rules still apply: a person's accept
overrides review-severity hits they have seen, never a reject-severity rule); reject ends
it in escalations.reject. Reviewers' verdicts arrive as claims on one ordered log (the
`control` topic: `workers.runtime.review`); the first claim for a parking in that order
is the verdict (`first_claim`), whoever else decided at the same moment.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from pipeline.trail.verdict import HumanDecision, Verdict


class HumanVerdict(StrEnum):
    """A person's verdict; where each one leads is the routing table's business."""

    ACCEPT = "accept"
    REJECT = "reject"


def reason(verdict: HumanVerdict, by: str, note: str) -> str:
    text = f"{verdict.value}ed by {by}"
    return f"{text}: {note}" if note else text


@dataclass(frozen=True, slots=True)
class Claim:
    """A reviewer's verdict on one parking of one candidate, before it is routed."""

    claim_id: str
    candidate_id: str
    parked: str
    verdict: str
    by: str
    note: str
    at: float


def first_claim(claims: Iterable[Claim], candidate_id: str, parked: str) -> Claim | None:
    """The claim that wins a parking: the first one in the log's order."""
    return next((c for c in claims if c.candidate_id == candidate_id and c.parked == parked), None)


def decide(claim: Claim) -> Verdict:
    """The winning claim's verdict, with the person's decision for the envelope."""
    verdict = HumanVerdict(claim.verdict)
    return Verdict(
        verdict,
        verdict.value,
        reason(verdict, claim.by, claim.note),
        method="human",
        evidence={"reviewer": claim.by, "note": claim.note},
        human=HumanDecision(verdict.value, claim.by, claim.note, claim.at),
    )
