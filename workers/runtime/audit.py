"""`groundstream audit verify`: read `audit`, `candidates`, `decisions` and the recorder's
chain heads, and let `pipeline.trail.audit.verify` judge them.

Everything is read without a consumer group at read_committed (`ranges.read_range`), so
an aborted recorder transaction is never mistaken for a chain. `--session` narrows the
check to one chain and that session's candidates and decisions; `--from` starts the reads
at an offset or a time, and the chains are then checked from wherever they start in that
range. An offset means a different message on each topic, so with one `decisions` is
checked from the first record the audit range chains, per partition. With the stages'
public keys (GROUNDSTREAM_TRUSTED_KEYS_DIR) every record on `decisions` must be signed by
the stage it names; a record that is not is named.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import IO, Any

from aiokafka import ConsumerRecord

from pipeline.trail.audit import (
    AuditReport,
    CandidateMessage,
    DecisionMessage,
    Head,
    Located,
    verify,
)
from pipeline.trail.replay import Position, message_ids
from topics.codec import loads
from topics.names import Topic
from topics.security.keys import TrustedKeys
from workers.runtime.ranges import read_range
from workers.runtime.settings import Settings
from workers.runtime.signing import record_refusal, require_keys, trusted_for
from workers.stages.recorder import chain_name

KEY_ENV = "GROUNDSTREAM_AUDIT_KEY"


def key_from_env(env: Mapping[str, str] = os.environ) -> bytes | None:
    """The chains' HMAC key: from the environment only, never a flag (shell history,
    process lists). Unset or empty: unkeyed SHA-256 chains."""
    value = env.get(KEY_ENV, "")
    return value.encode() if value else None


@dataclass(frozen=True, slots=True)
class AuditScope:
    start: Position | None = None
    session: str | None = None
    grace: float = 60.0


def _where(message: ConsumerRecord) -> str:
    return f"{message.topic}[{message.partition}]@{message.offset}"


def _object(value: bytes | None) -> dict[str, Any]:
    try:
        data = loads(value) if value else None
    except (ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def located(messages: list[ConsumerRecord], session: str | None) -> list[Located]:
    out = []
    for message in messages:
        entry = _object(message.value)
        if session is None or entry.get("chain", chain_name(message.key)) == session:
            out.append(Located(entry, _where(message)))
    return out


def candidate_messages(
    messages: list[ConsumerRecord], session: str | None
) -> list[CandidateMessage]:
    out = []
    for m in messages:
        if session is not None and _object(m.value).get("session_id", chain_name(m.key)) != session:
            continue
        ids = message_ids(m.value, m.topic, m.partition, m.offset)
        out.append(CandidateMessage(ids, _where(m), (m.timestamp or 0) / 1000.0))
    return out


def decision_messages(
    messages: list[ConsumerRecord], session: str | None, trusted: TrustedKeys | None = None
) -> list[DecisionMessage]:
    """The records on `decisions`; with `trusted`, each one's signature checked against
    the stage it names."""
    out = []
    for m in messages:
        if session is not None and chain_name(m.key) != session:
            continue
        record = _object(m.value)
        cid = record.get("candidate_id")
        name = cid if isinstance(cid, str) else f"(unreadable at {_where(m)})"
        refused = (
            None
            if trusted is None
            else record_refusal(trusted, m.key, m.value, tuple(m.headers or ()), record)
        )
        at = (m.timestamp or 0) / 1000.0
        stage = str(record.get("stage", ""))
        out.append(DecisionMessage(m.partition, m.offset, name, at, stage, refused))
    return out


def from_first_chained(
    decisions: list[DecisionMessage], entries: list[Located]
) -> list[DecisionMessage]:
    """With an offset start: the decisions from the first one the audit range chains, per
    partition (a partition the range does not reach is checked whole)."""
    first: dict[int, int] = {}
    for e in entries:
        source = e.entry.get("source")
        if isinstance(source, Mapping) and isinstance(source.get("offset"), int):
            partition = source.get("partition")
            first[partition] = min(first.get(partition, source["offset"]), source["offset"])
    return [d for d in decisions if d.offset >= first.get(d.partition, 0)]


def read_heads(messages: list[ConsumerRecord]) -> dict[str, Head]:
    """The compacted head table as of its end: the last value per key wins."""
    heads: dict[str, Head] = {}
    for message in messages:
        name = chain_name(message.key)
        if message.value is None:
            heads.pop(name, None)
        else:
            heads[name] = Head.from_dict(_object(message.value))
    return heads


async def _read(settings: Settings, scope: AuditScope) -> tuple[Any, ...]:
    audit = await read_range(settings, settings.topic(Topic.AUDIT), scope.start)
    candidates = await read_range(settings, settings.topic(Topic.CANDIDATES), scope.start)
    by_time = scope.start if scope.start is not None and scope.start.offset is None else None
    decisions = await read_range(settings, settings.topic(Topic.DECISIONS), by_time)
    try:
        heads = read_heads(await read_range(settings, settings.topic(Topic.AUDIT_HEADS)))
    except LookupError:
        heads = None  # no recorder has run: nothing to compare the tails with
    return audit, candidates, decisions, heads


def audit_verify(settings: Settings, scope: AuditScope, key: bytes | None) -> AuditReport:
    require_keys(settings, "audit verify", signs=False, trusts=True)
    audit, candidates, decisions, heads = asyncio.run(_read(settings, scope))
    if heads is not None and scope.session is not None:
        heads = {k: v for k, v in heads.items() if k == scope.session}
    entries = located(audit, scope.session)
    recorded = decision_messages(decisions, scope.session, trusted_for(settings, "audit verify"))
    if scope.start is not None and scope.start.offset is not None:
        recorded = from_first_chained(recorded, entries)
    return verify(
        entries,
        candidate_messages(candidates, scope.session),
        key,
        anchored=scope.start is None,
        heads=heads if scope.start is None else None,
        grace=scope.grace,
        decisions=recorded,
    )


def render_report(report: AuditReport, out: IO[str] | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(file=out, stderr=out is None, width=160)
    summary = Table(title="audit")
    summary.add_column("")
    summary.add_column("", justify="right")
    for label, value in (
        ("chains", report.chains),
        ("entries", report.entries),
        ("candidates", report.candidates),
        ("problems", len(report.problems)),
        ("superseded attempts", sum(1 for n in report.notes if n.kind.name == "SUPERSEDED")),
        ("in flight", sum(1 for n in report.notes if n.kind.name == "IN_FLIGHT")),
    ):
        summary.add_row(label, str(value))
    console.print(summary)
    if report.problems:
        table = Table(title="problems")
        for column in ("kind", "what", "detail"):
            table.add_column(column, overflow="fold")
        for problem in report.problems:
            table.add_row(problem.kind.value, problem.what, problem.detail)
        console.print(table)
    console.print("intact" if report.intact else "NOT intact")


def report_dict(report: AuditReport) -> Mapping[str, Any]:
    return {
        "intact": report.intact,
        "chains": report.chains,
        "entries": report.entries,
        "candidates": report.candidates,
        "problems": [p.to_dict() for p in report.problems],
        "notes": [n.to_dict() for n in report.notes],
    }
