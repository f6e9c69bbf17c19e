"""Per-candidate isolation: one bad candidate never takes its batch with it.

A stage handles a batch in one call (one encoder call, concurrent model calls). When that
call raises, or returns an output the broker would refuse, the batch is run again one
message at a time, and only the message that still fails is dead-lettered — under its
candidate id, with the reason — while the others go on as if nothing happened. State the
failed attempt wrote (the switch's session table) is rolled back to before it first.

Not every error is the candidate's fault. A broker error or the encoder running out of
memory says nothing about the message: dead-lettering it would lose a good candidate, so
retryable errors (`pipeline.failures.is_retryable`: the error tree's own mark, and one
table for other libraries') propagate and the loop retries the batch without committing
anything. A permanent error of one candidate goes to the operator's choice
(`on_error`, from GROUNDSTREAM_ON_PROCESSING_ERROR): dead-letter it (the default), or
stop: `ProcessingStopped` propagates, the table is put back as before the batch, and the
worker exits with nothing of the batch committed. An output too large for the broker is
not an error of processing and is always dead-lettered.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, MutableMapping, Sequence
from typing import Any

from pipeline.errors import GroundstreamError
from pipeline.failures import ErrorAction, is_retryable
from topics.names import MAX_MESSAGE_BYTES
from workers.interfaces import Emit, Inbound, Stage, StageContext
from workers.stages.kit import deadletter

log = logging.getLogger("groundstream.worker")

RECORD_OVERHEAD = 64 * 1024
"""Room left under the broker's message limit for the record's key, headers and batch
framing: an output bigger than MAX_MESSAGE_BYTES less this is refused before sending."""
MAX_OUTPUT_BYTES = MAX_MESSAGE_BYTES - RECORD_OVERHEAD


OnProcessingError = Callable[[str, Inbound, Exception], ErrorAction]
"""Called with the stage's name, the message and the permanent error it raised alone;
returns what to do with it (quix-streams' `on_processing_error`, Kafka Streams'
`ProcessingExceptionHandler`)."""


def always(action: ErrorAction) -> OnProcessingError:
    """The handler that chooses `action` for every error (the setting's handler)."""

    def choose(stage: str, item: Inbound, exc: Exception) -> ErrorAction:
        return action

    return choose


DEADLETTER_ALWAYS = always(ErrorAction.DEADLETTER)
"""The default: every candidate that fails alone is dead-lettered and the batch goes on."""


class ProcessingStopped(GroundstreamError, RuntimeError):
    """A candidate's permanent error, with `stop` chosen: the worker exits and commits
    nothing of the batch, which is redone (and fails again) on its next start."""


def emit_size(emit: Emit) -> int:
    return len(emit.value) + len(emit.key or b"") + sum(len(k) + len(v) for k, v in emit.headers)


def oversize(emits: Sequence[Emit], limit: int = MAX_OUTPUT_BYTES) -> int:
    """The size of the largest emit over `limit`, or 0 when every emit fits."""
    return max((n for n in map(emit_size, emits) if n > limit), default=0)


def savepoint(table: MutableMapping[Any, Any]) -> Callable[[], None]:
    """A function that puts `table` back as it is now (a changelog store keeps its own)."""
    own = getattr(table, "savepoint", None)
    if callable(own):
        return own()
    copy = dict(table)

    def restore() -> None:
        table.clear()
        table.update(copy)

    return restore


async def process_isolated(
    stage: Stage,
    batch: Sequence[Inbound],
    ctx: StageContext,
    state: MutableMapping[Any, Any] | None = None,
    limit: int = MAX_OUTPUT_BYTES,
    received: float | None = None,
    on_error: OnProcessingError = DEADLETTER_ALWAYS,
) -> list[Emit]:
    """`stage.process(batch)`, falling back to one message at a time on a failure;
    `state` is the table the stage writes (ctx.sessions unless told). Decisions are timed
    from `received` (`time.perf_counter()` when the batch arrived; now, unless told).
    `on_error` chooses for a message that fails alone with a permanent error."""
    ctx.received = time.perf_counter() if received is None else received
    try:
        return await _process(stage, batch, ctx, state, limit, on_error)
    finally:
        ctx.received = None


async def _process(
    stage: Stage,
    batch: Sequence[Inbound],
    ctx: StageContext,
    state: MutableMapping[Any, Any] | None,
    limit: int,
    on_error: OnProcessingError,
) -> list[Emit]:
    table = ctx.sessions if state is None else state
    restore = savepoint(table)
    try:
        emits = await stage.process(batch, ctx)
    except Exception as exc:
        if is_retryable(exc):
            raise
        log.warning("stage %s failed on a batch of %d: %r; one by one", stage.name, len(batch), exc)
    else:
        if not oversize(emits, limit):
            return emits
    restore()
    out: list[Emit] = []
    try:
        for item in batch:
            out += await _one(stage, item, ctx, table, limit, on_error)
    except ProcessingStopped:
        restore()  # the messages before the one that stopped were written too
        raise
    return out


async def _one(
    stage: Stage,
    item: Inbound,
    ctx: StageContext,
    table: MutableMapping[Any, Any],
    limit: int,
    on_error: OnProcessingError,
) -> list[Emit]:
    restore = savepoint(table)
    try:
        emits = await stage.process([item], ctx)
    except Exception as exc:
        if is_retryable(exc):
            raise
        restore()
        if ErrorAction(on_error(stage.name, item, exc)) is ErrorAction.STOP:
            raise ProcessingStopped(
                f"stage {stage.name} stopped on {_where(item)} ({type(exc).__name__}: {exc}):"
                " on a processing error the choice was stop (GROUNDSTREAM_ON_PROCESSING_ERROR);"
                " nothing of the batch is committed"
            ) from exc
        log.exception("stage %s: dead-lettering %s", stage.name, _where(item))
        reason = f"stage error: {type(exc).__name__}"
        return deadletter(item, reason, stage.name, ctx.clock())
    size = oversize(emits, limit)
    if size:
        restore()
        reason = f"output too large: {size} bytes > limit {limit}"
        return deadletter(item, reason, stage.name, ctx.clock())
    return emits


def _where(item: Inbound) -> str:
    return f"{item.topic}/{item.partition}/{item.offset}"
