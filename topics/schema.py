"""Message schemas: the candidate a producer sends, the envelope stages pass on, and the
per-stage payloads the envelope carries (the geometry stage's score, a person's verdict).

Parsing is strict and total: `parse_candidate` / `parse_envelope` either return a frozen
value or raise `MalformedMessage` with a reason that goes to the dead-letter topic with
the raw bytes. Nothing here raises anything else on bad input.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, field, fields, replace
from datetime import datetime
from typing import Any

import orjson

from pipeline.encoding.chunks import context_chunks
from pipeline.errors import GroundstreamError
from pipeline.judge.context import MAX_RANKED_CLAIMS, MAX_RANKED_WINDOWS, WindowRef, claim_windows
from pipeline.scores.results import DGIResult, GroundingScore, SGIResult, score_record
from topics.codec import dumps, loads

SCHEMA_VERSION = 1
RETRIEVAL = "retrieval"
SOURCES = (RETRIEVAL, "tool", "history", "user")
MODES = ("off", "shadow", "evaluate", "active")
"""A route's modes (`pipeline.policy.routing.Mode`, as wire names): an envelope names one."""
"""Where a context chunk may come from (`pipeline.guards.provenance.Source`, as wire names)."""
MAX_ID_CHARS = 256
DEFAULT_MAX_CANDIDATE_BYTES = 1024 * 1024


class MalformedMessage(GroundstreamError, ValueError):
    """A message cannot be used; `reason` is short and names the field at fault."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


@dataclass(frozen=True, slots=True)
class Candidate:
    """One candidate answer. `id` is the idempotency key, `session_id` the message key."""

    id: str
    """The idempotency key: one terminal outcome per id (at most 256 characters)."""
    session_id: str
    """The session the answer belongs to: the message key (at most 256 characters)."""
    question: str
    """The question or instruction the answer replies to."""
    response: str
    """The candidate answer to verify."""
    turn: int = 0
    """The session's turn number (an integer >= 0)."""
    initiator: str = "user"
    """Who the turn comes from: user starts a turn, agent steps continue it."""
    context: str | tuple[str, ...] | None = None
    """The evidence: a string, or a list of chunks (a string, or {text, source})."""
    context_sources: tuple[str, ...] | None = None
    """Where each context chunk came from: retrieval, tool, history or user."""
    samples: tuple[str, ...] | None = None
    """The candidate's own samples of the answer, for consistency."""
    deadline: float | None = None
    """When a decision is due: epoch seconds or ISO 8601 with a zone; past it, review."""
    route: str | None = None
    """The policy route to judge it by; unset: the one serving its task, else the default."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Free-form object: `task` picks a route, `tenant_field` may name a tenant in it."""

    @property
    def context_chunks(self) -> tuple[str, ...] | None:
        return context_chunks(self.context)

    @property
    def chunk_sources(self) -> tuple[str, ...]:
        """Where each context chunk came from; a chunk given as a bare string is retrieval."""
        chunks = self.context_chunks or ()
        return self.context_sources or (RETRIEVAL,) * len(chunks)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "id": self.id,
            "session_id": self.session_id,
            "turn": self.turn,
            "initiator": self.initiator,
            "question": self.question,
            "response": self.response,
        }
        if self.context is not None and self.context_sources is not None:
            out["context"] = [
                text if source == RETRIEVAL else {"text": text, "source": source}
                for text, source in zip(
                    self.context_chunks or (), self.context_sources, strict=True
                )
            ]
        elif self.context is not None:
            out["context"] = self.context if isinstance(self.context, str) else list(self.context)
        if self.samples is not None:
            out["samples"] = list(self.samples)
        if self.deadline is not None:
            out["deadline"] = self.deadline
        if self.route is not None:
            out["route"] = self.route
        if self.metadata:
            out["metadata"] = self.metadata
        return out


def _text(data: dict[str, Any], name: str, *, required: bool = True) -> str | None:
    value = data.get(name)
    if value is None:
        if required:
            raise MalformedMessage(f"missing field: {name}")
        return None
    if not isinstance(value, str):
        raise MalformedMessage(f"wrong type: {name} must be a string, not {type(value).__name__}")
    if not value.strip():
        raise MalformedMessage(f"empty field: {name}")
    return value


def _text_list(data: dict[str, Any], name: str) -> tuple[str, ...] | None:
    value = data.get(name)
    if value is None:
        return None
    if not isinstance(value, list):
        raise MalformedMessage(f"wrong type: {name} must be a list of strings")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise MalformedMessage(f"wrong type: {name}[{i}] must be a string")
    return tuple(value)


def _deadline(value: Any) -> float | None:
    """Absolute deadline: epoch seconds, or an ISO 8601 time with a zone."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise MalformedMessage("wrong type: deadline must be epoch seconds or ISO 8601")
    if isinstance(value, int | float):
        if not math.isfinite(value) or value <= 0:
            raise MalformedMessage("bad value: deadline must be positive epoch seconds")
        return float(value)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise MalformedMessage("bad value: deadline is not ISO 8601") from None
        if parsed.tzinfo is None:
            raise MalformedMessage("bad value: deadline needs a time zone")
        return parsed.timestamp()
    raise MalformedMessage("wrong type: deadline must be epoch seconds or ISO 8601")


def _chunks(raw: list[Any]) -> tuple[tuple[str, ...], tuple[str, ...] | None]:
    """Context chunks and their sources: each chunk a non-empty string (retrieval) or an
    object ``{"text": ..., "source": one of SOURCES}``; sources None when all are bare."""
    if not raw:
        raise MalformedMessage("empty field: context chunks must be non-empty strings")
    texts: list[str] = []
    sources: list[str] = []
    for i, item in enumerate(raw):
        if isinstance(item, dict):
            text, source = item.get("text"), item.get("source", RETRIEVAL)
            if set(item) - {"text", "source"}:
                raise MalformedMessage(f"bad value: context[{i}] has keys other than text, source")
            if source not in SOURCES:
                allowed = ", ".join(SOURCES)
                raise MalformedMessage(f"bad value: context[{i}].source must be one of {allowed}")
        else:
            text, source = item, RETRIEVAL
        if not isinstance(text, str):
            raise MalformedMessage(f"wrong type: context[{i}] must be a string or a chunk object")
        if not text.strip():
            raise MalformedMessage("empty field: context chunks must be non-empty strings")
        texts.append(text)
        sources.append(source)
    named = any(isinstance(item, dict) for item in raw)
    return tuple(texts), tuple(sources) if named else None


def _is_version(value: object) -> bool:
    """Exactly the integer SCHEMA_VERSION: `true` and `1.0` equal 1 in Python, and were
    accepted as if they were it."""
    return type(value) is int and value == SCHEMA_VERSION


def candidate_from_dict(data: Any) -> Candidate:
    """Validate a decoded candidate object."""
    if not isinstance(data, dict):
        raise MalformedMessage(
            f"wrong type: candidate must be a JSON object, not {type(data).__name__}"
        )
    version = data.get("schema_version", SCHEMA_VERSION)
    if not _is_version(version):
        raise MalformedMessage(f"unsupported schema_version: {version!r}")
    cid = _text(data, "id")
    session = _text(data, "session_id")
    assert cid is not None and session is not None
    for name, value in (("id", cid), ("session_id", session)):
        if len(value) > MAX_ID_CHARS:
            raise MalformedMessage(f"bad value: {name} longer than {MAX_ID_CHARS} characters")
    turn = data.get("turn", 0)
    if isinstance(turn, bool) or not isinstance(turn, int) or turn < 0:
        raise MalformedMessage("wrong type: turn must be a non-negative integer")
    initiator = data.get("initiator", "user")
    if initiator not in ("user", "agent"):
        raise MalformedMessage("bad value: initiator must be 'user' or 'agent'")
    raw_context = data.get("context")
    context: str | tuple[str, ...] | None
    context_sources: tuple[str, ...] | None = None
    if raw_context is None or isinstance(raw_context, str):
        context = _text(data, "context", required=False)
    elif not isinstance(raw_context, list):
        raise MalformedMessage(
            "wrong type: context must be a string or a list of strings, "
            f"not {type(raw_context).__name__}"
        )
    else:
        context, context_sources = _chunks(raw_context)
    route = _text(data, "route", required=False)
    metadata = data.get("metadata", {})
    if not isinstance(metadata, dict):
        raise MalformedMessage("wrong type: metadata must be an object")
    return Candidate(
        id=cid,
        session_id=session,
        question=_text(data, "question") or "",
        response=_text(data, "response") or "",
        turn=turn,
        initiator=initiator,
        context=context,
        context_sources=context_sources,
        samples=_text_list(data, "samples"),
        deadline=_deadline(data.get("deadline")),
        route=route,
        metadata=metadata,
    )


def parse_candidate(
    raw: bytes | None, *, max_bytes: int = DEFAULT_MAX_CANDIDATE_BYTES
) -> Candidate:
    """Bytes from the candidates topic to a Candidate, or MalformedMessage with the reason."""
    if raw is None:
        raise MalformedMessage("empty message: no value")
    if len(raw) > max_bytes:
        raise MalformedMessage(f"oversize: {len(raw)} bytes > limit {max_bytes}")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedMessage(f"invalid UTF-8 at byte {exc.start}") from None
    try:
        data = loads(raw)
    except orjson.JSONDecodeError as exc:
        raise MalformedMessage(f"not JSON: {exc}") from None
    return candidate_from_dict(data)


_FIELD_KINDS: dict[str, tuple[type, ...]] = {
    "float": (int, float),
    "int": (int,),
    "bool": (bool,),
    "str": (str,),
    "Method": (str,),
}
"""JSON types accepted for each annotation used by the score records."""


def _record_from_dict(cls: type, data: dict[str, Any], where: str) -> Any:
    """A frozen score record from its `to_dict()` form; every field checked by type."""
    spec = {f.name: f for f in fields(cls)}
    unknown = sorted(set(data) - set(spec))
    if unknown:
        raise MalformedMessage(f"bad value: {where} has unknown field {unknown[0]!r}")
    for name, f in spec.items():
        if name not in data:
            if f.default is MISSING:
                raise MalformedMessage(f"missing field: {where}.{name}")
            continue
        value = data[name]
        kinds = _FIELD_KINDS[str(f.type)]
        if (bool not in kinds and isinstance(value, bool)) or not isinstance(value, kinds):
            raise MalformedMessage(f"wrong type: {where}.{name} must be {f.type!s}")
        if isinstance(value, float) and not math.isfinite(value):
            raise MalformedMessage(f"bad value: {where}.{name} must be finite")
    return cls(**data)


@dataclass(frozen=True, slots=True)
class GeometryPayload:
    """The geometry stage's score, as the switch reads it back: an SGI or DGI record, or
    P(grounded) over the SGI when the policy carries a grounding model. On the wire it is
    the record's fields, plus `grounding` ({probability, features}) for P(grounded), plus
    `windows` when the claim head read the answer: per claim, its windows best first as
    [chunk, first statement, statements] ids into the counted evidence — what the judge
    reads of a long context (`pipeline.judge.context`). Ids, not texts: the envelope cannot
    carry words that are not the candidate's own evidence. Left out, `windows` is taken
    from the score's claim reading."""

    score: SGIResult | DGIResult | GroundingScore
    """The SGI or DGI record, or P(grounded) over the SGI."""
    windows: tuple[tuple[WindowRef, ...], ...] | None = None
    """Per claim, its best windows as ids into the evidence (what the judge reads)."""

    def __post_init__(self) -> None:
        if self.windows is None:
            object.__setattr__(self, "windows", claim_windows(self.score))

    def to_dict(self) -> dict[str, Any]:
        record = score_record(self.score)
        if self.windows:
            record["windows"] = [[list(ref) for ref in claim] for claim in self.windows]
        return record

    @classmethod
    def from_dict(cls, data: Any) -> GeometryPayload:
        if not isinstance(data, dict):
            raise MalformedMessage("wrong type: envelope geometry must be an object")
        record = dict(data)
        grounding = record.pop("grounding", None)
        windows = _windows(record.pop("windows", []))
        method = record.get("method")
        if method not in ("sgi", "dgi"):
            raise MalformedMessage("bad value: geometry.method must be 'sgi' or 'dgi'")
        result = _record_from_dict(SGIResult if method == "sgi" else DGIResult, record, "geometry")
        if grounding is None:
            return cls(result, windows)
        if not isinstance(result, SGIResult):
            raise MalformedMessage("bad value: geometry.grounding comes only with an sgi score")
        return cls(_grounding(grounding, result), windows)


def _windows(data: Any) -> tuple[tuple[WindowRef, ...], ...]:
    """geometry.windows: at most `MAX_RANKED_CLAIMS` lists of at most `MAX_RANKED_WINDOWS`
    [chunk, first, size] ids (non-negative integers, size at least 1)."""
    wrong = (
        "bad value: geometry.windows must be a list (one per claim) of lists of "
        "[chunk, first, size] non-negative integer ids"
    )
    if not isinstance(data, list) or len(data) > MAX_RANKED_CLAIMS:
        raise MalformedMessage(wrong)
    out: list[tuple[WindowRef, ...]] = []
    for claim in data:
        if not isinstance(claim, list) or len(claim) > MAX_RANKED_WINDOWS:
            raise MalformedMessage(wrong)
        refs: list[WindowRef] = []
        for ref in claim:
            if (
                not isinstance(ref, list)
                or len(ref) != 3
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in ref)
                or min(ref) < 0
                or ref[2] < 1
            ):
                raise MalformedMessage(wrong)
            refs.append((ref[0], ref[1], ref[2]))
        out.append(tuple(refs))
    return tuple(out)


def _grounding(data: Any, sgi: SGIResult) -> GroundingScore:
    if not isinstance(data, dict) or not (
        {"probability", "features"} <= set(data) <= {"probability", "features", "out_of_range"}
    ):
        raise MalformedMessage(
            "wrong type: geometry.grounding must be an object of probability and features"
            " (and out_of_range)"
        )
    out_of_range = data.get("out_of_range", "")
    if not isinstance(out_of_range, str):
        raise MalformedMessage("wrong type: geometry.grounding.out_of_range must be a reason")
    p, features = data["probability"], data["features"]
    if isinstance(p, bool) or not isinstance(p, int | float) or not 0.0 <= p <= 1.0:
        raise MalformedMessage("bad value: geometry.grounding.probability must be in [0, 1]")
    if not isinstance(features, dict) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
        for v in features.values()
    ):
        raise MalformedMessage(
            "wrong type: geometry.grounding.features must map names to finite numbers"
        )
    if out_of_range and not sgi.flagged:  # outside the model's domain: flagged, escalates
        return GroundingScore(float(p), sgi, features, flagged=True, flag_reason=out_of_range)
    return GroundingScore(float(p), sgi, features, flagged=sgi.flagged, flag_reason=sgi.flag_reason)


HUMAN_VERDICTS = ("accept", "reject")


@dataclass(frozen=True, slots=True)
class HumanPayload:
    """A person's verdict on a reviewed candidate: what rules later honour as an override."""

    verdict: str
    """accept or reject."""
    by: str
    """Who decided."""
    note: str
    """Their note (may be empty)."""
    at: float
    """When, in epoch seconds."""

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "by": self.by, "note": self.note, "at": self.at}

    @property
    def accepted(self) -> bool:
        return self.verdict == "accept"

    @classmethod
    def from_dict(cls, data: Any) -> HumanPayload:
        if not isinstance(data, dict):
            raise MalformedMessage("wrong type: envelope human must be an object")
        if set(data) != {"verdict", "by", "note", "at"}:
            raise MalformedMessage("bad value: envelope human needs verdict, by, note and at")
        verdict, by, note, at = data["verdict"], data["by"], data["note"], data["at"]
        if verdict not in HUMAN_VERDICTS:
            raise MalformedMessage("bad value: human.verdict must be 'accept' or 'reject'")
        if not isinstance(by, str) or not by.strip() or not isinstance(note, str):
            raise MalformedMessage("wrong type: human.by must name a person, human.note a string")
        if isinstance(at, bool) or not isinstance(at, int | float) or not math.isfinite(at):
            raise MalformedMessage("wrong type: human.at must be epoch seconds")
        return cls(verdict, by, note, at)


@dataclass(frozen=True, slots=True)
class Envelope:
    """What travels between stages: the candidate plus everything decided about it so far."""

    candidate: Candidate
    """The candidate as it was received."""
    route: str
    """The route it is judged by."""
    mode: str
    """The route's mode: off, shadow, evaluate or active."""
    deadline: float | None = None
    """The absolute deadline: the earlier of the candidate's and the route's."""
    geometry: GeometryPayload | None = None
    """The geometry stage's score, once scored."""
    trail: tuple[dict[str, Any], ...] = ()
    """Each stage's summary so far, in order."""
    last_hash: str = ""
    """The hash of the last decision record: the next one links to it."""
    timings: dict[str, float] = field(default_factory=dict)
    """Milliseconds each stage took so far."""
    traceparent: str | None = None
    """The W3C trace context of the candidate's trace."""
    human: HumanPayload | None = None
    """A person's verdict, once reviewed."""
    policy_version: str = ""
    """The version of the policy that decided it."""
    entered_at: float | None = None
    """When the candidate entered the ladder (its `candidates` message's timestamp)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "candidate": self.candidate.to_dict(),
            "route": self.route,
            "mode": self.mode,
            "deadline": self.deadline,
            "geometry": None if self.geometry is None else self.geometry.to_dict(),
            "trail": list(self.trail),
            "last_hash": self.last_hash,
            "timings": self.timings,
            "traceparent": self.traceparent,
            "human": None if self.human is None else self.human.to_dict(),
            "policy_version": self.policy_version,
            "entered_at": self.entered_at,
        }

    def encode(self) -> bytes:
        return dumps(self.to_dict())

    def after(self, stage: str, summary: dict[str, Any], record_hash: str, ms: float) -> Envelope:
        """The envelope once `stage` has decided: trail, hash chain and timings extended."""
        return replace(
            self,
            trail=(*self.trail, {"stage": stage, **summary}),
            last_hash=record_hash,
            timings={**self.timings, stage: round(ms, 3)},
        )


def envelope_from_dict(data: Any) -> Envelope:
    if not isinstance(data, dict):
        raise MalformedMessage("wrong type: envelope must be a JSON object")
    if not _is_version(data.get("schema_version")):
        raise MalformedMessage(f"unsupported schema_version: {data.get('schema_version')!r}")
    candidate = candidate_from_dict(data.get("candidate"))
    for name in ("route", "mode"):
        if not isinstance(data.get(name), str):
            raise MalformedMessage(f"wrong type: envelope {name} must be a string")
    if data["mode"] not in MODES:
        raise MalformedMessage(f"bad value: envelope mode must be one of {', '.join(MODES)}")
    trail = data.get("trail", [])
    if not isinstance(trail, list) or not all(isinstance(t, dict) for t in trail):
        raise MalformedMessage("wrong type: envelope trail must be a list of objects")
    geometry = data.get("geometry")
    deadline, entered_at = data.get("deadline"), data.get("entered_at")
    for name, value in (("deadline", deadline), ("entered_at", entered_at)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise MalformedMessage(f"wrong type: envelope {name} must be a number")
    human = data.get("human")
    return Envelope(
        candidate=candidate,
        route=data["route"],
        mode=data["mode"],
        deadline=deadline,
        geometry=None if geometry is None else GeometryPayload.from_dict(geometry),
        trail=tuple(trail),
        last_hash=str(data.get("last_hash", "")),
        timings=dict(data.get("timings") or {}),
        traceparent=data.get("traceparent"),
        human=None if human is None else HumanPayload.from_dict(human),
        policy_version=str(data.get("policy_version", "")),
        entered_at=entered_at,
    )


def parse_envelope(raw: bytes | None) -> Envelope:
    """Bytes from an inter-stage topic to an Envelope, or MalformedMessage."""
    if raw is None:
        raise MalformedMessage("empty message: no value")
    try:
        data = loads(raw)
    except orjson.JSONDecodeError as exc:
        raise MalformedMessage(f"not JSON: {exc}") from None
    return envelope_from_dict(data)
