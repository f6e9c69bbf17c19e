"""GroundingSwitch (the rung after geometry): turns a geometric score into a control action.

Geometry answers "did the answer come from the source?"; the switch answers "what should
the system do with that signal?". SGI has three zones (accept / escalate / on_reject),
DGI is binary (accept / on_reject), and anything non-geometric or unscorable escalates.
`write_to_state` is true only for accept. Pure: no model, no I/O, microseconds per call.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from pipeline.bounds.thresholds import Thresholds
from pipeline.errors import PolicyError
from pipeline.scores.check import LONG_FORM_CUT, Check, Level, Score, check
from pipeline.scores.grounding import LONG_FORM
from pipeline.scores.results import DGIResult, GroundingScore, SGIResult


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
    near_cut: tuple[str, ...] = ()
    """The cuts the score lay within `SCORE_EPSILON` of (`Thresholds.near_cuts`): the side
    of the cut it fell on is float noise, and the record says so."""


class GroundingSwitch:
    """Routes a score to accept / on_reject / escalate under one set of thresholds.

    A cut left out (None) comes from `base()`: the seed's cuts here; the public
    `pipeline.GroundingSwitch` overrides `base` with the active policy's, so a library
    user routes as the workers do. on_reject is the caller's choice (a policy sets it per
    route), `fallback` unless given.
    """

    __slots__ = ("_on_reject", "_thresholds")

    def __init__(
        self,
        accept_threshold_sgi: float | None = None,
        reject_threshold_sgi: float | None = None,
        accept_threshold_dgi: float | None = None,
        on_reject: str | SwitchAction = SwitchAction.FALLBACK,
    ) -> None:
        base = self.base()
        accept = base.sgi_strong_pass if accept_threshold_sgi is None else accept_threshold_sgi
        reject = base.sgi_review if reject_threshold_sgi is None else reject_threshold_sgi
        if reject > accept:
            raise PolicyError(
                "reject_threshold_sgi", reject, f"a value <= accept_threshold_sgi ({accept})"
            )
        dgi = base.dgi_pass if accept_threshold_dgi is None else accept_threshold_dgi
        self._thresholds = replace(base, sgi_strong_pass=accept, sgi_review=reject, dgi_pass=dgi)
        self._on_reject = parse_on_reject(on_reject)

    @classmethod
    def base(cls) -> Thresholds:
        """The thresholds that unspecified cuts take from: the seed's."""
        return Thresholds.seed()

    @classmethod
    def from_thresholds(
        cls, thresholds: Thresholds, on_reject: str | SwitchAction = SwitchAction.FALLBACK
    ) -> GroundingSwitch:
        """The switch for a whole (already validated) `Thresholds`, grounding cuts included."""
        switch = cls.__new__(cls)
        switch._thresholds = thresholds
        switch._on_reject = parse_on_reject(on_reject)
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
        decision = self._route(verdict)
        if decision.method not in _GEOMETRIC or _unscorable(verdict):
            return decision
        long_form = LONG_FORM_CUT in verdict.detail
        near = self._thresholds.near_cuts(verdict.method, verdict.score, long_form)
        return replace(decision, near_cut=near) if near else decision

    def _route(self, verdict: Check) -> SwitchDecision:
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


def _unscorable(verdict: Check) -> bool:
    """A check that carries no usable score (flagged geometry or out of the fitted range)."""
    return (
        verdict.level is Level.REVIEW and verdict.escalate and verdict.label == "Cannot be scored"
    )


def _recheck(verdict: Check, thresholds: Thresholds) -> Check:
    """Re-derive a geometric Check under this switch's thresholds, so both always agree."""
    if _unscorable(verdict):
        return verdict
    if verdict.method == "grounding":
        placeholder = SGIResult(0.0, 0.0, 0.0, 0, 1)
        long_form = float(LONG_FORM_CUT in verdict.detail)
        return check(GroundingScore(verdict.score, placeholder, {LONG_FORM: long_form}), thresholds)
    result: SGIResult | DGIResult = (
        SGIResult(verdict.score, 0.0, 0.0, 0, 1)
        if verdict.method == "sgi"
        else DGIResult(verdict.score, 0.0)
    )
    return check(result, thresholds)
