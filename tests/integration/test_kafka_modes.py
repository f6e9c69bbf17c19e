"""local.sh's other modes: the secured broker users run, and three nodes that lose one.

Each test starts (and stops) a cluster of its own in tmp_path on free ports, so they
run beside the session's plaintext broker.  Measured on the 2-core dev box: secure
start ~13 s, three-node start ~15 s; each test ~20-30 s in all.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaConnectionError, TopicAuthorizationFailedError

from .harness import BrokerStartError, LocalCluster, secure_broker, three_node_cluster


@pytest.fixture
def secure(tmp_path: Path) -> Iterator[LocalCluster]:
    try:
        with secure_broker(tmp_path / "kafka", users="judge rules") as cluster:
            yield cluster
    except BrokerStartError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture
def three(tmp_path: Path) -> Iterator[LocalCluster]:
    try:
        with three_node_cluster(tmp_path / "kafka") as cluster:
            yield cluster
    except BrokerStartError as exc:
        pytest.fail(str(exc), pytrace=False)


async def _create(cluster: LocalCluster, topic: str, replication: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap, **cluster.client_kwargs())
    await admin.start()
    try:
        resp = await admin.create_topics([NewTopic(topic, 1, replication)])
        assert [(t, code) for t, code, _ in resp.topic_errors] == [(topic, 0)]
    finally:
        await admin.close()


async def _produce(bootstrap: str, topic: str, value: bytes, **kw):
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", **kw)
    await producer.start()
    try:
        return await producer.send_and_wait(topic, value)
    finally:
        await producer.stop()


async def _read(bootstrap: str, topic: str, want: int, **kw) -> list[bytes]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **kw)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(got) < want and time.monotonic() < deadline:
            batch = await consumer.getmany(tp, timeout_ms=2000)
            got += [r.value for r in batch.get(tp, [])]
        return got
    finally:
        await consumer.stop()


async def test_secure_broker_scram_acls(
    secure: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    began = time.monotonic()
    env = secure.client_env()
    assert env["GROUNDSTREAM_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
    assert env["GROUNDSTREAM_KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512"
    assert env["GROUNDSTREAM_KAFKA_SASL_USERNAME"] == "admin"
    assert Path(env["GROUNDSTREAM_KAFKA_SSL_CA_FILE"]) == secure.ca_file
    assert Path(env["GROUNDSTREAM_KAFKA_SASL_PASSWORD_FILE"]).read_text().strip()

    topic = f"t-{uuid.uuid4().hex[:8]}.secure"
    await _create(secure, topic, 1)
    await secure.grant("User:judge", "TOPIC", topic, "WRITE", "READ", "DESCRIBE")

    # judge, SCRAM-SHA-512 over SASL_SSL with plain aiokafka: a round trip
    judge = secure.client_kwargs("judge")
    md = await _produce(secure.bootstrap, topic, b"scram-512", **judge)
    # the other mechanisms the listener offers, same user and password
    await _produce(
        secure.bootstrap,
        topic,
        b"scram-256",
        **secure.client_kwargs("judge", mechanism="SCRAM-SHA-256"),
    )
    await _produce(
        secure.bootstrap, topic, b"plain", **secure.client_kwargs("judge", mechanism="PLAIN")
    )
    assert md.offset == 0
    assert await _read(secure.bootstrap, topic, 3, **judge) == [
        b"scram-512",
        b"scram-256",
        b"plain",
    ]

    # rules authenticates fine but has no ACL: refused
    with pytest.raises(TopicAuthorizationFailedError):
        await _produce(secure.bootstrap, topic, b"nope", **secure.client_kwargs("rules"))

    # a wrong password does not get a connection at all (aiokafka only logs why)
    caplog.set_level(logging.ERROR, logger="aiokafka")
    with pytest.raises(KafkaConnectionError):
        await _produce(
            secure.bootstrap,
            topic,
            b"nope",
            **secure.client_kwargs("judge", password="wrong"),
            request_timeout_ms=5000,
        )

    assert "SaslAuthenticationFailed" in caplog.text
    assert "invalid credentials" in caplog.text

    # mutual TLS: the CA-signed client certificate is principal User:client (its CN)
    with pytest.raises(TopicAuthorizationFailedError):
        await _produce(secure.ssl_bootstrap, topic, b"nope", **secure.mtls_kwargs())
    await secure.grant("User:client", "TOPIC", topic, "WRITE")
    await _produce(secure.ssl_bootstrap, topic, b"mtls", **secure.mtls_kwargs())

    print(f"secure start {secure.start_seconds:.1f}s, checks {time.monotonic() - began:.1f}s")


async def test_three_nodes_lose_one(three: LocalCluster) -> None:
    began = time.monotonic()
    topic = f"t-{uuid.uuid4().hex[:8]}.rf3"
    await _create(three, topic, 3)
    before = await _produce(three.bootstrap, topic, b"before")

    admin = AIOKafkaAdminClient(bootstrap_servers=three.bootstrap)
    await admin.start()
    try:
        (desc,) = await admin.describe_topics([topic])
    finally:
        await admin.close()
    (part,) = desc["partitions"]
    assert sorted(part["replicas"]) == [1, 2, 3]
    # the worst node to lose: the partition's leader
    leader = part["leader"]
    pids = three.pids()
    assert sorted(pids) == [1, 2, 3]
    assert three.kill(leader) == pids[leader]
    assert leader not in three.pids()

    killed = time.monotonic()
    after = await _produce(three.bootstrap, topic, b"after")  # acks=all, min.insync.replicas=2
    resumed = time.monotonic() - killed
    assert after.offset == before.offset + 1
    assert await _read(three.bootstrap, topic, 2) == [b"before", b"after"]
    print(
        f"three-node start {three.start_seconds:.1f}s; node {leader} (leader) killed, "
        f"acks=all produce resumed in {resumed:.1f}s; checks {time.monotonic() - began:.1f}s"
    )
