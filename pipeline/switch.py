"""GroundingSwitch (stage 2): turns a geometric score into a control action.

Geometry answers "did the answer come from the source?"; the switch answers "what should
the system do with that signal?". SGI has three zones (accept / escalate / on_reject),
DGI is binary (accept / on_reject), and anything non-geometric or unscorable escalates.
`write_to_state` is true only for accept. Pure: no model, no I/O, microseconds per call.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from pipeline.check import Check, Level, Score, check
from pipeline.errors import PolicyError
from pipeline.grounding import GroundingScore
from pipeline.results import DGIResult, SGIResult
from pipeline.thresholds import DGI_PASS, SGI_REVIEW, SGI_STRONG_PASS, Thresholds


class SwitchAction(StrEnum):
    """The control action; a str so it goes into JSON and logs unchanged."""

    ACCEPT = "accept"
    REJECT = "reject"
    FALLBACK = "fallback"
    REGENERATE = "regenerate"
    ESCALATE = "escalate"


_GEOMETRIC = frozenset({"sgi", "dgi", "grounding"})

ON_REJECT_ACTIONS = frozenset(
    {SwitchAction.FALLBACK, SwitchAction.REJECT, SwitchAction.REGENERATE, SwitchAction.ESCALATE}
)
"""What clearly negative geometry may do; accept is never one of them."""


def parse_on_reject(value: object, field: str = "on_reject") -> SwitchAction:
    """The on_reject action named by `value`, or a PolicyError naming `field`."""
    allowed = ", ".join(sorted(a.value for a in ON_REJECT_ACTIONS))
    try:
        action = SwitchAction(value)
    except ValueError:
        raise PolicyError(field, value, f"one of {allowed}") from None
    if action not in ON_REJECT_ACTIONS:
        raise PolicyError(field, value, f"one of {allowed}")
    return action


@dataclass(frozen=True, slots=True)
class SwitchDecision:
    """What the switch decided and why; `check` is the audit verdict it was based on."""

    action: SwitchAction
    write_to_state: bool
    reason: str
    check: Check
    score: float
    method: str
    level: str


class GroundingSwitch:
    """Routes a score to accept / on_reject / escalate under one set of thresholds."""

    __slots__ = ("_on_reject", "_thresholds")

    def __init__(
        self,
        accept_threshold_sgi: float = SGI_STRONG_PASS,
        reject_threshold_sgi: float = SGI_REVIEW,
        accept_threshold_dgi: float = DGI_PASS,
        on_reject: str | SwitchAction = SwitchAction.FALLBACK,
    ) -> None:
        if reject_threshold_sgi > accept_threshold_sgi:
            raise PolicyError(
                "reject_threshold_sgi",
                reject_threshold_sgi,
                f"a value <= accept_threshold_sgi ({accept_threshold_sgi})",
            )
        self._thresholds = Thresholds(
            accept_threshold_sgi, reject_threshold_sgi, accept_threshold_dgi
        )
        self._on_reject = parse_on_reject(on_reject)

    @classmethod
    def from_thresholds(
        cls, thresholds: Thresholds, on_reject: str | SwitchAction = SwitchAction.FALLBACK
    ) -> GroundingSwitch:
        switch = cls(
            thresholds.sgi_strong_pass, thresholds.sgi_review, thresholds.dgi_pass, on_reject
        )
        switch._thresholds = thresholds  # keeps the grounding cuts too
        return switch

    @property
    def thresholds(self) -> Thresholds:
        return self._thresholds

    @property
    def on_reject(self) -> SwitchAction:
        return self._on_reject

    def __repr__(self) -> str:
        t = self._thresholds
        return (
            f"GroundingSwitch(accept_threshold_sgi={t.sgi_strong_pass}, "
            f"reject_threshold_sgi={t.sgi_review}, accept_threshold_dgi={t.dgi_pass}, "
            f"on_reject={self._on_reject.value!r})"
        )

    def __call__(self, score: Score | Check) -> SwitchDecision:
        return self.decide(score)

    def decide(self, score: Score | Check) -> SwitchDecision:
        """The action for one score; see the module docstring for the zones."""
        if isinstance(score, Check) and score.method in _GEOMETRIC:
            verdict = _recheck(score, self._thresholds)
        else:
            verdict = check(score, self._thresholds)
        if verdict.method not in _GEOMETRIC:
            return self._make(
                SwitchAction.ESCALATE,
                f"{verdict.method} is not a geometric score; later stages decide",
                verdict,
            )
        if verdict.escalate or verdict.level is Level.REVIEW:
            return self._make(
                SwitchAction.ESCALATE, f"ambiguous geometry: {verdict.detail}", verdict
            )
        if verdict.level is Level.OK:
            return self._make(SwitchAction.ACCEPT, f"grounded: {verdict.detail}", verdict)
        return self._make(
            self._on_reject,
            f"ungrounded: {verdict.detail}; on_reject={self._on_reject.value}",
            verdict,
        )

    @staticmethod
    def _make(action: SwitchAction, reason: str, verdict: Check) -> SwitchDecision:
        return SwitchDecision(
            action=action,
            write_to_state=action is SwitchAction.ACCEPT,
            reason=reason,
            check=verdict,
            score=verdict.score,
            method=verdict.method,
            level=verdict.level.value,
        )


def _recheck(verdict: Check, thresholds: Thresholds) -> Check:
    """Re-derive a geometric Check under this switch's thresholds, so both always agree."""
    if verdict.level is Level.REVIEW and verdict.escalate and verdict.label == "Cannot be scored":
        return verdict
    if verdict.method == "grounding":
        placeholder = SGIResult(0.0, 0.0, 0.0, 0, 1)
        return check(GroundingScore(verdict.score, placeholder, {}), thresholds)
    result: SGIResult | DGIResult = (
        SGIResult(verdict.score, 0.0, 0.0, 0, 1)
        if verdict.method == "sgi"
        else DGIResult(verdict.score, 0.0)
    )
    return check(result, thresholds)
