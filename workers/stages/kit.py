"""What every stage adapter shares: `conclude`, dead letters, and the record emit.

A stage adapter decodes its messages, does its I/O (encoder, HTTP), calls its rung's pure
decision in `pipeline.stages`, and hands the `Verdict` to `conclude`, which writes the
decision record, looks the next topic up in the routing table (`routes`), applies the
route's mode (shadow and off serve the safe path) and the kill switch's row, and
addresses the envelope there, adding the final `outcome` record when that topic is
terminal. The Kafka workers and the embedded runner both execute these emits, so both
modes decide identically.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from pipeline.policy.routing import Mode
from pipeline.scores.results import DGIResult, GroundingScore, SGIResult
from pipeline.trail.records import OUTCOME_STAGE, content_hash, make_record
from pipeline.trail.verdict import HumanDecision, Verdict
from topics.codec import dumps
from topics.conclusion import Conclusion, candidate_id_of
from topics.names import TERMINAL, Topic
from topics.schema import Candidate, Envelope, GeometryPayload, HumanPayload
from topics.security.keys import Signer
from topics.security.signatures import sign
from topics.signing import signed
from workers.interfaces import Emit, Inbound, StageContext
from workers.stages.routes import KILL_SWITCH, route, served


def key_of(candidate: Candidate) -> bytes:
    return candidate.session_id.encode("utf-8")


def record_emit(record: dict[str, Any], key: bytes) -> Emit:
    return Emit(Topic.DECISIONS, key, dumps(record))


def conclude(
    ctx: StageContext, stage: str, env: Envelope, verdict: Verdict, started: float
) -> list[Emit]:
    """Record `stage`'s `verdict` on `env` and send the envelope where it routes; see the
    module docstring. `started`: `time.perf_counter()` when the stage took the candidate
    up (a decision's timing counts from there, or from its batch's receipt if earlier)."""
    now = ctx.clock()
    mode = Mode(env.mode)
    action, reason, gate = verdict.action, verdict.reason, verdict.gate
    decided = route(stage, verdict.routing)
    target = served(mode, decided)
    served_action = action if target is decided else "fallback"
    if ctx.control.kill_switch and env.human is None and target in KILL_SWITCH:
        # A person's verdict is the authority the kill switch defers to: it stands.
        # Defence in depth: the rules stage already holds state writes under the kill switch.
        target, served_action, gate = KILL_SWITCH[target], "escalate", gate or "kill_switch"
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
        score=verdict.score,
        method=verdict.method,
        level=verdict.level,
        decided_action=action,
        served_action=served_action,
        gate=gate,
        breaker=_plain(verdict.breaker),
        timings=timings,
        thresholds=_plain(verdict.thresholds),
        evidence=_plain(verdict.evidence),
    )
    key = key_of(env.candidate)
    env = env.after(
        stage, {"action": action, "reason": reason, "served": served_action}, record["hash"], ms
    )
    env = _carry(env, verdict.scored, verdict.human)
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
    emits.append(conclusion_emit(ending))
    return emits


def _plain(mapping: Any) -> Any:
    return None if mapping is None else dict(mapping)


def _carry(
    env: Envelope,
    scored: SGIResult | DGIResult | GroundingScore | None,
    human: HumanDecision | None,
) -> Envelope:
    """The envelope with what the verdict hands on: geometry's score, a person's verdict."""
    if scored is not None:
        env = replace(env, geometry=GeometryPayload(scored))
    if human is not None:
        env = replace(env, human=HumanPayload(human.verdict, human.by, human.note, human.at))
    return env


def conclusion_emit(conclusion: Conclusion) -> Emit:
    """A conclusion addressed to the terminal writer, keyed by candidate id (signed as it
    is sent: `signed_emits`)."""
    return Emit(Topic.CONCLUDED, conclusion.wire_key(), conclusion.value, conclusion.wire_headers())


SIGNED_TOPICS = frozenset({Topic.CONCLUDED, Topic.DECISIONS})
"""What a stage vouches for with its own key: its conclusions and its decision records
(the inner topics' envelopes carry the shared HMAC, `topics.signing`)."""


def signed_emits(signer: Signer | None, emits: Sequence[Emit]) -> list[Emit]:
    """`emits`, those on `concluded` and `decisions` signed by `signer` (unchanged without
    one: a development broker without keys). Every process that writes them calls this
    just before it sends: the Kafka loop, the review queue, attach."""
    if signer is None:
        return list(emits)
    return [
        replace(e, headers=sign(signer, e.topic.value, e.key, e.value, e.headers))
        if e.topic in SIGNED_TOPICS
        else e
        for e in emits
    ]


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
    anonymous: bool = False,
) -> list[Emit]:
    """The raw bytes, unchanged, with the reason and origin in headers; the stage's record
    and the candidate's `outcome`, both under its id when the message names one (else
    under its origin, topic/partition/offset, the one name that survives redelivery).
    Sent through the terminal writer like every outcome; `direct` only where no writer
    follows (the writer's own dead letters, attach). `anonymous`: under its origin even
    when it names a candidate (a conclusion the writer refused is no outcome of the
    candidate it names: a forger must not end that candidate's trail)."""
    origin = f"{item.topic}/{item.partition}/{item.offset}"
    named = None if anonymous else candidate_id_of(item.value)
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
    return [record_emit(record, key or b""), conclusion_emit(ending)]
