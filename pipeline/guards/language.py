"""The language guard: an answer or a source in a language the encoder cannot read is not
accepted on geometry's word.

The default encoder (all-MiniLM-L6-v2) was trained on English: its card lists no other
language, and the angle between a German answer and a German source says little about
support. Nothing in the scores notices; the probability of a German answer is as sure as
any. So the geometry stage detects the answer's and the context's language, and a
candidate whose answer or context is in a language its route does not accept
(`RouteConfig.languages`, by default the encoder's), or whose answer and context are in
two different languages, has its score flagged with the languages in the reason: a flagged
score never auto-accepts, it escalates (to the judge where there is one, else to the
route's escalation), as an answer outside the fitted range does (`pipeline.guards.domain`).

Detection: py3langid (a naive Bayes identifier over byte n-grams for 97 languages whose
model ships inside the wheel, so nothing is downloaded at run time; deterministic; 4.6 MB).
Measured against lingua-language-detector (96 MB, 60 s to load its models, 2 of 10 short
English sentences misread) and langdetect (unmaintained since 2021, random unless seeded,
and sure of a wrong language for 162 of 372 short HaluEval answers): py3langid read
49 of 51 hand-written sentences in six languages and every English sentence right.

What cannot be told is not flagged. A name or a number ("Steyr Mannlicher", "1987") has no
language; the identifier guesses one with low confidence. A text is *told* only with at
least `MIN_LETTERS` letters and a top language at `MIN_CONFIDENCE` or more: under that rule
none of 12,851 English texts of the shared data (HaluEval QA answers, questions and
knowledge; RAGTruth, BEGIN, FaithDial, SummEdits and WiCE answers and sources) is told as
another language, and 46 of the 51 foreign sentences are told (the five left are short
French, Spanish, Dutch and Portuguese sentences read at low confidence; a longer context
beside them is told; `tools/language_check.py`).

Failure posture: pure given the identifier; the identifier is loaded once, on the first
text, so `import pipeline` stays light.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from pipeline.errors import PolicyError

MIN_LETTERS = 20
"""Fewer letters than this and a text's language is not told: a name, a number, a word."""
MIN_CONFIDENCE = 0.7
"""The identifier's normalised probability of its top language below which a text's
language is not told."""
MAX_CHARS = 5000
"""Only this many leading characters are read: a source's language shows in its first
paragraphs, and the cost stays bounded for a huge context."""
LANGUAGES = "languages"
"""The evidence key of the language check's reading."""
ANY = "*"
"""A route's `languages` holding this accepts every language (the guard is off)."""

DEFAULT_ENCODER = "all-MiniLM-L6-v2"
ENCODER_LANGUAGES: dict[str, tuple[str, ...]] = {
    DEFAULT_ENCODER: ("en",),
}
"""The languages each known encoder's model card lists, by model name."""
DEFAULT_LANGUAGES: tuple[str, ...] = ("en",)
"""An encoder whose card is not known here is held to English, the language of the cards
that ship; a route that knows better sets `languages`."""


def encoder_languages(model: str | None) -> tuple[str, ...]:
    """The languages the card of encoder `model` (a name or a path ending in one; None: the
    default encoder) lists."""
    if model is None:
        return ENCODER_LANGUAGES[DEFAULT_ENCODER]
    name = model.rstrip("/").rsplit("/", 1)[-1].removesuffix("-int8")
    return ENCODER_LANGUAGES.get(name, DEFAULT_LANGUAGES)


def parse_languages(value: object, where: str) -> tuple[str, ...]:
    """A route's `languages` setting: a non-empty list of ISO 639-1 codes, or ["*"]."""
    if (
        not isinstance(value, list)
        or not value
        or not all(
            isinstance(v, str) and (v == ANY or (len(v) == 2 and v.isalpha() and v.islower()))
            for v in value
        )
    ):
        raise PolicyError(
            where, value, 'a non-empty list of ISO 639-1 codes ("en", "de"), or ["*"]'
        )
    return tuple(sorted(set(value)))


@dataclass(frozen=True, slots=True)
class Detected:
    """A text's language as told (`language` None: it cannot be told) and the identifier's
    confidence in its top language."""

    language: str | None
    confidence: float

    def to_dict(self) -> dict[str, Any]:
        return {"language": self.language, "confidence": round(self.confidence, 4)}


@lru_cache(maxsize=1)
def _identifier() -> Any:
    """py3langid's model with its two large tables (the 39 MiB transition table, the
    28 MiB class weights) mapped from an unlinked temporary file rather than held: a text
    pages in the rows it visits (~40 of the 67 MiB for English), and nothing is copied
    twice (`from_model_file` copies the transition table into a stdlib array while numpy's
    is still held). Issue 33: the geometry worker's peak on torch. A memoryview over the
    mapped array indexes as py3langid's array does, to the same ints: the same readings."""
    import lzma
    import shutil
    import tempfile

    import numpy as np
    from py3langid.langid import MODEL_DIR, MODEL_FILE, LanguageIdentifier

    mapped = {}
    with tempfile.TemporaryFile(suffix=".npz") as tmp, tempfile.TemporaryFile() as tables:
        with lzma.open(MODEL_DIR / MODEL_FILE) as src:  # never the whole npz in memory
            shutil.copyfileobj(src, tmp, length=1 << 20)
        tmp.seek(0)
        with np.load(tmp, allow_pickle=False) as data:
            for key in ("nextmove", "ptc"):
                table = np.ascontiguousarray(data[key])
                offset = tables.tell()
                tables.write(memoryview(table).cast("B"))
                tables.flush()
                mapped[key] = (table.dtype, table.shape, offset)
                del table
            row, pc = data["nextmove_row"], data["pc"]
            classes, output = data["classes"].tolist(), data["out_feat"].tolist()
        for key, (dtype, shape, offset) in mapped.items():
            mapped[key] = np.memmap(tables, dtype=dtype, mode="r", offset=offset, shape=shape)
    return LanguageIdentifier(
        mapped["ptc"],
        pc,
        classes,
        memoryview(mapped["nextmove"]),
        output,
        norm_probs=True,
        tk_row=memoryview(row),
    )


def detect(text: str) -> Detected:
    """The language of `text`, or None where it cannot be told (see the module docstring)."""
    head = text[:MAX_CHARS]
    if sum(ch.isalpha() for ch in head) < MIN_LETTERS:
        return Detected(None, 0.0)
    language, confidence = _identifier().classify(head)
    confidence = float(confidence)
    return Detected(str(language) if confidence >= MIN_CONFIDENCE else None, confidence)


@dataclass(frozen=True, slots=True)
class LanguageCheck:
    """The answer's and the context's languages and why the pair is not accepted on
    geometry's word (`reason` "" when it may be)."""

    answer: Detected
    context: Detected | None
    accepted: tuple[str, ...]
    reason: str = ""
    question: Detected | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"answer": self.answer.to_dict(), "accepted": list(self.accepted)}
        if self.context is not None:
            out["context"] = self.context.to_dict()
        if self.question is not None:
            out["question"] = self.question.to_dict()
        return out


def check_languages(
    response: str,
    context: Sequence[str] | None,
    accepted: Iterable[str],
    question: str | None = None,
) -> LanguageCheck:
    """The language check of one candidate under a route's `accepted` languages: its
    answer, its context and, when given, its question (SGI measures the answer's angle to
    the question too) must each be in an accepted language where it can be told."""
    allowed = tuple(sorted(set(accepted)))
    answer = detect(response)
    source = None if not context else detect("\n".join(context))
    asked = None if question is None else detect(question)
    if ANY in allowed:
        return LanguageCheck(answer, source, allowed, question=asked)
    problems = []
    for what, found in (("answer", answer), ("context", source), ("question", asked)):
        if found is not None and found.language is not None and found.language not in allowed:
            problems.append(f"the {what} reads as {found.language!r} ({found.confidence:.2f})")
    if (
        not problems
        and source is not None
        and answer.language is not None
        and source.language is not None
        and answer.language != source.language
    ):
        problems.append(
            f"the answer reads as {answer.language!r} and the context as {source.language!r}"
        )
    if not problems:
        return LanguageCheck(answer, source, allowed, question=asked)
    reason = "language: " + "; ".join(problems) + f"; the route accepts {', '.join(allowed)}"
    return LanguageCheck(answer, source, allowed, reason, asked)
