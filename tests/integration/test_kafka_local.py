"""The local Kafka 4.x broker (deploy/kafka/local.sh) works with aiokafka."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from workers.bench.procs import free_port

from .harness import local_sh

MiB = 1024 * 1024


async def test_round_trip_with_admin_created_topic(kafka_bootstrap, topic_prefix, kafka_helpers):
    topic = f"{topic_prefix}roundtrip"
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        resp = await admin.create_topics([NewTopic(topic, 2, 1)])
        assert [(t, code) for t, code, _ in resp.topic_errors] == [(topic, 0)]
        # CreateTopics answers once the controller has the topic; a broker with many
        # topics shows it in its metadata a little later.
        deadline = asyncio.get_running_loop().time() + 10
        assert await kafka_helpers.wait_for_partitions(kafka_bootstrap, topic, deadline) == [0, 1]
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


def _local_sh(
    run_dir: Path, port: int, controller: int, *args: str
) -> subprocess.CompletedProcess[str]:
    env = {
        "GROUNDSTREAM_KAFKA_DIR": str(run_dir),
        "KAFKA_PORT": str(port),
        "KAFKA_CONTROLLER_PORT": str(controller),
    }
    return local_sh(*args, timeout=240, env=env)


def _pid_from_status(out: str) -> int:
    m = re.search(r"running \(pid (\d+),", out)
    assert m, out
    return int(m.group(1))


def test_local_sh_start_is_idempotent_and_stop_ends_only_its_broker(tmp_path: Path) -> None:
    """A second broker of the test's own, on free ports and its own run dir."""
    port, controller = free_port(), free_port()
    sh = lambda *a: _local_sh(tmp_path / "run", port, controller, *a)  # noqa: E731
    assert sh("status").returncode != 0, "nothing is running in a fresh run dir"
    try:
        first = sh("start")
        assert first.returncode == 0, first.stderr
        status = sh("status")
        assert status.returncode == 0 and status.stdout.startswith("running"), status.stdout
        pid = _pid_from_status(status.stdout)
        assert f"127.0.0.1:{port}" in status.stdout

        again = sh("start")
        assert again.returncode == 0, again.stderr
        assert "already running" in again.stderr
        assert _pid_from_status(sh("status").stdout) == pid
    finally:
        stopped = sh("stop")
    assert stopped.returncode == 0, stopped.stderr
    assert sh("status").returncode != 0
    # Gone, or a zombie its new parent has not reaped yet: either way no broker runs.
    cmdline = Path(f"/proc/{pid}/cmdline")
    assert not cmdline.exists() or b"kafka.Kafka" not in cmdline.read_bytes()
