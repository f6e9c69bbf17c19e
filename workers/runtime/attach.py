"""`groundstream attach --source TOPIC`: gate an existing bus without changing its agents.

Reads the user's topic in its own consumer group, maps each message with the policy's
`[attach]` mapping (`pipeline.policy.attach`), and sends what it finds on:

* a candidate → `candidates`, keyed by its session, once it passes the schema check
  (`topics.schema.candidate_from_dict`; a failure dead-letters the message, as geometry
  would);
* anything else the mapping reads → the pass-through topic, untouched: value, key and
  headers as they were;
* a message the mapping cannot read → `deadletter`, raw bytes and reason.

Attaching is idempotent. Candidate ids are deterministic (the message's own id, else its
topic/partition/offset), and before it sends anything attach reads the ids already on
`candidates` and the positions it dead-lettered before: a candidate attached before — by
an earlier run over the same offsets, or by this run before a restart — is counted and
skipped, never sent twice, and a message it could not read gets one dead letter (one
outcome). Pass-through copies are at least once: a second run over the same offsets in
a fresh group copies them again. (The outcome
ledger is the backstop: a second message with a decided id never gets a second outcome.)
Offsets are committed after the batch's sends are acknowledged, so a crash repeats at
most a batch, and the repetition is skipped as above.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer, ConsumerRecord
from aiokafka.admin import NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from pipeline.policy.attach import AttachMapping, Kind, map_message
from pipeline.trail.replay import message_ids
from topics import clients
from topics.codec import dumps
from topics.names import MAX_MESSAGE_BYTES, Topic
from topics.schema import MalformedMessage, candidate_from_dict
from topics.security.keys import Signer
from workers.interfaces import Emit, Inbound
from workers.runtime.ranges import read_range
from workers.runtime.settings import Settings
from workers.runtime.signing import require_keys, signer_for
from workers.stages.kit import deadletter, signed_emits

STAGE = "attach"


def pass_through_topic(source: str) -> str:
    """Where non-candidates go by default: next to the source, in the user's namespace."""
    return f"{source}.passthrough"


@dataclass(frozen=True, slots=True)
class Send:
    """One message to produce, by its physical topic name (the source's own namespace)."""

    topic: str
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()

    @classmethod
    def of(cls, emit: Emit, settings: Settings) -> Send:
        return cls(settings.topic(emit.topic), emit.key, emit.value, emit.headers)


@dataclass(frozen=True, slots=True)
class Routed:
    """Where one source message goes: its sends, and what it counted as."""

    sends: tuple[Send, ...]
    counted: str
    candidate_id: str | None = None


def route_message(
    message: ConsumerRecord,
    mapping: AttachMapping,
    settings: Settings,
    pass_through: str,
    known: set[str],
    now: float,
    signer: Signer | None = None,
) -> Routed:
    """The sends for one message of the source topic (module docstring); its dead
    letter's records signed by `signer` (attach's own key)."""
    mapped = map_message(
        message.value,
        message.key,
        mapping,
        topic=message.topic,
        partition=message.partition,
        offset=message.offset,
    )
    headers = tuple(message.headers or ())
    if mapped.kind is Kind.PASS_THROUGH:
        return Routed(
            (Send(pass_through, message.key, message.value or b"", headers),), "pass_through"
        )
    reason = mapped.reason
    if mapped.kind is Kind.CANDIDATE and mapped.candidate is not None:
        try:
            candidate = candidate_from_dict(mapped.candidate)
        except MalformedMessage as exc:
            reason = f"attach mapping: {exc.reason}"
        else:
            if candidate.id in known:
                return Routed((), "duplicate", candidate.id)
            send = Send(
                settings.topic(Topic.CANDIDATES),
                candidate.session_id.encode(),
                dumps(candidate.to_dict()),
                headers,
            )
            return Routed((send,), "candidates", candidate.id)
    item = Inbound(
        message.key, message.value, message.topic, message.partition, message.offset, headers
    )
    if position(message) in known:
        return Routed((), "duplicate")  # dead-lettered by an earlier attach: one outcome
    emits = signed_emits(signer, deadletter(item, reason, STAGE, now, direct=True))
    sends = tuple(Send.of(e, settings) for e in emits)
    return Routed(sends, "deadletter")


async def prepare_topics(settings: Settings, source: str, pass_through: str) -> None:
    """The source must exist; the pass-through topic is created like it if it does not
    (the user's namespace, so `topics create` does not know it)."""
    admin = clients.admin(settings.kafka())
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        if source not in existing:
            raise LookupError(f"topic {source} does not exist")
        if pass_through in existing:
            return
        (described,) = await admin.describe_topics([source])
        partitions = len(described["partitions"])
        with contextlib.suppress(TopicAlreadyExistsError):
            await admin.create_topics([NewTopic(pass_through, partitions, settings.replication)])
    finally:
        await admin.close()


def position(message: ConsumerRecord) -> str:
    """A source message's place, the name a dead letter of it is known by."""
    return f"{message.topic}/{message.partition}/{message.offset}"


async def known_ids(settings: Settings) -> set[str]:
    """Every id already on `candidates`, and the source position of every message attach
    dead-lettered: both are outcomes a second attach over the same offsets must not add."""
    messages = await read_range(settings, settings.topic(Topic.CANDIDATES))
    known = {i for m in messages for i in message_ids(m.value, m.topic, m.partition, m.offset)}
    for dead in await read_range(settings, settings.topic(Topic.DEADLETTER)):
        headers = {k: v.decode("utf-8", "replace") for k, v in dead.headers or ()}
        if headers.get("gs-stage") == STAGE:
            known.add(
                f"{headers.get('gs-source-topic')}/{headers.get('gs-source-partition')}/"
                f"{headers.get('gs-source-offset')}"
            )
    return known


async def _send_batch(producer: AIOKafkaProducer, routed: Sequence[Routed]) -> None:
    futures = [
        await producer.send(s.topic, s.value, key=s.key, headers=list(s.headers))
        for r in routed
        for s in r.sends
    ]
    await asyncio.gather(*futures)


async def attach(
    settings: Settings,
    source: str,
    mapping: AttachMapping,
    *,
    pass_through: str | None = None,
    group: str | None = None,
    until_idle: float | None = None,
) -> Counter[str]:
    """Attach `source` until cancelled, or until it has been idle `until_idle` seconds.
    `group`: the consumer group (default `<prefix>groundstream-attach`)."""
    target = pass_through or pass_through_topic(source)
    require_keys(settings, STAGE, signs=True, trusts=False)
    await prepare_topics(settings, source, target)
    known = await known_ids(settings)
    signer = signer_for(settings, STAGE)  # its dead letters' records, signed as attach
    kafka = settings.kafka()
    consumer = clients.consumer(
        kafka,
        source,
        group_id=group or f"{settings.topic_prefix}groundstream-attach",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        max_partition_fetch_bytes=MAX_MESSAGE_BYTES,
    )
    producer = clients.producer(
        kafka,
        acks="all",
        enable_idempotence=True,
        max_request_size=MAX_MESSAGE_BYTES,
    )
    counts: Counter[str] = Counter()
    await producer.start()
    await consumer.start()
    try:
        idle_since = time.monotonic()
        while True:
            batches = await consumer.getmany(timeout_ms=500, max_records=settings.batch_size)
            messages = [m for tp in sorted(batches) for m in batches[tp]]
            if not messages:
                if not consumer.assignment():
                    idle_since = time.monotonic()  # still joining the group: not idle yet
                elif until_idle is not None and time.monotonic() - idle_since >= until_idle:
                    return counts
                continue
            routed = []
            for message in messages:
                r = route_message(message, mapping, settings, target, known, time.time(), signer)
                if r.counted == "candidates" and r.candidate_id is not None:
                    known.add(r.candidate_id)
                elif r.counted == "deadletter":
                    known.add(position(message))
                counts[r.counted] += 1
                routed.append(r)
            await _send_batch(producer, routed)
            await consumer.commit()
            idle_since = time.monotonic()
    finally:
        await consumer.stop()
        await producer.stop()
