"""A decision log that proves itself: the `audit` chain and its verification.

Why a second log. `decisions` is written by every stage process, each at its own pace,
and a record's `prev_hash` links only to the same candidate's previous record
(`records.verify_chain`). That chain cannot see a candidate deleted whole, a trail cut
off at its end, records moved between candidates, or an edit followed by recomputing
every later hash. What it lacks is one writer that numbers everything it sees.

Who numbers. Sequence numbers can only be assigned where one process sees every record
of a chain in one order. The stages cannot: several processes write `decisions`
concurrently. The terminal writer cannot: it sees conclusions, not the stage records
before them. So one more reader does: the audit recorder (`workers/stages/recorder.py`)
consumes `decisions` at read_committed in its own consumer group and appends, per
session, an entry with the next sequence number, the previous entry's hash and the record
itself to `audit`. A session's records all live on one partition of `decisions` (the key
is the session id), and a partition has one consumer in the group, so each chain has
exactly one writer; the recorder writes its entries, its chain heads and its input
offsets in one Kafka transaction, so a crash neither skips nor repeats a number, and a
restarted recorder fences its predecessor. A chain per session rather than per partition:
the heads are then keyed like `decisions` itself, so they live in a table co-partitioned
with it and survive a restart without a scan of the log.

Keyed chains. With a key (`GROUNDSTREAM_AUDIT_KEY`) each entry's hash is an HMAC, so an
edit cannot be hidden by recomputing the hashes that follow: without the key they cannot
be recomputed. Without a key the chain shows accidental damage and careless edits, and
an edit with every later hash recomputed passes: only the key closes that.

What verification reports (`verify`), each naming the entry (chain, sequence number,
candidate and stage, and where it sits in the log):
* altered — an entry's hash does not match its content, or the decision record inside
  does not match its own hash, or a link is broken;
* removed — a sequence number missing from a chain;
* reordered — a chain's sequence numbers out of order in the log;
* inserted — a sequence number that occurs twice;
* a trail without its outcome, and a candidate in `candidates` with no outcome (what a
  cut tail, or a whole candidate deleted, leaves behind), unless it is still in flight;
* a chain shorter than its recorded head (a cut tail);
* unrecorded — decision records on `decisions` that no audit entry covers (the entry's
  `source` names the record's partition and offset), once older than the grace: its
  recorder is not running, or behind by more than the bound; and an empty audit log
  while decisions or candidates exist. "Intact" is never said about records nobody
  chained: a forged record appended to `decisions` with no recorder running is named here;
* not signed by its stage — with the stages' public keys, a record on `decisions` that the
  stage it names did not sign (unsigned, an unknown key, another stage's key): a process
  that may write `decisions` cannot speak for another stage.
A superseded attempt (a later decision the outcome ledger did not deliver) is reported as
such, never as tampering.

Pure: no Kafka, no clock; the reader in `workers/runtime/audit.py` feeds it.
"""

from __future__ import annotations

import hashlib
import hmac
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

import orjson

from pipeline.trail.records import OUTCOME_STAGE, SUPERSEDED_STAGE, record_hash

AUDIT_SCHEMA_VERSION = 1
REVIEW_TOPIC = "escalations.review"
DEADLETTER_TOPIC = "deadletter"


class Mac(StrEnum):
    """How an entry's hash was made."""

    SHA256 = "sha256"
    HMAC_SHA256 = "hmac-sha256"


class Finding(StrEnum):
    """What verification found; only `SUPERSEDED` and `IN_FLIGHT` leave a log intact."""

    ALTERED = "altered"
    REMOVED = "removed"
    REORDERED = "reordered"
    INSERTED = "inserted"
    UNVERIFIABLE = "unverifiable"
    UNRECORDED = "unrecorded"
    UNSIGNED = "not signed by its stage"
    NO_OUTCOME = "trail without outcome"
    CANDIDATE_WITHOUT_OUTCOME = "candidate without outcome"
    SUPERSEDED = "superseded attempt"
    IN_FLIGHT = "in flight"


NOT_TAMPERING = frozenset({Finding.SUPERSEDED, Finding.IN_FLIGHT})


def digest(body: Mapping[str, Any], key: bytes | None) -> str:
    """The hash of an entry's body (everything but `hash`): HMAC-SHA256 with a key."""
    data = orjson.dumps(
        {k: v for k, v in body.items() if k != "hash"},
        option=orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY,
    )
    if key:
        return hmac.new(key, data, hashlib.sha256).hexdigest()
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True, slots=True)
class Head:
    """Where a chain stands: its last sequence number and that entry's hash."""

    seq: int = 0
    hash: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "hash": self.hash}

    @classmethod
    def from_dict(cls, data: Any) -> Head:
        if not isinstance(data, Mapping):
            return cls()
        seq, value = data.get("seq"), data.get("hash")
        ok = isinstance(seq, int) and not isinstance(seq, bool) and isinstance(value, str)
        return cls(seq, value) if ok else cls()  # type: ignore[arg-type]


def chain_entry(
    record: Mapping[str, Any],
    chain: str,
    head: Head,
    key: bytes | None,
    *,
    partition: int,
    offset: int,
) -> dict[str, Any]:
    """The next entry of `chain` after `head`: the record, numbered, linked and hashed."""
    body: dict[str, Any] = {
        "audit_schema_version": AUDIT_SCHEMA_VERSION,
        "chain": chain,
        "seq": head.seq + 1,
        "prev": head.hash,
        "mac": (Mac.HMAC_SHA256 if key else Mac.SHA256).value,
        "source": {"partition": partition, "offset": offset},
        "record": dict(record),
    }
    body["hash"] = digest(body, key)
    return body


def head_of(entry: Mapping[str, Any]) -> Head:
    return Head(int(entry["seq"]), str(entry["hash"]))


@dataclass(frozen=True, slots=True)
class Located:
    """An audit entry and where the log holds it (e.g. `audit[0]@17`)."""

    entry: Mapping[str, Any]
    where: str


@dataclass(frozen=True, slots=True)
class Problem:
    kind: Finding
    what: str
    """Names the entry or candidate."""
    detail: str

    def render(self) -> str:
        return f"{self.kind.value}: {self.what}: {self.detail}"

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind.value, "what": self.what, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class CandidateMessage:
    """A message on `candidates`: the ids it may be recorded under, where, and when."""

    ids: tuple[str, ...]
    where: str
    at: float
    """Epoch seconds (the message's timestamp)."""


@dataclass(frozen=True, slots=True)
class DecisionMessage:
    """A message on `decisions`: where the log holds it, whose record it is, and when."""

    partition: int
    offset: int
    candidate_id: str
    at: float
    """Epoch seconds (the message's timestamp)."""
    stage: str = ""
    refused: str | None = None
    """Why its signature is not trusted (unsigned, an unknown key, another stage's key:
    `workers.runtime.signing.record_refusal`); None when the stage it names signed it,
    or when no trusted keys were given."""


MAX_NAMED = 5
"""Candidate ids an `unrecorded` problem names before it only counts them."""


@dataclass(frozen=True, slots=True)
class AuditReport:
    chains: int
    entries: int
    candidates: int
    problems: tuple[Problem, ...] = ()
    notes: tuple[Problem, ...] = field(default=())

    @property
    def intact(self) -> bool:
        return not self.problems


def name(located: Located) -> str:
    """An entry as a person finds it: chain and number, candidate and stage, position."""
    e = located.entry
    record = e.get("record") if isinstance(e.get("record"), Mapping) else {}
    return (
        f"chain {e.get('chain')!s} #{e.get('seq')} "
        f"({record.get('candidate_id')}/{record.get('stage')}) at {located.where}"
    )


def _well_formed(entry: Mapping[str, Any]) -> bool:
    seq = entry.get("seq")
    return (
        isinstance(seq, int)
        and not isinstance(seq, bool)
        and seq >= 1
        and isinstance(entry.get("chain"), str)
        and isinstance(entry.get("prev"), str)
        and isinstance(entry.get("hash"), str)
        and isinstance(entry.get("record"), Mapping)
    )


def _content(located: Located, key: bytes | None) -> list[Problem]:
    """The entry's own hash (keyed where the log is) and its record's hash."""
    e = located.entry
    mac = e.get("mac")
    if key is not None and mac != Mac.HMAC_SHA256:
        return [Problem(Finding.ALTERED, name(located), "an unkeyed entry in a keyed log")]
    if key is None and mac == Mac.HMAC_SHA256:
        return []  # reported once per chain: a keyed chain needs the key
    problems = []
    if digest(e, key) != e.get("hash"):
        problems.append(Problem(Finding.ALTERED, name(located), "hash does not match content"))
    record = e["record"]
    if record_hash(record) != record.get("hash"):
        problems.append(
            Problem(Finding.ALTERED, name(located), "the decision record's own hash does not match")
        )
    return problems


def verify_chain_entries(
    chain: str,
    entries: Sequence[Located],
    key: bytes | None,
    *,
    anchored: bool = True,
    head: Head | None = None,
) -> list[Problem]:
    """One chain, its entries in log order. `anchored`: the chain is read from its start
    (numbering must begin at 1); `head`: the recorder's head for the chain, if known."""
    problems: list[Problem] = []
    if key is None and any(e.entry.get("mac") == Mac.HMAC_SHA256 for e in entries):
        problems.append(
            Problem(
                Finding.UNVERIFIABLE,
                f"chain {chain}",
                "the chain is keyed: set GROUNDSTREAM_AUDIT_KEY to verify it",
            )
        )
    seen: dict[int, Located] = {}
    highest = 0
    for located in entries:
        problems += _content(located, key)
        seq = int(located.entry["seq"])
        if seq in seen:
            problems.append(
                Problem(
                    Finding.INSERTED,
                    name(located),
                    f"a second entry numbered {seq} (the first is at {seen[seq].where})",
                )
            )
            continue
        if seq < highest:
            problems.append(
                Problem(Finding.REORDERED, name(located), f"comes after #{highest} in the log")
            )
        seen[seq] = located
        highest = max(highest, seq)
    if not seen:
        return problems
    first = 1 if anchored else min(seen)
    missing = [s for s in range(first, highest + 1) if s not in seen]
    for start, end in _runs(missing):
        after = f" after {name(seen[start - 1])}" if start - 1 in seen else " at the chain's start"
        numbers = f"#{start}" if start == end else f"#{start}..#{end}"
        problems.append(Problem(Finding.REMOVED, f"chain {chain} {numbers}", f"missing{after}"))
    for seq in sorted(seen):
        located, before = seen[seq], seen.get(seq - 1)
        if before is not None and located.entry["prev"] != before.entry["hash"]:
            problems.append(
                Problem(
                    Finding.ALTERED,
                    name(located),
                    f"does not link to #{seq - 1}: one of them was altered or replaced",
                )
            )
        elif seq == 1 and located.entry["prev"] != "":
            problems.append(Problem(Finding.ALTERED, name(located), "the first entry links back"))
    if head is not None and head.seq > highest:
        numbers = f"#{highest + 1}" if head.seq == highest + 1 else f"#{highest + 1}..#{head.seq}"
        problems.append(
            Problem(
                Finding.REMOVED,
                f"chain {chain} {numbers}",
                f"the chain ends at #{highest}, its recorder's head is #{head.seq}: "
                "the tail was cut",
            )
        )
    return problems


def _runs(numbers: list[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for n in numbers:
        if runs and runs[-1][1] == n - 1:
            runs[-1] = (runs[-1][0], n)
        else:
            runs.append((n, n))
    return runs


def _record_time(record: Mapping[str, Any]) -> float | None:
    try:
        return datetime.fromisoformat(str(record.get("decided_at"))).timestamp()
    except ValueError:
        return None


def verify_trails(
    records: Sequence[tuple[Mapping[str, Any], str]],
    candidates: Sequence[CandidateMessage],
    *,
    grace: float,
) -> tuple[list[Problem], list[Problem]]:
    """Outcomes: every trail ends in one, every candidate has one. Returns (problems,
    notes). A trail or candidate newer than `grace` seconds before the log's newest record
    is in flight, not missing its outcome; with no grace, nothing is in flight."""
    outcomes: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    trail_at: dict[str, tuple[float, str]] = {}
    problems: list[Problem] = []
    notes: list[Problem] = []
    newest = max((t for r, _ in records if (t := _record_time(r)) is not None), default=0.0)
    for record, where in records:
        if not isinstance(record.get("candidate_id"), str):
            continue  # not a decision record: named as altered by the chain check
        cid, stage = record["candidate_id"], str(record.get("stage"))
        if stage == SUPERSEDED_STAGE:
            notes.append(
                Problem(Finding.SUPERSEDED, f"{cid} at {where}", str(record.get("reason", "")))
            )
            continue
        if stage == OUTCOME_STAGE or record.get("topic") == DEADLETTER_TOPIC:
            outcomes[cid].append(record)
        trail_at[cid] = (_record_time(record) or 0.0, where)
    for cid, found in outcomes.items():
        delivered = [r for r in found if r.get("stage") == OUTCOME_STAGE] or found[:1]
        # The ledger's rule: a later outcome only follows one that parked the candidate
        # in review (a person's verdict); every other outcome is final.
        if any(r.get("topic") != REVIEW_TOPIC for r in delivered[:-1]):
            problems.append(
                Problem(
                    Finding.INSERTED,
                    cid,
                    f"{len(delivered)} outcomes: after an outcome outside review there is no other",
                )
            )
    for cid, (at, where) in trail_at.items():
        if cid in outcomes:
            continue
        if grace > 0 and newest - at < grace:
            notes.append(Problem(Finding.IN_FLIGHT, cid, f"last record at {where}"))
        else:
            problems.append(
                Problem(Finding.NO_OUTCOME, cid, f"its trail ends at {where} without an outcome")
            )
    for message in candidates:
        if any(i in outcomes or i in trail_at for i in message.ids):
            continue  # has its outcome, or its trail is reported above
        label = f"{message.ids[0]} ({message.where})"
        if grace > 0 and (newest - message.at < grace or not records):
            notes.append(Problem(Finding.IN_FLIGHT, label, "no outcome yet"))
        else:
            problems.append(
                Problem(Finding.CANDIDATE_WITHOUT_OUTCOME, label, "no outcome in the audit log")
            )
    return problems, notes


def _sources(entries: Iterable[Located]) -> set[tuple[int, int]]:
    """The (partition, offset) on `decisions` of each entry's record."""
    out = set()
    for located in entries:
        source = located.entry.get("source")
        if isinstance(source, Mapping):
            partition, offset = source.get("partition"), source.get("offset")
            if isinstance(partition, int) and isinstance(offset, int):
                out.add((partition, offset))
    return out


def _span(found: Sequence[DecisionMessage]) -> str:
    first, last = found[0], found[-1]
    at = f"@{first.offset}" + (f"..@{last.offset}" if last.offset != first.offset else "")
    return f"decisions[{first.partition}]{at}"


def _ids(found: Sequence[DecisionMessage]) -> str:
    ids = list(dict.fromkeys(d.candidate_id for d in found))
    more = f" and {len(ids) - MAX_NAMED} more" if len(ids) > MAX_NAMED else ""
    return ", ".join(ids[:MAX_NAMED]) + more


def verify_coverage(
    entries: Sequence[Located], decisions: Sequence[DecisionMessage], *, grace: float
) -> tuple[list[Problem], list[Problem]]:
    """Every decision record is chained: those no entry covers are a problem per partition
    (naming the candidates), unless newer than `grace` seconds before the newest decision
    — the recorder is then within its bound, and they are a note. Returns (problems, notes)."""
    covered = _sources(entries)
    newest = max((d.at for d in decisions), default=0.0)
    late: dict[int, list[DecisionMessage]] = defaultdict(list)
    behind: dict[int, list[DecisionMessage]] = defaultdict(list)
    for d in sorted(decisions, key=lambda d: (d.partition, d.offset)):
        if (d.partition, d.offset) not in covered:
            (behind if grace > 0 and newest - d.at < grace else late)[d.partition].append(d)
    problems = [
        Problem(
            Finding.UNRECORDED,
            _span(found),
            f"{len(found)} decision record(s) no audit entry covers ({_ids(found)}): "
            "is `groundstream audit record` running? (`worker all` runs it)",
        )
        for found in late.values()
    ]
    notes = [
        Problem(
            Finding.IN_FLIGHT,
            _span(found),
            f"{len(found)} decision record(s) not chained yet (newer than the grace)",
        )
        for found in behind.values()
    ]
    return problems, notes


def verify_signatures(decisions: Sequence[DecisionMessage]) -> list[Problem]:
    """Each decision record whose signature is not its own stage's, named."""
    return [
        Problem(
            Finding.UNSIGNED,
            f"{d.candidate_id}/{d.stage} at decisions[{d.partition}]@{d.offset}",
            d.refused,
        )
        for d in decisions
        if d.refused is not None
    ]


def verify(
    entries: Iterable[Located],
    candidates: Sequence[CandidateMessage],
    key: bytes | None,
    *,
    anchored: bool = True,
    heads: Mapping[str, Head] | None = None,
    grace: float = 60.0,
    decisions: Sequence[DecisionMessage] | None = None,
) -> AuditReport:
    """Every chain of the log and every candidate's outcome; with `decisions` (the
    records on `decisions` in scope), that each of them is chained. See the module
    docstring."""
    entries = list(entries)
    chains: dict[str, list[Located]] = defaultdict(list)
    problems: list[Problem] = []
    notes: list[Problem] = []
    if not entries and (candidates or decisions):
        problems.append(
            Problem(
                Finding.UNRECORDED,
                "the audit log",
                f"is empty while {len(decisions or ())} decision record(s) and "
                f"{len(candidates)} candidate(s) exist: nothing was checked; run "
                "`groundstream audit record` (`worker all` runs it)",
            )
        )
    if decisions:
        found, notes = verify_coverage(entries, decisions, grace=grace)
        problems += found + verify_signatures(decisions)
    count = 0
    for located in entries:
        count += 1
        if not _well_formed(located.entry):
            problems.append(Problem(Finding.ALTERED, located.where, "not an audit entry"))
            continue
        chains[str(located.entry["chain"])].append(located)
    for chain, chained in chains.items():
        head = None if heads is None else heads.get(chain)
        problems += verify_chain_entries(chain, chained, key, anchored=anchored, head=head)
    if heads is not None and anchored:
        for chain in sorted(set(heads) - set(chains)):
            problems.append(
                Problem(
                    Finding.REMOVED,
                    f"chain {chain} #1..#{heads[chain].seq}",
                    "the whole chain is gone from the log",
                )
            )
    records = [(e.entry["record"], e.where) for c in chains.values() for e in c]
    trail_problems, trail_notes = verify_trails(records, candidates, grace=grace)
    return AuditReport(
        chains=len(chains),
        entries=count,
        candidates=len(candidates),
        problems=(*problems, *trail_problems),
        notes=(*notes, *trail_notes),
    )
