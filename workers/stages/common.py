"""Decoding and the deadline gate, shared by every stage that reads envelopes."""

from __future__ import annotations

import abc
import asyncio
import time
from collections.abc import Sequence
from dataclasses import replace

from pipeline.judge.context import WindowRef
from pipeline.policy.routing import RouteConfig, expired
from pipeline.scores.results import DGIResult, GroundingScore, SGIResult
from pipeline.stages.inputs import evidence_context
from pipeline.trail.verdict import DEADLINE
from topics.names import Topic
from topics.schema import Envelope, MalformedMessage, parse_envelope
from topics.signing import verify
from workers.interfaces import Emit, Inbound, StageContext
from workers.stages.kit import conclude, deadletter


def geometry_result(env: Envelope) -> SGIResult | DGIResult | GroundingScore | None:
    """The score the geometry stage put on the envelope (validated when the envelope was
    parsed: a malformed one is dead-lettered); None when there is none."""
    return None if env.geometry is None else env.geometry.score


def geometry_windows(env: Envelope) -> tuple[tuple[WindowRef, ...], ...]:
    """Each claim's windows, best first, as the geometry stage ranked them (empty when the
    claim head did not read the answer): what the judge reads of a long context."""
    return () if env.geometry is None else env.geometry.windows or ()


def open_envelopes(
    stage: str, batch: Sequence[Inbound], ctx: StageContext, source: Topic
) -> tuple[list[Envelope], list[Emit]]:
    """Decode a batch: usable envelopes, plus emits for dead letters and expired deadlines.

    With a stage key, an envelope whose signature for `source` does not verify is dead-
    lettered unread: only a stage may write an inner topic. A person's verdict is not
    subject to the deadline (the deadline is what sent it to that person)."""
    now = ctx.clock()
    usable: list[Envelope] = []
    emits: list[Emit] = []
    for item in batch:
        forged = ctx.stage_key and verify(ctx.stage_key, source.value, item.value, item.headers)
        if forged:
            emits += deadletter(item, forged, stage, now)
            continue
        try:
            env = parse_envelope(item.value)
        except MalformedMessage as exc:
            emits += deadletter(item, exc.reason, stage, now)
            continue
        if env.human is None and expired(env.deadline, now):
            emits += conclude(ctx, stage, env, DEADLINE, time.perf_counter())
            continue
        usable.append(env)
    return usable, emits


def evidence_only(env: Envelope, route: RouteConfig) -> Envelope:
    """`env` with its candidate's context cut to the chunks that count as evidence (for
    scoring; the envelope sent on keeps the candidate as it came)."""
    chunks, assessed = evidence_context(env.candidate, route)
    if assessed is None or not assessed.excluded:
        return env
    return replace(env, candidate=replace(env.candidate, context=chunks, context_sources=None))


class EnvelopeStage(abc.ABC):
    """A stage that reads envelopes: decode, gate expired deadlines, decide each one.

    Decisions of one batch run concurrently (model calls overlap); a decision without
    awaits runs to completion in order, so per-session state sees the partition's order.
    """

    name: str
    source: Topic

    async def process(self, batch: Sequence[Inbound], ctx: StageContext) -> list[Emit]:
        envelopes, emits = open_envelopes(self.name, batch, ctx, self.source)
        for result in await asyncio.gather(*(self.decide_one(env, ctx) for env in envelopes)):
            emits += result
        return emits

    @abc.abstractmethod
    async def decide_one(self, env: Envelope, ctx: StageContext) -> list[Emit]: ...

    async def close(self) -> None:
        return None
