"""Geometry stage: candidates → scored. Decodes each candidate, settles what can be
settled before encoding (`pipeline.stages.geometry.screen`), scores the rest in one
encoder call per batch, and concludes each with `pipeline.stages.geometry.decide`.
Undecodable candidates and refused initiators are dead-lettered."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from pipeline.guards.domain import task_of
from pipeline.policy.defaults import claim_reader_at, default_claim_reader
from pipeline.policy.document import Policy
from pipeline.policy.routing import deadline_for
from pipeline.scores.batch import score_batch
from pipeline.scores.grounding import CLAIM_READER, reads_claims
from pipeline.scores.results import DGIResult, GroundingScore, SGIResult
from pipeline.stages import geometry
from pipeline.stages.inputs import evidence_context
from topics.names import Topic
from topics.schema import Envelope, MalformedMessage, parse_candidate
from workers.clients.claims import load_head
from workers.clients.encoder import stage_encoder
from workers.interfaces import Emit, Inbound, StageContext
from workers.stages.common import evidence_only
from workers.stages.kit import conclude, deadletter


class GeometryStage:
    name = "geometry"
    source = Topic.CANDIDATES

    def __init__(self, reader: str = "") -> None:
        """`reader`: the claim reader's directory (GROUNDSTREAM_READER, `--reader`); ""
        for the default one. Loaded on first use, and only when a route's model weighs it."""
        self.reader = reader

    async def process(self, batch: Sequence[Inbound], ctx: StageContext) -> list[Emit]:
        now = ctx.clock()
        emits: list[Emit] = []
        ready: list[tuple[Envelope, float]] = []
        for item in batch:
            started = time.perf_counter()
            try:
                candidate = parse_candidate(item.value, max_bytes=ctx.max_candidate_bytes)
            except MalformedMessage as exc:
                emits += deadletter(item, exc.reason, self.name, now)
                continue
            route = geometry.route_of(candidate, ctx.policy, ctx.default_route)
            refused = geometry.refusal(candidate, route)
            if refused is not None:
                emits += deadletter(item, refused, self.name, now)
                continue
            # Entry = the candidates message's broker timestamp, the same on redelivery,
            # so a replay judges the deadline as the first attempt did.
            entered = now if item.timestamp is None else item.timestamp
            env = Envelope(
                candidate=candidate,
                route=route.name,
                mode=route.mode.value,
                deadline=deadline_for(candidate.deadline, route, entered),
                entered_at=entered,
                traceparent=_header(item, "traceparent"),
                policy_version=ctx.policy.version,
            )
            screened = geometry.screen(candidate, route, ctx.policy, env.deadline, now, ctx.caps)
            if screened is not None:
                emits += conclude(ctx, self.name, env, screened, started)
            else:
                ready.append((env, started))
        if not ready:
            return emits
        reference = None if ctx.policy.reference is None else np.array(ctx.policy.reference)
        encoder = stage_encoder(ctx)
        # The encoder call runs in a thread so the consumer keeps heartbeating meanwhile.
        results = await asyncio.to_thread(
            _score_by_route,
            [evidence_only(env, ctx.route_for(env.route)) for env, _ in ready],
            encoder,
            reference,
            ctx.policy,
            self.reader,
        )
        encoder_id = getattr(encoder, "model_id", "custom")
        for (env, started), scored in zip(ready, results, strict=True):
            verdict = geometry.decide(
                scored,
                ctx.policy.thresholds_for(env.route),
                ctx.policy.thresholds_dict(env.route),
                encoder_id,
                evidence_context(env.candidate, ctx.route_for(env.route))[1],
            )
            emits += conclude(ctx, self.name, env, verdict, started)
        return emits

    async def close(self) -> None:
        return None


def _score_by_route(
    envelopes: Sequence[Envelope],
    encoder: Any,
    reference: np.ndarray | None,
    policy: Policy,
    reader: str = "",
) -> list[SGIResult | DGIResult | GroundingScore]:
    """Each candidate scored by its route's grounding model (`calibrate --route`), else the
    policy's; one `score_batch` per route in the batch. The claim reader is loaded only for
    a route whose model weighs it."""
    by_route: dict[str, list[int]] = {}
    for i, env in enumerate(envelopes):
        by_route.setdefault(env.route, []).append(i)
    out: list[SGIResult | DGIResult | GroundingScore | None] = [None] * len(envelopes)
    for route, indices in by_route.items():
        candidates = [envelopes[i].candidate for i in indices]
        model = policy.grounding_for(route)
        weighed = model is not None and reads_claims(model, CLAIM_READER)
        scored = score_batch(
            [(c.question, c.context_chunks, c.response) for c in candidates],
            encoder,
            reference,
            model,
            [task_of(c.metadata) for c in candidates],
            load_head(),
            (claim_reader_at(reader) if reader else default_claim_reader()) if weighed else None,
            languages=policy.languages_for(route),
        )
        for i, result in zip(indices, scored, strict=True):
            out[i] = result
    return out  # type: ignore[return-value]


def _header(item: Inbound, name: str) -> str | None:
    for key, value in item.headers:
        if key == name:
            return value.decode("ascii", "replace")
    return None
