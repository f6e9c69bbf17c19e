"""When a judge is configured, the switch defers to it what geometry cannot settle.

The judge outranks geometry (:mod:`pipeline.bounds.authority`), so with one available the
switch's own verdict is final only where it is conclusive. Two route settings
(:class:`pipeline.policy.routing.RouteConfig`) say where it is not:

* ``below_review_with_judge = "judge"``: an answer below the review cut is asked of the
  judge instead of taking the route's ``on_reject``. Geometry and word overlap cannot tell
  a correct paraphrase from an invented one, and a right answer that falls back costs the
  caller a regeneration; the judge reads it.
* ``judge_accept_cut``: a P(grounded) auto-accept below this stricter cut goes to the
  judge instead of straight to rules. Realistic hallucinations reuse the source's words
  and score high; only well above the accept cut is geometry's yes conclusive.
* ``reader_accept_cut``: an auto-accept whose weakest claim the claim reader scores below
  this goes to the judge too: with a judge at hand, geometry and the reader must both be
  conclusive before an answer skips it.

The reader also guards the judge's own yes (`veto_judge_yes`): with ``reader_veto_cut``
set, a yes on an answer whose weakest claim the reader finds clearly unsupported goes to a
person, not to rules. Two independent readers must agree before state; an LLM judge that
says yes to a fluent invention is exactly the error the reader is there to catch. So does
the geometry (`veto_grounding_yes`): with ``judge_veto_cut`` set, a yes on an answer whose
P(grounded) is below it goes to a person.

A fitted judge share (`calibrate --judge-share`, `pipeline.fit.judge_share`) needs no
rule of its own here: a route's `[routes.NAME.judge_band]` is applied by the policy
(`Policy.judged_route`, `Policy.thresholds_for(..., judged=True)`) only where a judge is
configured: the band's accept cut is the switch's accept cut, its reject cut the review
cut, and ``below_review_with_judge = "on_reject"``, so the switch accepts above the band,
takes on_reject below it, and escalates the band, which consistency passes on to the judge
unless samples commit it.

With no judge (``judge_available`` false) the switch's verdict stands unchanged, so a
route without a judge behaves exactly as before. Whether a judge is available is a fact
the caller passes in (the worker knows its endpoint); this module reads no environment.
Pure: no I/O.
"""

from __future__ import annotations

from pipeline.policy.routing import BELOW_REVIEW_JUDGE, RouteConfig
from pipeline.rungs.grounding_switch import SwitchAction, SwitchDecision
from pipeline.scores.check import Level
from pipeline.scores.grounding import CLAIM_READER, GroundingModel, reads_claims
from pipeline.scores.results import GroundingScore

__all__ = ["defer_to_judge", "reader_score", "veto_grounding_yes", "veto_judge_yes"]


def reader_score(score: object, model: GroundingModel | None) -> float | None:
    """The claim reader's P(supported) of the weakest claim behind `score`, or None when
    the reader did not read this answer (no grounding model, or one that gives the reader
    no weight, so the geometry stage never ran it and the feature holds no reading)."""
    if not isinstance(score, GroundingScore) or model is None:
        return None
    if not reads_claims(model, CLAIM_READER) or CLAIM_READER not in score.features:
        return None
    return float(score.features[CLAIM_READER])


def defer_to_judge(
    decision: SwitchDecision,
    route: RouteConfig,
    judge_available: bool,
    reader: float | None = None,
) -> str | None:
    """Why `decision` goes to the judge instead of where the switch sent it, or None when
    it stands (no judge, or geometry was conclusive under `route`'s settings). `reader` is
    the claim reader's weakest claim (`reader_score`), None where it did not read."""
    if not judge_available:
        return None
    if (
        decision.level == Level.RISK.value
        and decision.action is not SwitchAction.ESCALATE
        and route.below_review_with_judge == BELOW_REVIEW_JUDGE
    ):
        return f"{decision.reason}; below the review cut with a judge configured: the judge decides"
    cut = route.judge_accept_cut
    if (
        decision.action is SwitchAction.ACCEPT
        and decision.method == "grounding"
        and cut is not None
        and decision.score < cut
    ):
        return (
            f"{decision.reason}, but below judge_accept_cut {cut:.3f}: not conclusive with a "
            "judge configured, the judge decides"
        )
    cut = route.reader_accept_cut
    if (
        decision.action is SwitchAction.ACCEPT
        and decision.method == "grounding"
        and cut is not None
        and reader is not None
        and reader < cut
    ):
        return (
            f"{decision.reason}, but the claim reader's weakest claim {reader:.3f} is below "
            f"reader_accept_cut {cut:.3f}: not conclusive with a judge configured, the judge "
            "decides"
        )
    return None


def veto_judge_yes(reader: float | None, route: RouteConfig) -> str | None:
    """Why a judge's yes goes to a person instead of rules, or None when it stands: the
    claim reader found the answer's weakest claim clearly unsupported (below `route`'s
    ``reader_veto_cut``). Where the reader did not read (`reader` None), the yes stands."""
    cut = route.reader_veto_cut
    if cut is None or reader is None or reader >= cut:
        return None
    return (
        f"judge said yes, but the claim reader's weakest claim {reader:.3f} is below "
        f"reader_veto_cut {cut:.3f}: two readers disagree, a person decides"
    )


def veto_grounding_yes(score: object, route: RouteConfig) -> str | None:
    """Why a judge's yes goes to a person instead of rules, or None when it stands: the
    answer's P(grounded) is below `route`'s ``judge_veto_cut``. Where there is no usable
    P(grounded) (no grounding model, or geometry that could not be scored), the yes stands."""
    cut = route.judge_veto_cut
    if cut is None or not isinstance(score, GroundingScore) or score.sgi.flagged:
        return None
    if score.value >= cut:
        return None
    return (
        f"judge said yes, but P(grounded) {score.value:.3f} is below judge_veto_cut "
        f"{cut:.3f}: the geometry finds it clearly ungrounded, a person decides"
    )
