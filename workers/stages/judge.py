"""Judge stage: judge → rules (yes) | escalations.<on_reject> (no) | escalations.review.

Reads the verdict from the first token's logprobs (`pipeline.stages.judge` decides).
Anything but a clear yes or no — no endpoint configured, timeout, 5xx, open breaker,
malformed reply, missing logprobs — goes to a person. Calls for a batch run concurrently,
each inside its candidate's deadline, so a slow endpoint never stalls the consumer past
the judge timeout."""

from __future__ import annotations

import time
from dataclasses import replace

from pipeline.routing import expired
from pipeline.stages import judge
from pipeline.stages.inputs import evidence_context
from pipeline.stages.verdict import DEADLINE
from topics.names import Topic
from topics.schema import Envelope
from workers.clients.endpoints import EndpointPool, time_left
from workers.clients.llm import failure_kind
from workers.interfaces import Emit, EndpointConfig, StageContext
from workers.stages.common import EnvelopeStage, geometry_result
from workers.stages.kit import conclude


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
            return conclude(ctx, self.name, env, judge.UNAVAILABLE, started)
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
            return conclude(ctx, self.name, env, DEADLINE, started)
        evidence: dict = {"calls": [call.to_dict() for call in calls], "model": self.pool.model}
        if readout is not None:
            evidence["readout"] = readout.to_dict()
        verdict = judge.decide(
            readout,
            failure_kind(calls[-1]) if readout is None else "",
            route,
            ctx.policy.judge,
            geometry_result(env),
            ctx.policy.grounding_for(route.name),
        )
        breaker = {"judge": endpoint.breaker_state.status.value}
        return conclude(
            ctx, self.name, env, replace(verdict, evidence=evidence, breaker=breaker), started
        )

    async def close(self) -> None:
        await self.pool.close()
