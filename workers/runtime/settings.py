"""Worker settings from environment variables, validated once at start-up.

Every variable is `GROUNDSTREAM_<NAME>`; a bad value raises `SettingsError` naming the
variable, so a misconfigured worker stops before it touches a message.
"""

from __future__ import annotations

import difflib
import importlib.util
import logging
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pipeline.encoding.encoder import BACKENDS
from pipeline.errors import PolicyError, ReaderError
from pipeline.failures import ErrorAction
from pipeline.guards import admission
from pipeline.guards.admission import WorkCaps
from pipeline.policy.document import Policy, load_policy
from topics.clients import SASL_MECHANISMS, SECURITY_PROTOCOLS, KafkaConnection
from topics.names import Topic
from topics.security import keyfiles

PREFIX = "GROUNDSTREAM_"
MSK_SIGNER = "aws_msk_iam_sasl_signer"
"""The `msk` extra's module: MSK's IAM tokens."""


class SettingsError(PolicyError):
    """An environment variable holds an invalid value."""


def _positive_int(v: str) -> int:
    n = int(v)
    if n < 1:
        raise ValueError
    return n


MAX_IN_FLIGHT = 128
"""Most calls a worker may keep open to one endpoint: the candidates concluded beyond a
partition's committed offset are named in its metadata, which must stay under the
broker's 4 KiB (`inflight`)."""


def _in_flight(v: str) -> int:
    n = int(v)
    if not 1 <= n <= MAX_IN_FLIGHT:
        raise ValueError
    return n


def _positive_float(v: str) -> float:
    x = float(v)
    if not x > 0:
        raise ValueError
    return x


def _port(v: str) -> int:
    n = int(v)
    if not 0 < n < 65536:
        raise ValueError
    return n


def _servers(v: str) -> str:
    for part in v.split(","):
        host, _, port = part.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError
    return v


def _encoder_backend(v: str) -> str:
    if v not in BACKENDS:
        raise ValueError
    return v


def _instance_id(v: str) -> str:
    if not re.fullmatch(r"[a-zA-Z0-9._-]{1,100}", v):
        raise ValueError
    return v


def _reader_dir(v: str) -> str:
    """A reader directory whose files match its reader.json ("" for none); a `ReaderError`
    says why not, and the one-line error carries it."""
    if not v:
        return ""
    from pipeline.claims.readers import check_reader_dir

    check_reader_dir(v)
    return v


def _nli_model(v: str) -> str:
    """`reader`, a CrossEncoder directory, or a reader directory of a pair classifier."""
    from pipeline.claims.readers import META_FILE, ReaderKind, check_reader_dir

    if v in ("", "reader") or not (Path(v) / META_FILE).is_file():
        return v
    spec = check_reader_dir(v)
    if spec is not None and spec.kind is not ReaderKind.PAIR:
        raise ReaderError("a token classifier reads answers, not pairs of texts")
    return v


def _grounding_models(policy: Policy) -> list[tuple[str, Any]]:
    """Every grounding model of `policy`, named by where the policy holds it."""
    return [("the policy's grounding model", policy.grounding)] + [
        (f"route {name}'s grounding model", fit.grounding)
        for name, fit in policy.route_fits.items()
    ]


def _one_of(choices: tuple[str, ...], unset: bool = False) -> Callable[[str], str]:
    """One of `choices`, or "" (unset) where `unset`."""

    def parse(v: str) -> str:
        if v not in choices and not (unset and v == ""):
            raise ValueError
        return v

    return parse


_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _flag(v: str) -> bool:
    if v.strip().lower() in _TRUE:
        return True
    if v.strip().lower() in _FALSE:
        return False
    raise ValueError


def _aws_region(v: str) -> str:
    if v and not re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d", v):
        raise ValueError
    return v


def _existing_file(v: str) -> str:
    """A path to a readable file ("" for none)."""
    if v and not Path(v).is_file():
        raise ValueError
    return v


def _header_name(v: str) -> str:
    """An HTTP header name ("" for none): letters, digits and dashes."""
    if v and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9-]{0,63}", v):
        raise ValueError
    return v


def _existing_dir(v: str) -> str:
    """A path to a folder ("" for none)."""
    if v and not Path(v).is_dir():
        raise ValueError
    return v


def _url(v: str) -> str:
    if v and not v.startswith(("http://", "https://")):
        raise ValueError
    return v.rstrip("/")


_PARSERS: dict[str, tuple[Callable[[str], Any], str]] = {
    "bootstrap_servers": (_servers, "host:port[,host:port…]"),
    "partitions": (_positive_int, "an integer >= 1"),
    "replication": (_positive_int, "an integer >= 1"),
    "batch_size": (_positive_int, "an integer >= 1"),
    "batch_within": (_positive_float, "seconds > 0"),
    "max_candidate_bytes": (_positive_int, "bytes >= 1"),
    "max_response_words": (_positive_int, "an integer >= 1"),
    "max_source_words": (_positive_int, "an integer >= 1"),
    "max_claims": (_positive_int, "an integer >= 1"),
    "max_samples": (_positive_int, "an integer >= 1"),
    "max_sample_words": (_positive_int, "an integer >= 1"),
    "web_port": (_port, "a TCP port"),
    "metrics_port": (_port, "a TCP port (the first stage's; each stage adds its index)"),
    "sampler_url": (_url, "an http(s) base URL ending in /v1"),
    "judge_url": (_url, "an http(s) base URL ending in /v1"),
    "sampler_timeout": (_positive_float, "seconds > 0"),
    "judge_timeout": (_positive_float, "seconds > 0"),
    "judge_max_in_flight": (_in_flight, f"an integer from 1 to {MAX_IN_FLIGHT}"),
    "sampler_max_in_flight": (_in_flight, f"an integer from 1 to {MAX_IN_FLIGHT}"),
    "control_poll": (_positive_float, "seconds > 0"),
    "encoder_backend": (_encoder_backend, f"{', '.join(BACKENDS[:-1])} or {BACKENDS[-1]}"),
    "encoder_cache_rows": (_positive_int, "an integer >= 1"),
    "instance_id": (_instance_id, "1-100 of a-z A-Z 0-9 . _ -"),
    "leave_group_on_stop": (_flag, "true/false, 1/0 or yes/no"),
    "on_processing_error": (ErrorAction, " or ".join(ErrorAction)),
    "reader": (_reader_dir, "a reader directory (`groundstream reader export` writes one)"),
    "nli_model": (_nli_model, "reader, a CrossEncoder directory or a pair reader's directory"),
    "kafka_security_protocol": (_one_of(SECURITY_PROTOCOLS), ", ".join(SECURITY_PROTOCOLS)),
    "kafka_sasl_mechanism": (_one_of(SASL_MECHANISMS, unset=True), ", ".join(SASL_MECHANISMS)),
    "kafka_sasl_password_file": (_existing_file, "a readable file"),
    "kafka_oauth_token_file": (_existing_file, "a readable file"),
    "reviewer_tokens_file": (_existing_file, "a readable file"),
    "reviewer_identity_header": (_header_name, "an HTTP header name such as X-Forwarded-User"),
    "kafka_aws_region": (_aws_region, "an AWS region such as eu-west-1"),
    "kafka_ssl_ca_file": (_existing_file, "a readable file"),
    "kafka_ssl_cert_file": (_existing_file, "a readable file"),
    "kafka_ssl_key_file": (_existing_file, "a readable file"),
    "kafka_ssl_check_hostname": (_flag, "true/false, 1/0 or yes/no"),
    "kafka_allow_cleartext_sasl": (_flag, "true/false, 1/0 or yes/no"),
    "signing_key_file": (_existing_file, "a readable file (`groundstream keys generate`)"),
    "trusted_keys_dir": (_existing_dir, "a folder of public keys (`groundstream keys generate`)"),
}

SECRET_FIELDS = frozenset(
    {
        "web_token",
        "reviewer_token",
        "judge_api_key",
        "sampler_api_key",
        "stage_key",
        "kafka_sasl_password",
        "kafka_ssl_key_password",
    }
)
"""Settings whose values never appear in an error message, a log line or a record."""

OTHER_VARIABLES: Mapping[str, str] = MappingProxyType(
    {
        "GROUNDSTREAM_ONNX_DIR": "the ONNX encoder's cache (pipeline/encoding/onnx_encoder.py);"
        " unset: $XDG_CACHE_HOME/groundstream/onnx (~/.cache by default)",
        "GROUNDSTREAM_AUDIT_KEY": "the audit chains' HMAC key (pipeline/trail/audit.py), read"
        " by the recorder and `groundstream audit`: set, each entry's hash is an HMAC, so an"
        " edit cannot be hidden by recomputing the hashes after it; unset, plain SHA-256",
        "GROUNDSTREAM_PYTHON": "deploy/kafka/local.sh: the python with aiokafka for its"
        " readiness round trip (the test harness sets it)",
        "GROUNDSTREAM_KAFKA_DIR": "deploy/kafka/local.sh: the run dir (config, data, logs)",
        "GROUNDSTREAM_KAFKA_VERSION": "deploy/kafka/local.sh: a Kafka 4.x version over pom.xml's",
        "GROUNDSTREAM_KAFKA_HEAP": "deploy/kafka/local.sh: the JVM heap of each node",
        "GROUNDSTREAM_KAFKA_TIMEOUT": "deploy/kafka/local.sh: seconds to wait for readiness",
        "GROUNDSTREAM_KAFKA_CACHE": "deploy/kafka/local.sh: the classpath cache dir",
        "GROUNDSTREAM_KAFKA_SECURE": "deploy/kafka/local.sh: 1 for a SASL_SSL listener and the"
        " authorizer",
        "GROUNDSTREAM_KAFKA_NODES": "deploy/kafka/local.sh: how many KRaft nodes (1 to 9)",
        "GROUNDSTREAM_KAFKA_NODE": "deploy/kafka/local.sh logs: which node's server.log",
        "GROUNDSTREAM_KAFKA_USERS": "deploy/kafka/local.sh: the SCRAM users it makes",
    }
)
"""`GROUNDSTREAM_*` variables read elsewhere than `Settings`: not warned about."""

log = logging.getLogger("groundstream.settings")


class _DefaultBatch(int):
    """The batch size nobody gave: an int like any other, but `batch_size_for` can tell it
    from the same number set on purpose (a variable, an override, a constructor value)."""


DEFAULT_BATCH_SIZE = _DefaultBatch(64)
STAGE_BATCH_SIZES: Mapping[str, int] = MappingProxyType({"switch": 1000})
"""A stage's batch when GROUNDSTREAM_BATCH_SIZE is not set, where it is not the default:
a cheap stage's rate is set by its transactions' round trips, one per batch, so it takes
more per batch; geometry's batch is bounded by the encoder (docs/benchmarks.md)."""


@dataclass(frozen=True, slots=True)
class Settings:
    """Validated settings of one worker process (or CLI call)."""

    bootstrap_servers: str = "127.0.0.1:9092"
    """The Kafka bootstrap servers every client connects to."""
    topic_prefix: str = ""
    """Put before every topic and group name: tenants and tests share one cluster."""
    policy: str = ""
    """The policy TOML (`--policy` on the commands); unset: the shipped default."""
    default_route: str = "default"
    """The route of a candidate that names none and whose task no route serves."""
    partitions: int = 3
    """Partitions of each topic `groundstream topics create` makes."""
    replication: int = 1
    """Replication factor of each topic `groundstream topics create` makes."""
    batch_size: int = DEFAULT_BATCH_SIZE
    """Every stage's batch when set; unset, the stage's own (`batch_size_for`)."""
    batch_within: float = 0.05
    """Seconds a stage waits for its batch to fill before it processes what came."""
    max_candidate_bytes: int = 1024 * 1024
    """A candidate message larger than this is dead-lettered unread."""
    max_response_words: int = admission.RESPONSE_WORDS
    """Work cap: an answer over this many words goes to review unencoded (gate work_cap)."""
    max_source_words: int = admission.SOURCE_WORDS
    """Work cap: a question and context over this many words go to review unencoded."""
    max_claims: int = admission.CLAIMS
    """Work cap: an answer with more claims than this goes to review unencoded."""
    max_samples: int = admission.SAMPLES
    """Work cap: a candidate bringing more samples than this goes to review, unsampled."""
    max_sample_words: int = admission.SAMPLE_WORDS
    """Work cap: a candidate with a sample over this many words goes to review, unsampled."""
    web_host: str = "127.0.0.1"
    """The dashboard's bind address."""
    web_port: int = 6066
    """The dashboard's port."""
    web_token: str = field(default="", repr=False)
    """The dashboard's shared token: reads whole records and flips the kill switch, but names
    nobody, so it gives no review verdict (GROUNDSTREAM_REVIEWER_TOKENS_FILE does)."""
    web_allowed_hosts: str = ""
    """Comma-separated host names the dashboard answers besides loopback and its bind address."""
    reviewer_tokens_file: str = ""
    """Reviewers' own credentials, one `name:<sha256 of the token>` a line (`groundstream
    review add-reviewer`): a verdict is recorded under the name its token matches."""
    reviewer_identity_header: str = ""
    """The header an authenticating proxy in front of the dashboard names the signed-in user
    in (`X-Forwarded-User`): trusted only when set, so reach the dashboard only through it."""
    reviewer_token: str = field(default="", repr=False)
    """`groundstream review decide` with a tokens file: the deciding reviewer's own token."""
    data_dir: str = ".groundstream"
    """Local data: each stage's readiness file."""
    sampler_url: str = ""
    """Consistency's OpenAI-compatible sampler; unset: only the candidate's own samples."""
    sampler_model: str = ""
    """The sampler's model; unset: the one model the endpoint's /models lists."""
    sampler_timeout: float = 20.0
    """Seconds one sampler call may take."""
    judge_url: str = ""
    """The judge's OpenAI-compatible base URL; unset: no judge (answers go to review)."""
    judge_model: str = ""
    """The judge's model; unset: the one model the endpoint's /models lists."""
    judge_timeout: float = 10.0
    """Seconds one judge call may take: the smaller of this and the policy's [judge]
    timeout_seconds is the limit (`workers/stages/judge.py`)."""
    judge_max_in_flight: int = 64
    """Judge calls one worker keeps open; each candidate concluded as its call returns."""
    sampler_max_in_flight: int = 64
    """Sampler calls one consistency worker keeps open to its endpoint."""
    judge_api_key: str = field(default="", repr=False)
    """The judge endpoint's bearer token."""
    sampler_api_key: str = field(default="", repr=False)
    """The sampler endpoint's bearer token."""
    stage_key: str = field(default="", repr=False)
    """Shared HMAC secret: stages sign each envelope on an inner topic, and dead-letter one
    that fails it (conclusions and decision records are signed per stage, below)."""
    signing_key_file: str = ""
    """This process's own Ed25519 private key (PEM): its conclusions and decision records
    are signed with it. Required on an SSL or SASL_* broker (`groundstream keys generate`)."""
    trusted_keys_dir: str = ""
    """The stages' public keys, `<stage>.pub` (and `<stage>.<any>.pub` during a rollover):
    the terminal writer, review and `audit verify` trust a signature only by these. Read
    again every 30 s while running: a key added or removed needs no restart."""
    nli_model: str = ""
    """GROUNDSTREAM_NLI_MODEL: consistency's entailment model; `reader` is GROUNDSTREAM_READER's
    pair reader (no claim reader ships with groundstream: train or export one first)."""
    reader: str = ""
    """GROUNDSTREAM_READER: the claim reader's directory (`groundstream reader export`, or
    `train claims`); unset, no reader (none ships). Checked against its reader.json."""
    log_level: str = "warning"
    """debug, info, warning or error; answer text is never logged."""
    otlp_endpoint: str = ""
    """OTLP/HTTP endpoint for traces (one per candidate) and OTel metrics; unset: none."""
    metrics_host: str = "127.0.0.1"
    """The bind address of each worker's Prometheus /metrics."""
    metrics_port: int = 0  # 0: no /metrics endpoint (the variable is unset)
    """Each worker's /metrics: this port plus its stage's ladder index (the audit recorder:
    after the last stage); unset: off."""
    control_poll: float = 0.5
    """Seconds between a worker's reads of the control topic (the kill switch)."""
    encoder_backend: str = "torch"
    """The sentence encoder's runtime: torch, ONNX Runtime, or ONNX int8."""
    encoder_cache_rows: int = 20_000
    """Embeddings a worker's encoder keeps, least recently used out first: ~1.85 KiB each
    (all-MiniLM-L6-v2), so the default holds ~37 MiB and the worker's peak follows this
    setting, not how many distinct texts it has seen."""
    instance_id: str = ""  # empty: the host name (one process per stage and host)
    """This process's transactional and static member id in its stage; unset: the host name."""
    leave_group_on_stop: bool = True
    """On SIGTERM or SIGINT, leave the stage's consumer group after the last batch, so its
    partitions move to the other replicas at once; false: the group keeps them for this
    instance id until the session timeout (10 s), for a restart that returns within it."""
    on_processing_error: ErrorAction = ErrorAction.DEADLETTER
    """A candidate's permanent error: dead-letter it, or stop the worker (`isolation`)."""
    kafka_security_protocol: str = "PLAINTEXT"
    """How every Kafka client connects: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."""
    kafka_sasl_mechanism: str = ""
    """With SASL_*: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER."""
    kafka_sasl_username: str = ""
    """PLAIN's and SCRAM's user name."""
    kafka_sasl_password: str = field(default="", repr=False)
    """PLAIN's and SCRAM's password (or GROUNDSTREAM_KAFKA_SASL_PASSWORD_FILE)."""
    kafka_sasl_password_file: str = ""
    """A mounted secret holding the SASL password, read at start-up (instead of
    GROUNDSTREAM_KAFKA_SASL_PASSWORD, never with it)."""
    kafka_oauth_token_file: str = ""
    """OAUTHBEARER's token, read again whenever it changes (a sidecar keeps it fresh)."""
    kafka_aws_region: str = ""
    """OAUTHBEARER on Amazon MSK's IAM: tokens signed for this region with the AWS
    credentials the default chain finds (the `msk` extra)."""
    kafka_ssl_ca_file: str = ""
    """With SSL or SASL_SSL: the PEM of the CA that signed the brokers' certificates."""
    kafka_ssl_cert_file: str = ""
    """Mutual TLS: the client certificate (with GROUNDSTREAM_KAFKA_SSL_KEY_FILE)."""
    kafka_ssl_key_file: str = ""
    """Mutual TLS: the client certificate's key."""
    kafka_ssl_key_password: str = field(default="", repr=False)
    """The password of an encrypted GROUNDSTREAM_KAFKA_SSL_KEY_FILE."""
    kafka_ssl_check_hostname: bool = True
    """Whether the broker's certificate must name the host; the chain is verified either way."""
    kafka_allow_cleartext_sasl: bool = False
    """PLAIN or OAUTHBEARER over SASL_PLAINTEXT sends the password or token in clear: refused
    at start-up unless this says the network is trusted (SCRAM never sends the password)."""

    def batch_size_for(self, stage: str) -> int:
        """The stage's batch: the one given, else the stage's default."""
        if type(self.batch_size) is not _DefaultBatch:
            return self.batch_size
        return STAGE_BATCH_SIZES.get(stage, self.batch_size)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for f in fields(cls):
            name = PREFIX + f.name.upper()
            if name not in env:
                continue
            raw = env[name]
            parser, expected = _PARSERS.get(f.name, (str, "a string"))
            try:
                values[f.name] = parser(raw)
            except ValueError as exc:
                why = f" ({exc})" if isinstance(exc, ReaderError) else ""
                shown = "(hidden)" if f.name in SECRET_FIELDS else raw
                raise SettingsError(name, shown, expected + why) from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        warn_unknown(env)
        if values.get("kafka_sasl_password_file"):
            values["kafka_sasl_password"] = _password_from_file(values)
        settings = cls(**values)
        check_kafka(settings)
        if settings.log_level.lower() not in ("debug", "info", "warning", "error"):
            raise SettingsError(
                PREFIX + "LOG_LEVEL", settings.log_level, "debug, info, warning or error"
            )
        if settings.nli_model == "reader" and settings.reader:
            from pipeline.claims.readers import ReaderKind, check_reader_dir

            spec = check_reader_dir(settings.reader)
            if spec is not None and spec.kind is not ReaderKind.PAIR:
                raise SettingsError(
                    PREFIX + "NLI_MODEL",
                    "reader",
                    "a pair reader: GROUNDSTREAM_READER is a token classifier, which reads "
                    "answers, not pairs of texts",
                )
        return settings

    def kafka(self) -> KafkaConnection:
        """The cluster connection every Kafka client is built from (`topics.clients`)."""
        return KafkaConnection(
            self.bootstrap_servers,
            security_protocol=self.kafka_security_protocol,
            sasl_mechanism=self.kafka_sasl_mechanism,
            sasl_username=self.kafka_sasl_username,
            sasl_password=self.kafka_sasl_password,
            oauth_token_file=self.kafka_oauth_token_file,
            aws_region=self.kafka_aws_region,
            ssl_ca_file=self.kafka_ssl_ca_file,
            ssl_cert_file=self.kafka_ssl_cert_file,
            ssl_key_file=self.kafka_ssl_key_file,
            ssl_key_password=self.kafka_ssl_key_password,
            ssl_check_hostname=self.kafka_ssl_check_hostname,
        )

    def nli_path(self) -> str:
        """What consistency's NLI slot loads: `reader` is GROUNDSTREAM_READER's when set."""
        return self.reader if self.nli_model == "reader" and self.reader else self.nli_model

    def work_caps(self) -> WorkCaps:
        """The per-candidate work caps (`pipeline.guards.admission`)."""
        return WorkCaps(
            self.max_response_words,
            self.max_source_words,
            self.max_claims,
            self.max_samples,
            self.max_sample_words,
        )

    def topic(self, topic: Topic) -> str:
        return topic.full(self.topic_prefix)

    def load_policy(self) -> Policy:
        policy = load_policy(self.policy or None)
        if self.default_route not in policy.routes:
            raise SettingsError(
                PREFIX + "DEFAULT_ROUTE",
                self.default_route,
                f"a route of the policy ({', '.join(sorted(policy.routes))})",
            )
        from pipeline.scores.grounding import served_reader_problem

        problem = served_reader_problem(_grounding_models(policy), self.served_reader())
        if problem is not None:
            error = SettingsError(PREFIX + "READER", self.reader, "the policy's reader")
            error.args = (
                f"{PREFIX}READER={self.reader or '(unset)'}: in policy {policy.version}, "
                f"{problem}; set {PREFIX}READER (or --reader) to that reader's directory, or "
                "refit the policy without --reader",
            )
            raise error
        return policy

    def served_reader(self) -> str | None:
        """The claim reader the geometry stage would run: GROUNDSTREAM_READER's, else the
        shipped one when the package has it, else None."""
        from pipeline.claims.reader import MODEL_FILE, bundled_reader_dir

        if self.reader:
            return self.reader
        return str(bundled_reader_dir()) if (bundled_reader_dir() / MODEL_FILE).is_file() else None

    def reader_note(self, policy: Policy) -> str | None:
        """One line when GROUNDSTREAM_READER is set but no grounding model of `policy`
        gives it weight: the ladder then does not run it (None otherwise). It says so with
        the figures when the policy's fit measured that reader and gave it no say."""
        from pipeline.scores.grounding import CLAIM_READER, reads_claims

        if not self.reader or any(
            reads_claims(m, CLAIM_READER) for _, m in _grounding_models(policy) if m is not None
        ):
            return None
        from pipeline.claims.readers import reader_identity

        digest = reader_identity(self.reader)["digest"]
        for _, model in _grounding_models(policy):
            record = getattr(model, "reader", None) or {}
            if record.get("weighed") is False and record.get("digest") == digest:
                return (
                    f"note: the policy gives the reader {self.reader} no weight, so the ladder"
                    " does not run it: `groundstream calibrate --reader` measured it and gave"
                    f" it no say ({record.get('verdict')})"
                )
        return (
            f"note: the policy gives the reader {self.reader} no weight, so the ladder does "
            "not run it; fit its weight with `groundstream calibrate --reader` "
            "(docs/how-to/bring-a-reader.md)"
        )

    def data_path(self, *parts: str) -> Path:
        return Path(self.data_dir).joinpath(*parts)


def _password_from_file(values: Mapping[str, Any]) -> str:
    """GROUNDSTREAM_KAFKA_SASL_PASSWORD_FILE's content, its trailing newline stripped."""
    path = values["kafka_sasl_password_file"]
    if values.get("kafka_sasl_password"):
        raise SettingsError(
            PREFIX + "KAFKA_SASL_PASSWORD_FILE",
            path,
            "no GROUNDSTREAM_KAFKA_SASL_PASSWORD beside it (set one or the other)",
        )
    try:
        return Path(path).read_text(encoding="utf-8").rstrip("\r\n")
    except (OSError, UnicodeDecodeError):
        raise SettingsError(PREFIX + "KAFKA_SASL_PASSWORD_FILE", path, "a readable file") from None


_SSL_FIELDS = (
    "kafka_ssl_ca_file",
    "kafka_ssl_cert_file",
    "kafka_ssl_key_file",
    "kafka_ssl_key_password",
)


def check_kafka(s: Settings) -> None:
    """The security settings taken together: what a protocol or mechanism needs is there,
    and nothing set is left unused (a CA file beside PLAINTEXT is a mistake, not a no-op)."""
    protocol, mechanism = s.kafka_security_protocol, s.kafka_sasl_mechanism
    name = PREFIX + "KAFKA_SECURITY_PROTOCOL"
    if protocol.startswith("SASL_"):
        if not mechanism:
            raise SettingsError(
                PREFIX + "KAFKA_SASL_MECHANISM",
                "",
                f"one of {', '.join(SASL_MECHANISMS)} with {name}={protocol}",
            )
        if mechanism == "OAUTHBEARER":
            if bool(s.kafka_oauth_token_file) == bool(s.kafka_aws_region):
                raise SettingsError(
                    PREFIX + "KAFKA_OAUTH_TOKEN_FILE",
                    s.kafka_oauth_token_file,
                    "the token's file with OAUTHBEARER, or GROUNDSTREAM_KAFKA_AWS_REGION for"
                    " MSK's IAM (one of the two)",
                )
            if s.kafka_aws_region and importlib.util.find_spec(MSK_SIGNER) is None:
                raise SettingsError(
                    PREFIX + "KAFKA_AWS_REGION",
                    s.kafka_aws_region,
                    "MSK's IAM tokens, which need the msk extra: pip install 'groundstream[msk]'",
                )
        else:
            if not s.kafka_sasl_username:
                raise SettingsError(
                    PREFIX + "KAFKA_SASL_USERNAME", "", f"a user name with {mechanism}"
                )
            if not s.kafka_sasl_password:
                raise SettingsError(
                    PREFIX + "KAFKA_SASL_PASSWORD",
                    "",
                    f"a password with {mechanism} (or GROUNDSTREAM_KAFKA_SASL_PASSWORD_FILE)",
                )
    else:
        for f in ("kafka_sasl_mechanism", "kafka_sasl_username", "kafka_sasl_password_file"):
            if getattr(s, f):
                raise SettingsError(
                    PREFIX + f.upper(), getattr(s, f), f"unset with {name}={protocol}"
                )
        if s.kafka_sasl_password:
            raise SettingsError(
                PREFIX + "KAFKA_SASL_PASSWORD", "(hidden)", f"unset with {name}={protocol}"
            )
    if s.kafka_aws_region and mechanism != "OAUTHBEARER":
        raise SettingsError(
            PREFIX + "KAFKA_AWS_REGION",
            s.kafka_aws_region,
            "unset unless GROUNDSTREAM_KAFKA_SASL_MECHANISM=OAUTHBEARER (MSK's IAM)",
        )
    if s.kafka_oauth_token_file and mechanism != "OAUTHBEARER":
        raise SettingsError(
            PREFIX + "KAFKA_OAUTH_TOKEN_FILE",
            s.kafka_oauth_token_file,
            "unset unless GROUNDSTREAM_KAFKA_SASL_MECHANISM=OAUTHBEARER",
        )
    if protocol not in ("SSL", "SASL_SSL"):
        for f in _SSL_FIELDS:
            if getattr(s, f):
                shown = "(hidden)" if f in SECRET_FIELDS else getattr(s, f)
                raise SettingsError(
                    PREFIX + f.upper(), shown, f"unset with {name}={protocol} (no TLS)"
                )
        if not s.kafka_ssl_check_hostname:
            raise SettingsError(
                PREFIX + "KAFKA_SSL_CHECK_HOSTNAME", "false", f"unset with {name}={protocol}"
            )
    if bool(s.kafka_ssl_cert_file) != bool(s.kafka_ssl_key_file):
        given, missing = ("CERT", "KEY") if s.kafka_ssl_cert_file else ("KEY", "CERT")
        raise SettingsError(
            f"{PREFIX}KAFKA_SSL_{missing}_FILE",
            "",
            f"a file beside GROUNDSTREAM_KAFKA_SSL_{given}_FILE (mutual TLS needs both)",
        )
    if s.kafka_ssl_key_password and not s.kafka_ssl_key_file:
        raise SettingsError(
            PREFIX + "KAFKA_SSL_KEY_PASSWORD",
            "(hidden)",
            "unset without GROUNDSTREAM_KAFKA_SSL_KEY_FILE",
        )
    # An encrypted key with no password: OpenSSL would ask on a terminal there is not.
    if (
        s.kafka_ssl_key_file
        and not s.kafka_ssl_key_password
        and keyfiles.encrypted_pem(s.kafka_ssl_key_file)
    ):
        raise SettingsError(
            PREFIX + "KAFKA_SSL_KEY_PASSWORD",
            "",
            f"the password of {s.kafka_ssl_key_file}, which is encrypted",
        )
    _check_cleartext(s)


CLEARTEXT_MECHANISMS = ("PLAIN", "OAUTHBEARER")
"""Mechanisms whose secret crosses the wire as it is (SCRAM sends a proof, not the password)."""


def _check_cleartext(s: Settings) -> None:
    """PLAIN's password and OAUTHBEARER's token over SASL_PLAINTEXT can be read by anyone on
    the path: only where GROUNDSTREAM_KAFKA_ALLOW_CLEARTEXT_SASL says the network is trusted."""
    if (
        s.kafka_security_protocol == "SASL_PLAINTEXT"
        and s.kafka_sasl_mechanism in CLEARTEXT_MECHANISMS
        and not s.kafka_allow_cleartext_sasl
    ):
        raise SettingsError(
            PREFIX + "KAFKA_ALLOW_CLEARTEXT_SASL",
            "false",
            f"true to send {s.kafka_sasl_mechanism}'s "
            f"{'token' if s.kafka_sasl_mechanism == 'OAUTHBEARER' else 'password'} in clear over "
            "SASL_PLAINTEXT on a trusted network; else use SASL_SSL, or SCRAM-SHA-512",
        )


def known_variables() -> frozenset[str]:
    """Every `GROUNDSTREAM_*` variable groundstream reads."""
    return frozenset(PREFIX + f.name.upper() for f in fields(Settings)) | set(OTHER_VARIABLES)


def unknown_variables(env: Mapping[str, str]) -> list[str]:
    """One line per `GROUNDSTREAM_*` variable of `env` that nothing reads (a typo is
    otherwise silently a default), with the nearest known name when there is one."""
    known = known_variables()
    lines = []
    for name in sorted(n for n in env if n.startswith(PREFIX) and n not in known):
        near = difflib.get_close_matches(name, known, n=1)
        hint = f" (did you mean {near[0]}?)" if near else ""
        lines.append(f"{name} is not a groundstream setting{hint}")
    return lines


_warned = False


def warn_unknown(env: Mapping[str, str]) -> None:
    """Log `unknown_variables` as one warning, once per process."""
    global _warned
    if _warned:
        return
    _warned = True
    lines = unknown_variables(env)
    if lines:
        log.warning("; ".join(lines))
