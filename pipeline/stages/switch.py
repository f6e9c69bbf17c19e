"""The switch's rule: the session gate, the geometry verdict, and whether a judge decides
instead (`pipeline.policy.deferral`); the session state it leaves behind.

A step of a turn that has already escalated is held for a person (`turn_latched`); every
decision here that is not an accept latches the turn (`pipeline.policy.sessions`), and so does a
final outcome from further up the ladder that did not reach state (`escalated_turn`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.policy.deferral import defer_to_judge, reader_score
from pipeline.policy.routing import RouteConfig
from pipeline.policy.sessions import SessionState, enter, leave
from pipeline.rungs.grounding_switch import GroundingSwitch, SwitchAction
from pipeline.scores.grounding import GroundingModel
from pipeline.scores.results import DGIResult, GroundingScore, SGIResult
from pipeline.stages.inputs import CandidateView
from pipeline.trail.verdict import ASK_JUDGE, Verdict, hold

LATCHED = hold("turn_latched: an earlier step of this turn escalated", "turn_latched")
NO_GEOMETRY = Verdict(SwitchAction.ESCALATE, "escalate", "no usable geometry on the envelope")


def decide(
    candidate: CandidateView,
    route: RouteConfig,
    session: SessionState,
    scored: SGIResult | DGIResult | GroundingScore | None,
    switch: GroundingSwitch,
    cuts: Mapping[str, float],
    grounding: GroundingModel | None,
    judge_available: bool,
) -> tuple[Verdict, SessionState]:
    """The switch's verdict on one scored candidate and the session state after it.
    `grounding` is the route's grounding model, read only where a judge may be asked (the
    claim reader's weakest claim decides whether an accept is conclusive)."""
    held, session = enter(session, candidate.initiator, candidate.turn, route)
    if held:
        return LATCHED, session
    if scored is None:
        return NO_GEOMETRY, leave(session, True, candidate.turn)
    decision = switch.decide(scored)
    reader = reader_score(scored, grounding) if judge_available else None
    deferred = defer_to_judge(decision, route, judge_available, reader)
    escalated = deferred is not None or decision.action is not SwitchAction.ACCEPT
    verdict = Verdict(
        decision.action if deferred is None else ASK_JUDGE,
        decision.action.value if deferred is None else SwitchAction.ESCALATE.value,
        decision.reason if deferred is None else deferred,
        score=decision.score,
        method=decision.method,
        level=decision.level,
        evidence={"check": decision.check.render()}
        | ({"near_cut": list(decision.near_cut)} if decision.near_cut else {}),
        thresholds=cuts,
    )
    return verdict, leave(session, escalated, candidate.turn)


def escalated_turn(record: Mapping[str, Any]) -> tuple[str, int] | None:
    """The session and turn that a final outcome from further up the ladder latches, or
    None: an outcome that was decided an accept (or skip) latches nothing, and neither does
    a dead letter. Shadow serves every outcome as fallback: what counts is what was decided."""
    if record.get("stage") != "outcome" or record.get("decided_action") in ("accept", "skip"):
        return None
    session = str(record.get("session_id", ""))
    turn = record.get("turn")
    if not session or not isinstance(turn, int) or record.get("topic") == "deadletter":
        return None
    return session, turn
