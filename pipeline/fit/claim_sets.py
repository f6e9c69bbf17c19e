"""The shared labelled claim sets as (claim, evidence, label) pairs for the claim reader.

Why it exists
    ``groundstream train claims`` pretrains its cross-encoder on thirteen public
    claim–source sets (``../shared/data/claims``: TabFact, InfoTabs, e-SNLI, TaxiNLI,
    counterfactual SNLI, SummEdits, FRANK, BUMP, XSumFaith, WiCE, FaithDial,
    FEVER-Symmetric). Each set has its own shape; this module turns every line into what
    the stage will score at serving time — a claim against the evidence its best windows
    give — so the reader learns on the inputs it will see.

Evidence
    The premise is read as a context (:func:`pipeline.claims.units.context_statements`: prose
    sentences, or ``"path: value"`` for a JSON premise such as InfoTabs' infobox), cut
    into the stage's windows, and the claim's ``DEFAULT_CANDIDATES`` best windows by the
    lexical ranking are joined in context order — exactly how the claim stage builds a
    claim's evidence. A TabFact table becomes one statement per row
    (``"row 3: year = 2008; venue = beijing"``) under its caption.

Splits
    Each set's own test split (or, for sets published as one split, a fifth of its
    sources by hash) is held out for the figures; a training pair whose source (table id,
    article, premise) also appears held out is dropped, so no source is both trained and
    scored.

Failure posture
    Pure but for reading the files. A line without its fields, or with a label this
    module does not know, raises ``ValueError`` naming the file and line.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.claims.units import DEFAULT_CANDIDATES, rank_windows, split_windows

__all__ = ["CLAIM_SETS", "ClaimPair", "evidence_for", "load_claim_sets", "table_context"]

SUPPORTED_LABELS = frozenset({"entailment", "supported"})
UNSUPPORTED_LABELS = frozenset(
    {
        "contradiction",
        "neutral",
        "not_entailment",
        "hallucination",
        "partial_hallucination",
        "partially_supported",
        "not_supported",
    }
)
LEFT_OUT_LABELS = frozenset({"generic", "uncooperative"})
"""FaithDial's replies that neither follow nor contradict their knowledge."""


@dataclass(frozen=True, slots=True)
class _SetSpec:
    file: str
    held_out: frozenset[str]
    """The set's own splits kept for the figures; empty: a fifth of its groups by hash."""
    group_field: str | None = None
    """The field naming a line's source; None: the premise text."""


CLAIM_SETS: dict[str, _SetSpec] = {
    "tabfact": _SetSpec("tabfact_statements.jsonl.gz", frozenset({"test"}), "table_id"),
    "infotabs": _SetSpec(
        "infotabs.jsonl.gz", frozenset({"test_alpha1", "test_alpha2", "test_alpha3"}), "table_id"
    ),
    "esnli": _SetSpec("esnli_devtest.jsonl.gz", frozenset({"test"})),
    "cad_snli": _SetSpec("cad_snli.jsonl.gz", frozenset({"test"})),
    "taxinli": _SetSpec("taxinli_mnli_dev.jsonl.gz", frozenset()),
    "summedits": _SetSpec("summedits.jsonl.gz", frozenset({"test"})),
    "wice": _SetSpec("wice.jsonl.gz", frozenset({"test"})),
    "frank": _SetSpec("frank_rebuilt.jsonl.gz", frozenset({"test"}), "hash"),
    "bump": _SetSpec("bump.jsonl.gz", frozenset(), "pair_id"),
    "faithdial": _SetSpec("faithdial_audit.jsonl.gz", frozenset()),
    "fever_symmetric": _SetSpec("fever_symmetric.jsonl.gz", frozenset({"test"})),
    "xsumfaith": _SetSpec("xsumfaith_partial.jsonl.gz", frozenset(), "bbcid"),
}
"""Every set the reader pretrains on, by short name."""

TABLES_FILE = "tabfact_tables.jsonl.gz"
HASH_HELD_OUT = 5
"""For a set published as one split: one group in this many is held out."""


@dataclass(frozen=True, slots=True)
class ClaimPair:
    """One claim against its evidence, as the stage will score it."""

    claim: str
    evidence: str
    label: int
    """1 supported, 0 not."""
    name: str
    """The set's short name (``CLAIM_SETS``)."""
    group: str
    held_out: bool


def evidence_for(claim: str, context: str | Sequence[str], k: int = DEFAULT_CANDIDATES) -> str:
    """The claim's ``k`` best windows of ``context`` by the lexical ranking, joined in
    context order: what the claim stage hands the reader. Empty for an empty context."""
    windows = split_windows(context)
    if not windows:
        return ""
    (best,) = rank_windows([claim], [w.text for w in windows], k=k)
    chosen = sorted((windows[i] for i in best), key=lambda w: (w.chunk, w.first))
    return " ".join(w.text for w in chosen)


def table_context(table: dict, caption: str = "") -> str:
    """A table as a JSON context whose statements are its caption and one line per row."""
    header = [str(h) for h in table["header"]]
    fields: dict[str, str] = {}
    if caption:
        fields["caption"] = caption
    for n, row in enumerate(table["rows"], start=1):
        cells = (f"{h} = {v}" for h, v in zip(header, row, strict=False) if str(v).strip())
        fields[f"row {n}"] = "; ".join(cells)
    return json.dumps(fields, ensure_ascii=False)


def _lines(path: Path) -> Iterator[tuple[int, dict]]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        for n, line in enumerate(handle, start=1):
            if line.strip():
                yield n, json.loads(line)


def _hash_held_out(group: str) -> bool:
    return int(hashlib.sha256(group.encode()).hexdigest()[:8], 16) % HASH_HELD_OUT == 0


def _label(raw: object, where: str) -> int | None:
    if raw in SUPPORTED_LABELS:
        return 1
    if raw in UNSUPPORTED_LABELS:
        return 0
    if raw in LEFT_OUT_LABELS:
        return None
    raise ValueError(f"{where}: unknown label {raw!r}")


def _read_set(directory: Path, name: str, spec: _SetSpec, tables: dict | None) -> list[ClaimPair]:
    raw: list[tuple[str, str | Sequence[str], int, str, bool]] = []
    for n, line in _lines(directory / spec.file):
        where = f"{spec.file}:{n}"
        try:
            claim = str(line["hypothesis"])
            label = _label(line["label"], where)
            split = str(line.get("split", ""))
            if name == "tabfact":
                table = (tables or {})[line["table_id"]]
                context: str | Sequence[str] = table_context(table, line.get("caption") or "")
            else:
                context = str(line["premise"])
        except KeyError as exc:
            raise ValueError(f"{where}: missing field {exc}") from None
        if label is None or not claim.strip():
            continue
        group = str(line[spec.group_field]) if spec.group_field else str(context)
        group = hashlib.blake2b(f"{name}:{group}".encode(), digest_size=8).hexdigest()
        held = split in spec.held_out if spec.held_out else _hash_held_out(group)
        raw.append((claim, context, label, group, held))
    held_groups = {g for *_, g, h in raw if h}
    # TabFact's minimal refuting rewrites repeat a few val/test statements: drop those too.
    held_claims = {c for c, *_, h in raw if h} if name == "tabfact" else set()
    return [
        ClaimPair(claim, evidence_for(claim, context), label, name, group, held)
        for claim, context, label, group, held in raw
        if held or (group not in held_groups and claim not in held_claims)
    ]


def load_claim_sets(directory: Path, names: Sequence[str] | None = None) -> list[ClaimPair]:
    """Every pair of the named sets (all by default) found in ``directory``."""
    chosen = list(names or CLAIM_SETS)
    unknown = [n for n in chosen if n not in CLAIM_SETS]
    if unknown:
        raise ValueError(f"unknown claim set(s) {unknown}; known: {sorted(CLAIM_SETS)}")
    tables = None
    if "tabfact" in chosen:
        tables = {t["table_id"]: t for _, t in _lines(directory / TABLES_FILE)}
    pairs: list[ClaimPair] = []
    for name in chosen:
        pairs.extend(_read_set(directory, name, CLAIM_SETS[name], tables))
    return pairs
