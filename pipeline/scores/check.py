"""check(): the human-readable verdict on a geometric score, and the one home of its wording.

`check` and `GroundingSwitch` read the same `Thresholds`, so the audit text and the
routing action always agree (seed 000, "Relationship to check()"). Given no thresholds,
this pure function uses the seed's cuts; `pipeline.scores.check` (from `pipeline.policy.defaults`)
uses the shipped policy's, as the workers do. A non-geometric
score (for example a consistency score) is passed through as `review` and escalated:
geometry does not reinterpret another stage's signal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from pipeline.bounds.thresholds import Thresholds
from pipeline.scores.grounding import LONG_FORM
from pipeline.scores.results import DGIResult, GroundingScore, SGIResult


class Level(StrEnum):
    """How worried a reader should be."""

    OK = "ok"
    REVIEW = "review"
    RISK = "risk"


@dataclass(frozen=True, slots=True)
class Check:
    """A verdict with its audit text. `escalate` is true when geometry cannot settle it."""

    label: str
    level: Level
    message: str
    detail: str
    method: str
    score: float
    escalate: bool

    def render(self) -> str:
        """One line for the audit trail: level, method and score, label, explanation."""
        return (
            f"[{self.level.value.upper()}] {self.method.upper()}={self.score:.3f} "
            f"{self.label}: {self.message} ({self.detail})"
        )


Score = SGIResult | DGIResult | GroundingScore


def _cut(value: float) -> str:
    """A threshold for the audit text: at most four decimals, at least one (2.0, 0.4543);
    an infinite accept cut (accept nothing) reads "inf", as in the policy file."""
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    text = f"{value:.4f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


def check(score: Score | Check, thresholds: Thresholds | None = None) -> Check:
    """The canonical check of a score under `thresholds` (the seed's cuts by default)."""
    t = thresholds or Thresholds.seed()
    if isinstance(score, Check):
        return score
    if not isinstance(score, SGIResult | DGIResult | GroundingScore):
        kind = type(score).__name__
        raise TypeError(f"check() takes SGIResult, DGIResult, GroundingScore or Check, not {kind}")
    if score.flagged:
        out_of_range = isinstance(score, GroundingScore) and score.out_of_range
        return Check(
            "Cannot be scored",
            Level.REVIEW,
            "The model was not fitted on answers like this one; a later stage must decide."
            if out_of_range
            else "The geometric score is not usable; a later stage must decide.",
            score.flag_reason,
            score.method,
            score.value,
            True,
        )
    if isinstance(score, SGIResult):
        return _check_sgi(score.value, t)
    if isinstance(score, DGIResult):
        return _check_dgi(score.value, t)
    return _check_grounding(score.value, t, bool(score.features.get(LONG_FORM, 0.0)))


def _check_sgi(value: float, t: Thresholds) -> Check:
    if value >= t.sgi_strong_pass:
        return Check(
            "Supported by the document",
            Level.OK,
            "The response sits closer to the context than to the question.",
            f"SGI {value:.3f} >= strong pass {_cut(t.sgi_strong_pass)}",
            "sgi",
            value,
            False,
        )
    if value >= t.sgi_review:
        return Check(
            "Partly supported",
            Level.REVIEW,
            "Geometry is ambiguous: the response is about as close to the question as to "
            "the context.",
            f"SGI {value:.3f} in [{_cut(t.sgi_review)}, {_cut(t.sgi_strong_pass)})",
            "sgi",
            value,
            True,
        )
    return Check(
        "Not supported by the document",
        Level.RISK,
        "The response has drifted away from the context it was given.",
        f"SGI {value:.3f} < review {_cut(t.sgi_review)}",
        "sgi",
        value,
        False,
    )


def _check_dgi(value: float, t: Thresholds) -> Check:
    if value >= t.dgi_pass:
        return Check(
            "Moves like a grounded answer",
            Level.OK,
            "With no source, the answer's displacement follows the grounded reference direction.",
            f"DGI {value:.3f} >= pass {_cut(t.dgi_pass)}",
            "dgi",
            value,
            False,
        )
    return Check(
        "Possibly fabricated",
        Level.RISK,
        "With no source, the answer's displacement does not follow grounded answers.",
        f"DGI {value:.3f} < pass {_cut(t.dgi_pass)}",
        "dgi",
        value,
        False,
    )


LONG_FORM_CUT = "long-form "
"""How a grounding check's detail names the long-form cuts (`Thresholds.grounding_cuts`),
so a switch re-deriving the check from its record applies the same pair."""


def _check_grounding(value: float, t: Thresholds, long_form: bool = False) -> Check:
    accept, review = t.grounding_cuts(long_form)
    kind = LONG_FORM_CUT if long_form else ""
    if value >= accept:
        return Check(
            "Supported by the document",
            Level.OK,
            "Geometry, source and claim support together say the response comes from the context.",
            f"P(grounded) {value:.3f} >= {kind}accept {_cut(accept)}",
            "grounding",
            value,
            False,
        )
    if value >= review:
        return Check(
            "Partly supported",
            Level.REVIEW,
            "The context does not settle the response either way; a later stage must decide.",
            f"P(grounded) {value:.3f} in {kind}[{_cut(review)}, {_cut(accept)})",
            "grounding",
            value,
            True,
        )
    return Check(
        "Not supported by the document",
        Level.RISK,
        "What the response claims is not backed by the context it was given.",
        f"P(grounded) {value:.3f} < {kind}review {_cut(review)}",
        "grounding",
        value,
        False,
    )
