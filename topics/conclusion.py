"""The wire format of a conclusion: a stage's terminal message on its way to the writer.

A stage that concludes a candidate does not write the terminal topic itself; it sends the
terminal message, unchanged, to the internal `concluded` topic keyed by candidate id,
with what the terminal writer needs in headers: the terminal topic, the message's own key
(the session id), whether a person decided, and the `outcome` record to write with it.
The writer (workers/stages/terminal.py) checks the outcome ledger and either delivers the
message as it is — value, key and the stage's own headers — or records a superseded
attempt. Keeping the value untouched means a dead letter's raw bytes (which need not be
JSON, or even UTF-8) travel as they are.

A conclusion is signed by the stage that concluded it, with that stage's own Ed25519 key
(`topics.security.signatures`, applied as the stage's worker sends it): the signature
covers everything the writer acts on — terminal topic, candidate id, key, human flag,
outcome record, value and passed headers. The writer delivers it only when a trusted key
of the signer verifies it and the signer may conclude to that topic
(`pipeline.bounds.conclusions`), so whoever can write to `concluded` without a stage's key
can neither put a candidate into `state` nor pre-empt its outcome (the first outcome
wins), and a stage that is taken over concludes only where it always could.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.errors import GroundstreamError
from topics.codec import dumps, loads
from topics.schema import MAX_ID_CHARS
from topics.security.signatures import SIGNATURE_HEADERS

TERMINAL_HEADER = "gs-terminal"
CANDIDATE_HEADER = "gs-candidate"
KEY_HEADER = "gs-key"
HUMAN_HEADER = "gs-human"
OUTCOME_HEADER = "gs-outcome"
_OURS = frozenset({TERMINAL_HEADER, CANDIDATE_HEADER, KEY_HEADER, HUMAN_HEADER, OUTCOME_HEADER})


class BadConclusion(GroundstreamError, ValueError):
    """A message on `concluded` the writer refuses: it lacks what the writer needs, or its
    signer may not conclude it (`workers.stages.terminal.admitted`)."""


@dataclass(frozen=True, slots=True)
class Conclusion:
    """A terminal message and its outcome record, before the ledger has been asked."""

    candidate_id: str
    topic: str
    key: bytes | None
    value: bytes
    outcome: dict[str, Any]
    human: bool = False
    headers: tuple[tuple[str, bytes], ...] = ()

    def wire_headers(self) -> tuple[tuple[str, bytes], ...]:
        """Our headers, then the terminal message's own."""
        ours = (
            (TERMINAL_HEADER, self.topic.encode()),
            (CANDIDATE_HEADER, self.candidate_id.encode("utf-8")),
            (HUMAN_HEADER, b"1" if self.human else b"0"),
            (OUTCOME_HEADER, dumps(self.outcome)),
        )
        key = () if self.key is None else ((KEY_HEADER, self.key),)
        return (*ours, *key, *self.headers)

    def wire_key(self) -> bytes:
        return self.candidate_id.encode("utf-8")


def read_conclusion(value: bytes | None, headers: tuple[tuple[str, bytes], ...]) -> Conclusion:
    """A conclusion back from the `concluded` topic's value and headers (its signature is
    checked before, by the writer, and not passed on)."""
    found: dict[str, bytes] = {}
    passed: list[tuple[str, bytes]] = []
    for name, data in headers:
        if name in _OURS:
            found[name] = data
        elif name not in SIGNATURE_HEADERS:
            passed.append((name, data))
    try:
        outcome = loads(found[OUTCOME_HEADER])
        topic = found[TERMINAL_HEADER].decode()
        candidate_id = found[CANDIDATE_HEADER].decode("utf-8")
    except (KeyError, ValueError) as exc:
        raise BadConclusion(f"conclusion without {exc}") from None
    if not isinstance(outcome, dict):
        raise BadConclusion("conclusion outcome is not an object")
    return Conclusion(
        candidate_id=candidate_id,
        topic=topic,
        key=found.get(KEY_HEADER),
        value=value or b"",
        outcome=outcome,
        human=found.get(HUMAN_HEADER) == b"1",
        headers=tuple(passed),
    )


def candidate_id_of(raw: bytes | None) -> str | None:
    """The candidate id a message carries, if any: a candidate's `id`, or an envelope's
    `candidate.id`. Best effort on bytes that failed validation; never raises."""
    if not raw:
        return None
    try:
        data = loads(raw)
    except (ValueError, RecursionError):
        return None
    if isinstance(data, Mapping) and isinstance(data.get("candidate"), Mapping):
        data = data["candidate"]
    cid = data.get("id") if isinstance(data, Mapping) else None
    return cid if isinstance(cid, str) and cid.strip() and len(cid) <= MAX_ID_CHARS else None
