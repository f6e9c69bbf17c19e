"""Fixtures and helpers for tests that talk to a real Kafka broker.

* ``kafka_bootstrap`` (session): ``"127.0.0.1:<KAFKA_PORT or 9092>"``.  Uses a broker
  that already answers there; otherwise starts one with ``deploy/kafka/local.sh start``
  and stops it at session end (only if this fixture started it).
* ``topic_prefix`` (function): a unique ``"t-<uuid8>."`` per test; tests name their
  topics with it so runs against a long-lived broker do not collide.
* ``kafka_helpers`` (function): namespace with the async helpers below, for test
  modules that prefer not to import from this conftest.
* ``create_topics`` / ``produce`` / ``consume_all``: async helpers on plain aiokafka.

Every test collected under ``tests/integration`` is marked ``integration``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.client import AIOKafkaClient
from aiokafka.structs import RecordMetadata

INTEGRATION_DIR = Path(__file__).resolve().parent
REPO_ROOT = INTEGRATION_DIR.parents[1]
LOCAL_SH = REPO_ROOT / "deploy" / "kafka" / "local.sh"

# CreateTopics error code for "topic already exists".
_TOPIC_ALREADY_EXISTS = 36


def kafka_port() -> int:
    return int(os.environ.get("KAFKA_PORT", "9092"))


# --------------------------------------------------------------------- hooks --


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # This hook sees every collected item of the session: mark only ours.
    for item in items:
        try:
            item.path.resolve().relative_to(INTEGRATION_DIR)
        except ValueError:
            continue
        item.add_marker(pytest.mark.integration)


# ------------------------------------------------------------------ fixtures --


def _broker_answers(bootstrap: str, timeout: float = 5.0) -> bool:
    """True if a Kafka broker returns metadata at ``bootstrap``."""

    async def probe() -> None:
        client = AIOKafkaClient(bootstrap_servers=bootstrap, request_timeout_ms=int(timeout * 1000))
        try:
            await asyncio.wait_for(client.bootstrap(), timeout)
        finally:
            await client.close()

    try:
        asyncio.run(probe())
    except Exception:
        return False
    return True


def _local_sh(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = os.environ.copy()
    # The readiness probe in local.sh needs aiokafka; the interpreter running the
    # tests has it.
    env.setdefault("GROUNDSTREAM_PYTHON", sys.executable)
    return subprocess.run(
        [str(LOCAL_SH), *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    bootstrap = f"127.0.0.1:{kafka_port()}"
    if _broker_answers(bootstrap):
        yield bootstrap
        return

    for tool in ("java", "mvn"):
        if shutil.which(tool) is None:
            pytest.fail(f"no Kafka broker at {bootstrap} and no `{tool}` to start one")
    # If local.sh already has a broker of ours (e.g. still starting), reuse it and
    # leave it running afterwards.
    already_ours = _local_sh("status", timeout=30).returncode == 0
    started = time.monotonic()
    proc = _local_sh("start")
    if proc.returncode != 0:
        pytest.fail(
            f"`{LOCAL_SH} start` failed (rc={proc.returncode}) after "
            f"{time.monotonic() - started:.0f}s:\n{proc.stdout}\n{proc.stderr}",
            pytrace=False,
        )
    try:
        yield bootstrap
    finally:
        if not already_ours:
            stop = _local_sh("stop", timeout=120)
            if stop.returncode != 0:
                print(f"warning: `{LOCAL_SH} stop` failed:\n{stop.stdout}\n{stop.stderr}")


@pytest.fixture
def topic_prefix() -> str:
    return f"t-{uuid.uuid4().hex[:8]}."


@pytest.fixture
def kafka_helpers() -> SimpleNamespace:
    return SimpleNamespace(create_topics=create_topics, produce=produce, consume_all=consume_all)


# ------------------------------------------------------------------- helpers --


async def create_topics(
    bootstrap: str,
    topics: Sequence[str],
    *,
    partitions: int = 1,
    config: Mapping[str, str] | None = None,
    exist_ok: bool = False,
) -> None:
    """Create ``topics`` (replication factor 1); raise on any broker error."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        resp = await admin.create_topics(
            [NewTopic(name, partitions, 1, topic_configs=dict(config or {})) for name in topics]
        )
    finally:
        await admin.close()
    errors = [
        (name, code, msg)
        for name, code, msg in resp.topic_errors
        if code != 0 and not (exist_ok and code == _TOPIC_ALREADY_EXISTS)
    ]
    if errors:
        raise RuntimeError(f"create_topics failed: {errors}")


async def produce(
    bootstrap: str,
    topic: str,
    items: Sequence[tuple[bytes | None, bytes]],
    headers: Sequence[tuple[str, bytes]] | None = None,
    **producer_kwargs: Any,
) -> list[RecordMetadata]:
    """Produce ``(key, value)`` pairs in order (acks=all); ``headers`` go on every record.

    Extra keyword arguments go to ``AIOKafkaProducer`` (e.g. ``max_request_size``).
    """
    producer_kwargs.setdefault("acks", "all")
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **producer_kwargs)
    await producer.start()
    try:
        futures = [
            await producer.send(
                topic, value=value, key=key, headers=list(headers) if headers else None
            )
            for key, value in items
        ]
        return list(await asyncio.gather(*futures))
    finally:
        await producer.stop()


async def consume_all(
    bootstrap: str,
    topic: str,
    *,
    expect: int | None = None,
    timeout: float = 10.0,
    **consumer_kwargs: Any,
) -> list[ConsumerRecord]:
    """Read ``topic`` from the beginning of every partition, without a consumer group.

    Stops once ``expect`` records were read, or -- when ``expect`` is None -- once
    every partition is read up to its end offset as of the call; in either case no
    later than ``timeout`` seconds, returning what it has.  Records are in
    per-partition offset order (partitions concatenated in arrival order).
    Extra keyword arguments go to ``AIOKafkaConsumer`` (e.g. ``max_partition_fetch_bytes``).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    records: list[ConsumerRecord] = []
    partitions = await _wait_for_partitions(bootstrap, topic, deadline)
    if not partitions:
        return records
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **consumer_kwargs,
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        end_offsets = await consumer.end_offsets(tps) if expect is None else {}

        async def done() -> bool:
            if expect is not None:
                return len(records) >= expect
            for tp, end in end_offsets.items():
                if await consumer.position(tp) < end:
                    return False
            return True

        while not await done():
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            batch = await consumer.getmany(timeout_ms=int(min(remaining, 1.0) * 1000))
            for tp_records in batch.values():
                records.extend(tp_records)
        return records
    finally:
        await consumer.stop()


async def _wait_for_partitions(bootstrap: str, topic: str, deadline: float) -> list[int]:
    """Partition ids of ``topic`` once the broker knows it (empty list at ``deadline``)."""
    loop = asyncio.get_running_loop()
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        while True:
            (desc,) = await admin.describe_topics([topic])
            if desc["error_code"] == 0 and desc["partitions"]:
                return sorted(p["partition"] for p in desc["partitions"])
            if loop.time() >= deadline:
                return []
            await asyncio.sleep(0.2)
    finally:
        await admin.close()
