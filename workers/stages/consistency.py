"""Consistency stage: consistency → rules (committed and the response agrees) | judge.

Samples come with the candidate or are drawn from an OpenAI-compatible sampler; they are
embedded with the stage's encoder (or compared by an NLI model) and the rule in
`pipeline.stages.consistency` decides on the similarities. An unavailable sampler fails
closed (up the ladder, never accepted here); samples of the candidate's own over the work
caps go to review unread (`consistency.screen`)."""

from __future__ import annotations

import asyncio
import time

import numpy as np

from pipeline.stages import consistency
from pipeline.stages.inputs import evidence_context
from topics.names import Topic
from topics.schema import Envelope
from workers.clients.encoder import stage_encoder
from workers.clients.endpoints import EndpointPool, rate_limit_patience, time_left
from workers.clients.nli import load_nli
from workers.interfaces import Emit, EndpointConfig, StageContext
from workers.stages.common import EnvelopeStage
from workers.stages.kit import conclude


class ConsistencyStage(EnvelopeStage):
    name = "consistency"
    source = Topic.CONSISTENCY

    def __init__(self, sampler: EndpointConfig, nli_model: str = "") -> None:
        """`nli_model`: the path of an NLI cross-encoder; empty compares embeddings."""
        self.nli_model = nli_model
        self.pool = EndpointPool(
            "sampler",
            sampler.url,
            sampler.model,
            sampler.api_key,
            max_in_flight=sampler.max_in_flight,
        )
        self.timeout = sampler.timeout
        self.max_in_flight = sampler.max_in_flight
        """As the judge's: candidates decided at once, each concluded as its calls return."""

    async def decide_one(self, env: Envelope, ctx: StageContext) -> list[Emit]:
        started = time.perf_counter()
        c = env.candidate
        config = ctx.policy.consistency
        screened = consistency.screen(c, ctx.caps)
        if screened is not None:
            return conclude(ctx, self.name, env, screened, started)
        route = ctx.route_for(env.route)
        own = consistency.supplied(c, route)
        drawn = None
        if not own.distinct and self.pool.configured:
            endpoint = self.pool.for_route(route)
            result = await endpoint.sample(
                c.question,
                evidence_context(c, route)[0],
                config.n_samples,
                config.temperature,
                config.max_tokens,
                timeout=time_left(env.deadline, ctx.clock(), self.timeout),
                token_budget=config.token_budget,
                patience=rate_limit_patience(env.deadline, ctx.clock(), self.timeout),
            )
            drawn = consistency.Drawn(
                samples=tuple(result.samples),
                requested=result.requested,
                budget_limit=result.budget_limit,
                tokens_used=result.tokens_used,
                calls=tuple(call.to_dict() for call in result.calls),
                breaker=endpoint.breaker_state.status.value,
                failure=None if result.failure is None else result.failure.value,
            )
            stopped = consistency.after_sampling(drawn, env.deadline, ctx.clock())
            if stopped is not None:
                return conclude(ctx, self.name, env, stopped, started)
        samples = consistency.samples_of(own, drawn)
        similarity = await asyncio.to_thread(self._similarity, c.response, samples, ctx)
        verdict = consistency.decide(own, drawn, similarity, config, bool(self.nli_model))
        return conclude(ctx, self.name, env, verdict, started)

    def _similarity(
        self, response: str, samples: list[str], ctx: StageContext
    ) -> np.ndarray | None:
        """The similarity matrix over the response and each sample (None without samples)."""
        if not samples:
            return None
        texts = [response, *samples]
        if self.nli_model:
            return load_nli(self.nli_model).matrix(texts)
        return consistency.similarities(stage_encoder(ctx).encode(texts))

    async def close(self) -> None:
        await self.pool.close()
