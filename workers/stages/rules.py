"""Rules stage: rules → state | escalations.review | escalations.reject.

Every path to state passes here; the rule (a person's override, the kill switch, who
accepted) is `pipeline.stages.rules`."""

from __future__ import annotations

import time

from pipeline.stages import rules
from topics.names import Topic
from topics.schema import Envelope
from workers.interfaces import Emit, StageContext
from workers.stages.common import EnvelopeStage
from workers.stages.kit import conclude


class RulesStage(EnvelopeStage):
    name = "rules"
    source = Topic.RULES

    async def decide_one(self, env: Envelope, ctx: StageContext) -> list[Emit]:
        started = time.perf_counter()
        verdict = rules.decide(
            env, ctx.route_for(env.route), ctx.policy.rules, ctx.caps, ctx.control.kill_switch
        )
        return conclude(ctx, self.name, env, verdict, started)
