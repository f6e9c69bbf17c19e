"""The terminal writer: the one place a candidate's outcome is written, exactly once.

Every stage that concludes a candidate — on `state`, an `escalations.*` topic or
`deadletter` — sends the terminal message to `concluded` instead (topics/conclusion.py),
keyed by candidate id. This stage reads `concluded` and, per message, applies the rule of
`pipeline.stages.terminal`: the first conclusion of an id is delivered — the terminal
message, its `outcome` record on `decisions`, and the ledger entry — and any later one (a
stage that ran a candidate twice, a replica that was fenced too late) is recorded on
`decisions` as a `superseded` attempt and delivered nowhere. A person's verdict on a
candidate parked in review is the one later outcome the ledger lets through.

Why one writer: the ladder's stages are at-least-once with respect to each other in the
worst case (replicas, fenced zombies), and two stages could conclude one id at once. All
conclusions of one id land on one partition of `concluded`, read by one consumer in
order, so "first" is well defined. The ledger is the compacted `outcomes` topic keyed by
candidate id, co-partitioned with `concluded`; the Kafka loop restores it at
read_committed on assignment and writes it in the same transaction as the outputs and
the input offsets, so ledger, outputs and offsets never disagree, whatever crashes.

With a stage key, a conclusion whose seal does not verify is dead-lettered as it came, not
delivered (topics/conclusion.py). The embedded runner calls `deliver` directly, with a
dict for a ledger.
"""

from __future__ import annotations

from collections.abc import MutableMapping, Sequence
from typing import Any

from pipeline.stages import terminal
from pipeline.trail.ledger import Attempt
from topics.conclusion import BadConclusion, Conclusion, read_conclusion
from topics.names import Topic
from workers.interfaces import Emit, Inbound, StageContext
from workers.stages.kit import deadletter, record_emit


def deliver(ledger: MutableMapping[bytes, Any], conclusion: Conclusion, now: float) -> list[Emit]:
    """The emits for one conclusion: delivered (and the ledger updated), or recorded as
    superseded (`pipeline.stages.terminal`)."""
    attempt = Attempt(conclusion.candidate_id, conclusion.topic, conclusion.human)
    lkey = conclusion.candidate_id.encode("utf-8")
    delivery = terminal.decide(ledger.get(lkey), attempt, conclusion.outcome, now)
    if delivery.superseded is not None:
        return [record_emit(delivery.superseded, conclusion.key or b"")]
    ledger[lkey] = delivery.entry
    return [
        record_emit(conclusion.outcome, conclusion.key or b""),
        Emit(Topic(conclusion.topic), conclusion.key, conclusion.value, conclusion.headers),
    ]


class TerminalStage:
    """concluded → state | escalations.* | deadletter, through the outcome ledger."""

    name = "terminal"
    reads_control = False  # delivers or records decisions made upstream; none of its own
    source = Topic.CONCLUDED

    def __init__(self, ledger: MutableMapping[bytes, Any] | None = None) -> None:
        self.ledger: MutableMapping[bytes, Any] = {} if ledger is None else ledger

    async def process(self, batch: Sequence[Inbound], ctx: StageContext) -> list[Emit]:
        emits: list[Emit] = []
        for item in batch:
            try:
                conclusion = read_conclusion(item.value, item.headers, ctx.stage_key)
            except BadConclusion as exc:
                emits += deadletter(item, str(exc), self.name, ctx.clock(), direct=True)
                continue
            emits += deliver(self.ledger, conclusion, ctx.clock())
        return emits

    async def close(self) -> None:
        return None
