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

What the writer delivers is only what a stage with the authority concluded. With trusted
keys (GROUNDSTREAM_TRUSTED_KEYS_DIR), a conclusion must carry a signature one of its
signer's keys verifies, and the signer must hold the authority for the terminal topic it
names (`pipeline.bounds.conclusions`: only rules concludes to state). Whatever the keys, a
conclusion must name a terminal topic. Anything else — unsigned, an unknown key, a stage
beyond its authority, `candidates` or any inner topic, a malformed header — is
dead-lettered with a one-line reason under its own origin (it is no outcome of the
candidate it names), and the batch goes on: no message can stop the writer. The embedded
runner calls `handle` directly, with a dict for a ledger.
"""

from __future__ import annotations

from collections.abc import MutableMapping, Sequence
from typing import Any

from pipeline.bounds.conclusions import refusal
from pipeline.stages import terminal
from pipeline.trail.ledger import Attempt
from topics.conclusion import BadConclusion, Conclusion, read_conclusion
from topics.names import Topic
from topics.security.keys import TrustedKeys
from topics.security.signatures import Unverified, verify
from workers.interfaces import Emit, Inbound, StageContext
from workers.stages.kit import deadletter, record_emit

NAME = "terminal"


def admitted(item: Inbound, trusted: TrustedKeys | None) -> Conclusion:
    """The conclusion `item` carries, when the writer may deliver it; BadConclusion with
    the one-line reason otherwise (see the module docstring)."""
    signer = None
    if trusted is not None:
        try:
            signer = verify(trusted, Topic.CONCLUDED.value, item.key, item.value, item.headers)
        except Unverified as exc:
            raise BadConclusion(f"conclusion refused: {exc}") from None
    conclusion = read_conclusion(item.value, item.headers)
    refused = refusal(signer, conclusion.topic)
    if refused is not None:
        raise BadConclusion(f"conclusion refused: {refused}")
    return conclusion


def handle(
    ledger: MutableMapping[bytes, Any], item: Inbound, trusted: TrustedKeys | None, now: float
) -> list[Emit]:
    """One message of `concluded`: delivered or superseded (`deliver`), or dead-lettered
    with its reason when it is not admitted."""
    try:
        conclusion = admitted(item, trusted)
    except BadConclusion as exc:
        return deadletter(item, str(exc), NAME, now, direct=True, anonymous=True)
    return deliver(ledger, conclusion, now)


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

    name = NAME
    reads_control = False  # delivers or records decisions made upstream; none of its own
    source = Topic.CONCLUDED

    def __init__(self, ledger: MutableMapping[bytes, Any] | None = None) -> None:
        self.ledger: MutableMapping[bytes, Any] = {} if ledger is None else ledger

    async def process(self, batch: Sequence[Inbound], ctx: StageContext) -> list[Emit]:
        emits: list[Emit] = []
        for item in batch:
            emits += handle(self.ledger, item, ctx.trusted, ctx.clock())
        return emits

    async def close(self) -> None:
        return None
