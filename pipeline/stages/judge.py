"""The judge's rule: a clear yes moves the candidate on to rules, a clear no ends it as the
route's `on_reject`, and anything else — no endpoint, a failed call, a reply that is not
a clear yes or no — goes to a person. A yes on an answer the claim reader finds clearly
unsupported goes to a person too (`pipeline.policy.deferral.veto_judge_yes`), and so does a yes on
one whose P(grounded) is below the route's veto cut (`veto_grounding_yes`).

The verdict routes on `pipeline.judge.question.JudgeVerdict` (a clear no on the route's
`on_reject`); the record keeps the switch's vocabulary for the action (yes = `accept`).
"""

from __future__ import annotations

from pipeline.judge.question import (
    JudgeConfig,
    JudgeReadout,
    JudgeVerdict,
    decide_judge,
    verdict_for_failure,
)
from pipeline.policy.deferral import reader_score, veto_grounding_yes, veto_judge_yes
from pipeline.policy.routing import RouteConfig
from pipeline.rungs.grounding_switch import SwitchAction
from pipeline.scores.grounding import GroundingModel
from pipeline.scores.results import DGIResult, GroundingScore, SGIResult
from pipeline.trail.verdict import HOLD, Verdict, hold

UNAVAILABLE = hold("judge unavailable: no judge endpoint configured", "judge_unavailable")


def decide(
    readout: JudgeReadout | None,
    failure: str,
    route: RouteConfig,
    config: JudgeConfig,
    scored: SGIResult | DGIResult | GroundingScore | None,
    grounding: GroundingModel | None,
) -> Verdict:
    """The judge's verdict from its reply's `readout` (None when the call failed in
    transport, `failure` naming how), on `route`; `scored` and `grounding` are the
    geometry score and the route's model, for the claim reader's veto of a yes."""
    if readout is None:
        verdict, reason = verdict_for_failure(failure)
        score = None
    else:
        decision = decide_judge(readout, config)
        verdict, reason, score = decision.verdict, decision.reason, decision.score
    fields = {"score": score, "method": "judge", "level": verdict.value}
    if verdict is JudgeVerdict.NO:
        return Verdict(route.on_reject, route.on_reject.value, reason, **fields)
    if verdict is JudgeVerdict.UNSURE:
        return Verdict(verdict, "escalate", reason, gate="judge_unsure", **fields)
    vetoed = veto_judge_yes(reader_score(scored, grounding), route)
    if vetoed is not None:
        return Verdict(HOLD, "escalate", vetoed, gate="reader_veto", **fields)
    vetoed = veto_grounding_yes(scored, route)
    if vetoed is not None:
        return Verdict(HOLD, "escalate", vetoed, gate="grounding_veto", **fields)
    return Verdict(verdict, SwitchAction.ACCEPT.value, reason, **fields)
