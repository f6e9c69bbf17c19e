"""The root of every error groundstream raises on purpose, and the core's own errors.

Catch `GroundstreamError` to catch them all; each also keeps the standard type a caller
may already catch. Each says whether it may be retried (`retryable`, marked ↻ below): not
the message's fault, so a batch it interrupts is redone, never dead-lettered
(`pipeline.failures`). The tree, by area (a test walks every package and fails on an
error outside it, or a mark here that disagrees with the class):

GroundstreamError
 ├── PolicyError (ValueError)            a policy or setting is invalid; names the field
 │    └── SettingsError                  workers.runtime.settings: a GROUNDSTREAM_* variable
 ├── ScoringError (ValueError)           an input cannot be scored (empty text, bad shape)
 ├── DataFileError (ValueError)          a data file is unreadable or malformed; names file, line
 ├── EncoderChanged (ValueError)         pipeline.trail.replay: not the recorded encoder
 ├── ReaderError (ValueError)            pipeline.claims.readers: a reader or checkpoint refused
 ├── MalformedMessage (ValueError)       topics.schema: a message is unusable; it is dead-lettered
 ├── DecodeLimitError (JSONDecodeError)  topics.codec: nesting or size beyond the parse limits
 ├── BadConclusion (ValueError)          topics.conclusion: a concluded message the writer refuses
 ├── GroupFenced (KafkaError)           topics.fencing: offsets refused, the group moved on
 ├── UnstableOffsetCommit (KafkaError) ↻ topics.fencing: offsets pending in a transaction
 ├── TopicConfigMismatch (ValueError)    topics.admin: an existing topic's setting would lose data
 ├── KeyPasswordMissing (ValueError)     topics.security.keyfiles: an encrypted key, no password
 ├── TokenFileError (ValueError)         topics.security.tokens: no OAuth token to send yet
 ├── KeyFileError (ValueError)           topics.security.keys: a key file or folder unusable
 ├── Unverified (ValueError)             topics.security.signatures: a signature that does not hold
 ├── KeysMissing (ValueError)            workers.runtime.signing: no keys on a secured broker
 ├── TopicsMissing (RuntimeError) ↻      workers.runtime.runner: broker or topics absent at start
 ├── NotReady (RuntimeError)             workers.runtime.runner: in-process loops never came up
 ├── UnknownTopic (LookupError)          workers.runtime.kafka_tools: no such topic
 ├── RetriesExhausted (RuntimeError) ↻   workers.runtime.loop: no progress past patience; exit
 │    └── BrokerUnavailable ↻            the broker the cause: gone; exit uncommitted
 ├── StaleBatch (RuntimeError) ↻         workers.runtime.loop: a rebalance took the batch
 ├── Fenced (RuntimeError)               workers.runtime.loop: a newer worker took the id; exit
 ├── ControlUnknown (RuntimeError) ↻     workers.runtime.loop: kill switch unknown; redo the batch
 ├── ProcessingStopped (RuntimeError)    workers.runtime.isolation: a permanent error under `stop`
 ├── ReplyTooLarge                       workers.clients.llm: an endpoint's reply over the size cap
 ├── EndpointRefused                     workers.clients.discovery: no model set and not one found
 ├── CandidateConflict (ValueError)      workers.clients.agent: an id reused for other content
 ├── OutcomeTimeout (TimeoutError) ↻     workers.clients.agent: no outcome yet (in flight)
 ├── AlreadyDecided (LookupError)        workers.runtime.review: a second verdict on one candidate
 ├── ReviewerFileError (ValueError)     workers.runtime.reviewers: a reviewer tokens file unusable
 ├── Refused                             workers.web.access: a request's credential refused
 ├── AclsRefused (RuntimeError)          workers.runtime.acls: the broker refused an ACL binding
 ├── LeaveRefused (KafkaError)          workers.runtime.membership: LeaveGroup refused
 ├── CompareError (ValueError)           workers.eval.quantized: an int8 comparison asked wrongly
 └── BenchError (RuntimeError)           workers.bench: a benchmark could not run
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import ClassVar

EXIT_REFUSED = 1
EXIT_KAFKA = 2
EXIT_FENCED = 3

EXIT_CODES: Mapping[int, str] = MappingProxyType(
    {
        0: "Done; for a check (`audit verify`, `probe`, `determinism`, `wait-ready`, `produce`):"
        " it passed.",
        EXIT_REFUSED: "groundstream refused what it was given: a bad file, setting, policy or"
        " path (one line names it), or a check failed: `audit verify` found the log not intact,"
        " `probe` found the endpoint not usable, `determinism` found a decision that differs,"
        " `wait-ready` timed out, `produce` left out lines the ladder would dead-letter.",
        EXIT_KAFKA: "Kafka: the broker cannot be reached, refused the connection (credentials,"
        " certificate, an ACL) or lacks the ladder's topics; a worker gave up after the broker"
        " stayed away; or click refused the command line (an unknown command or option).",
        EXIT_FENCED: "A worker stopped because another worker started under its instance id"
        " (GROUNDSTREAM_INSTANCE_ID) and fenced it; nothing of its open batch was committed.",
    }
)
"""The exit status of every `groundstream` command and worker, and what each means:
`workers.cli.base.one_line` and `workers.runtime.runner.run_stage` exit with these."""


class GroundstreamError(Exception):
    """Root of every error the core raises on purpose."""

    retryable: ClassVar[bool] = False
    """True when the error is not the message's fault (the broker, a batch's timing): the
    work is redone, and the candidate never dead-lettered for it. Permanent by default."""


class PolicyError(GroundstreamError, ValueError):
    """A policy or config value is invalid. The message names the field, value and allowed set."""

    def __init__(self, field: str, value: object, expected: str) -> None:
        self.field = field
        self.value = value
        self.expected = expected
        super().__init__(f"invalid setting {field}={value!r}: expected {expected}")


class DataFileError(GroundstreamError, ValueError):
    """A data file (labelled records, claim sets, bench results) is unreadable or malformed;
    the message names the file and the record or line."""


class ScoringError(GroundstreamError, ValueError):
    """An input cannot be scored (for example empty text); the message says why."""


class ReaderError(GroundstreamError, ValueError):
    """A reader directory or a checkpoint to export is refused (missing files, hashes that
    do not match, an architecture or label set it cannot serve); one line that says why."""
