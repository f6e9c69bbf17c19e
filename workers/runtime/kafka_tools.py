"""`groundstream produce`, `consume`, `outcomes` and `control kill-switch status`: the
small tools for trying the Kafka path by hand."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Collection, Sequence
from pathlib import Path
from typing import IO, Any

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from pipeline.errors import GroundstreamError
from topics import clients
from topics.codec import dumps, loads
from topics.names import MAX_MESSAGE_BYTES, Topic
from topics.schema import MalformedMessage, parse_candidate
from workers.interfaces import ControlState
from workers.runtime.control import read_control
from workers.runtime.outcomes import Trails
from workers.runtime.settings import Settings
from workers.runtime.telemetry import configure, send_span

CONTROL_READ_TIMEOUT_S = 10.0


class UnknownTopic(GroundstreamError, LookupError):
    """The topic does not exist: a consumer would log an error every 100 ms until it
    gives up with a traceback, so the tools check first and name what does exist."""

    def __init__(self, settings: Settings, topic: str, existing: Collection[str]) -> None:
        known = [t.value for t in Topic if settings.topic(t) in existing]
        where = f"{settings.bootstrap_servers}" + (
            f" (prefix {settings.topic_prefix!r})" if settings.topic_prefix else ""
        )
        listed = ", ".join(known) if known else "none (run `groundstream topics create`)"
        super().__init__(f"no topic {topic!r} on {where}; known topics: {listed}")


def reader(settings: Settings, *topics: str, **options: Any) -> AIOKafkaConsumer:
    """A consumer outside any group that reads ``topics`` from their first offset and
    commits nothing: for the tools that look at a topic (consume, review list, dashboard)
    without taking part in a stage's group. It reads committed messages only: stages
    write in transactions, and an aborted attempt's outputs must never be seen."""
    return clients.consumer(
        settings.kafka(),
        *topics,
        group_id=None,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        isolation_level="read_committed",
        max_partition_fetch_bytes=MAX_MESSAGE_BYTES,
        **options,
    )


async def open_reader(settings: Settings, topic: str) -> tuple[AIOKafkaConsumer, str]:
    """A started `reader` and the physical name of `topic` (logical), once the broker
    says it exists; UnknownTopic otherwise. The caller subscribes or assigns."""
    consumer = reader(settings)
    name = f"{settings.topic_prefix}{topic}"
    try:
        await consumer.start()
        existing = await consumer.topics()
        if name not in existing:
            raise UnknownTopic(settings, topic, existing)
    except BaseException:
        await consumer.stop()
        raise
    return consumer, name


async def _records(
    consumer: AIOKafkaConsumer, idle_timeout: float | None
) -> AsyncIterator[ConsumerRecord]:
    """Records as they come; ends after `idle_timeout` seconds without one (None: never)."""
    while True:
        batches = await consumer.getmany(timeout_ms=int((idle_timeout or 1.0) * 1000))
        if not batches and idle_timeout is not None:
            return
        for tp in sorted(batches):
            for record in batches[tp]:
                yield record


def numbered_lines(path: Path) -> list[tuple[int, bytes]]:
    """The file's non-blank lines with their 1-based line numbers."""
    lines = path.read_bytes().splitlines()
    return [(n, line) for n, line in enumerate(lines, start=1) if line.strip()]


def check_candidates(lines: Sequence[tuple[int, bytes]], max_bytes: int) -> dict[int, str]:
    """Line number → why the geometry stage would dead-letter that line, checked with the
    stage's own parser and size limit (GROUNDSTREAM_MAX_CANDIDATE_BYTES)."""
    bad = {}
    for n, line in lines:
        try:
            parse_candidate(line, max_bytes=max_bytes)
        except MalformedMessage as exc:
            bad[n] = exc.reason
    return bad


def _session_key(line: bytes) -> bytes | None:
    try:
        data = loads(line)
    except ValueError:
        return None
    session = data.get("session_id") if isinstance(data, dict) else None
    return session.encode() if isinstance(session, str) else None


async def produce_file(
    settings: Settings, path: Path, topic: str, *, leave_out: Collection[int] = ()
) -> int:
    """Send every non-blank line as one message, keyed by its session id when it has one,
    except the line numbers in `leave_out`.
    Each message starts its own trace: a `send` span whose context goes in `traceparent`."""
    configure("groundstream-produce", settings.otlp_endpoint)
    producer = clients.producer(settings.kafka(), acks="all", max_request_size=MAX_MESSAGE_BYTES)
    await producer.start()
    try:
        lines = [line for n, line in numbered_lines(path) if n not in leave_out]
        name = f"{settings.topic_prefix}{topic}"
        futures = []
        for line in lines:
            key = _session_key(line)
            with send_span(name, key) as headers:
                futures.append(await producer.send(name, line, key=key, headers=headers))
        await asyncio.gather(*futures)
        return len(lines)
    finally:
        await producer.stop()


def render(record) -> bytes:
    """A message as one JSON line: the value inline when it is JSON, else base64."""
    try:
        value = loads(record.value) if record.value is not None else None
        value_field = {"value": value}
    except ValueError:
        value_field = {"value_b64": base64.b64encode(record.value).decode()}
    return dumps(
        {
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
            "key": record.key.decode("utf-8", "replace") if record.key else None,
            "headers": {k: v.decode("utf-8", "replace") for k, v in (record.headers or ())},
            **value_field,
        }
    )


async def consume_topic(
    settings: Settings, topic: str, max_messages: int | None, timeout: float, out: IO[str]
) -> int:
    """Read a topic from the beginning (no consumer group) and print JSON lines."""
    consumer, name = await open_reader(settings, topic)
    consumer.subscribe([name])
    seen = 0
    try:
        async for record in _records(consumer, timeout):
            out.write(render(record).decode() + "\n")
            seen += 1
            if max_messages is not None and seen >= max_messages:
                break
        out.flush()
        return seen
    finally:
        await consumer.stop()


async def print_outcomes(settings: Settings, idle_timeout: float | None, out: IO[str]) -> Trails:
    """Print one line per candidate as its outcome arrives on `decisions` (see
    `outcomes.py`); returns the trails, whose `pending` are candidates still in flight."""
    consumer, name = await open_reader(settings, Topic.DECISIONS.value)
    consumer.subscribe([name])
    trails = Trails()
    try:
        async for record in _records(consumer, idle_timeout):
            try:
                line = trails.add(loads(record.value or b""))
            except ValueError:
                continue
            if line is not None:
                out.write(line + "\n")
                out.flush()
        return trails
    finally:
        await consumer.stop()


async def kill_switch_status(settings: Settings) -> ControlState | None:
    """The kill switch as the compacted control topic says once read to its end (what
    every worker serves); None when it was never set. TimeoutError if the end is not
    reached within CONTROL_READ_TIMEOUT_S."""
    consumer, name = await open_reader(settings, Topic.CONTROL.value)
    state = None
    try:
        tp = TopicPartition(name, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        async with asyncio.timeout(CONTROL_READ_TIMEOUT_S):
            end = (await consumer.end_offsets([tp]))[tp]
            while await consumer.position(tp) < end:
                for records in (await consumer.getmany(tp, timeout_ms=500)).values():
                    for record in records:
                        state = read_control(record.key, record.value) or state
        return state
    finally:
        await consumer.stop()
