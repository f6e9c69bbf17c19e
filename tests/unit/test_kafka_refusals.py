"""The cluster's refusals, each one line that says what was refused and what puts it right
(workers/runtime/refusals.py), read from constructed aiokafka errors; an absent broker
keeps its own line, byte for byte."""

from __future__ import annotations

import logging
import ssl
from pathlib import Path

import pytest
from aiokafka import errors

from topics.clients import KafkaConnection
from workers.cli.base import one_line
from workers.runtime import refusals
from workers.runtime.refusals import REFUSALS, TROUBLESHOOTING, kafka_refusal

WHERE = "k1:9093"
SCRAM = KafkaConnection(WHERE, "SASL_SSL", "SCRAM-SHA-512", "gs-geometry", "pw-not-shown")
PLAIN = KafkaConnection(WHERE)


@pytest.fixture(autouse=True)
def _fresh() -> None:
    refusals.forget_connect_errors()
    yield
    refusals.forget_connect_errors()


def bootstrap_failure(logged: BaseException) -> errors.KafkaConnectionError:
    """What aiokafka's bootstrap does: log the reason, raise a bare connection error."""
    refusals.remember_connect_errors(quiet=True)
    logging.getLogger("aiokafka").error('Unable connect to "%s:%s": %s', "k1", 9093, logged)
    return errors.KafkaConnectionError(f"Unable to bootstrap from [('{WHERE}', 9093)]")


def cert_error(message: str) -> ssl.SSLCertVerificationError:
    error = ssl.SSLCertVerificationError(1, f"[SSL: CERTIFICATE_VERIFY_FAILED] {message}")
    error.verify_message = message
    error.reason = "CERTIFICATE_VERIFY_FAILED"
    return error


def see(anchor: str) -> str:
    """The pointer a refusal's line ends with: its entry in the troubleshooting page."""
    return f"; see docs/how-to/troubleshooting.md#{anchor}"


def test_every_refusal_points_to_an_entry_of_the_troubleshooting_page() -> None:
    from pymdownx.slugs import slugify

    page = Path(__file__).resolve().parents[2] / TROUBLESHOOTING
    slug = slugify(case="lower")
    headings = {
        slug(line.lstrip("#").strip(), "-")
        for line in page.read_text(encoding="utf-8").splitlines()
        if line.startswith("#")
    }
    for refusal in REFUSALS:
        assert refusal.anchor in headings, refusal.anchor
    for anchor in ("topics-missing", "cannot-reach-kafka"):  # the lines of runner and CLI
        assert anchor in headings, anchor


@pytest.mark.parametrize(
    "error",
    [errors.SaslAuthenticationFailed("bad creds"), errors.AuthenticationFailedError()],
)
def test_rejected_credentials(error: Exception) -> None:
    line = kafka_refusal(error, WHERE, SCRAM)
    assert line == (
        f"Kafka at {WHERE} refused user 'gs-geometry' with SCRAM-SHA-512 "
        "(GROUNDSTREAM_KAFKA_SASL_USERNAME, GROUNDSTREAM_KAFKA_SASL_PASSWORD): "
        f"{type(error).__name__}{see('kafka-refused-the-credentials')}"
    )
    assert "pw-not-shown" not in line


def test_rejected_credentials_behind_a_closed_connection() -> None:
    closed = errors.KafkaConnectionError("Connection at k1:9093 closed")
    closed.__cause__ = errors.SaslAuthenticationFailed()
    assert "refused user 'gs-geometry'" in kafka_refusal(closed, WHERE, SCRAM)


def test_an_oauth_token_refused_names_its_file() -> None:
    conn = KafkaConnection(WHERE, "SASL_SSL", "OAUTHBEARER", oauth_token_file="/var/run/token")
    line = kafka_refusal(errors.SaslAuthenticationFailed(), WHERE, conn)
    assert "GROUNDSTREAM_KAFKA_OAUTH_TOKEN_FILE" in line


def test_an_untrusted_certificate_names_the_ca_setting() -> None:
    error = bootstrap_failure(cert_error("unable to get local issuer certificate"))
    assert kafka_refusal(error, WHERE, KafkaConnection(WHERE, "SSL")) == (
        f"the certificate of Kafka at {WHERE} is not trusted (unable to get local issuer "
        "certificate); set GROUNDSTREAM_KAFKA_SSL_CA_FILE to the CA that signed it"
        + see("the-certificate-is-not-trusted")
    )


@pytest.mark.parametrize(
    "message",
    [
        "Hostname mismatch, certificate is not valid for 'k1'.",
        "IP address mismatch, certificate is not valid for '10.0.0.7'.",
    ],
)
def test_a_certificate_for_another_host(message: str) -> None:
    error = bootstrap_failure(cert_error(message))
    line = kafka_refusal(error, WHERE, KafkaConnection(WHERE, "SSL"))
    assert "does not name that host" in line and "subjectAltName (SAN)" in line
    # the fix is the certificate's names, never turning the check off
    assert "CHECK_HOSTNAME" not in line and "false" not in line


def test_a_tls_client_on_a_plaintext_port() -> None:
    wrong = ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number")
    wrong.reason = "WRONG_VERSION_NUMBER"
    line = kafka_refusal(bootstrap_failure(wrong), WHERE, KafkaConnection(WHERE, "SSL"))
    assert line == (
        f"the TLS handshake with Kafka at {WHERE} failed (WRONG_VERSION_NUMBER); is that port "
        "a TLS listener? (GROUNDSTREAM_KAFKA_SECURITY_PROTOCOL)" + see("the-tls-handshake-failed")
    )


def test_a_missing_client_certificate() -> None:
    wanted = ssl.SSLError(1, "[SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED]")
    wanted.reason = "TLSV13_ALERT_CERTIFICATE_REQUIRED"
    line = kafka_refusal(bootstrap_failure(wanted), WHERE, KafkaConnection(WHERE, "SSL"))
    assert "GROUNDSTREAM_KAFKA_SSL_CERT_FILE" in line


def test_a_plaintext_client_on_a_tls_port() -> None:
    error = bootstrap_failure(errors.KafkaConnectionError("Connection at k1:9093 closed"))
    assert kafka_refusal(error, WHERE, PLAIN) == (
        f"Kafka at {WHERE} closed the connection during the handshake: a TLS listener? "
        "GROUNDSTREAM_KAFKA_SECURITY_PROTOCOL is PLAINTEXT; set SSL (or SASL_SSL)"
        + see("kafka-closed-the-connection-during-the-handshake")
    )


E = errors
ACL_REFUSALS = [
    (E.TopicAuthorizationFailedError({"p.candidates", "p.scored"}), "topic p.candidates, p.scored"),
    (E.TopicAuthorizationFailedError("p.judge"), "topic p.judge"),
    (E.GroupAuthorizationFailedError("gs-geometry"), "consumer group gs-geometry"),
    (E.TransactionalIdAuthorizationFailed("geometry.host-1"), "transactional id geometry.host-1"),
    (E.ClusterAuthorizationFailedError(), "the cluster"),
]


@pytest.mark.parametrize(("error", "what"), ACL_REFUSALS)
def test_an_acl_refusal_names_what_and_how_to_grant_it(error: Exception, what: str) -> None:
    line = kafka_refusal(error, WHERE, SCRAM)
    assert line == (
        f"Kafka at {WHERE} refused User:gs-geometry access to {what} ({type(error).__name__}); "
        "`groundstream acls --stage NAME --principal User:gs-geometry --apply` grants it"
        + see("an-acl-refused-access")
    )


def test_without_sasl_the_principal_is_a_placeholder() -> None:
    line = kafka_refusal(errors.TopicAuthorizationFailedError("t"), WHERE, PLAIN)
    assert "--principal User:NAME --apply" in line


def test_an_absent_broker_is_no_refusal() -> None:
    refused = ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 1)")
    assert kafka_refusal(bootstrap_failure(refused), WHERE, PLAIN) is None
    assert kafka_refusal(errors.KafkaTimeoutError(), WHERE, PLAIN) is None


def test_one_line_keeps_the_unreachable_line(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(__import__("os").environ):
        if name.startswith("GROUNDSTREAM_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("GROUNDSTREAM_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    assert one_line(errors.KafkaConnectionError("Unable to bootstrap")) == (
        "cannot reach Kafka at 127.0.0.1:1 (GROUNDSTREAM_BOOTSTRAP_SERVERS): KafkaConnectionError"
        + see("cannot-reach-kafka"),
        2,
    )
    line, status = one_line(errors.TopicAuthorizationFailedError("t"))
    assert status == 2 and line.startswith(
        "Kafka at 127.0.0.1:1 refused User:NAME access to topic t"
    )


def test_quiet_tools_print_nothing_of_aiokafka(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        bootstrap_failure(cert_error("self-signed certificate"))
    assert not [r for r in caplog.records if r.name.startswith("aiokafka")]
    assert isinstance(refusals.last_connect_error(), ssl.SSLCertVerificationError)


def test_the_logger_is_given_back_as_it_was() -> None:
    logger = logging.getLogger("aiokafka")
    before = (logger.level, logger.propagate, list(logger.handlers))
    refusals.remember_connect_errors(quiet=True)
    refusals.remember_connect_errors(quiet=True)
    assert logger.propagate is False and len(logger.handlers) == len(before[2]) + 1
    refusals.forget_connect_errors()
    assert (logger.level, logger.propagate, list(logger.handlers)) == before


def test_aiokafka_logs_a_failed_connection_where_it_is_remembered() -> None:
    """The logger aiokafka's bootstrap writes 'Unable connect to ...' to."""
    from aiokafka import client

    assert client.log.name == "aiokafka"
