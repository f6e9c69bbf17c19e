"""Judge stage: judge → rules (yes) | escalations.<on_reject> (no) | escalations.review.

Reads the verdict from the first token's logprobs. Anything but a clear yes or no —
no endpoint configured, timeout, 5xx, open breaker, malformed reply, missing logprobs —
goes to a person. Calls for a batch run concurrently, each inside its candidate's
deadline, so a slow endpoint never stalls the consumer past the judge timeout."""

from __future__ import annotations

import time

from pipeline.deferral import reader_score, veto_judge_yes
from pipeline.judge import JudgeVerdict, decide_judge, verdict_for_failure
from pipeline.routing import expired
from pipeline.switch import SwitchAction
from topics.names import Topic
from topics.schema import Envelope
from workers.clients.endpoints import EndpointPool, time_left
from workers.clients.llm import failure_kind
from workers.stages.common import (
    EnvelopeStage,
    evidence_context,
    expire,
    geometry_result,
    hold_for_review,
)
from workers.stages.kit import Emit, EndpointConfig, StageContext, conclude


class JudgeStage(EnvelopeStage):
    name = "judge"
    source = Topic.JUDGE

    def __init__(self, judge: EndpointConfig) -> None:
        self.pool = EndpointPool("judge", judge.url, judge.model, judge.api_key)
        self.timeout = judge.timeout

    async def decide_one(self, env: Envelope, ctx: StageContext) -> list[Emit]:
        started = time.perf_counter()
        route = ctx.route_for(env.route)
        c = env.candidate
        if not self.pool.configured:
            return hold_for_review(
                self.name,
                env,
                ctx,
                started=started,
                gate="judge_unavailable",
                reason="judge unavailable: no judge endpoint configured",
            )
        endpoint = self.pool.for_route(route)
        timeout = time_left(
            env.deadline, ctx.clock(), min(self.timeout, ctx.policy.judge.timeout_seconds)
        )
        readout, calls = await endpoint.judge(
            c.question,
            evidence_context(c, route)[0],
            c.response,
            ctx.policy.judge,
            timeout=timeout,
        )
        if expired(env.deadline, ctx.clock()):
            return expire(self.name, env, ctx)
        evidence: dict = {"calls": [call.to_dict() for call in calls], "model": self.pool.model}
        if readout is None:
            verdict, reason = verdict_for_failure(failure_kind(calls[-1]))
            score = None
        else:
            decision = decide_judge(readout, ctx.policy.judge)
            verdict, reason, score = decision.verdict, decision.reason, decision.score
            evidence["readout"] = readout.to_dict()
        # Routed in the switch's vocabulary: a clear no is served as the route's on_reject.
        action = {JudgeVerdict.YES: SwitchAction.ACCEPT, JudgeVerdict.NO: route.on_reject}.get(
            verdict, SwitchAction.ESCALATE
        )
        gate = None if verdict is not JudgeVerdict.UNSURE else "judge_unsure"
        if verdict is JudgeVerdict.YES:
            vetoed = veto_judge_yes(
                reader_score(geometry_result(env), ctx.policy.grounding_for(route.name)), route
            )
            if vetoed is not None:
                action, reason, gate = SwitchAction.ESCALATE, vetoed, "reader_veto"
        return conclude(
            ctx,
            env,
            stage=self.name,
            action=action.value,
            reason=reason,
            verdict=action,
            started=started,
            score=score,
            method="judge",
            level=verdict.value,
            evidence=evidence,
            breaker={"judge": endpoint.breaker_state.status.value},
            gate=gate,
        )

    async def close(self) -> None:
        await self.pool.close()
