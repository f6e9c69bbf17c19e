"""Every Kafka client groundstream makes is made here, from one `KafkaConnection`: the
bootstrap servers and the cluster's security (TLS, SASL, an OAuth token file or MSK's
IAM), so no
producer, consumer or admin client can leave the security settings behind
(tests/unit/test_kafka_clients.py walks the source for any other construction).
Producers are `fencing.GroupFencedProducer`s: aiokafka's, whose transactional offset
commit can carry the group member's generation (KIP-447).

`Settings.kafka()` (workers.runtime.settings) gives the connection of the
`GROUNDSTREAM_KAFKA_*` variables, validated at start-up; a bare `KafkaConnection(servers)`
is a PLAINTEXT one (a local broker, the tests)."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.abc import AbstractTokenProvider
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.helpers import create_ssl_context

from topics.fencing import GroupFencedProducer
from topics.security import keyfiles, redaction
from topics.security.tokens import FileTokenProvider

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


class MskIamTokenProvider(AbstractTokenProvider):
    """SASL/OAUTHBEARER on Amazon MSK's IAM access control: a token signed for `region`
    with the AWS credentials the default chain finds (environment, profile, the pod's or
    instance's role), by `aws-msk-iam-sasl-signer-python` (the `msk` extra). A token is
    kept until a minute before it expires, then signed anew (in a thread: finding the
    credentials can mean a request to the instance's metadata service)."""

    RENEW_BEFORE_S = 60.0

    def __init__(self, region: str, clock: Callable[[], float] = time.time) -> None:
        self.region = region
        self._clock = clock
        self._token, self._expires = "", 0.0

    def sign(self) -> str:
        if self._clock() < self._expires - self.RENEW_BEFORE_S:
            return self._token
        from aws_msk_iam_sasl_signer import MSKAuthTokenProvider

        token, expiry_ms = MSKAuthTokenProvider.generate_auth_token(self.region)
        self._token, self._expires = token, expiry_ms / 1000
        return token

    async def token(self) -> str:
        return await asyncio.to_thread(self.sign)

    def __repr__(self) -> str:
        return f"MskIamTokenProvider({self.region!r})"


@dataclass(frozen=True)
class KafkaConnection:
    """Where the cluster is and how to prove who we are to it. Secrets never print."""

    bootstrap_servers: str
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = ""
    sasl_username: str = ""
    sasl_password: str = field(default="", repr=False)
    oauth_token_file: str = ""
    aws_region: str = ""
    """With OAUTHBEARER and no token file: MSK's IAM tokens for this region."""
    ssl_ca_file: str = ""
    ssl_cert_file: str = ""
    ssl_key_file: str = ""
    ssl_key_password: str = field(default="", repr=False)
    ssl_check_hostname: bool = True

    def __post_init__(self) -> None:
        if self.security_protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"security protocol {self.security_protocol!r}")
        if self.sasl_mechanism and self.sasl_mechanism not in SASL_MECHANISMS:
            raise ValueError(f"SASL mechanism {self.sasl_mechanism!r}")

    @property
    def uses_ssl(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    @cached_property
    def ssl_context(self) -> ssl.SSLContext | None:
        """One context per connection, shared by all its clients (None without TLS): the
        system's trust store, or GROUNDSTREAM_KAFKA_SSL_CA_FILE; a client certificate for
        mutual TLS; the host name checked unless turned off."""
        if not self.uses_ssl:
            return None
        context = create_ssl_context(
            cafile=self.ssl_ca_file or None,
            certfile=self.ssl_cert_file or None,
            keyfile=self.ssl_key_file or None,
            # No password given: a callback that refuses, so OpenSSL never prompts for one
            # on a terminal a worker does not have.
            password=self.ssl_key_password or keyfiles.no_password(self.ssl_key_file),
        )
        context.check_hostname = self.ssl_check_hostname
        return context

    @cached_property
    def token_provider(self) -> AbstractTokenProvider | None:
        if self.uses_sasl and self.sasl_mechanism == "OAUTHBEARER":
            if self.aws_region and not self.oauth_token_file:
                return MskIamTokenProvider(self.aws_region)
            return FileTokenProvider(self.oauth_token_file)
        return None

    def client_kwargs(self) -> dict[str, Any]:
        """What every aiokafka client gets from the connection."""
        kwargs: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap_servers,
            "security_protocol": self.security_protocol,
        }
        if self.uses_ssl:
            kwargs["ssl_context"] = self.ssl_context
        if self.uses_sasl:
            kwargs["sasl_mechanism"] = self.sasl_mechanism
            if self.sasl_mechanism == "OAUTHBEARER":
                kwargs["sasl_oauth_token_provider"] = self.token_provider
            else:
                kwargs["sasl_plain_username"] = self.sasl_username
                kwargs["sasl_plain_password"] = self.sasl_password
        return kwargs


def connection(kafka: KafkaConnection | str) -> KafkaConnection:
    """`kafka` itself, or a PLAINTEXT connection to the servers a bare string names (an
    agent's client on a local broker; the services take theirs from `Settings.kafka()`)."""
    return kafka if isinstance(kafka, KafkaConnection) else KafkaConnection(kafka)


def _merged(conn: KafkaConnection, options: dict[str, Any]) -> dict[str, Any]:
    redaction.install()  # whoever set up logging, no client's debug lines show SASL's bytes
    kwargs = conn.client_kwargs()
    clash = sorted(set(kwargs) & set(options))
    if clash:
        raise TypeError(f"set by the connection, not per client: {', '.join(clash)}")
    return {**kwargs, **options}


def producer(conn: KafkaConnection, **options: Any) -> GroupFencedProducer:
    """An unstarted producer on `conn`; `options` are aiokafka's own (acks, ...). A
    transactional one commits offsets fenced by the group's generation when given the
    consumer's `fencing.GroupMetadata`."""
    return GroupFencedProducer(**_merged(conn, options))


def consumer(conn: KafkaConnection, *topics: str, **options: Any) -> AIOKafkaConsumer:
    """An unstarted consumer on `conn`, subscribed to `topics` if any."""
    return AIOKafkaConsumer(*topics, **_merged(conn, options))


def admin(conn: KafkaConnection, **options: Any) -> AIOKafkaAdminClient:
    """An unstarted admin client on `conn`."""
    return AIOKafkaAdminClient(**_merged(conn, options))
