"""The wire format of a conclusion: a stage's terminal message on its way to the writer.

A stage that concludes a candidate does not write the terminal topic itself; it sends the
terminal message, unchanged, to the internal `concluded` topic keyed by candidate id,
with what the terminal writer needs in headers: the terminal topic, the message's own key
(the session id), whether a person decided, and the `outcome` record to write with it.
The writer (workers/stages/terminal.py) checks the outcome ledger and either delivers the
message as it is — value, key and the stage's own headers — or records a superseded
attempt. Keeping the value untouched means a dead letter's raw bytes (which need not be
JSON, or even UTF-8) travel as they are.

With a stage key (GROUNDSTREAM_STAGE_KEY) a conclusion is sealed: an HMAC over everything
the writer acts on — terminal topic, candidate id, key, human flag, outcome record, value
and passed headers — so whoever can write to `concluded` without the key can neither put
a candidate into `state` nor pre-empt its outcome (the first outcome wins).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.errors import GroundstreamError
from topics.codec import dumps, loads
from topics.schema import MAX_ID_CHARS
from topics.signing import signature

TERMINAL_HEADER = "gs-terminal"
CANDIDATE_HEADER = "gs-candidate"
KEY_HEADER = "gs-key"
HUMAN_HEADER = "gs-human"
OUTCOME_HEADER = "gs-outcome"
SEAL_HEADER = "gs-conclusion-hmac"
SEALED_AS = "concluded"
_OURS = frozenset(
    {TERMINAL_HEADER, CANDIDATE_HEADER, KEY_HEADER, HUMAN_HEADER, OUTCOME_HEADER, SEAL_HEADER}
)


class BadConclusion(GroundstreamError, ValueError):
    """A message on `concluded` lacks what the writer needs (only we write there)."""


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

    def sealed_bytes(self) -> bytes:
        """What the seal covers: every field the writer acts on."""
        return dumps(
            [
                self.topic,
                self.candidate_id,
                (self.key or b"").hex(),
                self.human,
                self.outcome,
                hashlib.sha256(self.value).hexdigest(),
                [[k, v.hex()] for k, v in self.headers],
            ]
        )

    def wire_headers(self, stage_key: bytes | None = None) -> tuple[tuple[str, bytes], ...]:
        """Our headers, then the terminal message's own; sealed when given a key."""
        seal = (
            ()
            if stage_key is None
            else ((SEAL_HEADER, signature(stage_key, SEALED_AS, self.sealed_bytes())),)
        )
        ours = (
            (TERMINAL_HEADER, self.topic.encode()),
            (CANDIDATE_HEADER, self.candidate_id.encode("utf-8")),
            (HUMAN_HEADER, b"1" if self.human else b"0"),
            (OUTCOME_HEADER, dumps(self.outcome)),
        )
        key = () if self.key is None else ((KEY_HEADER, self.key),)
        return (*ours, *key, *seal, *self.headers)

    def wire_key(self) -> bytes:
        return self.candidate_id.encode("utf-8")


def read_conclusion(
    value: bytes | None,
    headers: tuple[tuple[str, bytes], ...],
    stage_key: bytes | None = None,
) -> Conclusion:
    """A conclusion back from the `concluded` topic's value and headers; with a stage key,
    BadConclusion unless its seal verifies."""
    found: dict[str, bytes] = {}
    passed: list[tuple[str, bytes]] = []
    for name, data in headers:
        if name in _OURS:
            found[name] = data
        else:
            passed.append((name, data))
    try:
        outcome = loads(found[OUTCOME_HEADER])
        topic = found[TERMINAL_HEADER].decode()
        candidate_id = found[CANDIDATE_HEADER].decode("utf-8")
    except (KeyError, ValueError) as exc:
        raise BadConclusion(f"conclusion without {exc}") from None
    if not isinstance(outcome, dict):
        raise BadConclusion("conclusion outcome is not an object")
    conclusion = Conclusion(
        candidate_id=candidate_id,
        topic=topic,
        key=found.get(KEY_HEADER),
        value=value or b"",
        outcome=outcome,
        human=found.get(HUMAN_HEADER) == b"1",
        headers=tuple(passed),
    )
    if stage_key is not None:
        expected = signature(stage_key, SEALED_AS, conclusion.sealed_bytes())
        if not hmac.compare_digest(found.get(SEAL_HEADER, b""), expected):
            raise BadConclusion("conclusion seal missing or does not verify")
    return conclusion


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
