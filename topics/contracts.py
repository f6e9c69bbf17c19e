"""What a consumer of groundstream's topics may rely on: JSON Schemas of the messages, the
headers, and which topic carries which message.

The schemas are built from the code's own definitions — the fields of `Candidate`,
`Envelope` and `HumanPayload` (topics/schema.py) and the decision record's field table
(`pipeline.trail.records.RECORD_FIELDS`) — so a field added there is in the schema, or
building it fails naming the field. `python -m tools.docs_reference --write` writes them
to docs/reference/schemas/; a test validates the embedded runner's real records and
messages against them.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from pipeline.trail.records import OPTIONAL_RECORD_FIELDS, OUTCOME_STAGE, RECORD_FIELDS
from topics.names import TERMINAL, Topic
from topics.schema import (
    HUMAN_VERDICTS,
    MODES,
    SCHEMA_VERSION,
    SOURCES,
    Candidate,
    Envelope,
    HumanPayload,
)

DIALECT = "https://json-schema.org/draft/2020-12/schema"
BASE = "https://groundstream.dev/schemas/"
"""The schemas' `$id` prefix: a name, not a location anything is fetched from."""

_CHUNK = {
    "oneOf": [
        {"type": "string"},
        {
            "type": "object",
            "properties": {"text": {"type": "string"}, "source": {"enum": list(SOURCES)}},
            "required": ["text"],
        },
    ]
}

_TYPES: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {
        "str": {"type": "string"},
        "str | None": {"type": ["string", "null"]},
        "int": {"type": "integer"},
        "float": {"type": "number"},
        "float | None": {"type": ["number", "null"]},
        "tuple[str, ...] | None": {"type": "array", "items": {"type": "string"}},
        "str | tuple[str, ...] | None": {
            "oneOf": [{"type": "string"}, {"type": "array", "items": _CHUNK}]
        },
        "dict[str, Any]": {"type": "object"},
        "dict[str, float]": {"type": "object", "additionalProperties": {"type": "number"}},
        "tuple[dict[str, Any], ...]": {"type": "array", "items": {"type": "object"}},
        "GeometryPayload | None": {"type": ["object", "null"]},
        "HumanPayload | None": {"oneOf": [{"$ref": "#/$defs/human"}, {"type": "null"}]},
        "Candidate": {"$ref": "#/$defs/candidate"},
    }
)
"""A dataclass field's annotation → its JSON Schema; a new annotation must be added here."""

_NARROWED: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {
        "Candidate.turn": {"type": "integer", "minimum": 0},
        "Candidate.initiator": {"enum": ["user", "agent"]},
        "Candidate.deadline": {"oneOf": [{"type": "number"}, {"type": "string"}, {"type": "null"}]},
        "Envelope.mode": {"enum": list(MODES)},
        "HumanPayload.verdict": {"enum": list(HUMAN_VERDICTS)},
    }
)
"""Fields whose parser holds them to more than their type (topics/schema.py)."""

_WIRE_NAMES: Mapping[str, str] = MappingProxyType({"Candidate.context_sources": ""})
"""Fields that are not keys of the message (""): `context_sources` travels inside the
context's chunks, as `{text, source}`."""


def _object(cls: type, *, version: str = "") -> dict[str, Any]:
    """The JSON Schema of a dataclass's `to_dict`: its init fields, those without a
    default required; `version` "required" or "optional" adds `schema_version`."""
    properties: dict[str, Any] = {"schema_version": {"const": SCHEMA_VERSION}} if version else {}
    required = ["schema_version"] if version == "required" else []
    for f in dataclasses.fields(cls):
        where = f"{cls.__name__}.{f.name}"
        if not f.init or _WIRE_NAMES.get(where) == "":
            continue
        annotation = str(f.type)
        if where not in _NARROWED and annotation not in _TYPES:
            raise ValueError(f"{where}: annotation {annotation!r} has no JSON Schema in _TYPES")
        schema = dict(_NARROWED.get(where) or _TYPES[annotation])
        doc = _field_doc(cls, f.name)
        properties[f.name] = {**schema, "description": doc} if doc else schema
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(f.name)
    return {"type": "object", "properties": properties, "required": required}


def _field_doc(cls: type, name: str) -> str:
    """A field's attribute docstring, read from the source (the dataclass keeps none)."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body  # type: ignore[attr-defined]
    for node, after in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == name
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            return " ".join(after.value.value.split())
    return ""


def candidate_schema() -> dict[str, Any]:
    """A message of `candidates` (what a producer sends)."""
    return {
        "$schema": DIALECT,
        "$id": BASE + "candidate.json",
        "title": "groundstream candidate",
        "description": "A candidate answer, as sent to `candidates`.",
        **_object(Candidate, version="optional"),
    }


def envelope_schema() -> dict[str, Any]:
    """A message of `state` and `escalations.*` (and of the inner topics): the candidate
    and everything decided about it."""
    candidate = _object(Candidate, version="optional")  # as candidate_from_dict reads it
    return {
        "$schema": DIALECT,
        "$id": BASE + "envelope.json",
        "title": "groundstream envelope",
        "description": "The value of a message on `state` and `escalations.*`: the candidate "
        "as received, its route and mode, and what each stage decided.",
        **_object(Envelope, version="required"),
        "$defs": {"candidate": candidate, "human": _object(HumanPayload)},
    }


def _record(title: str, description: str, name: str) -> dict[str, Any]:
    return {
        "$schema": DIALECT,
        "$id": BASE + name,
        "title": title,
        "description": description,
        "type": "object",
        "properties": {
            field: {**schema, "description": meaning}
            for field, (schema, meaning) in RECORD_FIELDS.items()
        },
        "required": [f for f in RECORD_FIELDS if f not in OPTIONAL_RECORD_FIELDS],
    }


def decision_schema() -> dict[str, Any]:
    """A decision record on `decisions`: any stage's, and the outcome."""
    return _record(
        "groundstream decision record",
        "One message of `decisions`: a stage's decision about a candidate, hash-chained to "
        "the candidate's previous record.",
        "decision.json",
    )


def outcome_schema() -> dict[str, Any]:
    """The `outcome` record: a decision record whose stage is `outcome`, naming the
    terminal topic the candidate was delivered to."""
    schema = _record(
        "groundstream outcome record",
        "The one `outcome` decision record per candidate: where it ended, and why.",
        "outcome.json",
    )
    schema["properties"]["stage"] = {**schema["properties"]["stage"], "const": OUTCOME_STAGE}
    schema["properties"]["topic"] = {
        **schema["properties"]["topic"],
        "enum": [t.value for t in TERMINAL],
    }
    schema["required"] = [*schema["required"], "topic"]
    return schema


SCHEMAS = {
    "candidate.json": candidate_schema,
    "envelope.json": envelope_schema,
    "decision.json": decision_schema,
    "outcome.json": outcome_schema,
}
"""Each schema file of docs/reference/schemas/ and what builds it."""

CARRIES: Mapping[Topic, str] = MappingProxyType(
    {
        Topic.CANDIDATES: "candidate.json",
        Topic.SCORED: "envelope.json",
        Topic.CONSISTENCY: "envelope.json",
        Topic.JUDGE: "envelope.json",
        Topic.RULES: "envelope.json",
        Topic.STATE: "envelope.json",
        Topic.FALLBACK: "envelope.json",
        Topic.REGENERATE: "envelope.json",
        Topic.REJECT: "envelope.json",
        Topic.REVIEW: "envelope.json",
        Topic.DECISIONS: "decision.json (and outcome.json for stage `outcome`)",
        Topic.DEADLETTER: "the refused message's own bytes, unchanged (headers say why)",
        Topic.CONTROL: "internal: kill switch and review claims",
        Topic.CONCLUDED: "internal: the terminal message on its way to the terminal writer",
        Topic.OUTCOMES: "internal: the outcome ledger, one entry per candidate id",
        Topic.SESSIONS: "internal: the switch's per-session table",
        Topic.JUDGE_LEDGER: "internal: the judge's budgets and verdict cache",
        Topic.AUDIT: "the audit chain's numbered entries over `decisions`",
        Topic.AUDIT_HEADS: "internal: the audit chain's heads",
        Topic.DECISIONS_PUBLIC: "the public projection of each decision record",
    }
)
"""What the value of each topic's messages is (docs/reference/records.md prints it)."""

HEADERS: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        "traceparent": (
            "every topic a candidate travels",
            "The W3C trace context of the candidate's trace, when the producer sent one.",
        ),
        "gs-hmac": (
            "the inner topics (scored, consistency, judge, rules)",
            "HMAC-SHA256 of the envelope and its topic under GROUNDSTREAM_STAGE_KEY, when set.",
        ),
        "gs-reason": ("deadletter", "Why the message was refused, one line."),
        "gs-stage": ("deadletter", "The stage that refused it."),
        "gs-candidate-id": ("deadletter", "The candidate id the message names, if it names one."),
        "gs-source-topic": ("deadletter", "The topic the refused message was read from."),
        "gs-source-partition": ("deadletter", "Its partition."),
        "gs-source-offset": ("deadletter", "Its offset."),
    }
)
"""The message headers a consumer may read, where they appear, and what they hold (the
`concluded` topic's own headers are internal)."""
