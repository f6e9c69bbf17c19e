"""What a rung decides about one candidate: the `Verdict` the adapter hands to `conclude`.

`routing` is the key the routing table (`workers.stages.routes`) maps to the next topic;
`action` is what the decision record says the stage did. They differ where a stage speaks
another's vocabulary (a judge's yes is recorded as `accept`, a gate as `escalate` and
routed `hold`). The routing keys that are not an enum of `pipeline/` are named here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.scores.results import DGIResult, GroundingScore, SGIResult

HOLD = "hold"
"""A gate stopped automatic handling: a person decides (escalations.review)."""
SCORED = "scored"
"""Geometry scored the candidate; the switch decides."""
SKIP = "skip"
"""Geometry under mode `off`: no verification, straight to the safe path."""
ASK_JUDGE = "ask_judge"
"""Switch: geometry was not conclusive and a judge is configured (`pipeline.policy.deferral`)."""
PASS = "pass"
"""Consistency: a committed meaning the response agrees with; on to rules."""
DEFER = "defer"
"""Consistency: anything else (competing meanings, unresolved, budget, no sampler)."""


@dataclass(frozen=True, slots=True)
class HumanDecision:
    """A person's verdict as the envelope carries it on (rules honour it as an override)."""

    verdict: str
    by: str
    note: str
    at: float


@dataclass(frozen=True, slots=True)
class Verdict:
    """One rung's decision about one candidate: everything its decision record and its
    routing need, and what it adds to the envelope (`scored`, `human`)."""

    routing: str
    action: str
    reason: str
    score: float | None = None
    method: str | None = None
    level: str | None = None
    gate: str | None = None
    evidence: Mapping[str, Any] | None = None
    breaker: Mapping[str, str] | None = None
    thresholds: Mapping[str, float] | None = None
    scored: SGIResult | DGIResult | GroundingScore | None = None
    """Geometry: the score the envelope carries on to the switch."""
    human: HumanDecision | None = None
    """Review: the person's verdict the envelope carries on to rules."""


def hold(reason: str, gate: str, **fields: Any) -> Verdict:
    """Fail closed: a gate stopped automatic handling, so a person decides."""
    return Verdict(HOLD, "escalate", reason, gate=gate, **fields)


DEADLINE = hold("deadline", "deadline")
"""An expired deadline is never accepted."""
