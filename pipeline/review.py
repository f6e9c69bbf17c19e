"""Human review (stage 6): a person's verdict is a decision like any other.

Accept sends the candidate through rules to state (rules still apply: a person's accept
overrides review-severity hits they have seen, never a reject-severity rule); reject ends
it in escalations.reject.
"""

from __future__ import annotations

from enum import StrEnum


class HumanVerdict(StrEnum):
    """A person's verdict; where each one leads is the routing table's business."""

    ACCEPT = "accept"
    REJECT = "reject"


def reason(verdict: HumanVerdict, by: str, note: str) -> str:
    text = f"{verdict.value}ed by {by}"
    return f"{text}: {note}" if note else text
