"""Loaders for labelled data files: each answer becomes a candidate with a grounded label.

Calibration, `eval` and benchmarks read labelled files by path (the project never ships
them) and turn every labelled answer into a candidate message exactly as a producer
would send it, plus its label. The format is detected from the first record's keys:

* ``halueval_qa`` (``knowledge``, ``question``, ``right_answer``, ``hallucinated_answer``):
  two candidates per record, the knowledge as context.
* ``halueval_general`` (``ID``, ``user_query``, ``chatgpt_response``, ``hallucination``
  yes/no): one candidate, no context.
* ``candidates`` (``id``, ``question``, ``response``, ``metadata`` with ``label`` right /
  hallucinated, as RAGTruth is packaged): one candidate, kept as given.
* ``reference_pairs`` (CSV ``id``, ``domain``, ``question``, ``grounded_response``,
  ``fabricated_response``): two candidates, no context.

JSON lines (or one JSON array) and CSV with a header are read; the first non-blank
character decides (``{`` or ``[`` → JSON). Every candidate has ``id``, ``session_id`` (its
own id unless the record gives one: each labelled answer is a separate one-turn session),
``turn``, ``initiator`` (``"user"``), ``question``, ``response``, ``context`` when there is
one, and ``metadata``
with ``label`` (``"right"`` / ``"hallucinated"``), ``dataset`` and ``group_id`` (answers
that share a question or context share it). Ids are stable: they derive from the record's
own id or its 0-based position in the file, so a rerun gives the same ids.

Failure posture: an unknown format raises `DataFileError` (a `ValueError`) naming the keys
found; a record that is not JSON or not text, with a missing field, an unknown label, or a
duplicate candidate id raises `DataFileError`
naming the record. Nothing is silently skipped. Empty texts are passed on as they are:
the pipeline decides what to do with bad input.
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from pipeline.errors import DataFileError

__all__ = [
    "DatasetFormat",
    "LabelledCandidate",
    "detect_format",
    "file_sha256",
    "load_labelled",
]

LABEL_RIGHT = "right"
LABEL_HALLUCINATED = "hallucinated"


class DatasetFormat(StrEnum):
    """The labelled-data layouts `load_labelled` understands."""

    HALUEVAL_QA = "halueval_qa"
    HALUEVAL_GENERAL = "halueval_general"
    CANDIDATES = "candidates"
    REFERENCE_PAIRS = "reference_pairs"


_SIGNATURES: tuple[tuple[DatasetFormat, frozenset[str]], ...] = (
    (
        DatasetFormat.HALUEVAL_QA,
        frozenset({"knowledge", "question", "right_answer", "hallucinated_answer"}),
    ),
    (
        DatasetFormat.HALUEVAL_GENERAL,
        frozenset({"ID", "user_query", "chatgpt_response", "hallucination"}),
    ),
    (DatasetFormat.CANDIDATES, frozenset({"id", "question", "response", "metadata"})),
    (
        DatasetFormat.REFERENCE_PAIRS,
        frozenset({"id", "domain", "question", "grounded_response", "fabricated_response"}),
    ),
)


@dataclass(frozen=True, slots=True)
class LabelledCandidate:
    """One candidate message and whether its answer is grounded (the ground truth)."""

    candidate: dict[str, Any]
    grounded: bool

    @property
    def id(self) -> str:
        """The candidate id."""
        return str(self.candidate["id"])


def file_sha256(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes, read in chunks (for recording what was fitted on)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def detect_format(record: Mapping[str, Any]) -> DatasetFormat:
    """The format whose required keys the record has.

    Raises:
        DataFileError: no format matches; the message lists the keys found.
    """
    keys = set(record)
    for fmt, required in _SIGNATURES:
        if required <= keys:
            return fmt
    known = "; ".join(f"{fmt.value}: {', '.join(sorted(req))}" for fmt, req in _SIGNATURES)
    raise DataFileError(
        f"unknown labelled-data format: first record has keys {sorted(keys)}; known formats: "
        f"{known}"
    )


def _read_records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(0-based record index, record) from JSON lines, a JSON array or a CSV with header."""
    try:
        yield from _parse_records(path)
    except UnicodeDecodeError as exc:
        raise DataFileError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    except (json.JSONDecodeError, csv.Error) as exc:
        raise DataFileError(f"{path}: invalid JSON or CSV: {exc}") from exc


def _parse_records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with path.open("r", encoding="utf-8", newline="") as handle:
        head = handle.read(4096).lstrip()
        handle.seek(0)
        if head.startswith("["):
            data = json.load(handle)
            if not isinstance(data, list):
                raise DataFileError(f"{path}: expected a JSON array of records")
            for i, record in enumerate(data):
                yield i, _as_record(record, path, i)
        elif head.startswith("{"):
            index = 0
            for line_no, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DataFileError(f"{path}:{line_no}: invalid JSON: {exc}") from exc
                yield index, _as_record(record, path, index)
                index += 1
        else:
            for i, row in enumerate(csv.DictReader(handle)):
                yield i, dict(row)


def _as_record(record: object, path: Path, index: int) -> dict[str, Any]:
    if not isinstance(record, dict):
        raise DataFileError(f"{path}: record {index} is not a JSON object")
    return record


def _field(record: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in record or record[key] is None:
        raise DataFileError(f"{where}: missing field {key!r}")
    return record[key]


def _candidate(
    cid: str,
    question: str,
    response: str,
    label: str,
    dataset: str,
    group_id: str,
    context: Any = None,
    **extra: Any,
) -> LabelledCandidate:
    candidate: dict[str, Any] = {
        "id": cid,
        "session_id": cid,
        "turn": 1,
        "initiator": "user",
        "question": question,
        "response": response,
    }
    if context is not None:
        candidate["context"] = context
    candidate["metadata"] = {"label": label, "dataset": dataset, "group_id": group_id, **extra}
    return LabelledCandidate(candidate, label == LABEL_RIGHT)


def _halueval_qa(i: int, record: Mapping[str, Any], where: str) -> list[LabelledCandidate]:
    question = _field(record, "question", where)
    knowledge = _field(record, "knowledge", where)
    group = f"halueval-qa-{i}"
    return [
        _candidate(
            f"{group}-{suffix}",
            question,
            _field(record, key, where),
            label,
            "halueval_qa",
            group,
            context=knowledge,
        )
        for suffix, key, label in (
            ("right", "right_answer", LABEL_RIGHT),
            ("hallucinated", "hallucinated_answer", LABEL_HALLUCINATED),
        )
    ]


def _halueval_general(i: int, record: Mapping[str, Any], where: str) -> list[LabelledCandidate]:
    verdict = str(_field(record, "hallucination", where)).strip().lower()
    if verdict not in {"yes", "no"}:
        raise DataFileError(f"{where}: hallucination must be 'yes' or 'no', got {verdict!r}")
    source_id = str(_field(record, "ID", where))
    cid = f"halueval-general-{source_id}"
    return [
        _candidate(
            cid,
            _field(record, "user_query", where),
            _field(record, "chatgpt_response", where),
            LABEL_HALLUCINATED if verdict == "yes" else LABEL_RIGHT,
            "halueval_general",
            cid,
            source_id=source_id,
        )
    ]


def _candidates(i: int, record: Mapping[str, Any], where: str) -> list[LabelledCandidate]:
    metadata = _field(record, "metadata", where)
    if not isinstance(metadata, Mapping):
        raise DataFileError(f"{where}: metadata must be an object")
    label = metadata.get("label")
    if label not in (LABEL_RIGHT, LABEL_HALLUCINATED):
        raise DataFileError(
            f"{where}: metadata.label must be {LABEL_RIGHT!r} or {LABEL_HALLUCINATED!r}, "
            f"got {label!r}"
        )
    candidate = dict(record)
    cid = str(_field(record, "id", where))
    candidate["id"] = cid
    candidate.setdefault("session_id", cid)
    candidate.setdefault("turn", 1)
    candidate.setdefault("initiator", "user")
    meta = dict(metadata)
    meta.setdefault("dataset", meta.get("source") or "candidates")
    meta.setdefault("group_id", cid)
    candidate["metadata"] = meta
    return [LabelledCandidate(candidate, label == LABEL_RIGHT)]


def _reference_pairs(i: int, record: Mapping[str, Any], where: str) -> list[LabelledCandidate]:
    source_id = str(_field(record, "id", where))
    question = _field(record, "question", where)
    domain = _field(record, "domain", where)
    group = f"groundlens-ref-{source_id}"
    return [
        _candidate(
            f"{group}-{suffix}",
            question,
            _field(record, key, where),
            label,
            "groundlens_reference_pairs",
            group,
            domain=domain,
            source_id=source_id,
        )
        for suffix, key, label in (
            ("grounded", "grounded_response", LABEL_RIGHT),
            ("fabricated", "fabricated_response", LABEL_HALLUCINATED),
        )
    ]


_CONVERTERS = {
    DatasetFormat.HALUEVAL_QA: _halueval_qa,
    DatasetFormat.HALUEVAL_GENERAL: _halueval_general,
    DatasetFormat.CANDIDATES: _candidates,
    DatasetFormat.REFERENCE_PAIRS: _reference_pairs,
}


def load_labelled(
    path: str | Path,
    *,
    limit: int | None = None,
    skip: int = 0,
    fmt: DatasetFormat | None = None,
) -> list[LabelledCandidate]:
    """Read a labelled data file into candidates with labels, in file order.

    Args:
        path: the data file (JSON lines, JSON array or CSV with header).
        limit: read at most this many *source records*; formats with two answers per
            record (HaluEval QA, reference pairs) give up to twice as many candidates.
            ``None`` reads everything.
        skip: leave out the first this many source records (for a held-out split: fit on
            ``limit=N``, evaluate on ``skip=N``).
        fmt: skip detection and read the file as this format.

    Raises:
        DataFileError: unknown format (keys named), a malformed record or a duplicate id.
        ValueError: a negative ``limit`` or ``skip``.
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be None or >= 0, got {limit}")
    if skip < 0:
        raise ValueError(f"skip must be >= 0, got {skip}")
    path = Path(path)
    out: list[LabelledCandidate] = []
    seen: set[str] = set()
    converter = _CONVERTERS[fmt] if fmt is not None else None
    for i, record in _read_records(path):
        if limit is not None and i >= skip + limit:
            break
        if converter is None:
            converter = _CONVERTERS[detect_format(record)]
        if i < skip:
            continue
        for item in converter(i, record, f"{path.name} record {i}"):
            if item.id in seen:
                raise DataFileError(f"{path.name} record {i}: duplicate candidate id {item.id!r}")
            seen.add(item.id)
            out.append(item)
    return out
