"""Provenance: evidence the candidate cannot forge — which context chunks and samples count.

An agent that passes its own earlier answer back as context grounds itself: the chunk
that repeats the response scores perfectly against it. So, before any score is computed,
each context chunk is judged by where it came from and what it says:

* its **source** (`retrieval`, `tool`, `history`, `user`; a bare string is retrieval)
  must be one the route trusts to ground an answer (`grounding_sources`);
* its normalised text must not **equal** the response, nor **contain** the whole
  response with no more than a short span around it (a speaker label, "you said"), once
  the response itself is longer than a short span (`short_span`). A one-word answer
  such as "Paris" legitimately appears in short evidence, and an extractive answer is a
  sentence of a longer retrieved passage: both still count.

Samples are judged the same way: copies of the response, or of each other, count once,
and the consistency stage needs `min_distinct` distinct samples before it may commit.
Both results say what was excluded and why, for the decision record's evidence.

Pure: no clock, no I/O.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from enum import StrEnum

from pipeline.errors import PolicyError


class Source(StrEnum):
    """Where a context chunk came from."""

    RETRIEVAL = "retrieval"
    TOOL = "tool"
    HISTORY = "history"  # the conversation so far: may hold the agent's own answers
    USER = "user"  # whatever the user typed: not evidence of anything


DEFAULT_GROUNDING_SOURCES = frozenset({Source.RETRIEVAL, Source.TOOL})
"""Sources that ground an answer unless a route says otherwise."""

SHORT_SPAN_CHARS = 24
"""A short span, in normalised characters (about four words): a response longer than
this, inside a chunk that adds no more than this around it, is an echo of itself."""


class Exclusion(StrEnum):
    """Why a chunk does not count as evidence."""

    SOURCE = "source_not_grounding"
    EQUALS_RESPONSE = "equals_response"
    CONTAINS_RESPONSE = "contains_response"


_NON_WORD = re.compile(r"[\W_]+", re.UNICODE)


def normalise(text: str) -> str:
    """Text as compared for copies: NFKC, case-folded, punctuation and spacing collapsed."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return _NON_WORD.sub(" ", folded).strip()


def parse_sources(values: Collection[object], where: str) -> frozenset[Source]:
    """A policy's list of source names as a set; an unknown name names the allowed ones."""
    out = set()
    for value in values:
        try:
            out.add(Source(value))
        except ValueError:
            allowed = ", ".join(s.value for s in Source)
            raise PolicyError(where, value, f"a list of {allowed}") from None
    return frozenset(out)


@dataclass(frozen=True, slots=True)
class Chunk:
    """One context chunk and where it came from."""

    text: str
    source: Source = Source.RETRIEVAL


@dataclass(frozen=True, slots=True)
class ContextEvidence:
    """Which chunks count. `counted` indexes into the candidate's chunks, in order."""

    counted: tuple[int, ...]
    excluded: tuple[tuple[int, Source, Exclusion], ...]

    @property
    def any_counted(self) -> bool:
        return bool(self.counted)

    def to_dict(self) -> dict[str, object]:
        return {
            "chunks": len(self.counted) + len(self.excluded),
            "counted": list(self.counted),
            "excluded": [
                {"index": i, "source": s.value, "reason": r.value} for i, s, r in self.excluded
            ],
        }


def exclusion(
    chunk: Chunk,
    response: str,
    grounding_sources: Collection[Source] = DEFAULT_GROUNDING_SOURCES,
    short_span: int = SHORT_SPAN_CHARS,
) -> Exclusion | None:
    """Why `chunk` is not evidence for `response`, or None when it counts."""
    if chunk.source not in grounding_sources:
        return Exclusion.SOURCE
    said, text = normalise(response), normalise(chunk.text)
    if text == said:
        return Exclusion.EQUALS_RESPONSE
    wrapped = len(text) - len(said) <= short_span
    if len(said) > short_span and wrapped and said in text:
        return Exclusion.CONTAINS_RESPONSE
    return None


def assess_context(
    chunks: Sequence[Chunk],
    response: str,
    grounding_sources: Collection[Source] = DEFAULT_GROUNDING_SOURCES,
    short_span: int = SHORT_SPAN_CHARS,
) -> ContextEvidence:
    """Sort a candidate's chunks into those that count and those that do not (and why)."""
    counted: list[int] = []
    excluded: list[tuple[int, Source, Exclusion]] = []
    for i, chunk in enumerate(chunks):
        why = exclusion(chunk, response, grounding_sources, short_span)
        if why is None:
            counted.append(i)
        else:
            excluded.append((i, chunk.source, why))
    return ContextEvidence(tuple(counted), tuple(excluded))


@dataclass(frozen=True, slots=True)
class SampleEvidence:
    """Samples once copies are collapsed: `distinct` keeps the first of each normalised
    text (copies of the response collapse into one); `enough` says whether there are at
    least `min_distinct` of them."""

    distinct: tuple[str, ...]
    copies_of_response: int
    duplicates: int
    min_distinct: int

    @property
    def enough(self) -> bool:
        return len(self.distinct) >= self.min_distinct

    def to_dict(self) -> dict[str, object]:
        return {
            "samples": len(self.distinct) + self.duplicates,
            "distinct": len(self.distinct),
            "copies_of_response": self.copies_of_response,
            "duplicates": self.duplicates,
            "min_distinct": self.min_distinct,
            "enough": self.enough,
        }


def distinct_samples(samples: Sequence[str], response: str, min_distinct: int) -> SampleEvidence:
    """Collapse copies: a sample equal (normalised) to the response or to an earlier sample
    adds nothing; blank samples are dropped."""
    said = normalise(response)
    seen: set[str] = set()
    distinct: list[str] = []
    copies = duplicates = 0
    for sample in samples:
        key = normalise(sample)
        if not key:
            continue
        if key == said:
            copies += 1
        if key in seen:
            duplicates += 1
            continue
        seen.add(key)
        distinct.append(sample)
    return SampleEvidence(tuple(distinct), copies, duplicates, min_distinct)
