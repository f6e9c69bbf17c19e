"""Why the cluster refused us, in one line: credentials it did not take, a certificate we
do not trust, a plaintext client on a TLS port, an ACL that does not let us at a topic, a
group or a transactional id. `kafka_refusal` gives that line, or None when the error is
none of these (the caller then says the broker cannot be reached).

aiokafka's bootstrap raises a bare `KafkaConnectionError("Unable to bootstrap ...")` and
only logs the reason (on the `aiokafka` logger); `remember_connect_errors` keeps the last
one it logged, so the line can name it. Each refusal is one `Refusal` row of `REFUSALS`:
a new one is a row. No line carries a password, a key password or a token.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from aiokafka import errors

from topics.clients import KafkaConnection
from topics.security.keyfiles import KeyPasswordMissing
from topics.security.tokens import TokenFileError

GRANT = "`groundstream acls --stage NAME --principal {principal} --apply` grants it"
"""How an ACL refusal is put right (the `acls` command writes the stage's ACLs)."""

TROUBLESHOOTING = "docs/how-to/troubleshooting.md"
"""The page each refusal's line points to, at the refusal's own entry (`Refusal.anchor`)."""

_KAFKA_LOG = "aiokafka"
"""aiokafka's client logs a failed connection here, its connections on `aiokafka.conn`."""


class _Remember(logging.Handler):
    """Keeps the last exception aiokafka logged (its connection failures among them)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.last: BaseException | None = None

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        for arg in args:
            if isinstance(arg, BaseException):
                self.last = arg


_remember = _Remember()
_saved: tuple[int, bool] | None = None


def remember_connect_errors(quiet: bool) -> None:
    """Keep the reason aiokafka logs for a failed connection (see the module's docstring).
    `quiet` (a one-shot tool, which reports a failure once, as one line): aiokafka's
    records go to nothing else, at any level of its loggers."""
    global _saved
    logger = logging.getLogger(_KAFKA_LOG)
    _remember.last = None
    if _remember not in logger.handlers:
        _saved = (logger.level, logger.propagate)
        logger.addHandler(_remember)
    if quiet:
        logger.setLevel(logging.WARNING)  # made, so remembered, and then kept from root
        logger.propagate = False


def forget_connect_errors() -> None:
    """Undo `remember_connect_errors`: aiokafka's logger as it was."""
    global _saved
    logger = logging.getLogger(_KAFKA_LOG)
    _remember.last = None
    if _remember in logger.handlers:
        logger.removeHandler(_remember)
    if _saved is not None:
        logger.setLevel(_saved[0])
        logger.propagate = _saved[1]
        _saved = None


def last_connect_error() -> BaseException | None:
    return _remember.last


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc`, its causes and contexts, then the connection error aiokafka last logged
    (when `exc` is a connection error: the reason its bootstrap only logged)."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo += [e.__cause__, e.__context__]
        if isinstance(e, errors.KafkaConnectionError) and _remember.last is not None:
            todo.append(_remember.last)


def _principal(conn: KafkaConnection | None) -> str:
    if conn is not None and conn.uses_sasl and conn.sasl_username:
        return f"User:{conn.sasl_username}"
    return "User:NAME"


def _named(e: BaseException) -> str:
    """What an authorization error names (a topic, a group, a transactional id)."""
    arg = e.args[0] if e.args else None
    if isinstance(arg, set | frozenset | list | tuple):
        return ", ".join(sorted(map(str, arg)))
    return str(arg) if arg else ""


def _credentials(e: BaseException, where: str, conn: KafkaConnection | None) -> str:
    if conn is not None and conn.sasl_mechanism == "OAUTHBEARER":
        given = "the token of GROUNDSTREAM_KAFKA_OAUTH_TOKEN_FILE"
    elif conn is not None and conn.uses_sasl:
        given = (
            f"user {conn.sasl_username!r} with {conn.sasl_mechanism} "
            "(GROUNDSTREAM_KAFKA_SASL_USERNAME, GROUNDSTREAM_KAFKA_SASL_PASSWORD)"
        )
    else:
        given = "our credentials (GROUNDSTREAM_KAFKA_SASL_*)"
    return f"Kafka at {where} refused {given}: {type(e).__name__}"


def _other_host(e: BaseException, conn: KafkaConnection | None) -> bool:
    message = str(getattr(e, "verify_message", "") or getattr(e, "reason", "")).lower()
    return isinstance(e, ssl.SSLCertVerificationError) and (
        "mismatch" in message or "hostname" in message
    )


def _other_host_line(e: BaseException, where: str, conn: KafkaConnection | None) -> str:
    message = getattr(e, "verify_message", "") or getattr(e, "reason", "") or type(e).__name__
    return (
        f"the certificate of Kafka at {where} does not name that host ({message}); "
        # Never the hint to stop checking: that lets anyone with a certificate from the
        # same CA stand in for the broker. The names are what is wrong.
        "fix the certificate's names: reissue it with every host clients connect by in "
        "its subjectAltName (SAN), or connect by a name it holds "
        "(GROUNDSTREAM_BOOTSTRAP_SERVERS)"
    )


def _certificate(e: BaseException, where: str, conn: KafkaConnection | None) -> str:
    message = getattr(e, "verify_message", "") or getattr(e, "reason", "") or type(e).__name__
    return (
        f"the certificate of Kafka at {where} is not trusted ({message}); set "
        "GROUNDSTREAM_KAFKA_SSL_CA_FILE to the CA that signed it"
    )


def _wants_certificate(e: BaseException, conn: KafkaConnection | None) -> bool:
    reason = getattr(e, "reason", None) or ""
    return isinstance(e, ssl.SSLError) and "CERTIFICATE_REQUIRED" in str(reason).upper()


def _wants_certificate_line(e: BaseException, where: str, conn: KafkaConnection | None) -> str:
    reason = getattr(e, "reason", None) or type(e).__name__
    return (
        f"Kafka at {where} wants a client certificate ({reason}); set "
        "GROUNDSTREAM_KAFKA_SSL_CERT_FILE and GROUNDSTREAM_KAFKA_SSL_KEY_FILE"
    )


def _handshake(e: BaseException, where: str, conn: KafkaConnection | None) -> str:
    reason = getattr(e, "reason", None) or type(e).__name__
    return (
        f"the TLS handshake with Kafka at {where} failed ({reason}); is that port a TLS "
        "listener? (GROUNDSTREAM_KAFKA_SECURITY_PROTOCOL)"
    )


def _plaintext_on_tls(e: BaseException, conn: KafkaConnection | None) -> bool:
    return (
        isinstance(e, errors.KafkaConnectionError)
        and " closed" in str(e)
        and (conn is None or not conn.uses_ssl)
    )


def _closed(e: BaseException, where: str, conn: KafkaConnection | None) -> str:
    protocol = conn.security_protocol if conn is not None else "PLAINTEXT"
    return (
        f"Kafka at {where} closed the connection during the handshake: a TLS listener? "
        f"GROUNDSTREAM_KAFKA_SECURITY_PROTOCOL is {protocol}; set SSL (or SASL_SSL)"
    )


def _acl(what: str) -> Callable[[BaseException, str, KafkaConnection | None], str]:
    def line(e: BaseException, where: str, conn: KafkaConnection | None) -> str:
        named = _named(e)
        return (
            f"Kafka at {where} refused {_principal(conn)} access to {what}"
            f"{' ' + named if named else ''} ({type(e).__name__}); "
            + GRANT.format(principal=_principal(conn))
        )

    return line


@dataclass(frozen=True)
class Refusal:
    """A refusal: which errors it is (a class, or a test of the error and connection),
    its line given the error, the bootstrap servers and the connection, and the anchor of
    its entry in the troubleshooting page, which the line ends by pointing to."""

    matches: type[BaseException] | tuple[type[BaseException], ...] | Callable[..., bool]
    line: Callable[[BaseException, str, KafkaConnection | None], str]
    anchor: str

    def match(self, e: BaseException, conn: KafkaConnection | None) -> bool:
        if isinstance(self.matches, type | tuple):
            return isinstance(e, self.matches)
        return bool(self.matches(e, conn))


def _own(e: BaseException, where: str, conn: KafkaConnection | None) -> str:
    """Our side's own credentials could not be given (an empty token file, a key that
    needs its password): the error's line already names the setting."""
    return str(e)


_ACL = "an-acl-refused-access"

REFUSALS: tuple[Refusal, ...] = (
    Refusal((TokenFileError, KeyPasswordMissing), _own, "our-own-credentials-could-not-be-read"),
    Refusal(
        (errors.SaslAuthenticationFailed, errors.AuthenticationFailedError),
        _credentials,
        "kafka-refused-the-credentials",
    ),
    Refusal(errors.TopicAuthorizationFailedError, _acl("topic"), _ACL),
    Refusal(errors.GroupAuthorizationFailedError, _acl("consumer group"), _ACL),
    Refusal(errors.TransactionalIdAuthorizationFailed, _acl("transactional id"), _ACL),
    Refusal(errors.ClusterAuthorizationFailedError, _acl("the cluster"), _ACL),
    Refusal(_other_host, _other_host_line, "the-certificate-does-not-name-that-host"),
    Refusal(ssl.SSLCertVerificationError, _certificate, "the-certificate-is-not-trusted"),
    Refusal(_wants_certificate, _wants_certificate_line, "kafka-wants-a-client-certificate"),
    Refusal(ssl.SSLError, _handshake, "the-tls-handshake-failed"),
    Refusal(_plaintext_on_tls, _closed, "kafka-closed-the-connection-during-the-handshake"),
)
"""Rows in order: the first row that matches an error of the chain (the one raised, its
causes, the connection error aiokafka logged) gives the line."""


def kafka_refusal(
    exc: BaseException,
    bootstrap: str,
    conn: KafkaConnection | None = None,
    stage: str | None = None,
) -> str | None:
    """The one line for a refusal by the cluster, else None (see the module docstring).
    `stage`: the stage being started, whose ACLs the line's `groundstream acls` grants."""
    chain = list(_chain(exc))
    for refusal in REFUSALS:
        for e in chain:
            if refusal.match(e, conn):
                line = refusal.line(e, bootstrap, conn)
                line += f"; see {TROUBLESHOOTING}#{refusal.anchor}"
                return line if stage is None else line.replace("--stage NAME", f"--stage {stage}")
    return None
