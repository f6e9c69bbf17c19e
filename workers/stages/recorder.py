"""The audit recorder: `decisions` → `audit` (numbered, chained) and `decisions.public`.

Reads every decision record as committed, in partition order, and for each one appends
the next entry of its session's chain to `audit` (`pipeline.trail.audit.chain_entry`) and its
public projection to `decisions.public` (`pipeline.trail.disclosure.public_record`). Why one
reader numbers the chains, and why per session, is argued in `pipeline.trail.audit`.

The chain heads are the stage's state table (`ctx.sessions`), keyed by the decision
message's key — the session id, as `decisions` is keyed — so the table is co-partitioned
with `decisions`; the loop writes it in the same transaction as the entries and the input
offsets. Nothing here reads a clock: an entry is a function of the record, the head and
the key.

A message on `decisions` that is not a record (unreadable, or not an object) is chained
too, as the digest of its bytes: the auditor must see that something was there, and its
record hash can never match, so verification names it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from pipeline.trail.audit import Head, chain_entry, head_of
from pipeline.trail.disclosure import public_record
from topics.codec import dumps, loads
from topics.names import Topic
from workers.interfaces import Emit, Inbound, StageContext


def chain_name(key: bytes | None) -> str:
    """A chain's name: its session key as text (undecodable bytes escaped, not merged)."""
    return (key or b"").decode("utf-8", "backslashreplace")


def read_record(value: bytes | None) -> dict[str, Any] | None:
    try:
        record = loads(value) if value else None
    except (ValueError, RecursionError):
        return None
    return record if isinstance(record, dict) else None


class RecorderStage:
    """decisions → audit + decisions.public, one entry per record (module docstring)."""

    name = "recorder"
    reads_control = False  # delivers or records decisions made upstream; none of its own
    source = Topic.DECISIONS
    outputs: tuple[Topic, ...] = (Topic.AUDIT, Topic.DECISIONS_PUBLIC)
    """Every topic `process` sends to (its principal may write these and its table)."""
    table = Topic.AUDIT_HEADS
    """The compacted changelog of the chain heads (`ctx.sessions`)."""

    def __init__(self, key: bytes | None = None) -> None:
        self.key = key or None

    async def process(self, batch: Sequence[Inbound], ctx: StageContext) -> list[Emit]:
        heads = ctx.sessions
        emits: list[Emit] = []
        for item in batch:
            chain_key = item.key or b""
            record = read_record(item.value)
            chained = record
            if chained is None:
                digest = hashlib.sha256(item.value or b"").hexdigest()
                chained = {"unreadable": True, "sha256": digest}
            head = Head.from_dict(heads.get(chain_key))
            entry = chain_entry(
                chained,
                chain_name(item.key),
                head,
                self.key,
                partition=item.partition,
                offset=item.offset,
            )
            heads[chain_key] = head_of(entry).to_dict()
            emits.append(Emit(Topic.AUDIT, chain_key, dumps(entry)))
            if record is not None:
                emits.append(Emit(Topic.DECISIONS_PUBLIC, chain_key, dumps(public_record(record))))
        return emits

    async def close(self) -> None:
        return None
