"""Judge stage: judge → rules (yes) | escalations.<on_reject> (no) | escalations.review.

Reads the verdict from the first token's logprobs (`pipeline.stages.judge` decides).
Anything but a clear yes or no — no endpoint configured, timeout, 5xx, open breaker,
malformed reply, missing logprobs — goes to a person. On Kafka the loop decides up to
`max_in_flight` candidates at once and concludes each as its call returns
(`StageLoop._flow`): a slow call holds up its own answer only. Each call runs inside its
candidate's deadline; a rate limit's Retry-After is waited out within it. Before a
call, the verdict cache and the route's judge budgets have their say
(`workers.stages.judge_ledger`: a cached clear verdict answers without a call; over
budget, never an accept), on the table the loop restores per input partition."""

from __future__ import annotations

import asyncio
import time
from collections.abc import MutableMapping, Sequence
from dataclasses import replace
from typing import Any

from pipeline.judge.context import judge_context
from pipeline.policy.routing import expired
from pipeline.stages import judge
from pipeline.stages.inputs import evidence_context
from pipeline.trail.verdict import DEADLINE
from topics.names import Topic
from topics.schema import Envelope
from workers.clients.endpoints import EndpointPool
from workers.clients.llm import failure_kind, spent_tokens
from workers.interfaces import Emit, EndpointConfig, Inbound, StageContext
from workers.stages.common import (
    EnvelopeStage,
    geometry_result,
    geometry_windows,
    open_envelopes,
)
from workers.stages.judge_ledger import JudgeGate
from workers.stages.kit import conclude


class JudgeStage(EnvelopeStage):
    name = "judge"
    source = Topic.JUDGE

    def __init__(self, judge: EndpointConfig) -> None:
        self.pool = EndpointPool(
            "judge", judge.url, judge.model, judge.api_key, max_in_flight=judge.max_in_flight
        )
        self.timeout = judge.timeout
        self.max_in_flight = judge.max_in_flight
        """The Kafka loop decides this many candidates at once, each concluded as its call
        returns (`StageLoop._flow`); the pool holds the endpoint to as many calls."""
        self.ledger: MutableMapping[bytes, Any] = {}
        """Spend and verdict cache per input partition; the Kafka loop's changelog store."""
        self.gate = JudgeGate()

    async def process(self, batch: Sequence[Inbound], ctx: StageContext) -> list[Emit]:
        """As every envelope stage, keeping each envelope's input partition: the budgets
        and the cache are kept per partition."""
        self.gate.sweep(self.ledger, ctx.policy, ctx.clock())
        emits: list[Emit] = []
        work = []
        for item in batch:
            envelopes, dead = open_envelopes(self.name, [item], ctx, self.source)
            emits += dead
            work += [(env, max(0, item.partition)) for env in envelopes]
        for result in await asyncio.gather(*(self.decide_one(e, ctx, p) for e, p in work)):
            emits += result
        return emits

    async def decide_one(self, env: Envelope, ctx: StageContext, partition: int = 0) -> list[Emit]:
        started = time.perf_counter()
        route = ctx.route_for(env.route)
        c = env.candidate
        if not self.pool.configured:
            return conclude(ctx, self.name, env, judge.UNAVAILABLE, started)
        route = ctx.policy.judged_route(route)  # the fitted band's veto cut, if any
        endpoint = self.pool.for_route(route)
        cap = min(self.timeout, ctx.policy.judge.timeout_seconds)
        # A long context is read as its claims' best windows (pipeline.judge.context).
        read = judge_context(
            evidence_context(c, route)[0],
            c.response,
            geometry_windows(env),
            ctx.policy.judge.max_context_tokens,
        )
        asked = await self.gate.ask(
            self.ledger, endpoint, self.pool.model, env, route, ctx, partition, read.chunks, cap
        )
        readout, calls = asked.readout, list(asked.calls)
        if asked.over is not None:  # a budget is spent: never an accept (pipeline.judge.budget)
            spent = {"model": self.pool.model, "context": read.to_dict(), **asked.evidence}
            return conclude(ctx, self.name, env, replace(asked.over, evidence=spent), started)
        if expired(env.deadline, ctx.clock()):
            return conclude(ctx, self.name, env, DEADLINE, started)
        evidence: dict = {"calls": [call.to_dict() for call in calls], "model": self.pool.model}
        evidence.update(asked.evidence)
        evidence["context"] = read.to_dict()
        evidence["tokens"] = spent_tokens(calls).to_dict()
        if readout is not None:
            evidence["readout"] = readout.to_dict()
        # Which readout decided (logprobs or votes); on a failed call, the one it asked for.
        mode = getattr(endpoint, "readout_mode", lambda _: "logprobs")(ctx.policy.judge)
        evidence["readout_kind"] = readout.readout if readout is not None else mode
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
