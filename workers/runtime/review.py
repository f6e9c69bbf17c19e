"""The review queue on Kafka: list what waits for a person, and record their verdict.

The verdict itself is `pipeline.stages.review` (the first claim wins), concluded by the
review adapter (`workers.stages.review`); this module is the Kafka I/O around it.

One verdict per parked candidate, whoever else is deciding at the same moment. Kafka has
no compare-and-set, but one partition has a total order, so the one-partition `control`
topic arbitrates: a reviewer first appends a *claim* (the verdict, who, when) keyed by
the candidate and the hash of the record that parked it, reads the topic back to its end,
and only the first claim for that parking is routed. A later reviewer is told "already
decided by … at …". The winner's decision record and its envelope are then written in
one Kafka transaction (verdict and routing atomically), under a transactional id derived
from the parking, so two processes completing the same claim fence each other.

A crash between the claim and the routing leaves a claimed item on the list (nothing
vanishes); any reviewer acting on it after `CLAIM_STALE_SECONDS` completes the *winning*
claim's verdict, not their own. An item is decided when a `review` record links to (has
as `prev_hash`) the record that parked it — with trusted keys, a record the review key
signed — and a candidate parked again later is listed again.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from aiokafka import TopicPartition

from pipeline.errors import GroundstreamError
from pipeline.policy.document import Policy
from pipeline.stages.review import Claim, HumanVerdict, first_claim
from pipeline.trail.records import iso_time
from topics import clients
from topics.codec import dumps, loads
from topics.names import MAX_MESSAGE_BYTES, Topic
from topics.schema import Envelope, MalformedMessage, parse_envelope
from topics.security.keys import TrustedKeys
from workers.clients.partitions import partitions as held_partitions
from workers.interfaces import StageContext
from workers.runtime.kafka_tools import reader
from workers.runtime.settings import Settings
from workers.runtime.signing import record_refusal, require_keys, signer_for, trusted_for
from workers.stages.kit import signed_emits
from workers.stages.review import REVIEW_STAGE, review_emits

log = logging.getLogger("groundstream.review")

CLAIM_PREFIX = b"review-claim/"
CLAIM_STALE_SECONDS = 60.0
"""A claim this old without its routing is taken as abandoned (its writer crashed)."""


def transactional_prefix(prefix: str) -> str:
    """What the transactional id of every verdict's routing starts with (one id per
    parking, `_route`); the review principal's ACLs grant this prefix."""
    return f"{prefix}groundstream-review-"


class AlreadyDecided(GroundstreamError, LookupError):
    """A verdict came second: another reviewer's verdict on this parking won."""

    def __init__(self, candidate_id: str, by: str, at: float, verdict: str) -> None:
        self.by, self.at, self.verdict = by, at, verdict
        when = iso_time(at)
        super().__init__(
            f"{candidate_id!r} is not waiting for review: already decided by {by} at {when} "
            f"({verdict})"
        )


def claim_key(claim: Claim) -> bytes:
    """A claim's key on the control topic: its candidate and its own id."""
    return CLAIM_PREFIX + f"{claim.candidate_id}/{claim.claim_id}".encode()


def encode_claim(claim: Claim) -> bytes:
    return dumps({"kind": "review_claim", **{f: getattr(claim, f) for f in Claim.__slots__}})


def read_claim(key: bytes | None, value: bytes | None) -> Claim | None:
    """A claim from a control message; None for anything else (never raises)."""
    if key is None or not key.startswith(CLAIM_PREFIX) or value is None:
        return None
    try:
        data = loads(value)
        claim = Claim(**{f: data[f] for f in Claim.__slots__})
    except (ValueError, KeyError, TypeError):
        return None
    texts = (claim.claim_id, claim.candidate_id, claim.parked, claim.verdict, claim.by)
    if not all(isinstance(t, str) for t in texts) or not isinstance(claim.at, int | float):
        return None
    return claim


@dataclass(frozen=True, slots=True)
class Pending:
    envelope: Envelope
    reason: str
    gate: str | None
    queued_at: float
    claimed: Claim | None = None

    def summary(self) -> dict[str, Any]:
        """What a reviewer's list shows; the raw texts stay in the envelope."""
        c = self.envelope.candidate
        last = self.envelope.trail[-1] if self.envelope.trail else {}
        out = {
            "candidate_id": c.id,
            "session_id": c.session_id,
            "turn": c.turn,
            "stage": last.get("stage"),
            "reason": self.reason,
            "route": self.envelope.route,
            "queued_at": self.queued_at,
        }
        if self.claimed is not None:
            out["claimed_by"] = self.claimed.by
            out["claimed_at"] = self.claimed.at
        return out

    def texts(self) -> dict[str, Any]:
        """What the reviewer decides on, as raw text: for the holder of access only."""
        c = self.envelope.candidate
        return {
            "question": c.question,
            "context": list(c.context_chunks or ()),
            "sources": list(c.chunk_sources),
            "answer": c.response,
        }


async def read_all(settings: Settings, topic: Topic, timeout: float) -> list[Any]:
    consumer = reader(settings, settings.topic(topic))
    await consumer.start()
    try:
        # Right after start the subscription may not hold the topic's partitions yet: read
        # then, the topic looked empty and a decided parking was listed as waiting.
        partitions = await held_partitions(consumer, settings.topic(topic))
        end = await consumer.end_offsets(partitions)
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


async def _claims(settings: Settings, timeout: float) -> list[Claim]:
    records = await read_all(settings, Topic.CONTROL, timeout)
    records.sort(key=lambda r: r.offset)
    return [c for c in (read_claim(r.key, r.value) for r in records) if c is not None]


def _decisions(
    records: list[Any], trusted: TrustedKeys | None
) -> tuple[set[str], dict[str, dict[str, Any]]]:
    """(parkings already decided, last review record per candidate) from `decisions`.
    With trusted keys, a `review` record counts only when the review key signed it:
    whoever else may write `decisions` cannot hide a parked answer."""
    parked: set[str] = set()
    last: dict[str, dict[str, Any]] = {}
    for r in records:
        try:
            rec = loads(r.value)
        except ValueError:
            continue
        if not isinstance(rec, dict) or rec.get("stage") != REVIEW_STAGE:
            continue
        if trusted is not None and (why := record_refusal(trusted, r.key, r.value, r.headers, rec)):
            log.warning("a review record not taken as a verdict (%s): %s", _where(r), why)
            continue
        parked.add(str(rec.get("prev_hash", "")))
        last[str(rec.get("candidate_id"))] = rec
    return parked, last


async def pending(settings: Settings, timeout: float = 20.0) -> list[Pending]:
    """Items on escalations.review that no person has decided yet, oldest first."""
    require_keys(settings, REVIEW_STAGE, signs=False, trusts=True)
    records = await read_all(settings, Topic.DECISIONS, timeout)
    decided, _ = _decisions(records, trusted_for(settings, REVIEW_STAGE))
    claims = await _claims(settings, timeout)
    queue: dict[str, Pending] = {}
    for record in await read_all(settings, Topic.REVIEW, timeout):
        try:
            env = parse_envelope(record.value)
        except MalformedMessage:
            continue
        if env.last_hash in decided:
            queue.pop(env.candidate.id, None)
            continue
        last = env.trail[-1] if env.trail else {}
        queue[env.candidate.id] = Pending(
            env,
            str(last.get("reason", "")),
            last.get("gate"),
            record.timestamp / 1000.0,
            first_claim(claims, env.candidate.id, env.last_hash),
        )
    return sorted(queue.values(), key=lambda p: p.queued_at)


async def decide(
    settings: Settings, policy: Policy, candidate_id: str, verdict: HumanVerdict, by: str, note: str
) -> dict[str, Any]:
    """Record a person's verdict and send the candidate on; returns the decision record.

    Raises AlreadyDecided when another verdict on this parking came first, LookupError
    when the candidate is not waiting for review at all."""
    if not by.strip():
        raise ValueError("--by must name the person deciding")
    require_keys(settings, REVIEW_STAGE, signs=True, trusts=True)
    items = {p.envelope.candidate.id: p for p in await pending(settings)}
    if candidate_id not in items:
        records = await read_all(settings, Topic.DECISIONS, 20.0)
        _, last = _decisions(records, trusted_for(settings, REVIEW_STAGE))
        if candidate_id in last:
            rec = last[candidate_id]
            evidence = rec.get("evidence") or {}
            raise AlreadyDecided(
                candidate_id,
                str(evidence.get("reviewer", "?")),
                _epoch(rec),
                str(rec.get("action")),
            )
        raise LookupError(f"{candidate_id!r} is not waiting for review")
    item = items[candidate_id]
    parked = item.envelope.last_hash
    winner = item.claimed
    if winner is None:
        mine = Claim(uuid.uuid4().hex, candidate_id, parked, verdict.value, by, note, time.time())
        await _send_claim(settings, mine)
        winner = first_claim(await _claims(settings, 20.0), candidate_id, parked)
        if winner is None:  # our own claim must be there: the topic did not read back
            raise TimeoutError("the control topic did not read back the review claim")
        if winner.claim_id != mine.claim_id:
            raise AlreadyDecided(candidate_id, winner.by, winner.at, winner.verdict)
    elif winner.by != by and time.time() - winner.at < CLAIM_STALE_SECONDS:
        raise AlreadyDecided(candidate_id, winner.by, winner.at, winner.verdict)
    record = await _route(settings, policy, item.envelope, winner)
    if winner.by != by:  # an abandoned claim completed: theirs stands, not ours
        raise AlreadyDecided(candidate_id, winner.by, winner.at, winner.verdict)
    return record


def _where(r: Any) -> str:
    return f"{r.topic}[{r.partition}]@{r.offset}"


def _epoch(record: dict[str, Any]) -> float:
    """A record's `decided_at` (ISO 8601) as epoch seconds; 0 when unreadable."""
    try:
        return datetime.fromisoformat(str(record.get("decided_at"))).timestamp()
    except ValueError:
        return 0.0


async def _send_claim(settings: Settings, claim: Claim) -> None:
    producer = clients.producer(settings.kafka(), acks="all")
    await producer.start()
    try:
        topic = settings.topic(Topic.CONTROL)
        await producer.send_and_wait(topic, encode_claim(claim), key=claim_key(claim), partition=0)
    finally:
        await producer.stop()


async def _route(settings: Settings, policy: Policy, env: Envelope, claim: Claim) -> dict[str, Any]:
    key = settings.stage_key.encode() or None
    ctx = StageContext(policy=policy, default_route=settings.default_route, stage_key=key)
    # The person's verdict is signed with the review key: the writer and the pending list
    # trust it only so.
    emits = signed_emits(signer_for(settings, REVIEW_STAGE), review_emits(ctx, env, claim))
    parking = hashlib.sha256(f"{env.candidate.id}/{env.last_hash}".encode()).hexdigest()[:24]
    producer = clients.producer(
        settings.kafka(),
        acks="all",
        enable_idempotence=True,
        transactional_id=f"{transactional_prefix(settings.topic_prefix)}{parking}",
        max_request_size=MAX_MESSAGE_BYTES,
    )
    await producer.start()
    try:
        async with producer.transaction():
            sent = [
                await producer.send(
                    settings.topic(e.topic), e.value, key=e.key, headers=list(e.headers)
                )
                for e in emits
            ]
        written = [await f for f in sent]
    finally:
        await producer.stop()
    await _until_readable(settings, written)
    return loads(emits[0].value)


async def _until_readable(settings: Settings, written: list[Any], timeout: float = 10.0) -> None:
    """Wait until a read_committed reader sees `written` (RecordMetadata of a committed
    transaction). The broker answers a commit before it has written the transaction's
    markers, so a `review list` right after `review decide` could still list the item;
    after this it cannot. Past `timeout` the verdict stands (it is committed) and only the
    read-back is late: say so and return."""
    last: dict[TopicPartition, int] = {}
    for meta in written:
        tp = TopicPartition(meta.topic, meta.partition)
        last[tp] = max(last.get(tp, -1), meta.offset)
    consumer = reader(settings)
    await consumer.start()
    try:
        deadline = time.monotonic() + timeout
        while True:
            ends = await consumer.end_offsets(list(last))  # read_committed: the stable end
            if all(ends[tp] > offset for tp, offset in last.items()):
                return
            if time.monotonic() > deadline:
                log.warning("a committed review verdict is not readable after %.0fs", timeout)
                return
            await asyncio.sleep(0.05)
    finally:
        await consumer.stop()
