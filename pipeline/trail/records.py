"""Decision records: one per stage per candidate, plus a final `outcome` record.

Records are hash-chained per candidate: each carries the hash of the candidate's previous
record (`prev_hash`) and its own `hash` over its canonical JSON, so a trail read in order
shows an edited record or a broken link (`verify_chain`). It cannot show a candidate
deleted whole, a cut tail or an edit with every later hash recomputed: that is the audit
chain's job (`pipeline.trail.audit`). `sanitize` drops raw text and interpretations for the
operators' own views; consumers outside the trust boundary get the allow-listed
`pipeline.trail.disclosure.public_record` instead.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import orjson

from pipeline.bounds.thresholds import record_cut
from pipeline.trail.evidence import cap_evidence

RECORD_SCHEMA_VERSION = 1
OUTCOME_STAGE = "outcome"
SUPERSEDED_STAGE = "superseded"
"""The terminal writer's record of a later attempt at a candidate that already has its
outcome: delivered nowhere, kept on `decisions` for the audit."""

_TEXT: Mapping[str, Any] = {"type": "string"}
_TEXT_OR_NULL: Mapping[str, Any] = {"type": ["string", "null"]}
_HEX = {"type": "string", "pattern": "^[0-9a-f]{64}$"}

RECORD_FIELDS: Mapping[str, tuple[Mapping[str, Any], str]] = {
    "schema_version": ({"const": RECORD_SCHEMA_VERSION}, "The record format's version."),
    "candidate_id": (
        _TEXT,
        "The candidate's id (a dead letter without one: its origin, `topic/partition/offset`).",
    ),
    "session_id": (_TEXT, "The candidate's session (the message key)."),
    "turn": ({"type": "integer", "minimum": 0}, "The session's turn number."),
    "stage": (
        _TEXT,
        "Who decided: a rung (`geometry`, `switch`, …), `review`, `outcome` (the "
        "candidate's one terminal outcome) or `superseded` (a later attempt).",
    ),
    "action": (
        _TEXT,
        "What was decided: `accept`, `escalate`, `fallback`, `deadletter`, …; on "
        "an outcome record, the outcome.",
    ),
    "write_to_state": ({"type": "boolean"}, "True only for an accept that goes to `state`."),
    "reason": (_TEXT, "Why, in one line."),
    "score": (
        {"type": ["number", "null"]},
        "The score the stage decided on (SGI, DGI, P(grounded), a judge's P(yes)), if any.",
    ),
    "method": (
        _TEXT_OR_NULL,
        "Which score: `sgi`, `dgi`, `grounding`, `consistency`, `judge`, `rules`, …",
    ),
    "level": (_TEXT_OR_NULL, "The score's band (`ok`, `review`, `risk`, …), if any."),
    "policy_version": (_TEXT, "The version of the policy that decided."),
    "decided_at": ({"type": "string", "format": "date-time"}, "When, ISO 8601 with a zone."),
    "mode": (
        _TEXT,
        "The route's mode (`off`, `shadow`, `evaluate`, `active`); empty on a dead letter.",
    ),
    "route": (_TEXT, "The route it was decided by; empty on a dead letter."),
    "decided_action": (_TEXT, "What the policy decided."),
    "served_action": (
        _TEXT,
        "What was served: differs from `decided_action` in `shadow` and `off` mode.",
    ),
    "gate": (
        _TEXT_OR_NULL,
        "The gate that held it (`judge_unavailable`, `deadline`, "
        "`kill_switch`, `judge_budget`, …), if any.",
    ),
    "breaker": (
        {"type": "object", "additionalProperties": {"type": "string"}},
        "Each endpoint breaker's state when it decided.",
    ),
    "kill_switch": ({"type": "boolean"}, "Whether the kill switch was on."),
    "timings": (
        {"type": "object", "additionalProperties": {"type": "number"}},
        "Milliseconds each stage took so far.",
    ),
    "trace_id": (_TEXT_OR_NULL, "The candidate's trace id (W3C trace context), if traced."),
    "thresholds": (
        {"type": "object", "additionalProperties": {"type": ["number", "string"]}},
        "The cuts it was decided by (`inf`, a string, for an accept cut that accepts nothing).",
    ),
    "evidence": ({"type": "object"}, "What the stage saw, by stage (capped in size)."),
    "prev_hash": (
        {"type": "string", "pattern": "^([0-9a-f]{64})?$"},
        "The hash of the candidate's previous record; empty for its first.",
    ),
    "topic": (_TEXT, "On an outcome record: the terminal topic it was delivered to."),
    "content_hash": (
        _HEX,
        "On an outcome record: SHA-256 of the candidate's content (a "
        "resubmission has the same, a reused id another).",
    ),
    "hash": (_HEX, "SHA-256 of the record's canonical JSON without this field."),
}
"""Every field of a decision record, in the order `make_record` writes them: its JSON
Schema and its meaning (docs/reference/records.md and docs/reference/schemas/ are made
from this table, and a test holds `make_record` to it)."""
OPTIONAL_RECORD_FIELDS = frozenset({"topic", "content_hash"})
"""Fields only some records carry (an outcome's `topic`, a delivered outcome's hash)."""

_VOLATILE = frozenset({"decided_at", "timings", "trace_id", "hash", "prev_hash", "duration_ms"})
_PRIVATE_EVIDENCE = frozenset(
    {
        "interpretations",
        "competing",
        "committed",
        "partial_at_cutoff",
        "samples",
        "top_tokens",
        "spans",
        "hits",
        "note",
    }
)


@functools.lru_cache(maxsize=64)
def iso_time(epoch_seconds: float) -> str:
    # Cached: a stage's record and the outcome after it are stamped with the same time.
    return datetime.fromtimestamp(epoch_seconds, UTC).isoformat(timespec="milliseconds")


_HASH_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY


def record_hash(record: Mapping[str, Any]) -> str:
    body = {k: v for k, v in record.items() if k != "hash"}
    return _digest(body)


def _digest(body: Mapping[str, Any]) -> str:
    return hashlib.sha256(orjson.dumps(body, option=_HASH_OPTIONS)).hexdigest()


CONTENT_FIELDS = (
    "session_id",
    "turn",
    "initiator",
    "question",
    "context",
    "response",
    "samples",
    "route",
)
"""What a candidate says, as opposed to when it must be decided by or what it carries along."""


def content_hash(candidate: Mapping[str, Any]) -> str:
    """A candidate's content, hashed: the same id sent again with the same content is a
    resubmission (it gets its first outcome back), with other content a reuse (refused).
    Deadline and metadata are left out: a retry may carry a new deadline or trace."""
    body = {k: candidate.get(k) for k in CONTENT_FIELDS if candidate.get(k) is not None}
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


def make_record(
    *,
    candidate_id: str,
    session_id: str,
    turn: int,
    stage: str,
    action: str,
    write_to_state: bool,
    reason: str,
    policy_version: str,
    decided_at: float,
    mode: str,
    route: str,
    prev_hash: str,
    score: float | None = None,
    method: str | None = None,
    level: str | None = None,
    decided_action: str | None = None,
    served_action: str | None = None,
    topic: str | None = None,
    gate: str | None = None,
    breaker: Mapping[str, str] | None = None,
    kill_switch: bool = False,
    timings: Mapping[str, float] | None = None,
    trace_id: str | None = None,
    thresholds: Mapping[str, float] | None = None,
    evidence: Mapping[str, Any] | None = None,
    content_hash: str | None = None,
) -> dict[str, Any]:
    """A complete, hashed decision record. `write_to_state` is forced false off `state`."""
    record: dict[str, Any] = {
        "schema_version": RECORD_SCHEMA_VERSION,
        "candidate_id": candidate_id,
        "session_id": session_id,
        "turn": turn,
        "stage": stage,
        "action": action,
        "write_to_state": bool(write_to_state and (topic in (None, "state"))),
        "reason": reason,
        "score": score,
        "method": method,
        "level": level,
        "policy_version": policy_version,
        "decided_at": iso_time(decided_at),
        "mode": mode,
        "route": route,
        "decided_action": decided_action or action,
        "served_action": served_action or action,
        "gate": gate,
        "breaker": dict(breaker or {}),
        "kill_switch": kill_switch,
        "timings": dict(timings or {}),
        "trace_id": trace_id,
        "thresholds": {  # an infinite accept cut (accept nothing) as "inf": JSON has no inf
            k: record_cut(v) if isinstance(v, float) else v for k, v in (thresholds or {}).items()
        },
        "evidence": cap_evidence(evidence or {}),
        "prev_hash": prev_hash,
    }
    if topic is not None:
        record["topic"] = topic
    if content_hash is not None:
        record["content_hash"] = content_hash
    record["hash"] = _digest(record)  # no "hash" key yet: no copy without it to make
    return record


def verify_chain(records: Iterable[Mapping[str, Any]]) -> list[str]:
    """Problems found replaying records in order: edited records or broken links."""
    last: dict[str, str] = {}
    problems = []
    for rec in records:
        cid = str(rec.get("candidate_id"))
        if record_hash(rec) != rec.get("hash"):
            problems.append(f"{cid}/{rec.get('stage')}: hash does not match content")
        if rec.get("prev_hash", "") != last.get(cid, ""):
            problems.append(
                f"{cid}/{rec.get('stage')}: prev_hash does not link to the previous record"
            )
        last[cid] = str(rec.get("hash"))
    return problems


def _strip_private(value: Any) -> Any:
    """Drop private keys at every depth: stages nest their evidence."""
    if isinstance(value, Mapping):
        return {k: _strip_private(v) for k, v in value.items() if k not in _PRIVATE_EVIDENCE}
    if isinstance(value, list):
        return [_strip_private(v) for v in value]
    return value


def sanitize(record: Mapping[str, Any]) -> dict[str, Any]:
    """Records without raw text or internal interpretations, for the operators' views
    (a deny-list; untrusted consumers get `pipeline.trail.disclosure.public_record`)."""
    out = {k: v for k, v in record.items() if k != "evidence"}
    out["evidence"] = _strip_private(record.get("evidence") or {})
    return out


def comparable(record: Mapping[str, Any]) -> dict[str, Any]:
    """A record without its run-dependent fields, for comparing two runs of one input."""
    return {k: v for k, v in record.items() if k not in _VOLATILE}
