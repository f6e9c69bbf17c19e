"""`groundstream produce` and `consume`: the small tools for trying the Kafka path by hand."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import IO, Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from topics.codec import dumps, loads
from topics.names import MAX_MESSAGE_BYTES
from workers.runtime.settings import Settings
from workers.runtime.telemetry import configure, send_span


def reader(settings: Settings, *topics: str, **options: Any) -> AIOKafkaConsumer:
    """A consumer outside any group that reads ``topics`` from their first offset and
    commits nothing: for the tools that look at a topic (consume, review list, dashboard)
    without taking part in a stage's group. It reads committed messages only: stages
    write in transactions, and an aborted attempt's outputs must never be seen."""
    return AIOKafkaConsumer(
        *topics,
        bootstrap_servers=settings.bootstrap_servers,
        group_id=None,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        isolation_level="read_committed",
        max_partition_fetch_bytes=MAX_MESSAGE_BYTES,
        **options,
    )


def _session_key(line: bytes) -> bytes | None:
    try:
        data = loads(line)
    except ValueError:
        return None
    session = data.get("session_id") if isinstance(data, dict) else None
    return session.encode() if isinstance(session, str) else None


async def produce_file(settings: Settings, path: Path, topic: str) -> int:
    """Send every non-blank line as one message, keyed by its session id when it has one.
    Each message starts its own trace: a `send` span whose context goes in `traceparent`."""
    configure("groundstream-produce", settings.otlp_endpoint)
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.bootstrap_servers, acks="all", max_request_size=MAX_MESSAGE_BYTES
    )
    await producer.start()
    try:
        lines = [line for line in path.read_bytes().splitlines() if line.strip()]
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
    consumer = reader(settings, f"{settings.topic_prefix}{topic}")
    await consumer.start()
    seen = 0
    try:
        while max_messages is None or seen < max_messages:
            batches = await consumer.getmany(timeout_ms=int(timeout * 1000))
            if not batches:
                break
            for records in batches.values():
                for record in records:
                    out.write(render(record).decode() + "\n")
                    seen += 1
                    if max_messages is not None and seen >= max_messages:
                        break
        out.flush()
        return seen
    finally:
        await consumer.stop()
