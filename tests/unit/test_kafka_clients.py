"""One place builds every Kafka client (topics/clients.py), and it passes the cluster's
security to each: the protocol, SASL credentials or the OAuth token provider, and one TLS
context per connection. No module builds an aiokafka client any other way."""

from __future__ import annotations

import ast
import asyncio
import logging
import os
import ssl
from pathlib import Path

import pytest

from topics import clients
from topics.clients import FileTokenProvider, KafkaConnection
from topics.security.keyfiles import KeyPasswordMissing
from topics.security.tokens import TokenFileError
from workers.runtime.refusals import kafka_refusal

ROOT = Path(__file__).resolve().parents[2]
TLS = ROOT / "tests" / "fixtures" / "tls"
FACTORY = ROOT / "topics" / "clients.py"
CLIENTS = {"AIOKafkaProducer", "GroupFencedProducer", "AIOKafkaConsumer", "AIOKafkaAdminClient"}
CA = str(TLS / "client.crt")  # self-signed: its own CA


def constructions(path: Path) -> list[str]:
    """`file:line name` for each call of an aiokafka client class in `path`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name in CLIENTS:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
    return found


def test_only_the_factory_builds_a_kafka_client() -> None:
    sources = [
        p
        for top in ("pipeline", "topics", "workers", "tools")
        for p in sorted((ROOT / top).rglob("*.py"))
        if p != FACTORY
    ]
    assert len(sources) > 100
    found = [c for p in sources for c in constructions(p)]
    assert found == [], "build Kafka clients with topics.clients, which passes the security"


def test_the_walk_would_see_one() -> None:
    assert constructions(FACTORY)  # the factory's own three calls, so the walk works


def _kafka(conn: KafkaConnection) -> dict:
    return conn.client_kwargs()


def test_plaintext_is_the_servers_alone() -> None:
    assert _kafka(KafkaConnection("k:9092")) == {
        "bootstrap_servers": "k:9092",
        "security_protocol": "PLAINTEXT",
    }


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_ssl_passes_credentials_and_the_context(mechanism: str) -> None:
    conn = KafkaConnection(
        "k:9093",
        "SASL_SSL",
        sasl_mechanism=mechanism,
        sasl_username="gs-geometry",
        sasl_password="pw-not-printed",
        ssl_ca_file=CA,
    )
    kwargs = _kafka(conn)
    assert kwargs["security_protocol"] == "SASL_SSL"
    assert kwargs["sasl_mechanism"] == mechanism
    assert kwargs["sasl_plain_username"] == "gs-geometry"
    assert kwargs["sasl_plain_password"] == "pw-not-printed"
    assert isinstance(kwargs["ssl_context"], ssl.SSLContext)
    assert "sasl_oauth_token_provider" not in kwargs
    assert "pw-not-printed" not in repr(conn)


def test_sasl_plaintext_has_no_tls_context() -> None:
    conn = KafkaConnection("k:9092", "SASL_PLAINTEXT", "PLAIN", "u", "p")
    kwargs = _kafka(conn)
    assert "ssl_context" not in kwargs and conn.ssl_context is None
    assert kwargs["sasl_plain_username"] == "u"


def test_oauthbearer_gets_the_file_token_provider(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t1\n")
    conn = KafkaConnection("k:9093", "SASL_SSL", "OAUTHBEARER", oauth_token_file=str(token))
    kwargs = _kafka(conn)
    assert isinstance(kwargs["sasl_oauth_token_provider"], FileTokenProvider)
    assert "sasl_plain_username" not in kwargs and "sasl_plain_password" not in kwargs
    assert kwargs["sasl_oauth_token_provider"] is conn.token_provider  # one per connection


def test_the_tls_context_verifies_and_is_built_once() -> None:
    conn = KafkaConnection("k:9093", "SSL", ssl_ca_file=CA)
    context = conn.ssl_context
    assert context is conn.ssl_context
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname is True
    assert any(c["subject"] for c in context.get_ca_certs())  # the CA file was loaded


def test_check_hostname_off_still_verifies_the_chain() -> None:
    conn = KafkaConnection("k:9093", "SSL", ssl_ca_file=CA, ssl_check_hostname=False)
    assert conn.ssl_context.check_hostname is False
    assert conn.ssl_context.verify_mode == ssl.CERT_REQUIRED


@pytest.mark.parametrize(
    ("key", "password"), [("client.key", ""), ("client-encrypted.key", "test-key-password")]
)
def test_mutual_tls_loads_the_client_certificate(key: str, password: str) -> None:
    conn = KafkaConnection(
        "k:9093",
        "SSL",
        ssl_ca_file=CA,
        ssl_cert_file=str(TLS / "client.crt"),
        ssl_key_file=str(TLS / key),
        ssl_key_password=password,
    )
    assert conn.ssl_context is not None  # a wrong key password raises ssl.SSLError here
    assert "test-key-password" not in repr(conn)


def test_a_wrong_key_password_is_refused() -> None:
    conn = KafkaConnection(
        "k:9093",
        "SSL",
        ssl_cert_file=str(TLS / "client.crt"),
        ssl_key_file=str(TLS / "client-encrypted.key"),
        ssl_key_password="wrong",
    )
    with pytest.raises(ssl.SSLError):
        _ = conn.ssl_context


def test_an_encrypted_key_without_a_password_is_refused_not_prompted_for() -> None:
    """OpenSSL asks the terminal for a missing key password; the factory's callback refuses
    in one line naming the setting instead (a worker has no terminal)."""
    key = str(TLS / "client-encrypted.key")
    conn = KafkaConnection("k:9093", "SSL", ssl_cert_file=str(TLS / "client.crt"), ssl_key_file=key)
    with pytest.raises(KeyPasswordMissing) as caught:
        _ = conn.ssl_context
    assert str(caught.value) == (
        f"the client key {key} is encrypted: "
        "set GROUNDSTREAM_KAFKA_SSL_KEY_PASSWORD to its password"
    )


def test_each_kind_of_client_gets_the_security() -> None:
    conn = KafkaConnection("k:9093", "SASL_SSL", "SCRAM-SHA-512", "gs-judge", "pw", ssl_ca_file=CA)

    async def build() -> None:
        producer = clients.producer(conn, acks="all")
        consumer = clients.consumer(conn, "t1", group_id="g")
        admin = clients.admin(conn, client_id="groundstream-admin")
        try:
            for client in (producer.client, consumer._client, admin._client):
                assert client._security_protocol == "SASL_SSL"
                assert client._sasl_mechanism == "SCRAM-SHA-512"
                assert client._sasl_plain_username == "gs-judge"
                assert client._ssl_context is conn.ssl_context
            assert consumer.subscription() == {"t1"}
        finally:
            await producer.stop()
            await consumer.stop()
            await admin.close()

    asyncio.run(build())


def test_a_client_cannot_override_the_security() -> None:
    with pytest.raises(TypeError, match="security_protocol"):
        clients.producer(KafkaConnection("k:1"), security_protocol="PLAINTEXT")


def test_a_bare_string_is_a_plaintext_connection() -> None:
    assert clients.connection("k:1") == KafkaConnection("k:1")
    conn = KafkaConnection("k:1", "SSL")
    assert clients.connection(conn) is conn


def test_an_unknown_protocol_is_refused() -> None:
    with pytest.raises(ValueError):
        KafkaConnection("k:1", "TLS")


def test_the_token_is_read_again_when_the_file_changes(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("first-token\n")
    provider = FileTokenProvider(path)
    assert asyncio.run(provider.token()) == "first-token"
    reads = []
    original = Path.read_text

    def counting(self: Path, *a, **kw) -> str:
        reads.append(self)
        return original(self, *a, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Path, "read_text", counting)
        assert provider.read() == "first-token"
        assert reads == []  # unchanged file: the cached token
        path.write_text("second-token-longer\n")
        stat = path.stat()
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
        assert asyncio.run(provider.token()) == "second-token-longer"
        assert reads == [path]
    assert "token" not in repr(provider).replace(str(path), "")


def test_an_empty_or_gone_token_file_keeps_the_last_good_token_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A sidecar rewriting the file leaves it empty (or absent) for a moment: the token
    sent then is still the last good one, and one warning says so."""
    path = tmp_path / "token"
    path.write_text("good-token\n")
    provider = FileTokenProvider(path)
    assert provider.read() == "good-token"
    caplog.set_level(logging.WARNING, logger="groundstream.kafka")
    path.write_text("")
    assert asyncio.run(provider.token()) == "good-token"
    path.unlink()
    assert provider.read() == "good-token"
    assert provider.read() == "good-token"
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1, warnings
    assert f"GROUNDSTREAM_KAFKA_OAUTH_TOKEN_FILE {path} is empty" in warnings[0]
    assert "good-token" not in warnings[0]
    path.write_text("next-token")
    assert provider.read() == "next-token"
    path.write_text("  \n")  # a new spell of emptiness is said again
    assert provider.read() == "next-token"
    assert len(caplog.records) == 2


@pytest.mark.parametrize("make", ["empty", "absent"])
def test_with_no_good_token_yet_the_error_is_one_line(tmp_path: Path, make: str) -> None:
    path = tmp_path / "token"
    if make == "empty":
        path.write_text("\n")
    provider = FileTokenProvider(path)
    with pytest.raises(TokenFileError) as caught:
        asyncio.run(provider.token())
    why = "empty" if make == "empty" else "unreadable (No such file or directory)"
    assert str(caught.value) == (
        f"GROUNDSTREAM_KAFKA_OAUTH_TOKEN_FILE {path} is {why}: no OAuth token to send"
    )
    conn = KafkaConnection("k:9093", "SASL_SSL", "OAUTHBEARER", oauth_token_file=str(path))
    assert kafka_refusal(caught.value, "k:9093", conn) == (
        f"{caught.value}; see docs/how-to/troubleshooting.md#our-own-credentials-could-not-be-read"
    )


def test_the_sasl_authenticate_bytes_never_reach_a_log(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What aiokafka's connection logger writes at debug level for PLAIN and OAUTHBEARER,
    formatted as a handler would: the request line stays, its secret bytes do not."""
    from aiokafka.protocol.admin import SaslAuthenticateRequest_v1, SaslAuthenticateResponse_v1

    conn_log = logging.getLogger("aiokafka.conn")
    monkeypatch.setattr(conn_log, "filters", [])

    async def build() -> None:  # the factory installs the filter
        await clients.producer(KafkaConnection("k:1")).stop()

    asyncio.run(build())
    assert len(conn_log.filters) == 1
    caplog.set_level(logging.DEBUG, logger="aiokafka.conn")
    secret = "pl41n-passw0rd"
    plain = SaslAuthenticateRequest_v1(b"\x00judge\x00" + secret.encode())
    bearer = SaslAuthenticateRequest_v1(b"n,,\x01auth=Bearer " + secret.encode() + b"\x01\x01")
    answer = SaslAuthenticateResponse_v1(0, None, secret.encode(), 0)
    for message in (plain, bearer):
        conn_log.debug("Request to %s:%d %d: %s", "k", 1, 3, message)
    conn_log.debug("Response from %s:%d %d: %s", "k", 1, 3, answer)
    conn_log.info("Request %s", plain)  # at any level
    text = "\n".join(logging.Formatter("%(message)s").format(r) for r in caplog.records)
    assert secret not in text
    assert text.count("SaslAuthenticateRequest_v1(<redacted>)") == 3
    assert "Request to k:1 3: SaslAuthenticateRequest_v1(<redacted>)" in text
    assert "SaslAuthenticateResponse_v1(<redacted>)" in text


def test_msk_iam_signs_a_token_for_the_region_with_the_default_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As far as it goes without AWS: the real signer, given credentials in the
    environment (no network: the token is a presigned URL made here), renewed a minute
    before it expires."""
    import base64
    from urllib.parse import parse_qs, urlparse

    from topics.clients import MskIamTokenProvider

    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    now = [1_000_000.0]
    conn = KafkaConnection(
        "b-1.msk.example:9098",
        security_protocol="SASL_SSL",
        sasl_mechanism="OAUTHBEARER",
        aws_region="eu-west-1",
    )
    provider = conn.client_kwargs()["sasl_oauth_token_provider"]
    assert isinstance(provider, MskIamTokenProvider)
    provider._clock = lambda: now[0]
    token = asyncio.run(provider.token())
    url = urlparse(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode())
    query = parse_qs(url.query)
    assert url.netloc == "kafka.eu-west-1.amazonaws.com"
    assert query["Action"] == ["kafka-cluster:Connect"]
    assert query["X-Amz-Credential"][0].startswith("AKIAIOSFODNN7EXAMPLE/")
    assert "wJalrXUtnFEMI" not in token  # signed with the secret, never carrying it
    assert asyncio.run(provider.token()) == token  # kept while valid
    now[0] = provider._expires  # past its renewal time: signed anew
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAOTHERKEYEXAMPLE1")
    assert asyncio.run(provider.token()) != token
