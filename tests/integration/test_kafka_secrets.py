"""A client's secrets never reach its logs: with debug logging, aiokafka's connection
logger writes every request, the SASL authentication among them; over a real SASL_SSL
connection with PLAIN (whose bytes are the password itself) the password is in no line,
in-process or from `groundstream --log-level debug`."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from topics import clients
from topics.clients import KafkaConnection

from .harness import REPO_ROOT, BrokerStartError, LocalCluster, groundstream, secure_broker


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    try:
        with secure_broker(tmp_path_factory.mktemp("secrets") / "kafka") as cluster:
            yield cluster
    except BrokerStartError as exc:
        pytest.fail(str(exc), pytrace=False)


async def test_plain_at_debug_level_logs_the_authentication_but_not_the_password(
    secure: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    password = secure.password("admin")
    conn = KafkaConnection(
        secure.bootstrap,
        "SASL_SSL",
        "PLAIN",
        "admin",
        password,
        ssl_ca_file=str(secure.ca_file),
    )
    caplog.set_level(logging.DEBUG, logger="aiokafka")
    admin = clients.admin(conn, client_id="secrets-test")
    await admin.start()
    try:
        assert isinstance(await admin.list_topics(), list)
    finally:
        await admin.close()
    lines = [logging.Formatter("%(name)s %(message)s").format(r) for r in caplog.records]
    text = "\n".join(lines)
    # the authentication was logged (so the check below reads a real line) ...
    assert "SaslAuthenticateRequest_v1(<redacted>)" in text, text[-2000:]
    assert "Authenticated as admin via PLAIN" in text
    # ... and the password is in none of them
    assert password not in text


def test_the_cli_at_debug_level_prints_no_password(secure: LocalCluster) -> None:
    password = secure.password("admin")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GROUNDSTREAM_")}
    env |= secure.client_env() | {
        "GROUNDSTREAM_KAFKA_SASL_MECHANISM": "PLAIN",
        "GROUNDSTREAM_TOPIC_PREFIX": f"s{uuid.uuid4().hex[:6]}.",
        "GROUNDSTREAM_PARTITIONS": "1",
        "PYTHONPATH": str(REPO_ROOT),
    }
    done = groundstream(env, "--log-level", "debug", "topics", "create", timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "SaslAuthenticateRequest_v1(<redacted>)" in done.stderr
    assert password not in done.stderr and password not in done.stdout
    assert Path(env["GROUNDSTREAM_KAFKA_SASL_PASSWORD_FILE"]).read_text().strip() == password
