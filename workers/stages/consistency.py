"""Consistency stage: consistency → rules (committed and the response agrees) | judge.

Samples come with the candidate or are drawn from an OpenAI-compatible sampler; they are
embedded with the stage's encoder and grouped by meaning (`pipeline.consistency`). Only a
committed interpretation that the response agrees with moves towards state; unresolved,
requires-clarification and budget-exceeded decisions go on to the judge. An unavailable
sampler fails closed the same way (up the ladder, never accepted here)."""

from __future__ import annotations

import asyncio
import time

import numpy as np

from pipeline.consistency import BudgetLimit, ConsistencyDecision, decide_consistency
from pipeline.provenance import distinct_samples
from pipeline.routing import expired
from topics.names import Topic
from topics.schema import Envelope
from workers.clients.encoder import stage_encoder
from workers.clients.endpoints import EndpointPool, time_left
from workers.clients.nli import load_nli
from workers.stages.common import EnvelopeStage, evidence_context, expire
from workers.stages.kit import Emit, EndpointConfig, StageContext, conclude
from workers.stages.routes import DEFER, PASS


def similarities(vectors: np.ndarray) -> np.ndarray:
    """Cosine similarity matrix of row vectors (float64)."""
    v = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    v = v / np.where(norms == 0, 1.0, norms)
    return v @ v.T


class ConsistencyStage(EnvelopeStage):
    name = "consistency"
    source = Topic.CONSISTENCY

    def __init__(self, sampler: EndpointConfig, nli_model: str = "") -> None:
        """`nli_model`: the path of an NLI cross-encoder; empty compares embeddings."""
        self.nli_model = nli_model
        self.pool = EndpointPool("sampler", sampler.url, sampler.model, sampler.api_key)
        self.timeout = sampler.timeout

    async def decide_one(self, env: Envelope, ctx: StageContext) -> list[Emit]:
        started = time.perf_counter()
        c = env.candidate
        config = ctx.policy.consistency
        route = ctx.route_for(env.route)
        # Samples the candidate brought may be its own answer again: copies count once.
        supplied = distinct_samples(c.samples or (), c.response, route.min_distinct_samples)
        samples = list(supplied.distinct)
        budget = BudgetLimit.NONE
        evidence: dict = {"sample_source": "candidate" if samples else "none"}
        if samples:
            evidence["distinct_samples"] = supplied.to_dict()
        breaker = None
        if not samples and self.pool.configured:
            endpoint = self.pool.for_route(route)
            drawn = await endpoint.sample(
                c.question,
                evidence_context(c, route)[0],
                config.n_samples,
                config.temperature,
                config.max_tokens,
                timeout=time_left(env.deadline, ctx.clock(), self.timeout),
                token_budget=config.token_budget,
            )
            breaker = {"sampler": endpoint.breaker_state.status.value}
            evidence.update(
                sample_source="sampler",
                tokens_used=drawn.tokens_used,
                calls=[call.to_dict() for call in drawn.calls],
                # The sampler's answers as drawn: a replay decides on them again instead of
                # asking the sampler (workers.clients.recorded); private to the record.
                samples=list(drawn.samples),
                budget_limit=drawn.budget_limit.value,
            )
            if expired(env.deadline, ctx.clock()):
                return expire(self.name, env, ctx)
            if drawn.failure is not None and len(drawn.samples) < drawn.requested:
                return conclude(
                    ctx,
                    env,
                    stage=self.name,
                    action="escalate",
                    started=started,
                    verdict=DEFER,
                    gate="sampler_unavailable",
                    breaker=breaker,
                    reason=f"sampler unavailable ({drawn.failure.value}); the judge decides",
                    evidence=evidence,
                )
            samples, budget = list(drawn.samples), drawn.budget_limit
        decision = await asyncio.to_thread(self._decide, env, samples, budget, ctx)
        evidence.update(decision.to_dict())
        evidence["similarity"] = "nli" if self.nli_model else "embedding"
        if decision.passes and evidence["sample_source"] == "candidate" and not supplied.enough:
            return conclude(
                ctx,
                env,
                stage=self.name,
                action="unresolved",
                reason=(
                    f"{len(supplied.distinct)} distinct sample(s) of the candidate's own, "
                    f"{supplied.min_distinct} needed to commit; the judge decides"
                ),
                verdict=DEFER,
                started=started,
                score=decision.consistency_score,
                method="consistency",
                level=decision.level.value,
                gate="too_few_distinct_samples",
                evidence=evidence,
            )
        return conclude(
            ctx,
            env,
            stage=self.name,
            action=decision.outcome.value,
            reason=decision.reason,
            verdict=PASS if decision.passes else DEFER,
            started=started,
            score=decision.consistency_score,
            method="consistency",
            level=decision.level.value,
            evidence=evidence,
            breaker=breaker,
        )

    def _decide(
        self, env: Envelope, samples: list[str], budget: BudgetLimit, ctx: StageContext
    ) -> ConsistencyDecision:
        if not samples:
            empty = np.zeros((0,))
            return decide_consistency(
                empty, np.zeros((0, 0)), [], ctx.policy.consistency, budget_limit=budget
            )
        texts = [env.candidate.response, *samples]
        if self.nli_model:
            sim = load_nli(self.nli_model).matrix(texts)
        else:
            sim = similarities(stage_encoder(ctx).encode(texts))
        return decide_consistency(
            sim[0, 1:], sim[1:, 1:], samples, ctx.policy.consistency, budget_limit=budget
        )

    async def close(self) -> None:
        await self.pool.close()
