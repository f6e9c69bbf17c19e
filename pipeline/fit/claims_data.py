"""Training and evaluation examples for the claim-support model (`groundstream train`).

Why it exists
    The claim-support model must learn what a claim says against its source, not how
    extractive it looks. Its examples therefore come from four places, each teaching one
    thing, and one more place that only tests it:

    * RAGTruth span labels (:func:`ragtruth_examples`): real RAG answers; a claim that
      overlaps a human-marked unsupported span is unsupported, the others are supported.
    * BEGIN (:func:`begin_examples`): conversational replies against a knowledge snippet,
      often abstractive — attributable paraphrases the lexical view misreads.
    * Synthetic pairs from any prose context (:func:`synthetic_examples`, the FactCC
      recipe): a source sentence with a number, a negation, a name swapped for another of
      the same document or a qualifier added is unsupported; the sentence lightly reworded
      (clauses reordered, "X is Y" turned round, an assistant's wrapper) is supported.
    * JSON contexts (:func:`json_examples`): field statements, a value given for the wrong
      key, a number off, a field that is not there.
    * Reviewed answers (:func:`reviewed_examples`): the verdicts a project's own reviewers
      gave (`groundstream review export`), so a person's verdict trains the head too.
    * HaluEval QA, rephrased (:func:`halueval_examples`, :func:`rephrase`): right and
      hallucinated answers as given and as an assistant writes them. Evaluation only: it
      shows whether phrasing decides.

    Every example keeps its ``group`` (the context it was drawn from), so cross-validation
    never scores a context it trained on. Synthetic examples take their source's group.

Failure posture
    Readers raise ``DataFileError`` (a ``ValueError``) naming the record when a field is
    missing or a label is unknown. Generators are deterministic given their ``seed``.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.claims.units import context_statements, split_claims, strip_lead_in
from pipeline.encoding.chunks import context_chunks
from pipeline.errors import DataFileError

__all__ = [
    "REPHRASE_STYLES",
    "ClaimExample",
    "begin_examples",
    "begin_group",
    "halueval_examples",
    "json_examples",
    "ragtruth_examples",
    "ragtruth_group",
    "rephrase",
    "rephrase_as_assistant",
    "reviewed_examples",
    "synthetic_examples",
]

SUPPORTED = 1
UNSUPPORTED = 0

REPHRASE_STYLES = ("given", "based_on", "is_the_answer", "its")
"""How an answer is written for the phrasing check: as given, "Based on the passage, the
answer is X.", "X is the answer.", "It's X."."""


@dataclass(frozen=True, slots=True)
class ClaimExample:
    """One answer (or one synthetic claim) with its context and labels.

    ``claim_labels`` follows ``claims`` (1 supported, 0 not); ``label`` is the answer's
    (1 when every claim is supported). ``kind`` is the task (QA, Summary, Data2txt), the
    BEGIN source, the synthetic recipe, or the rephrasing style.
    """

    source: str
    group: str
    kind: str
    context: tuple[str, ...]
    claims: tuple[str, ...]
    claim_labels: tuple[int, ...]
    label: int


def _records(path: Path) -> Iterator[dict]:
    try:
        with path.open(encoding="utf-8") as handle:
            for n, line in enumerate(handle):
                if line.strip():
                    try:
                        record = json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise DataFileError(f"{path}:{n + 1}: invalid JSON: {exc}") from None
                    if not isinstance(record, dict):
                        raise DataFileError(f"{path}:{n + 1}: not a JSON object")
                    yield record
    except UnicodeDecodeError as exc:
        raise DataFileError(f"{path}: not UTF-8 text ({exc.reason})") from None


def _label(record: dict, where: str) -> int:
    label = record.get("metadata", {}).get("label")
    if label not in ("right", "hallucinated"):
        raise DataFileError(f"{where}: unknown label {label!r}")
    return SUPPORTED if label == "right" else UNSUPPORTED


def _span_ranges(response: str, spans: Sequence[str]) -> list[tuple[int, int]]:
    """Where the marked spans lie in the response (exact text, else its first 40 chars)."""
    out: list[tuple[int, int]] = []
    for span in spans:
        text = span.strip()
        at = response.find(text)
        if at < 0 and len(text) > 40:
            at = response.find(text[:40])
        if at >= 0:
            out.append((at, at + len(text)))
    return out


def ragtruth_group(record: dict) -> str:
    """A RAGTruth answer's group: its source (answers to one source share it)."""
    return str(record.get("metadata", {}).get("group_id", record["id"]))


def begin_group(record: dict) -> str:
    """A BEGIN reply's group: its knowledge snippet."""
    return "begin:" + context_chunks(record["context"])[0][:80]


def ragtruth_examples(path: Path) -> list[ClaimExample]:
    """One example per RAGTruth answer: claims overlapping a marked span are unsupported.

    A hallucinated answer whose spans cannot be located in its text keeps its answer label
    but no claim labels (all claims are marked -1 and skipped in training)."""
    out: list[ClaimExample] = []
    for n, record in enumerate(_records(path)):
        where = f"{path.name}:{n + 1}"
        meta = record.get("metadata", {})
        label = _label(record, where)
        response = record["response"]
        claims = split_claims(response)
        if not claims:
            continue
        ranges = _span_ranges(response, meta.get("spans", []))
        if label == UNSUPPORTED and not ranges:
            labels = tuple(-1 for _ in claims)
        else:
            labels = tuple(
                UNSUPPORTED if any(c.start < b and a < c.end for a, b in ranges) else SUPPORTED
                for c in claims
            )
        out.append(
            ClaimExample(
                "ragtruth",
                ragtruth_group(record),
                str(meta.get("task", "")),
                context_chunks(record["context"]),
                tuple(c.text for c in claims),
                labels,
                label,
            )
        )
    return out


def begin_examples(path: Path) -> list[ClaimExample]:
    """One example per BEGIN reply; an attributable reply's claims are all supported. An
    unattributable reply with several claims labels none of them (which one fails is not
    known) and counts only at the answer level."""
    out: list[ClaimExample] = []
    for n, record in enumerate(_records(path)):
        label = _label(record, f"{path.name}:{n + 1}")
        claims = split_claims(record["response"])
        if not claims:
            continue
        if label == SUPPORTED or len(claims) == 1:
            labels = tuple(label for _ in claims)
        else:
            labels = tuple(-1 for _ in claims)
        context = context_chunks(record["context"])
        out.append(
            ClaimExample(
                "begin",
                begin_group(record),
                str(record.get("metadata", {}).get("data_source", "")),
                context,
                tuple(c.text for c in claims),
                labels,
                label,
            )
        )
    return out


def reviewed_examples(path: Path) -> list[ClaimExample]:
    """One example per reviewed answer (`groundstream review export`: the candidates a person
    accepted or rejected, `metadata.label` right / hallucinated): an accepted answer's claims
    are all supported; a rejected one-claim answer's claim is unsupported; a rejected answer
    with several claims labels none of them (which one failed is not known) and counts only
    at the answer level. Answers without a context are left out: there is nothing to read
    their claims against."""
    out: list[ClaimExample] = []
    for n, record in enumerate(_records(path)):
        label = _label(record, f"{path.name}:{n + 1}")
        context = record.get("context")
        claims = split_claims(str(record.get("response", "")))
        if not context or not claims:
            continue
        if label == SUPPORTED or len(claims) == 1:
            labels = tuple(label for _ in claims)
        else:
            labels = tuple(-1 for _ in claims)
        chunks = context_chunks(context)
        out.append(
            ClaimExample(
                "reviewed",
                "reviewed:" + hashlib.sha256("\n".join(chunks).encode()).hexdigest()[:16],
                str(record.get("metadata", {}).get("task", "") or "reviewed"),
                chunks,
                tuple(c.text for c in claims),
                labels,
                label,
            )
        )
    return out


# ----------------------------------------------------------------------- synthetic prose

_NUMBER_RE = re.compile(r"\b\d[\d,]*(?:\.\d+)?\b")
_NAME_RE = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]+(?:\s+[A-Z][a-z]+)*")
_AUX_RE = re.compile(r"\b(is|are|was|were|has|have|had|will|can|could|would)\b")
_NEGATED_RE = re.compile(r"\b(is|are|was|were|has|have|had|will|can|could|would) not\b")
_COPULA_RE = re.compile(r"^(The [^,;]{3,40}?) (is|was|are|were) ([^,;]{3,60}?)\.?$")
_QUALIFIERS = ("only", "first", "officially", "exclusively", "largely", "briefly")
_WRAPPERS = (
    "Based on the passage, {s}",
    "According to the context, {s}",
    "The passage says that {s}",
    "{S}",
)


def _lower_first(s: str) -> str:
    return s[0].lower() + s[1:] if s[:1].isupper() and not s[1:2].isupper() else s


def _change_number(s: str, rng: random.Random) -> str | None:
    nums = list(_NUMBER_RE.finditer(s))
    if not nums:
        return None
    m = rng.choice(nums)
    raw = m.group(0).replace(",", "")
    try:
        value = float(raw)
    except ValueError:
        return None
    if raw.isdigit() and 1500 <= value <= 2100:  # a year
        new = str(int(value) + rng.choice((-3, -2, -1, 1, 2, 5)))
    elif raw.isdigit():
        new = str(max(int(value) + rng.choice((1, 2, 3, 10)), int(value * rng.choice((2, 3)))))
    else:
        new = f"{value * rng.choice((1.5, 2.0, 0.5)):.{len(raw.split('.')[1])}f}"
    return s[: m.start()] + new + s[m.end() :]


def _negate(s: str) -> str | None:
    m = _NEGATED_RE.search(s)
    if m:
        return s[: m.end(1)] + s[m.end() :]
    m = _AUX_RE.search(s)
    return s[: m.end()] + " not" + s[m.end() :] if m else None


def _swap_name(s: str, names: Sequence[str], rng: random.Random) -> str | None:
    own = [m for m in _NAME_RE.finditer(s)]
    if not own:
        return None
    m = rng.choice(own)
    others = [n for n in names if n != m.group(0) and n not in s]
    if not others:
        return None
    return s[: m.start()] + rng.choice(others) + s[m.end() :]


def _qualify(s: str, rng: random.Random) -> str | None:
    m = _AUX_RE.search(s)
    return s[: m.end()] + " " + rng.choice(_QUALIFIERS) + s[m.end() :] if m else None


def _reword(s: str, rng: random.Random) -> str:
    """A supported rewording: "The X is Y." → "Y is the X.", a leading clause moved to the
    end, or an assistant's wrapper around the sentence."""
    m = _COPULA_RE.match(s.strip())
    if m and rng.random() < 0.5:
        subject, verb, rest = m.groups()
        return f"{rest[0].upper()}{rest[1:]} {verb} {_lower_first(subject)}."
    head, sep, tail = s.partition(", ")
    if sep and 3 <= len(head.split()) <= 8 and len(tail.split()) >= 4 and rng.random() < 0.5:
        tail = tail.rstrip(".")
        return f"{tail[0].upper()}{tail[1:]}, {_lower_first(head)}."
    wrapper = rng.choice(_WRAPPERS)
    return wrapper.format(s=_lower_first(s), S=s)


def synthetic_examples(
    examples: Sequence[ClaimExample], per_context: int = 3, seed: int = 0
) -> list[ClaimExample]:
    """FactCC-style pairs from the prose contexts of ``examples`` (each context once):
    for up to ``per_context`` sentences, a reworded positive and one perturbed negative."""
    rng = random.Random(seed)
    seen: set[tuple[str, ...]] = set()
    out: list[ClaimExample] = []
    for ex in examples:
        if ex.context in seen or ex.kind == "Data2txt":
            continue
        seen.add(ex.context)
        sentences = [s for chunk in context_statements(ex.context) for s in chunk]
        names = sorted({m.group(0) for s in sentences for m in _NAME_RE.finditer(s)})
        usable = [s for s in sentences if 6 <= len(s.split()) <= 45]
        for s in rng.sample(usable, min(per_context, len(usable))):
            out.append(_one(ex, "reworded", s, _reword(s, rng), SUPPORTED))
            recipes = [
                ("number", _change_number(s, rng)),
                ("name", _swap_name(s, names, rng)),
                ("negation", _negate(s)),
                ("qualifier", _qualify(s, rng)),
            ]
            recipes = [(k, t) for k, t in recipes if t and t != s]
            if recipes:
                kind, text = rng.choice(recipes)
                out.append(_one(ex, kind, s, text, UNSUPPORTED))
    return out


def _one(ex: ClaimExample, kind: str, source: str, text: str, label: int) -> ClaimExample:
    del source  # the sentence is in the context; kept as a parameter for readability
    return ClaimExample(
        "synthetic", ex.group, kind, ex.context, (strip_lead_in(text),), (label,), label
    )


# ------------------------------------------------------------------------------- JSON

_ABSENT_FIELDS = ("dress code", "parking fee", "founding year", "delivery radius", "rating")


def json_examples(
    examples: Sequence[ClaimExample], per_context: int = 4, seed: int = 0
) -> list[ClaimExample]:
    """Field-by-field claims from the JSON contexts of ``examples``: a field stated as it
    is (supported), a value stated for the wrong key, a number off, an absent field."""
    rng = random.Random(seed)
    seen: set[tuple[str, ...]] = set()
    out: list[ClaimExample] = []
    for ex in examples:
        if ex.context in seen:
            continue
        seen.add(ex.context)
        fields = [
            tuple(s.split(": ", 1))
            for chunk, parsed in zip(ex.context, context_statements(ex.context), strict=True)
            if chunk.lstrip().startswith(("{", "["))
            for s in parsed
            if ": " in s
        ]
        fields = [f for f in fields if len(f) == 2 and 0 < len(f[1]) <= 80]
        if len(fields) < 3:
            continue
        for key, value in rng.sample(fields, min(per_context, len(fields))):
            out.append(_field(ex, "field", f"The {key} is {value}.", SUPPORTED))
            other = rng.choice([v for k, v in fields if v != value] or [value])
            negatives = [("wrong_key", f"The {key} is {other}.")]
            changed = _change_number(value, rng)
            if changed:
                negatives.append(("number_off", f"The {key} is {changed}."))
            absent = rng.choice(_ABSENT_FIELDS)
            negatives.append(("absent", f"The {absent} is {value}."))
            kind, text = rng.choice(negatives)
            if text != f"The {key} is {value}.":
                out.append(_field(ex, kind, text, UNSUPPORTED))
    return out


def _field(ex: ClaimExample, kind: str, text: str, label: int) -> ClaimExample:
    return ClaimExample("json", ex.group, kind, ex.context, (text,), (label,), label)


# -------------------------------------------------------------------------- HaluEval


def _is_sentence(answer: str) -> bool:
    return len(answer.split()) >= 4 and answer.rstrip().endswith((".", "!"))


def rephrase(answer: str, style: str) -> str:
    """``answer`` written the way an assistant would (see ``REPHRASE_STYLES``). A short
    answer is wrapped whole; one that is already a sentence gets the lead-in only (styles
    that would make it ungrammatical leave it as given)."""
    bare = answer.strip().rstrip(".")
    if style == "given":
        return answer
    if _is_sentence(answer):
        return f"Based on the passage, {_lower_first(answer.strip())}"
    if style == "based_on":
        return f"Based on the passage, the answer is {bare}."
    if style == "is_the_answer":
        return f"{bare} is the answer."
    if style == "its":
        return f"It's {bare}."
    raise ValueError(f"unknown style {style!r}; expected one of {REPHRASE_STYLES}")


ASSISTANT_STYLES = REPHRASE_STYLES[1:]
"""The styles `rephrase_as_assistant` picks from (every one but "given")."""


def rephrase_as_assistant(answer: str, key: str) -> str:
    """``answer`` as an assistant would write it, in a style chosen by a hash of ``key``
    (the candidate id), so a rerun rewrites every answer the same way. An answer that is
    already a sentence is left as given: only short spans are written out.

    `groundstream eval --phrasing assistant` rewrites right and hallucinated answers alike,
    so the evaluation shows whether the gate decides on content or on form."""
    if _is_sentence(answer):
        return answer
    digest = hashlib.sha256(key.encode()).digest()
    return rephrase(answer, ASSISTANT_STYLES[digest[0] % len(ASSISTANT_STYLES)])


def halueval_examples(path: Path) -> list[ClaimExample]:
    """Right and hallucinated HaluEval QA answers in every rephrasing style (``kind`` =
    ``"<style>"``, the label says which answer)."""
    out: list[ClaimExample] = []
    for n, record in enumerate(_records(path)):
        for key in ("knowledge", "right_answer", "hallucinated_answer"):
            if key not in record:
                raise DataFileError(f"{path.name}:{n + 1}: missing {key!r}")
        for style in REPHRASE_STYLES:
            for key, label in (("right_answer", SUPPORTED), ("hallucinated_answer", UNSUPPORTED)):
                claims = split_claims(rephrase(record[key], style))
                if not claims:
                    continue
                out.append(
                    ClaimExample(
                        "halueval",
                        f"halueval:{n}",
                        style,
                        (record["knowledge"],),
                        tuple(c.text for c in claims),
                        tuple(label for _ in claims),
                        label,
                    )
                )
    return out
