"""Reader directories: what `groundstream reader export` writes, and the one slot that
serves any reader (GROUNDSTREAM_READER, `--reader DIR`).

Why it exists
    The readers users already trust are published checkpoints: NLI cross-encoders and
    MiniCheck-style support classifiers (pair classifiers: sequence classification over
    (evidence, claim)) and LettuceDetect-style detectors (token classifiers: the tokens of
    an answer marked unsupported given its context). Exported once to ONNX, each is served
    here without torch and gives the grounding model the same feature as the reader
    trained here: each claim's P(supported), the weakest claim's the answer's
    (`pipeline.scores.grounding.CLAIM_READER`).

The directory
    ``model.onnx`` (fp32: a row's score is the same whatever batch it is read in),
    ``tokenizer.json`` and ``reader.json``: ``format`` (``FORMAT``), ``kind`` (``pair`` or
    ``token``), the ``architecture`` (the checkpoint's ``model_type``), its ``labels`` in
    output order and ``target``, the index of the label read (``supported`` for a pair
    classifier, ``unsupported`` for a token classifier), ``order`` (which text comes
    first), ``max_tokens``, the graph's ``inputs``, ``pad_id``, and the sha256 of every
    ``source`` checkpoint file read and every ``files`` entry written. A directory that
    ``groundstream train claims`` wrote (``reader.onnx``, a ``reader.json`` without
    ``format``) is served as before (:mod:`pipeline.claims.reader`).

Failure posture
    Reading a directory checks every hash of ``reader.json`` against its file and raises
    :class:`ReaderError` naming the first that differs, a missing file, or a spec it cannot
    serve; nothing is loaded from a directory that fails. Mapping labels is pure: a label
    set with no single supported (or unsupported) label is refused naming the labels found.
    ONNX Runtime is loaded only by `pipeline.claims.classifiers.load_reader`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pipeline.claims.units import ClaimSupport
from pipeline.errors import ReaderError

__all__ = [
    "ARCHITECTURES",
    "FORMAT",
    "META_FILE",
    "MODEL_FILE",
    "READER_ENV",
    "TOKENIZER_FILE",
    "AnswerReader",
    "ReaderKind",
    "ReaderSpec",
    "check_reader_dir",
    "file_sha256",
    "kind_of",
    "map_labels",
    "read_json_object",
    "reader_identity",
    "reader_name",
]

FORMAT = "groundstream-reader/1"
MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
META_FILE = "reader.json"
READER_ENV = "GROUNDSTREAM_READER"
TRAINED_MODEL_FILE = "reader.onnx"
"""What `groundstream train claims` writes instead of ``MODEL_FILE``."""

ARCHITECTURES = ("bert", "roberta", "deberta-v2", "modernbert")
"""The checkpoints' ``model_type`` values exported and tested here."""


class ReaderKind(StrEnum):
    """How a reader reads: a pair classifier reads (evidence, claim); a token classifier
    reads (context, answer) and marks the answer's unsupported tokens."""

    PAIR = "pair"
    TOKEN = "token"


_KIND_SUFFIX = {
    "ForSequenceClassification": ReaderKind.PAIR,
    "ForTokenClassification": ReaderKind.TOKEN,
}

_SUPPORTED = frozenset(
    {
        "entailment", "entailed", "entails", "entail", "supported", "support", "supports",
        "grounded", "faithful", "consistent", "factual", "attributable",
    }
)  # fmt: skip
_UNSUPPORTED = frozenset(
    {
        "hallucinated", "hallucination", "unsupported", "notsupported", "ungrounded",
        "unfaithful", "inconsistent", "nonfactual", "notfactual", "notattributable",
    }
)  # fmt: skip
"""Label names (lower case, letters and digits only) that say which output is read."""


def _norm(label: str) -> str:
    return re.sub(r"[^a-z0-9]", "", label.lower())


def kind_of(architectures: Sequence[str] | None) -> ReaderKind:
    """The reader kind of a checkpoint's ``config.architectures``."""
    for name in architectures or ():
        for suffix, kind in _KIND_SUFFIX.items():
            if str(name).endswith(suffix):
                return kind
    raise ReaderError(
        f"architecture {list(architectures or [])} is neither a sequence classifier "
        "(a pair reader) nor a token classifier (a token reader)"
    )


def _ordered_labels(id2label: Mapping[object, object]) -> tuple[str, ...]:
    try:
        by_index = {int(str(k)): str(v) for k, v in id2label.items()}
    except ValueError:
        raise ReaderError(f"id2label keys are not output indexes: {dict(id2label)}") from None
    if sorted(by_index) != list(range(len(by_index))):
        raise ReaderError(f"id2label does not number the outputs 0..n-1: {by_index}")
    return tuple(by_index[i] for i in range(len(by_index)))


def map_labels(
    id2label: Mapping[object, object], kind: ReaderKind, named: str | None = None
) -> tuple[tuple[str, ...], int]:
    """(labels in output order, index of the label read): ``supported`` for a pair
    classifier (entailment, supported, … or ``1`` of the binary ``0``/``1``), ``unsupported``
    for a token classifier (hallucinated, unsupported, …). Names are compared in lower case
    with punctuation dropped; `named` (``reader export --label``) picks a label by its
    exact name instead. Anything else is refused naming the labels found."""
    labels = _ordered_labels(id2label)
    wanted = "supported" if kind is ReaderKind.PAIR else "unsupported"
    if len(labels) < 2:
        raise ReaderError(
            f"{len(labels)} output {list(labels)}: a reader needs two or more labelled "
            "classes, one of them the one read"
        )
    if named is not None:
        found = [i for i, label in enumerate(labels) if label == named]
        if len(found) != 1:
            raise ReaderError(f"no label {named!r} among the labels found: {list(labels)}")
        return labels, found[0]
    names = {_norm(label) for label in labels}
    if kind is ReaderKind.PAIR and names == {"0", "1"}:
        return labels, [_norm(label) for label in labels].index("1")
    vocabulary = _SUPPORTED if kind is ReaderKind.PAIR else _UNSUPPORTED
    found = [i for i, label in enumerate(labels) if _norm(label) in vocabulary]
    if len(found) != 1:
        raise ReaderError(
            f"cannot tell which output is {wanted} from the labels found: {list(labels)} "
            "(name it with --label LABEL)"
        )
    return labels, found[0]


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True, slots=True)
class ReaderSpec:
    """A reader directory's ``reader.json``, validated (see the module docstring)."""

    kind: ReaderKind
    architecture: str
    labels: tuple[str, ...]
    target: int
    order: tuple[str, str]
    max_tokens: int
    inputs: tuple[str, ...]
    pad_id: int
    files: tuple[tuple[str, str], ...]
    source: tuple[tuple[str, str], ...]

    @property
    def name(self) -> str:
        """What decision records and policies call this reader: kind, architecture and the
        graph's digest."""
        return f"{self.kind.value}:{self.architecture}:{dict(self.files)[MODEL_FILE][:12]}"

    @classmethod
    def from_mapping(cls, data: Mapping[str, object], where: str) -> ReaderSpec:
        try:
            kind = ReaderKind(str(data["kind"]))
            labels = tuple(str(x) for x in data["labels"])  # type: ignore[attr-defined]
            target = int(data["target"])  # type: ignore[call-overload]
            order = tuple(str(x) for x in data["order"])  # type: ignore[attr-defined]
            spec = cls(
                kind,
                str(data["architecture"]),
                labels,
                target,
                (order[0], order[1]),
                int(data["max_tokens"]),  # type: ignore[call-overload]
                tuple(str(x) for x in data["inputs"]),  # type: ignore[attr-defined]
                int(data.get("pad_id", 0)),  # type: ignore[call-overload]
                tuple((str(k), str(v)) for k, v in dict(data["files"]).items()),  # type: ignore[call-overload]
                tuple((str(k), str(v)) for k, v in dict(data.get("source", {})).items()),  # type: ignore[call-overload]
            )
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise ReaderError(f"{where}: not a reader spec ({type(exc).__name__}: {exc})") from None
        expected_order = ("evidence", "claim") if kind is ReaderKind.PAIR else ("context", "answer")
        if sorted(spec.order) != sorted(expected_order):
            raise ReaderError(f"{where}: order {list(spec.order)} is not of {expected_order}")
        if not 0 <= spec.target < len(spec.labels) or spec.max_tokens < 8:
            raise ReaderError(
                f"{where}: target {spec.target} or max_tokens {spec.max_tokens} out of range"
            )
        if {MODEL_FILE, TOKENIZER_FILE} - set(dict(spec.files)):
            raise ReaderError(f"{where}: files must name {MODEL_FILE} and {TOKENIZER_FILE}")
        return spec

    def to_dict(self) -> dict[str, object]:
        return {
            "format": FORMAT,
            "kind": self.kind.value,
            "architecture": self.architecture,
            "labels": list(self.labels),
            "target": self.target,
            "order": list(self.order),
            "max_tokens": self.max_tokens,
            "inputs": list(self.inputs),
            "pad_id": self.pad_id,
            "files": dict(self.files),
            "source": dict(self.source),
        }


def read_json_object(path: Path, missing: str) -> dict:
    """The JSON object in `path` (a reader's ``reader.json``, a checkpoint's ``config.json``);
    else a `ReaderError` naming the file: `missing` says what its absence means."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ReaderError(f"{path}: missing ({missing})") from None
    except (OSError, ValueError) as exc:
        raise ReaderError(f"{path}: unreadable ({exc})") from None
    if not isinstance(data, dict):
        raise ReaderError(f"{path}: not a JSON object")
    return data


def _read_meta(directory: Path) -> dict:
    if not directory.is_dir():
        raise ReaderError(f"{directory}: no such reader directory")
    return read_json_object(directory / META_FILE, "not a reader directory")


def _check_hash(path: Path, expected: str) -> None:
    if not path.is_file():
        raise ReaderError(f"{path}: missing (named in {META_FILE})")
    found = _cached_sha256(str(path), path.stat().st_size, path.stat().st_mtime_ns)
    if found != expected:
        raise ReaderError(
            f"{path}: sha256 {found[:12]}… does not match {META_FILE}'s {expected[:12]}…"
        )


@lru_cache(maxsize=16)
def _cached_sha256(path: str, size: int, mtime_ns: int) -> str:
    """A file's digest, once per process while its size and time stay the same."""
    return file_sha256(Path(path))


def check_reader_dir(directory: str | Path) -> ReaderSpec | None:
    """Validate a reader directory: every hash of its ``reader.json`` matches its file.
    The spec of an exported reader; None for one `groundstream train claims` wrote (its
    ``onnx_sha256``, when recorded, is checked too). Raises :class:`ReaderError`."""
    path = Path(directory)
    data = _read_meta(path)
    if "format" not in data:
        model = path / TRAINED_MODEL_FILE
        if not model.is_file():
            raise ReaderError(f"{path / META_FILE}: names no format, and {model} is missing")
        if "onnx_sha256" in data:
            _check_hash(model, str(data["onnx_sha256"]))
        return None
    if data["format"] != FORMAT:
        raise ReaderError(f"{path / META_FILE}: format {data['format']!r}, expected {FORMAT!r}")
    spec = ReaderSpec.from_mapping(data, str(path / META_FILE))
    for name, digest in spec.files:
        _check_hash(path / name, digest)
    return spec


def reader_name(directory: str | Path) -> str:
    """The name of the reader in `directory` (validated): the spec's, or ``trained:`` and
    the digest of a reader trained here."""
    spec = check_reader_dir(directory)
    if spec is not None:
        return spec.name
    data = _read_meta(Path(directory))
    digest = str(data.get("onnx_sha256", "")) or file_sha256(Path(directory) / TRAINED_MODEL_FILE)
    return f"trained:{digest[:12]}"


def reader_identity(directory: str | Path) -> dict[str, Any]:
    """What a policy fitted with the reader in `directory` (validated) records of it: its
    ``name`` (as decision records give it), ``kind`` (``pair``, ``token``, or ``trained`` for
    one `groundstream train claims` wrote), the sha256 of each of its ``files`` as its
    ``reader.json`` lists them, and ``digest``: the sha256 of the whole ``reader.json``
    (labels, the label read, order, maximum length and those hashes) in canonical form,
    which is what start-up compares (`pipeline.scores.grounding.served_reader_problem`)."""
    path = Path(directory)
    spec = check_reader_dir(path)
    if spec is None:
        data = _read_meta(path)
        model = str(data.get("onnx_sha256", "")) or file_sha256(path / TRAINED_MODEL_FILE)
        canonical: dict[str, Any] = {**data, "onnx_sha256": model}
        name, kind, files = f"trained:{model[:12]}", "trained", {TRAINED_MODEL_FILE: model}
    else:
        canonical, name, kind, files = spec.to_dict(), spec.name, spec.kind.value, dict(spec.files)
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return {"name": name, "kind": kind, "digest": digest, "files": files}


@runtime_checkable
class AnswerReader(Protocol):
    """A reader that reads whole answers against their context (a token classifier), rather
    than (claim, evidence) pairs: one call for a batch of (context chunks, answer)."""

    name: str

    def read_answers(self, items: Sequence[tuple[Sequence[str], str]]) -> list[ClaimSupport]: ...
