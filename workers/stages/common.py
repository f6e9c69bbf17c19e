"""Decoding and the deadline gate, shared by every stage that reads envelopes."""

from __future__ import annotations

import time
from collections.abc import Sequence

from pipeline.routing import Next, expired
from topics.schema import Envelope, MalformedMessage, parse_envelope
from workers.stagekit import Emit, Inbound, StageContext, conclude, deadletter


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


def expire(stage: str, env: Envelope, ctx: StageContext) -> list[Emit]:
    """Fail closed on an expired deadline: a person decides; never accepted."""
    return conclude(
        ctx,
        env,
        stage=stage,
        action="escalate",
        reason="deadline",
        decided=Next.REVIEW,
        gate="deadline",
        started=time.perf_counter(),
    )
