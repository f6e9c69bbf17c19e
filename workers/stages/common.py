"""Decoding and the deadline gate, shared by every stage that reads envelopes."""

from __future__ import annotations

import abc
import asyncio
import time
from collections.abc import Sequence
from typing import Any

from pipeline.routing import expired
from topics.names import Topic
from topics.schema import Envelope, MalformedMessage, parse_envelope
from workers.stages.kit import Emit, Inbound, StageContext, conclude, deadletter
from workers.stages.routes import HOLD


def open_envelopes(
    stage: str, batch: Sequence[Inbound], ctx: StageContext
) -> tuple[list[Envelope], list[Emit]]:
    """Decode a batch: usable envelopes, plus emits for dead letters and expired deadlines."""
    now = ctx.clock()
    usable: list[Envelope] = []
    emits: list[Emit] = []
    for item in batch:
        try:
            env = parse_envelope(item.value)
        except MalformedMessage as exc:
            emits += deadletter(item, exc.reason, stage, now)
            continue
        if expired(env.deadline, now):
            emits += expire(stage, env, ctx)
            continue
        usable.append(env)
    return usable, emits


def hold_for_review(
    stage: str, env: Envelope, ctx: StageContext, *, reason: str, gate: str, **record: Any
) -> list[Emit]:
    """Fail closed: a gate stopped automatic handling, so a person decides."""
    record.setdefault("started", time.perf_counter())
    return conclude(
        ctx,
        env,
        stage=stage,
        action="escalate",
        verdict=HOLD,
        reason=reason,
        gate=gate,
        **record,
    )


def expire(stage: str, env: Envelope, ctx: StageContext) -> list[Emit]:
    """An expired deadline is never accepted."""
    return hold_for_review(stage, env, ctx, reason="deadline", gate="deadline")


class EnvelopeStage(abc.ABC):
    """A stage that reads envelopes: decode, gate expired deadlines, decide each one.

    Decisions of one batch run concurrently (model calls overlap); a decision without
    awaits runs to completion in order, so per-session state sees the partition's order.
    """

    name: str
    source: Topic

    async def process(self, batch: Sequence[Inbound], ctx: StageContext) -> list[Emit]:
        envelopes, emits = open_envelopes(self.name, batch, ctx)
        for result in await asyncio.gather(*(self.decide_one(env, ctx) for env in envelopes)):
            emits += result
        return emits

    @abc.abstractmethod
    async def decide_one(self, env: Envelope, ctx: StageContext) -> list[Emit]: ...

    async def close(self) -> None:
        return None
