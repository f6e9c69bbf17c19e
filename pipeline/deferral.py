"""When a judge is configured, the switch defers to it what geometry cannot settle.

The judge outranks geometry (:mod:`pipeline.authority`), so with one available the
switch's own verdict is final only where it is conclusive. Two route settings
(:class:`pipeline.routing.RouteConfig`) say where it is not:

* ``below_review_with_judge = "judge"``: an answer below the review cut is asked of the
  judge instead of taking the route's ``on_reject``. Geometry and word overlap cannot tell
  a correct paraphrase from an invented one, and a right answer that falls back costs the
  caller a regeneration; the judge reads it.
* ``judge_accept_cut``: a P(grounded) auto-accept below this stricter cut goes to the
  judge instead of straight to rules. Realistic hallucinations reuse the source's words
  and score high; only well above the accept cut is geometry's yes conclusive.

With no judge (``judge_available`` false) the switch's verdict stands unchanged, so a
route without a judge behaves exactly as before. Whether a judge is available is a fact
the caller passes in (the worker knows its endpoint); this module reads no environment.
Pure: no I/O.
"""

from __future__ import annotations

from pipeline.check import Level
from pipeline.routing import BELOW_REVIEW_JUDGE, RouteConfig
from pipeline.switch import SwitchAction, SwitchDecision

__all__ = ["defer_to_judge"]


def defer_to_judge(
    decision: SwitchDecision, route: RouteConfig, judge_available: bool
) -> str | None:
    """Why `decision` goes to the judge instead of where the switch sent it, or None when
    it stands (no judge, or geometry was conclusive under `route`'s settings)."""
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
    return None
