"""The agent's side of the gate: submit an answer, get its verdict.

    async with AgentClient("127.0.0.1:9092") as client:  # or a topics.clients.KafkaConnection
        outcome = await client.submit(candidate, timeout=30)
        if outcome.accepted:
            history.append(candidate["response"])
        else:
            ...  # outcome.action says what to do: fallback, regenerate, reject, escalate

`submit` sends the candidate to `candidates` and waits for its outcome, read from the
outcome ledger (`outcomes`: compacted, keyed by candidate id, written by the terminal
writer in the same transaction as the outcome, each entry carrying its `outcome` record)
at read_committed. The client keeps an index of the ledger by candidate id, read from its
start when the client starts and followed from then on, so:

* an id that already has an outcome is not sent again: `submit` returns that first
  outcome (`Outcome.resubmitted` is true), and nothing is decided twice;
* an id reused for other content is refused (`CandidateConflict`): every record carries
  the candidate's `content_hash` (`pipeline.trail.records.content_hash`), compared here;
* a timeout raises `OutcomeTimeout`, which says the candidate is still in flight; its
  outcome still arrives, and `outcome(id)` waits for it again.

`accepted(session_id)` yields a session's accepted answers in the order they reached
`state` (a session lives on one partition, so that order is the session's). `Client` is
the same thing for synchronous code: it runs the async client on a thread of its own.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from pipeline.errors import GroundstreamError
from pipeline.trail.records import OUTCOME_STAGE, content_hash
from topics import clients
from topics.clients import KafkaConnection
from topics.codec import dumps, loads
from topics.names import MAX_MESSAGE_BYTES, Topic
from topics.schema import MalformedMessage, candidate_from_dict, parse_envelope
from workers.clients.partitions import partitions

T = TypeVar("T")
DEADLETTER = "deadletter"
STATE = "state"


class CandidateConflict(GroundstreamError, ValueError):
    """A candidate id already decided for other content; send the new answer under a new id."""


class OutcomeTimeout(GroundstreamError, TimeoutError):
    """No outcome within the time asked for; the candidate is still in flight."""

    retryable = True

    def __init__(self, candidate_id: str, timeout: float) -> None:
        self.candidate_id = candidate_id
        super().__init__(
            f"no outcome for candidate {candidate_id!r} within {timeout:g}s: it is still in "
            "flight and its outcome will still arrive (await client.outcome(id) for it)"
        )


@dataclass(frozen=True, slots=True)
class Outcome:
    """A candidate's final outcome, as its `outcome` record states it."""

    candidate_id: str
    """The candidate's id."""
    accepted: bool
    """True when the answer is on `state`: use it."""
    action: str
    """`accept`, or what the caller should do instead: fallback, regenerate, reject,
    escalate (a person decides), or deadletter (the candidate could not be read)."""
    topic: str
    """The terminal topic it was delivered to (`state`, `escalations.*`, `deadletter`)."""
    reason: str
    """Why, in one line: the deciding stage and its reason."""
    record: Mapping[str, Any] = field(repr=False)
    """The whole `outcome` decision record (docs/reference/records.md)."""
    resubmitted: bool = False
    """True when the id had its outcome before this `submit`: nothing was sent."""

    @classmethod
    def from_record(cls, record: Mapping[str, Any], *, resubmitted: bool = False) -> Outcome:
        """The outcome an `outcome` decision record states."""
        topic = str(record.get("topic", ""))
        return cls(
            candidate_id=str(record.get("candidate_id")),
            accepted=topic == STATE,
            action=DEADLETTER if topic == DEADLETTER else str(record.get("action", "")),
            topic=topic,
            reason=str(record.get("reason", "")),
            record=dict(record),
            resubmitted=resubmitted,
        )


class OutcomeIndex:
    """Outcome records by candidate id, from the ledger's first offset on, live."""

    def __init__(self, kafka: KafkaConnection, topic: str) -> None:
        self.kafka, self.topic = kafka, topic
        self.consumer: AIOKafkaConsumer | None = None
        self.outcomes: dict[str, Mapping[str, Any]] = {}
        self.waiters: dict[str, list[asyncio.Future[Mapping[str, Any]]]] = {}
        self.caught_up = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.consumer = _reader(self.kafka, self.topic)
        await self.consumer.start()
        tps = await partitions(self.consumer, self.topic)
        await self.consumer.seek_to_beginning(*tps)
        ends = await self.consumer.end_offsets(tps)
        self._task = asyncio.create_task(self._follow(tps, ends))
        caught_up = asyncio.create_task(self.caught_up.wait())
        await asyncio.wait({self._task, caught_up}, return_when=asyncio.FIRST_COMPLETED)
        if self._task.done():
            caught_up.cancel()
            self._task.result()  # the reader failed before it caught up: say why

    async def _follow(self, tps: list[TopicPartition], ends: dict[TopicPartition, int]) -> None:
        assert self.consumer is not None
        behind = {tp for tp in tps if ends[tp] > 0}
        if not behind:
            self.caught_up.set()
        while True:
            batches = await self.consumer.getmany(timeout_ms=200)
            for records in batches.values():
                for message in records:
                    self._add(message.value)
            if behind:
                behind = {tp for tp in behind if await self.consumer.position(tp) < ends[tp]}
                if not behind:
                    self.caught_up.set()

    def _add(self, value: bytes | None) -> None:
        """One ledger entry: the outcome record it carries, unless the id has one."""
        try:
            entry = loads(value) if value else None
        except ValueError:
            return
        record = entry.get("outcome") if isinstance(entry, dict) else None
        if not isinstance(record, dict) or record.get("stage") != OUTCOME_STAGE:
            return
        cid = record.get("candidate_id")
        if not isinstance(cid, str) or cid in self.outcomes:
            return  # the first outcome is the outcome
        self.outcomes[cid] = record
        for waiter in self.waiters.pop(cid, []):
            if not waiter.done():
                waiter.set_result(record)

    async def wait(self, candidate_id: str) -> Mapping[str, Any]:
        if candidate_id in self.outcomes:
            return self.outcomes[candidate_id]
        waiter: asyncio.Future[Mapping[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiters.setdefault(candidate_id, []).append(waiter)
        return await waiter

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.consumer is not None:
            await self.consumer.stop()


def _reader(kafka: KafkaConnection, topic: str) -> AIOKafkaConsumer:
    """All of `topic`, no group, committed messages only."""
    return clients.consumer(
        kafka,
        topic,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        max_partition_fetch_bytes=MAX_MESSAGE_BYTES,
    )


class AgentClient:
    """Submit candidates and read their outcomes (module docstring)."""

    def __init__(
        self, kafka: KafkaConnection | str = "127.0.0.1:9092", topic_prefix: str = ""
    ) -> None:
        """`kafka`: the cluster's connection (TLS, SASL), or bootstrap servers for a
        PLAINTEXT one."""
        self.kafka, self.prefix = clients.connection(kafka), topic_prefix
        self.producer: AIOKafkaProducer | None = None
        self.index = OutcomeIndex(self.kafka, Topic.OUTCOMES.full(topic_prefix))
        self.sent: dict[str, str] = {}
        """Content hashes of the ids this client has sent, for conflicts still in flight."""

    async def start(self) -> None:
        """Connect, and read the outcome ledger's index (`async with` calls it)."""
        self.producer = clients.producer(
            self.kafka,
            acks="all",
            enable_idempotence=True,
            max_request_size=MAX_MESSAGE_BYTES,
        )
        await self.producer.start()
        try:
            await self.index.start()
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Close the connections (`async with` calls it)."""
        await self.index.stop()
        if self.producer is not None:
            await self.producer.stop()

    async def __aenter__(self) -> AgentClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _check(self, record: Mapping[str, Any], candidate_id: str, digest: str) -> None:
        recorded = record.get("content_hash")
        if recorded is not None and recorded != digest:
            raise CandidateConflict(
                f"candidate id {candidate_id!r} was already decided for other content "
                f"({record.get('topic')} at {record.get('decided_at')}): ids are idempotency "
                "keys; send a new answer under a new id"
            )

    async def submit(self, candidate: Mapping[str, Any], timeout: float = 30.0) -> Outcome:
        """Send `candidate` (a candidate object, as `groundstream verify` reads them) and
        return its outcome; see the module docstring for resubmissions and timeouts."""
        parsed = candidate_from_dict(dict(candidate))  # MalformedMessage is a ValueError
        data = parsed.to_dict()
        digest = content_hash(data)
        known = self.index.outcomes.get(parsed.id)
        if known is not None:
            self._check(known, parsed.id, digest)
            return Outcome.from_record(known, resubmitted=True)
        earlier = self.sent.get(parsed.id)
        if earlier is not None and earlier != digest:
            raise CandidateConflict(
                f"candidate id {parsed.id!r} is in flight with other content: "
                "send the new answer under a new id"
            )
        if earlier is None:
            if self.producer is None:
                raise RuntimeError("the client is not started: use `async with AgentClient(...)`")
            self.sent[parsed.id] = digest
            await self.producer.send_and_wait(
                Topic.CANDIDATES.full(self.prefix), dumps(data), key=parsed.session_id.encode()
            )
        return await self.outcome(parsed.id, timeout, digest)

    async def outcome(
        self, candidate_id: str, timeout: float, digest: str | None = None
    ) -> Outcome:
        """Wait up to `timeout` seconds for the outcome of an id already sent."""
        try:
            record = await asyncio.wait_for(asyncio.shield(self.index.wait(candidate_id)), timeout)
        except TimeoutError:
            raise OutcomeTimeout(candidate_id, timeout) from None
        digest = digest or self.sent.get(candidate_id)
        if digest is not None:
            self._check(record, candidate_id, digest)
        return Outcome.from_record(record)

    async def accepted(self, session_id: str) -> AsyncIterator[dict[str, Any]]:
        """The session's accepted candidates, in the order they reached `state`, as of
        now (each as the candidate object that was accepted)."""
        topic = Topic.STATE.full(self.prefix)
        consumer = _reader(self.kafka, topic)
        await consumer.start()
        try:
            tps = await partitions(consumer, topic)
            await consumer.seek_to_beginning(*tps)
            ends = await consumer.end_offsets(tps)
            pending = {tp for tp in tps if ends[tp] > 0}
            while pending:
                batches = await consumer.getmany(*pending, timeout_ms=500)
                for records in batches.values():
                    for message in records:
                        try:
                            env = parse_envelope(message.value)
                        except MalformedMessage:
                            continue  # not ours to judge here; the auditor's
                        if env.candidate.session_id == session_id:
                            yield env.candidate.to_dict()
                pending = {tp for tp in pending if await consumer.position(tp) < ends[tp]}
        finally:
            await consumer.stop()


class Client:
    """`AgentClient` for synchronous code: the same calls, blocking, on a private loop."""

    def __init__(
        self, kafka: KafkaConnection | str = "127.0.0.1:9092", topic_prefix: str = ""
    ) -> None:
        """Connect at once: `kafka` as for `AgentClient`; `topic_prefix` is the ladder's
        GROUNDSTREAM_TOPIC_PREFIX."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._client = self._run(self._make(kafka, topic_prefix))

    async def _make(self, kafka: KafkaConnection | str, prefix: str) -> AgentClient:
        client = AgentClient(kafka, prefix)
        await client.start()
        return client

    def _run(self, coroutine: Any) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        return future.result()

    def submit(self, candidate: Mapping[str, Any], timeout: float = 30.0) -> Outcome:
        """`AgentClient.submit`, blocking: send `candidate`, return its outcome."""
        return self._run(self._client.submit(candidate, timeout))

    def outcome(self, candidate_id: str, timeout: float = 30.0) -> Outcome:
        """`AgentClient.outcome`, blocking: wait for the outcome of an id already sent."""
        return self._run(self._client.outcome(candidate_id, timeout))

    def accepted(self, session_id: str) -> Iterator[dict[str, Any]]:
        """`AgentClient.accepted`, blocking: the session's accepted candidates, in order."""

        async def collect() -> list[dict[str, Any]]:
            return [c async for c in self._client.accepted(session_id)]

        return iter(self._run(collect()))

    def close(self) -> None:
        """Close the connections and the client's thread (`with` calls it)."""
        self._run(self._client.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
