"""The embedded runner: the whole ladder in one process, on an in-memory bus.

It runs the very stage adapters the Kafka workers run, in ladder order, moving their
emits between in-memory queues instead of topics, with the same per-candidate isolation
(`isolation.process_isolated`) and the same terminal writer (`terminal.handle`, applied
as each conclusion is published, so an outcome record follows its stage's record as it
did on Kafka). Same functions, same records: the embedded decisions equal the Kafka
decisions on the same input.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from topics.codec import dumps, loads
from topics.names import TERMINAL, Topic
from workers.interfaces import Emit, Inbound, Stage, StageContext
from workers.runtime.isolation import DEADLETTER_ALWAYS, OnProcessingError, process_isolated
from workers.stages.terminal import handle


@dataclass
class EmbeddedResult:
    """What a run produced: decision records in order, and each terminal topic's messages."""

    records: list[dict] = field(default_factory=list)
    outputs: dict[Topic, list[Emit]] = field(default_factory=lambda: defaultdict(list))

    def outcomes(self) -> dict[str, dict]:
        """The final outcome record of each candidate, by candidate id."""
        return {r["candidate_id"]: r for r in self.records if r["stage"] == "outcome"}


class EmbeddedBus:
    """In-memory topics with the Kafka-mode semantics the stages rely on."""

    def __init__(
        self,
        stages: Sequence[Stage],
        ctx: StageContext,
        batch_size: int = 64,
        on_error: OnProcessingError = DEADLETTER_ALWAYS,
    ) -> None:
        self.stages = list(stages)
        self.ctx = ctx
        self.batch_size = batch_size
        self.on_error = on_error
        self.queues: dict[Topic, deque[Inbound]] = defaultdict(deque)
        self.offsets: dict[Topic, int] = defaultdict(int)
        self.result = EmbeddedResult()
        self.ledger: dict[bytes, dict] = {}  # the outcome ledger, as the writer keeps it
        # Stages that follow the decisions stream, as the switch's session latch does.
        self.observers = [s for s in self.stages if hasattr(s, "observe")]

    def publish(self, emit: Emit) -> None:
        if emit.topic is Topic.CONCLUDED:
            offset = self.offsets[emit.topic]
            self.offsets[emit.topic] += 1
            item = Inbound(emit.key, emit.value, emit.topic.value, 0, offset, emit.headers)
            for delivered in handle(self.ledger, item, self.ctx.trusted, self.ctx.clock()):
                self.publish(delivered)
            return
        if emit.topic is Topic.DECISIONS:
            record = loads(emit.value)
            self.result.records.append(record)
            for stage in self.observers:
                stage.observe(record, self.ctx)  # type: ignore[attr-defined]
            return
        if emit.topic in TERMINAL:
            self.result.outputs[emit.topic].append(emit)
            return
        offset = self.offsets[emit.topic]
        self.offsets[emit.topic] += 1
        self.queues[emit.topic].append(
            Inbound(emit.key, emit.value, emit.topic.value, 0, offset, emit.headers)
        )

    async def drain(self, on_batch: Callable[[str, int], None] | None = None) -> EmbeddedResult:
        """Run stages until every queue is empty."""
        progressing = True
        while progressing:
            progressing = False
            for stage in self.stages:
                queue = self.queues[stage.source]
                while queue:
                    batch = [queue.popleft() for _ in range(min(self.batch_size, len(queue)))]
                    emits = await process_isolated(stage, batch, self.ctx, on_error=self.on_error)
                    for emit in emits:
                        self.publish(emit)
                    if on_batch is not None:
                        on_batch(stage.name, len(batch))
                    progressing = True
        return self.result


async def run_embedded(
    raw_candidates: Iterable[bytes | dict],
    stages: Sequence[Stage],
    ctx: StageContext,
    *,
    batch_size: int = 64,
    on_batch: Callable[[str, int], None] | None = None,
    on_error: OnProcessingError = DEADLETTER_ALWAYS,
) -> EmbeddedResult:
    """Push candidates (raw bytes, or dicts to encode) through the ladder in-process;
    `on_error` chooses for a candidate that fails alone (`isolation`)."""
    bus = EmbeddedBus(stages, ctx, batch_size, on_error)
    for raw in raw_candidates:
        value = dumps(raw) if isinstance(raw, dict) else raw
        key = None
        if isinstance(raw, dict) and isinstance(raw.get("session_id"), str):
            key = raw["session_id"].encode()
        bus.publish(Emit(Topic.CANDIDATES, key, value))
    return await bus.drain(on_batch)
