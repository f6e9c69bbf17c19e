"""Worker settings from environment variables, validated once at start-up.

Every variable is `GROUNDSTREAM_<NAME>`; a bad value raises `SettingsError` naming the
variable, so a misconfigured worker stops before it touches a message.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pipeline import admission
from pipeline.admission import WorkCaps
from pipeline.encoder import BACKENDS
from pipeline.errors import PolicyError, ReaderError
from pipeline.failures import ErrorAction
from pipeline.policy import Policy, load_policy
from topics.names import Topic

PREFIX = "GROUNDSTREAM_"


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
    "on_processing_error": (ErrorAction, " or ".join(ErrorAction)),
    "reader": (_reader_dir, "a reader directory (`groundstream reader export` writes one)"),
    "nli_model": (_nli_model, "reader, a CrossEncoder directory or a pair reader's directory"),
}


class _DefaultBatch(int):
    """The batch size nobody gave: an int like any other, but `batch_size_for` can tell it
    from the same number set on purpose (a variable, an override, a constructor value)."""


DEFAULT_BATCH_SIZE = _DefaultBatch(64)
STAGE_BATCH_SIZES: Mapping[str, int] = MappingProxyType({"switch": 1000})
"""A stage's batch when GROUNDSTREAM_BATCH_SIZE is not set, where it is not the default:
a cheap stage's rate is set by its transactions' round trips, one per batch, so it takes
more per batch; geometry's batch is bounded by the encoder (docs/performance.md)."""


@dataclass(frozen=True, slots=True)
class Settings:
    """Validated settings of one worker process (or CLI call)."""

    bootstrap_servers: str = "127.0.0.1:9092"
    topic_prefix: str = ""
    policy: str = ""
    default_route: str = "default"
    partitions: int = 3
    replication: int = 1
    batch_size: int = DEFAULT_BATCH_SIZE
    """Every stage's batch when set; unset, the stage's own (`batch_size_for`)."""
    batch_within: float = 0.05
    max_candidate_bytes: int = 1024 * 1024
    max_response_words: int = admission.RESPONSE_WORDS
    max_source_words: int = admission.SOURCE_WORDS
    max_claims: int = admission.CLAIMS
    max_samples: int = admission.SAMPLES
    max_sample_words: int = admission.SAMPLE_WORDS
    web_host: str = "127.0.0.1"
    web_port: int = 6066
    web_token: str = field(default="", repr=False)
    web_allowed_hosts: str = ""
    data_dir: str = ".groundstream"
    sampler_url: str = ""
    sampler_model: str = ""
    sampler_timeout: float = 20.0
    judge_url: str = ""
    judge_model: str = ""
    judge_timeout: float = 10.0
    judge_max_in_flight: int = 64
    """Judge calls one worker keeps open; each candidate concluded as its call returns."""
    sampler_max_in_flight: int = 64
    judge_api_key: str = field(default="", repr=False)
    sampler_api_key: str = field(default="", repr=False)
    stage_key: str = field(default="", repr=False)
    nli_model: str = ""
    """GROUNDSTREAM_NLI_MODEL: consistency's entailment model; `reader` is the claim reader
    (GROUNDSTREAM_READER's when it is a pair reader, else the one shipped)."""
    reader: str = ""
    """GROUNDSTREAM_READER: the claim reader's directory (`groundstream reader export`, or
    `train claims`); "" for the shipped one, if any. Checked against its reader.json."""
    log_level: str = "warning"
    otlp_endpoint: str = ""
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 0  # 0: no /metrics endpoint (the variable is unset)
    control_poll: float = 0.5
    encoder_backend: str = "torch"
    encoder_cache_rows: int = 20_000
    """Embeddings a worker's encoder keeps, least recently used out first: ~1.85 KiB each
    (all-MiniLM-L6-v2), so the default holds ~37 MiB and the worker's peak follows this
    setting, not how many distinct texts it has seen (issue 33)."""
    instance_id: str = ""  # empty: the host name (one process per stage and host)
    on_processing_error: ErrorAction = ErrorAction.DEADLETTER
    """A candidate's permanent error: dead-letter it, or stop the worker (`isolation`)."""

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
                raise SettingsError(name, raw, expected + why) from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        settings = cls(**values)
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

    def nli_path(self) -> str:
        """What consistency's NLI slot loads: `reader` is GROUNDSTREAM_READER's when set."""
        return self.reader if self.nli_model == "reader" and self.reader else self.nli_model

    def work_caps(self) -> WorkCaps:
        """The per-candidate work caps (`pipeline.admission`)."""
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
        from pipeline.claims.readers import served_reader_problem

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
            "not run it; fit its weight with `groundstream calibrate --reader` (docs/readers.md)"
        )

    def data_path(self, *parts: str) -> Path:
        return Path(self.data_dir).joinpath(*parts)
