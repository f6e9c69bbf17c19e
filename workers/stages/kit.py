"""What every stage adapter shares: the emit value, the context, and `conclude`.

A stage adapter does its I/O (encoder, HTTP), calls a pure decision from `pipeline/`,
and hands the verdict to `conclude`, which writes the decision record, looks the next
topic up in the routing table (`routes`), applies the route's mode (shadow and off serve
the safe path), and addresses the envelope there, adding the final `outcome` record when
that topic is terminal. The Kafka workers and the embedded runner both execute these
emits, so both modes decide identically.
"""

from __future__ import annotations

import time
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from pipeline.admission import WorkCaps
from pipeline.policy import Policy
from pipeline.records import OUTCOME_STAGE, content_hash, make_record
from pipeline.routing import Mode, RouteConfig
from topics.codec import dumps
from topics.conclusion import Conclusion, candidate_id_of
from topics.names import TERMINAL, Topic
from topics.schema import Candidate, Envelope
from topics.signing import signed
from workers.stages.routes import route, served


@dataclass(frozen=True, slots=True)
class Emit:
    """One message to send: logical topic, key, encoded value, headers."""

    topic: Topic
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class Inbound:
    """One message as a stage receives it, before decoding."""

    key: bytes | None
    value: bytes | None
    topic: str = ""
    partition: int = -1
    offset: int = -1
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp: float | None = None
    """The broker's timestamp of the message, in seconds (None in the embedded runner): on
    `candidates`, when the candidate entered the ladder, the same on every redelivery."""


@dataclass(frozen=True, slots=True)
class EndpointConfig:
    """One OpenAI-compatible endpoint a stage calls: all it needs from the settings, so a
    stage can be built (and tested) without the whole `Settings`."""

    url: str = ""
    model: str = ""
    timeout: float = 10.0
    api_key: str = field(default="", repr=False)


@dataclass
class ControlState:
    """Operator controls as this worker last saw them on the control topic.

    The kill switch has three states: on, off, and unknown (`known` false: the topic has
    not been read to its end, or cannot be read). While unknown, `kill_switch` is held ON
    so that anything deciding regardless fails closed, but the Kafka loop decides nothing
    then: it holds the batch uncommitted until the state is known (`workers.runtime.loop`).
    """

    kill_switch: bool = False
    kill_switch_by: str = ""
    kill_switch_at: float = 0.0
    known: bool = True
    unknown_spells: int = 0
    """How many times the state has turned unknown: a batch decided across a change of it
    was decided partly blind, and is redone."""

    @property
    def state(self) -> str:
        """`on`, `off` or `unknown`."""
        if not self.known:
            return "unknown"
        return "on" if self.kill_switch else "off"


@dataclass
class StageContext:
    """Everything a stage may use; built once per worker (or per embedded run)."""

    policy: Policy
    default_route: str = "default"
    clock: Callable[[], float] = time.time
    control: ControlState = field(default_factory=ControlState)
    sessions: MutableMapping[str, Any] = field(default_factory=dict)
    services: dict[str, Any] = field(default_factory=dict)
    max_candidate_bytes: int = 1024 * 1024
    caps: WorkCaps = field(default_factory=WorkCaps)
    """GROUNDSTREAM_MAX_*: what one candidate may cost (`pipeline.admission`)."""
    stage_key: bytes | None = None
    """GROUNDSTREAM_STAGE_KEY: envelopes are signed and inner topics verified with it."""
    encoder_backend: str = "torch"
    """GROUNDSTREAM_ENCODER_BACKEND: the backend the stage's encoder is loaded with."""
    received: float | None = None
    """`time.perf_counter()` when the stage received the batch in hand (set around each
    batch by `isolation.process_isolated`): a decision's timing counts from there."""

    def route_for(self, name: str | None) -> RouteConfig:
        return self.policy.route(name or self.default_route)


class Stage(Protocol):
    """A stream processor: its name, its source topic, and how it handles a batch."""

    name: str
    source: Topic

    async def process(self, batch: Sequence[Inbound], ctx: StageContext) -> list[Emit]: ...

    async def close(self) -> None: ...


def key_of(candidate: Candidate) -> bytes:
    return candidate.session_id.encode("utf-8")


def record_emit(record: dict[str, Any], key: bytes) -> Emit:
    return Emit(Topic.DECISIONS, key, dumps(record))


def conclude(
    ctx: StageContext,
    env: Envelope,
    *,
    stage: str,
    action: str,
    reason: str,
    verdict: str,
    started: float,
    score: float | None = None,
    method: str | None = None,
    level: str | None = None,
    evidence: dict[str, Any] | None = None,
    gate: str | None = None,
    breaker: dict[str, str] | None = None,
    thresholds: dict[str, float] | None = None,
    update: Callable[[Envelope], Envelope] | None = None,
) -> list[Emit]:
    """Record `stage`'s `action` and send the envelope where `verdict` routes it; see the
    module docstring."""
    now = ctx.clock()
    mode = Mode(env.mode)
    decided = route(stage, verdict)
    target = served(mode, decided)
    served_action = action if target is decided else "fallback"
    if ctx.control.kill_switch and target is Topic.STATE and env.human is None:
        # A person's verdict is the authority the kill switch defers to: it stands.
        # Defence in depth: the rules stage already holds state writes under the kill switch.
        target, served_action, gate = Topic.REVIEW, "escalate", gate or "kill_switch"
    # From the batch's receipt, not the candidate's own start: time spent behind the
    # others of its batch is the stage's time too (issue 23: a record said 5 ms).
    since = started if ctx.received is None else min(started, ctx.received)
    ms = (time.perf_counter() - since) * 1000.0
    common = {
        "candidate_id": env.candidate.id,
        "session_id": env.candidate.session_id,
        "turn": env.candidate.turn,
        "policy_version": env.policy_version or ctx.policy.version,
        "mode": env.mode,
        "route": env.route,
        "kill_switch": ctx.control.kill_switch,
        "trace_id": _trace_id(env.traceparent),
        # What the candidate says, so a client can tell a resubmission of its id from a
        # reuse of it for another answer (workers.clients.agent).
        "content_hash": content_hash(env.candidate.to_dict()),
    }
    timings = {**env.timings, stage: round(ms, 3)}
    record = make_record(
        **common,
        stage=stage,
        action=action,
        write_to_state=decided is Topic.STATE and target is Topic.STATE,
        reason=reason,
        decided_at=now,
        prev_hash=env.last_hash,
        score=score,
        method=method,
        level=level,
        decided_action=action,
        served_action=served_action,
        gate=gate,
        breaker=breaker,
        timings=timings,
        thresholds=thresholds,
        evidence=evidence,
    )
    key = key_of(env.candidate)
    env = env.after(
        stage, {"action": action, "reason": reason, "served": served_action}, record["hash"], ms
    )
    if update is not None:
        env = update(env)
    emits = [record_emit(record, key)]
    if target not in TERMINAL:
        value = env.encode()
        headers = signed(ctx.stage_key, target.value, value, _trace_headers(env))
        emits.append(Emit(target, key, value, headers))
        return emits
    outcome = make_record(
        **common,
        stage=OUTCOME_STAGE,
        action=served_action if target is not Topic.STATE else "accept",
        write_to_state=target is Topic.STATE,
        reason=f"{stage}: {reason}",
        decided_at=now,
        prev_hash=record["hash"],
        decided_action=action,
        served_action=served_action,
        topic=target.value,
        gate=gate,
        timings=timings,
    )
    env = replace(env, last_hash=outcome["hash"])
    value = env.encode()
    # Terminal: the writer delivers it, once per candidate id (workers/stages/terminal.py).
    ending = Conclusion(
        env.candidate.id,
        target.value,
        key,
        value,
        outcome,
        human=env.human is not None,
        headers=signed(ctx.stage_key, target.value, value, _trace_headers(env)),
    )
    emits.append(conclusion_emit(ending, ctx.stage_key))
    return emits


def conclusion_emit(conclusion: Conclusion, stage_key: bytes | None) -> Emit:
    """A conclusion addressed to the terminal writer, keyed by candidate id (sealed with
    the stage key when there is one)."""
    return Emit(
        Topic.CONCLUDED,
        conclusion.wire_key(),
        conclusion.value,
        conclusion.wire_headers(stage_key),
    )


def _trace_id(traceparent: str | None) -> str | None:
    parts = (traceparent or "").split("-")
    return parts[1] if len(parts) == 4 else None


def _trace_headers(env: Envelope) -> tuple[tuple[str, bytes], ...]:
    return (("traceparent", env.traceparent.encode()),) if env.traceparent else ()


def deadletter(
    item: Inbound,
    reason: str,
    stage: str,
    now: float,
    *,
    direct: bool = False,
    stage_key: bytes | None = None,
) -> list[Emit]:
    """The raw bytes, unchanged, with the reason and origin in headers; the stage's record
    and the candidate's `outcome`, both under its id when the message names one (else
    under its origin, topic/partition/offset, the one name that survives redelivery).
    Sent through the terminal writer like every outcome (sealed with `stage_key`);
    `direct` only where no writer follows (the writer's own dead letters, attach)."""
    origin = f"{item.topic}/{item.partition}/{item.offset}"
    named = candidate_id_of(item.value)
    candidate_id = named or origin
    headers = (
        ("gs-reason", reason.encode("utf-8")),
        ("gs-stage", stage.encode()),
        *((("gs-candidate-id", named.encode("utf-8")),) if named else ()),
        ("gs-source-topic", item.topic.encode()),
        ("gs-source-partition", str(item.partition).encode()),
        ("gs-source-offset", str(item.offset).encode()),
    )
    common = {
        "candidate_id": candidate_id,
        "session_id": (item.key or b"").decode("utf-8", "replace"),
        "turn": 0,
        "write_to_state": False,
        "policy_version": "",
        "decided_at": now,
        "mode": "",
        "route": "",
    }
    record = make_record(**common, stage=stage, action="deadletter", reason=reason, prev_hash="")
    outcome = make_record(
        **common,
        stage=OUTCOME_STAGE,
        action="deadletter",
        reason=f"{stage}: {reason}",
        prev_hash=record["hash"],
        topic=Topic.DEADLETTER.value,
    )
    key, value = item.key, item.value or b""
    if direct:
        return [
            record_emit(record, key or b""),
            record_emit(outcome, key or b""),
            Emit(Topic.DEADLETTER, key, value, headers),
        ]
    ending = Conclusion(candidate_id, Topic.DEADLETTER.value, key, value, outcome, headers=headers)
    return [record_emit(record, key or b""), conclusion_emit(ending, stage_key)]
