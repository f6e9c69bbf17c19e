"""Rules stage: rules → state | escalations.review | escalations.reject.

Every path to state passes here. A violation names the rule and the span. The kill switch
holds every automatic accept for review; a person's accept (from review) overrides
review-severity hits, which that person has seen, but never a reject-severity rule.
Who accepted (`pipeline.authority.accepted_by`, read from the envelope's trail) is
recorded in the evidence; a judge's or a person's accept turns low word coverage, an
opinion below theirs, into a finding instead of a hold."""

from __future__ import annotations

import time

from pipeline.authority import accepted_by
from pipeline.rules import RuleInput, RulesAction, evaluate_rules
from topics.names import Topic
from topics.schema import Envelope
from workers.stages.common import EnvelopeStage, evidence_context, hold_for_review
from workers.stages.kit import Emit, StageContext, conclude


class RulesStage(EnvelopeStage):
    name = "rules"
    source = Topic.RULES

    async def decide_one(self, env: Envelope, ctx: StageContext) -> list[Emit]:
        started = time.perf_counter()
        c = env.candidate
        human = env.human is not None and env.human.accepted
        accepter = accepted_by(env.trail, human)
        verdict = evaluate_rules(
            RuleInput(
                c.question, evidence_context(c, ctx.route_for(env.route))[0], c.response, c.metadata
            ),
            ctx.policy.rules,
            accepter,
            ctx.caps,
        )
        evidence = {
            "rules": verdict.to_dict(),
            "human_override": human,
            "accepted_by": None if accepter is None else accepter.value,
        }
        names = sorted({hit.rule for hit in verdict.hits})
        violation = f"rule violation: {', '.join(names)}"
        if verdict.action is RulesAction.REJECT:
            routed, action, reason = verdict.action, "reject", violation
        elif verdict.action is RulesAction.REVIEW and not human:
            routed, action, reason = verdict.action, "escalate", violation
        elif ctx.control.kill_switch and not human:
            return hold_for_review(
                self.name,
                env,
                ctx,
                started=started,
                gate="kill_switch",
                evidence=evidence,
                reason="kill switch on: no automatic acceptance",
            )
        else:
            routed, action = RulesAction.PASS, "accept"
            reason = (
                "no rule violated"
                if not names
                else f"accepted by a person over: {', '.join(names)}"
            )
        return conclude(
            ctx,
            env,
            stage=self.name,
            action=action,
            reason=reason,
            verdict=routed,
            started=started,
            method="rules",
            level=verdict.action.value,
            evidence=evidence,
        )
