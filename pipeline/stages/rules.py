"""The rules' rule: every path to state passes here.

A reject-severity hit rejects, whoever accepted. A review-severity hit goes to a person,
unless a person accepted (from review), who has seen it. The kill switch holds every
automatic accept for a person; a person's accept stands. Who accepted
(`pipeline.bounds.authority.accepted_by`, read from the envelope's trail) is recorded, and a
judge's or a person's accept turns low word coverage, an opinion below theirs, into a
finding instead of a hold.
"""

from __future__ import annotations

from pipeline.bounds.authority import accepted_by
from pipeline.guards.admission import WorkCaps
from pipeline.policy.routing import RouteConfig
from pipeline.rungs.rule_checks import RuleInput, RulesAction, RulesConfig, evaluate_rules
from pipeline.stages.inputs import EnvelopeView, evidence_context
from pipeline.trail.verdict import Verdict, hold


def decide(
    env: EnvelopeView,
    route: RouteConfig,
    config: RulesConfig,
    caps: WorkCaps,
    kill_switch: bool,
) -> Verdict:
    """The rules' verdict on the candidate `env` carries, on `route`."""
    c = env.candidate
    human = env.human is not None and env.human.accepted
    accepter = accepted_by(env.trail, human)
    verdict = evaluate_rules(
        RuleInput(c.question, evidence_context(c, route)[0], c.response, c.metadata),
        config,
        accepter,
        caps,
    )
    evidence = {
        "rules": verdict.to_dict(),
        "human_override": human,
        "accepted_by": None if accepter is None else accepter.value,
    }
    names = sorted({hit.rule for hit in verdict.hits})
    violation = f"rule violation: {', '.join(names)}"
    fields = {"method": "rules", "level": verdict.action.value, "evidence": evidence}
    if verdict.action is RulesAction.REJECT:
        return Verdict(verdict.action, "reject", violation, **fields)
    if verdict.action is RulesAction.REVIEW and not human:
        return Verdict(verdict.action, "escalate", violation, **fields)
    if kill_switch and not human:
        return hold("kill switch on: no automatic acceptance", "kill_switch", evidence=evidence)
    if not names:
        return Verdict(RulesAction.PASS, "accept", "no rule violated", **fields)
    return Verdict(
        RulesAction.PASS, "accept", f"accepted by a person over: {', '.join(names)}", **fields
    )
