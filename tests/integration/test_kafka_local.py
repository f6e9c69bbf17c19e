"""The local Kafka 4.x broker (deploy/kafka/local.sh) works with aiokafka."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

REPO_ROOT = Path(__file__).resolve().parents[2]
LOCAL_SH = REPO_ROOT / "deploy" / "kafka" / "local.sh"

MiB = 1024 * 1024


async def test_round_trip_with_admin_created_topic(kafka_bootstrap, topic_prefix, kafka_helpers):
    topic = f"{topic_prefix}roundtrip"
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        resp = await admin.create_topics([NewTopic(topic, 2, 1)])
        assert [(t, code) for t, code, _ in resp.topic_errors] == [(topic, 0)]
        assert topic in await admin.list_topics()
        (desc,) = await admin.describe_topics([topic])
        assert desc["error_code"] == 0
        assert len(desc["partitions"]) == 2
    finally:
        await admin.close()

    items = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(10)]
    metas = await kafka_helpers.produce(kafka_bootstrap, topic, items, headers=[("trace", b"abc")])
    assert len(metas) == 10

    records = await kafka_helpers.consume_all(kafka_bootstrap, topic, expect=10, timeout=30)
    assert sorted((r.key, r.value) for r in records) == sorted(items)
    assert all(list(r.headers) == [("trace", b"abc")] for r in records)

    # expect=None reads up to the end offsets and returns (no waiting for timeout)
    again = await kafka_helpers.consume_all(kafka_bootstrap, topic, expect=None, timeout=30)
    assert len(again) == 10


async def test_two_mib_message(kafka_bootstrap, topic_prefix, kafka_helpers):
    topic = f"{topic_prefix}big"
    await kafka_helpers.create_topics(
        kafka_bootstrap, [topic], config={"max.message.bytes": str(8 * MiB)}
    )
    payload = os.urandom(2 * MiB)  # incompressible

    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap, acks="all", max_request_size=9 * MiB
    )
    await producer.start()
    try:
        meta = await producer.send_and_wait(topic, payload, key=b"big")
    finally:
        await producer.stop()

    consumer = AIOKafkaConsumer(
        bootstrap_servers=kafka_bootstrap,
        group_id=None,
        enable_auto_commit=False,
        max_partition_fetch_bytes=9 * MiB,
        fetch_max_bytes=64 * MiB,
    )
    await consumer.start()
    try:
        tp = TopicPartition(topic, meta.partition)
        consumer.assign([tp])
        consumer.seek(tp, meta.offset)
        batch = await consumer.getmany(tp, timeout_ms=20000)
    finally:
        await consumer.stop()
    (record,) = batch[tp]
    assert record.key == b"big"
    assert record.value == payload

    # ...and through the generic helper with raised fetch limits
    records = await kafka_helpers.consume_all(
        kafka_bootstrap, topic, expect=1, timeout=30, max_partition_fetch_bytes=9 * MiB
    )
    assert [r.value for r in records] == [payload]


def _local_sh(*args: str) -> subprocess.CompletedProcess[str]:
    env = os.environ.copy()
    env.setdefault("GROUNDSTREAM_PYTHON", sys.executable)
    return subprocess.run(
        [str(LOCAL_SH), *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def _pid_from_status(out: str) -> int:
    m = re.search(r"running \(pid (\d+),", out)
    assert m, out
    return int(m.group(1))


def test_local_sh_status_and_idempotent_start(kafka_bootstrap):
    status = _local_sh("status")
    if status.returncode != 0:
        pytest.skip(f"the broker at {kafka_bootstrap} was not started by deploy/kafka/local.sh")
    assert status.stdout.startswith("running"), status.stdout
    pid = _pid_from_status(status.stdout)

    again = _local_sh("start")
    assert again.returncode == 0, again.stderr
    assert "already running" in again.stderr

    status2 = _local_sh("status")
    assert status2.returncode == 0
    assert _pid_from_status(status2.stdout) == pid
