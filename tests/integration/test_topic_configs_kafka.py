"""`topics create` on the real broker with topics someone made beforehand: one whose
setting would lose the ledger's or the chain's records is refused in one line naming the
topic and the setting, and nothing is created; one made right (as `topics create` itself
makes it) is left as it is. On three nodes with replication 3, each topic it creates has
min.insync.replicas=2 of its own (not only the brokers' default)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from topics import admin
from topics.clients import KafkaConnection
from topics.names import Topic

from .harness import REPO_ROOT, BrokerStartError, LocalCluster, three_node_cluster

DYNAMIC_TOPIC_CONFIG = 1
"""DescribeConfigs v1+'s config source of a setting made on the topic itself."""


@pytest.mark.parametrize(
    ("topic", "config", "line"),
    [
        (Topic.OUTCOMES, {"cleanup.policy": "delete"}, "cleanup.policy=delete, where"),
        (Topic.SESSIONS, {"cleanup.policy": "compact,delete"}, "cleanup.policy=compact,delete"),
        (Topic.AUDIT, {"retention.ms": "604800000"}, "retention.ms=604800000, where"),
        (Topic.DECISIONS, {"cleanup.policy": "compact"}, "cleanup.policy=compact, where"),
    ],
)
async def test_a_premade_topic_that_would_lose_records_is_refused(
    kafka_bootstrap, topic_prefix, kafka_helpers, topic: Topic, config: dict, line: str
) -> None:
    name = topic.full(topic_prefix)
    await kafka_helpers.create_topics(kafka_bootstrap, [name], config=config)
    conn = KafkaConnection(kafka_bootstrap)
    with pytest.raises(admin.TopicConfigMismatch) as refused:
        await admin.create_topics(conn, topic_prefix, 1, 1)
    message = str(refused.value)
    assert message.startswith(f"topic {name} exists with {line}")
    assert "\n" not in message
    # refused before anything was created: only the pre-made topic is there
    assert await admin.missing_topics(conn, topic_prefix) == [
        t.full(topic_prefix) for t in Topic if t is not topic
    ]


async def test_topics_made_right_are_left_as_they_are(kafka_bootstrap, topic_prefix) -> None:
    conn = KafkaConnection(kafka_bootstrap)
    first = await admin.create_topics(conn, topic_prefix, 1, 1)
    assert set(first.values()) == {"created"}
    again = await admin.create_topics(conn, topic_prefix, 1, 1)
    assert set(again.values()) == {"exists"} and set(again) == set(first)


async def test_the_command_refuses_in_one_line(
    kafka_bootstrap, topic_prefix, kafka_helpers
) -> None:
    name = Topic.OUTCOMES.full(topic_prefix)
    await kafka_helpers.create_topics(kafka_bootstrap, [name])  # the broker's default: delete
    env = {k: v for k, v in os.environ.items() if not k.startswith("GROUNDSTREAM_")}
    env |= {
        "GROUNDSTREAM_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "GROUNDSTREAM_TOPIC_PREFIX": topic_prefix,
        "PYTHONPATH": str(REPO_ROOT),
    }
    done = subprocess.run(
        [sys.executable, "-m", "workers.cli", "topics", "create"],
        env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [
        f"groundstream: topic {name} exists with cleanup.policy=delete, where groundstream "
        "needs cleanup.policy=compact or it loses records; set it (kafka-configs.sh --alter "
        f"--entity-type topics --entity-name {name} --add-config cleanup.policy=compact) or "
        "delete the topic, then run `groundstream topics create` again"
    ]


@pytest.fixture
def three(tmp_path: Path) -> Iterator[LocalCluster]:
    try:
        with three_node_cluster(tmp_path / "kafka") as cluster:
            yield cluster
    except BrokerStartError as exc:
        pytest.fail(str(exc), pytrace=False)


async def _described_once_known(conn: KafkaConnection, names: list[str]):
    """The DescribeConfigs answer for `names`, once it has no error. `create_topics`
    returns when one broker lists the topics; the broker asked here may be another whose
    metadata has not caught up yet, and it answers UNKNOWN_TOPIC_OR_PARTITION with no
    entries. The wait is bounded: a topic never known fails the test with its code."""
    client = admin.clients.admin(conn)
    await client.start()
    try:
        deadline = asyncio.get_running_loop().time() + 30
        while True:
            (response,) = await client.describe_configs(
                [
                    ConfigResource(ConfigResourceType.TOPIC, n, {"min.insync.replicas": None})
                    for n in names
                ]
            )
            failed = {name: code for code, _msg, _kind, name, _e in response.resources if code}
            if not failed or asyncio.get_running_loop().time() > deadline:
                assert not failed, f"error codes after 30 s: {failed}"
                return response
            await asyncio.sleep(0.5)
    finally:
        await client.close()


async def test_replication_three_sets_min_insync_replicas_two_on_each_topic(
    three: LocalCluster,
) -> None:
    prefix = f"isr-{uuid.uuid4().hex[:6]}."
    conn = KafkaConnection(three.bootstrap)
    report = await admin.create_topics(conn, prefix, 1, 3)
    assert set(report.values()) == {"created"}
    names = [t.full(prefix) for t in Topic]
    response = await _described_once_known(conn, names)
    assert response.API_VERSION >= 1  # a config source, not only "is default"
    found = {name: entries for _code, _msg, _kind, name, entries in response.resources}
    assert set(found) == set(names)
    for name, entries in found.items():
        ((key, value, _read_only, source, *_),) = entries
        assert (key, value, source) == ("min.insync.replicas", "2", DYNAMIC_TOPIC_CONFIG), name
