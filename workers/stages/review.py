"""The review queue on Kafka: list what waits for a person, and record their verdict."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from aiokafka import AIOKafkaProducer

from pipeline.policy import Policy
from pipeline.review import HumanVerdict, reason
from topics.codec import loads
from topics.names import MAX_MESSAGE_BYTES, Topic
from topics.schema import Envelope, HumanPayload, MalformedMessage, parse_envelope
from workers.runtime.kafka_tools import reader
from workers.runtime.settings import Settings
from workers.stages.kit import StageContext, conclude

REVIEW_STAGE = "review"


@dataclass(frozen=True, slots=True)
class Pending:
    envelope: Envelope
    reason: str
    gate: str | None
    queued_at: float

    def summary(self) -> dict[str, Any]:
        """What a reviewer's list shows; the raw texts stay in the envelope."""
        c = self.envelope.candidate
        last = self.envelope.trail[-1] if self.envelope.trail else {}
        return {
            "candidate_id": c.id,
            "session_id": c.session_id,
            "turn": c.turn,
            "stage": last.get("stage"),
            "reason": self.reason,
            "route": self.envelope.route,
            "queued_at": self.queued_at,
        }


async def read_all(settings: Settings, topic: Topic, timeout: float) -> list[Any]:
    """Every record on `topic` up to its end as of now (no consumer group), within `timeout`."""
    consumer = reader(settings, settings.topic(topic))
    await consumer.start()
    try:
        partitions = consumer.assignment()
        end = await consumer.end_offsets(list(partitions))
        records = []
        deadline = time.monotonic() + timeout
        while [tp for tp in partitions if await consumer.position(tp) < end[tp]]:
            if time.monotonic() > deadline:
                break
            batch = await consumer.getmany(timeout_ms=500)
            for recs in batch.values():
                records.extend(recs)
        return records
    finally:
        await consumer.stop()


async def pending(settings: Settings, timeout: float = 20.0) -> list[Pending]:
    """Items on escalations.review that no person has decided yet, oldest first."""
    decided = {
        rec["candidate_id"]
        for rec in (loads(r.value) for r in await read_all(settings, Topic.DECISIONS, timeout))
        if rec.get("stage") == REVIEW_STAGE
    }
    queue: dict[str, Pending] = {}
    for record in await read_all(settings, Topic.REVIEW, timeout):
        try:
            env = parse_envelope(record.value)
        except MalformedMessage:
            continue
        if env.candidate.id in decided:
            continue
        last = env.trail[-1] if env.trail else {}
        queue[env.candidate.id] = Pending(
            env, str(last.get("reason", "")), last.get("gate"), record.timestamp / 1000.0
        )
    return sorted(queue.values(), key=lambda p: p.queued_at)


async def decide(
    settings: Settings, policy: Policy, candidate_id: str, verdict: HumanVerdict, by: str, note: str
) -> dict[str, Any]:
    """Record a person's verdict and send the candidate on; returns the decision record."""
    if not by.strip():
        raise ValueError("--by must name the person deciding")
    items = {p.envelope.candidate.id: p for p in await pending(settings)}
    if candidate_id not in items:
        raise LookupError(
            f"{candidate_id!r} is not waiting for review (unknown or already decided)"
        )
    env = items[candidate_id].envelope
    human = HumanPayload(verdict.value, by, note, time.time())
    ctx = StageContext(policy=policy, default_route=settings.default_route)
    emits = conclude(
        ctx,
        env,
        stage=REVIEW_STAGE,
        action=verdict.value,
        reason=reason(verdict, by, note),
        verdict=verdict,
        started=time.perf_counter(),
        method="human",
        evidence={"reviewer": by, "note": note},
        update=lambda e: replace(e, human=human),
    )
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.bootstrap_servers, acks="all", max_request_size=MAX_MESSAGE_BYTES
    )
    await producer.start()
    try:
        for e in emits:
            await producer.send_and_wait(
                settings.topic(e.topic), e.value, key=e.key, headers=list(e.headers)
            )
    finally:
        await producer.stop()
    return loads(emits[0].value)
