"""Fixtures and helpers for tests that talk to a real Kafka broker.

* ``kafka_bootstrap`` (session): ``"127.0.0.1:<KAFKA_PORT or 9092>"``.  Uses a broker
  that already answers there; otherwise starts one with ``deploy/kafka/local.sh start``
  and stops it at session end (only if this fixture started it).
* ``topic_prefix`` (function): a unique ``"t-<uuid8>."`` per test; tests name their
  topics with it so runs against a long-lived broker do not collide.
* ``kafka_helpers`` (function): namespace with the async helpers below, for test
  modules that prefer not to import from this conftest.
* ``create_topics`` / ``produce`` / ``consume_all``: async helpers on plain aiokafka.
* ``dashboard_settings`` / ``dashboard_url`` (function): the web dashboard on this test's
  topics, served on 127.0.0.1; ``decision_record`` / ``send_decisions`` / ``until`` feed
  and watch it (tests/browser imports these too).

Every test collected under ``tests/integration`` is marked ``integration``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import RecordMetadata

from pipeline.trail.records import make_record
from topics.admin import create_topics as create_ladder_topics
from topics.codec import dumps
from topics.names import Topic
from workers.runtime.settings import Settings
from workers.web.app import build_app

from .harness import BrokerStartError, local_broker

INTEGRATION_DIR = Path(__file__).resolve().parent

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


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    bootstrap = f"127.0.0.1:{kafka_port()}"
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(local_broker(bootstrap))
        except BrokerStartError as exc:
            pytest.fail(str(exc), pytrace=False)
        yield bootstrap


@pytest.fixture
def topic_prefix() -> str:
    return f"t-{uuid.uuid4().hex[:8]}."


@pytest.fixture
def kafka_helpers() -> SimpleNamespace:
    return SimpleNamespace(
        create_topics=create_topics,
        produce=produce,
        consume_all=consume_all,
        wait_for_partitions=wait_for_partitions,
    )


# ------------------------------------------------------------------- helpers --


async def create_topics(
    bootstrap: str,
    topics: Sequence[str],
    *,
    partitions: int = 1,
    config: Mapping[str, str] | None = None,
    exist_ok: bool = False,
) -> None:
    """Create ``topics`` (replication factor 1); raise on any broker error. Returns once
    the broker's metadata lists them all, as for a topic someone made beforehand (the
    broker acknowledges a creation before it lists the topic)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        resp = await admin.create_topics(
            [NewTopic(name, partitions, 1, topic_configs=dict(config or {})) for name in topics]
        )
        errors = [
            (name, code, msg)
            for name, code, msg in resp.topic_errors
            if code != 0 and not (exist_ok and code == _TOPIC_ALREADY_EXISTS)
        ]
        if errors:
            raise RuntimeError(f"create_topics failed: {errors}")
        deadline = asyncio.get_running_loop().time() + 30
        while not set(topics) <= set(await admin.list_topics()):
            if asyncio.get_running_loop().time() > deadline:
                raise RuntimeError(f"created but not listed after 30 s: {sorted(topics)}")
            await asyncio.sleep(0.2)
    finally:
        await admin.close()


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
    security = {k: v for k, v in consumer_kwargs.items() if k in SECURITY_KWARGS}
    partitions = await wait_for_partitions(bootstrap, topic, deadline, **security)
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


SECURITY_KWARGS = frozenset(
    {
        *("security_protocol", "ssl_context", "sasl_mechanism"),
        *("sasl_plain_username", "sasl_plain_password", "sasl_oauth_token_provider"),
    }
)
"""aiokafka's connection settings, which every client on a secured broker needs."""


async def wait_for_partitions(
    bootstrap: str, topic: str, deadline: float, **security: Any
) -> list[int]:
    """Partition ids of ``topic`` once the broker knows it (empty list at ``deadline``);
    ``security``: aiokafka's connection settings on a secured broker."""
    loop = asyncio.get_running_loop()
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **security)
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


# ----------------------------------------------------------------- dashboard --
# Shared by tests/integration/test_dashboard.py (over HTTP) and tests/browser (in Chromium).

DASHBOARD_TOKEN = "integration-token"
REVIEWER_TOKENS = {"ann": "ann-integration-token", "bob": "bob-integration-token"}
"""Each reviewer's own token, in the dashboard's tokens file (`dashboard_settings`)."""


def decision_record(candidate_id: str, stage: str, action: str, **extra: Any) -> dict[str, Any]:
    """A hashed decision record as a stage would write it (decided now unless told)."""
    fields: dict[str, Any] = {
        "session_id": f"s-{candidate_id}",
        "turn": 1,
        "write_to_state": action == "accept",
        "reason": f"{stage}: {action}",
        "policy_version": "test",
        "decided_at": time.time(),
        "mode": "active",
        "route": "default",
        "prev_hash": "",
    }
    fields.update(extra)
    return make_record(candidate_id=candidate_id, stage=stage, action=action, **fields)


async def send_decisions(bootstrap: str, settings: Settings, *records: Mapping[str, Any]) -> None:
    """Produce `records` on the settings' `decisions` topic, keyed by session."""
    items = [(str(r["session_id"]).encode(), dumps(r)) for r in records]
    await produce(bootstrap, settings.topic(Topic.DECISIONS), items)


async def until(check: Any, timeout: float = 30.0, every: float = 0.2) -> Any:
    """Await `check()` until it returns something truthy, or `timeout`; its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value or time.monotonic() > deadline:
            return value
        await asyncio.sleep(every)


@pytest.fixture
async def dashboard_settings(kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> Settings:
    """Settings for this test's own topics (created), with the shared dashboard token and
    a reviewer tokens file naming ann and bob (`REVIEWER_TOKENS`)."""
    from workers.runtime.reviewers import token_digest

    tokens_file = tmp_path / "reviewers.txt"
    tokens_file.write_text(
        "".join(f"{name}:{token_digest(token)}\n" for name, token in REVIEWER_TOKENS.items()),
        encoding="utf-8",
    )
    settings = Settings(
        bootstrap_servers=kafka_bootstrap,
        topic_prefix=topic_prefix,
        partitions=2,
        web_token=DASHBOARD_TOKEN,
        reviewer_tokens_file=str(tokens_file),
    )
    await create_ladder_topics(
        settings.kafka(), topic_prefix, settings.partitions, settings.replication
    )
    return settings


@pytest.fixture
async def dashboard_url(dashboard_settings: Settings) -> AsyncIterator[str]:
    """The dashboard on an ephemeral port of 127.0.0.1, as `groundstream dashboard` serves it."""
    runner = web.AppRunner(build_app(dashboard_settings, dashboard_settings.load_policy()))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()
