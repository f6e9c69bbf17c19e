"""Geometry stage: candidates → scored. Validates, scores SGI/DGI in one encoder call per
batch, and dead-letters what cannot be used. `off`-mode routes skip straight to the safe
path; an expired deadline goes to review."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from pipeline.admission import Admission, admit
from pipeline.check import check
from pipeline.claims import ClaimSupport
from pipeline.defaults import default_claim_reader
from pipeline.domain import task_of
from pipeline.policy import UNKNOWN_ROUTE, Policy
from pipeline.results import DGIResult, GroundingScore, SGIResult
from pipeline.routing import Mode, deadline_for, expired
from pipeline.scoring import score_batch
from topics.names import Topic
from topics.schema import Candidate, Envelope, GeometryPayload, MalformedMessage, parse_candidate
from workers.clients.claims import load_head
from workers.clients.encoder import stage_encoder
from workers.stages.common import evidence_context, evidence_only, expire, hold_for_review
from workers.stages.kit import Emit, Inbound, StageContext, conclude, deadletter
from workers.stages.routes import SCORED, SKIP


class GeometryStage:
    name = "geometry"
    source = Topic.CANDIDATES

    async def process(self, batch: Sequence[Inbound], ctx: StageContext) -> list[Emit]:
        now = ctx.clock()
        emits: list[Emit] = []
        ready: list[tuple[Envelope, float]] = []
        for item in batch:
            started = time.perf_counter()
            try:
                candidate = parse_candidate(item.value, max_bytes=ctx.max_candidate_bytes)
            except MalformedMessage as exc:
                emits += deadletter(item, exc.reason, self.name, now, stage_key=ctx.stage_key)
                continue
            route = ctx.policy.route(
                ctx.policy.route_name(
                    candidate.route, task_of(candidate.metadata), ctx.default_route
                )
            )
            if candidate.initiator not in route.allowed_initiators:
                why = f"route {route.name!r} is not open to initiator {candidate.initiator!r}"
                emits += deadletter(item, why, self.name, now, stage_key=ctx.stage_key)
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
            if route.mode is Mode.OFF:
                unknown = ctx.policy.unknown_route(route.name)
                off = "mode off: no verification, nothing is auto-accepted"
                emits += conclude(
                    ctx,
                    env,
                    stage=self.name,
                    action=SKIP,
                    started=started,
                    reason=off if unknown is None else f"{unknown}: {off}",
                    verdict=SKIP,
                    gate=None if unknown is None else UNKNOWN_ROUTE,
                )
            elif expired(env.deadline, now):
                emits += expire(self.name, env, ctx)
            elif not (admitted := _admit(candidate, ctx)).admitted:
                # Decided before the expensive part: encoding and claim support grow
                # with the text, and one huge answer would hold up the whole batch.
                emits += hold_for_review(
                    self.name,
                    env,
                    ctx,
                    started=started,
                    gate="work_cap",
                    reason=admitted.reason,
                    evidence={"admission": admitted.to_dict()},
                )
            elif (found := evidence_context(candidate, route))[1] and not found[0]:
                # A context was given and none of it may ground the answer (its own words,
                # or sources the route does not trust): fail closed.
                emits += hold_for_review(
                    self.name,
                    env,
                    ctx,
                    started=started,
                    gate="no_evidence",
                    reason="no context chunk counts as evidence",
                    evidence={"provenance": found[1].to_dict()},
                )
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
        )
        for (env, started), scored in zip(ready, results, strict=True):
            verdict = check(scored, ctx.policy.thresholds_for(env.route))
            result = scored.sgi if isinstance(scored, GroundingScore) else scored
            payload = GeometryPayload(scored)
            evidence: dict[str, Any] = {
                "geometry": payload.to_dict(),
                "encoder": getattr(encoder, "model_id", "custom"),
            }
            assessed = evidence_context(env.candidate, ctx.route_for(env.route))[1]
            if assessed is not None:
                evidence["provenance"] = assessed.to_dict()
            if isinstance(scored, GroundingScore):
                evidence["grounding_probability"] = scored.value
                evidence["features"] = dict(scored.features)
                if scored.out_of_range:
                    evidence["out_of_range"] = scored.out_of_range
                if scored.claim is not None and scored.claim.weakest is not None:
                    evidence["weakest_claim"] = _weakest(scored.claim)
            emits += conclude(
                ctx,
                env,
                stage=self.name,
                action=SCORED,
                reason=verdict.render(),
                verdict=SCORED,
                started=started,
                score=result.value,
                method=result.method,
                level=verdict.level.value,
                evidence=evidence,
                thresholds=ctx.policy.thresholds_dict(env.route),
                update=lambda e, g=payload: replace(e, geometry=g),
            )
        return emits

    async def close(self) -> None:
        return None


def _admit(candidate: Candidate, ctx: StageContext) -> Admission:
    """The work caps on the question, the answer and every context chunk: the chunks are
    weighed as evidence (`evidence_context`) before any is encoded, at a cost of their
    own."""
    return admit(candidate.question, candidate.context_chunks, candidate.response, ctx.caps)


def _score_by_route(
    envelopes: Sequence[Envelope], encoder: Any, reference: np.ndarray | None, policy: Policy
) -> list[SGIResult | DGIResult | GroundingScore]:
    """Each candidate scored by its route's grounding model (`calibrate --route`), else the
    policy's; one `score_batch` per route in the batch."""
    by_route: dict[str, list[int]] = {}
    for i, env in enumerate(envelopes):
        by_route.setdefault(env.route, []).append(i)
    out: list[SGIResult | DGIResult | GroundingScore | None] = [None] * len(envelopes)
    for route, indices in by_route.items():
        candidates = [envelopes[i].candidate for i in indices]
        scored = score_batch(
            [(c.question, c.context_chunks, c.response) for c in candidates],
            encoder,
            reference,
            policy.grounding_for(route),
            [task_of(c.metadata) for c in candidates],
            load_head(),
            default_claim_reader(),
        )
        for i, result in zip(indices, scored, strict=True):
            out[i] = result
    return out  # type: ignore[return-value]


def _weakest(claim: ClaimSupport) -> dict[str, Any]:
    """The claim the context backs least, the passage that backs it best and the head's
    score: what a reviewer reads to see which sentence failed."""
    weakest, window = claim.weakest, claim.window
    return {
        "claim": weakest.text if weakest else "",
        "window": window.text if window else "",
        "score": claim.score,
        "claims": len(claim.claims),
    }


def _header(item: Inbound, name: str) -> str | None:
    for key, value in item.headers:
        if key == name:
            return value.decode("ascii", "replace")
    return None
