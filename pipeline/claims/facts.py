"""Which unsupported numbers and names are claims, and which are the detector's artefacts.

:func:`pipeline.claims.support.measure_support` flags every number and every capitalised run of
the response that the source does not contain. Most are claims — a swapped year, an
invented person — and those are hard facts no model may overrule. Some are not claims at
all, and an answer a judge or a person accepted should not be held on them:

* a list enumerator: the ``4`` of ``"\\n4. Flip the ribs"``;
* the hour of a clock time the source writes on the other clock: ``9:00 PM`` against
  ``21:00``;
* a capitalised word that only starts a list item or a line (``"1. Check the French
  White Pages"``): the name is what follows, measured again without it;
* one part of a hyphenated word the source writes whole: ``Wi-Fi`` against ``wifi``;
* the length of the answer itself: the ``200`` of ``"a summary in 200 words"``;
* a name the source writes in another form: a US state for its postal code
  (``California`` / ``"CA"``), an acronym of a source name (``EU`` / ``European Union``),
  an abbreviation with its period (``Apr.`` / ``April``), or a word that shares its stem
  with a source name, spelling variants included (``Chinese`` / ``China``,
  ``Organisation`` / ``Organization``). A judge or a person read the answer; a variant
  that is really another name (``Austria`` / ``Australia``) is theirs to catch.

:func:`is_artefact` says so for one flagged span. The rules stage keeps such a span as an
opinion on support (it still holds an accept by geometry, exactly as before), not as a
hard fact (:mod:`pipeline.bounds.authority`). Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pipeline.claims.support import Span, measure_support

__all__ = ["is_artefact"]

_LINE_START = re.compile(r"(?:^|\n)[ \t]*(?:[-*\u2022][ \t]*)?(?:\d{1,3}[.)][ \t]+)?$")
"""What may precede a span that starts a line or a list item."""
_ENUMERATOR_END = re.compile(r"[.)](?:\s|$)")
_CLOCK = re.compile(r"(?::[0-5]\d)?\s*([AaPp])\.?[Mm]\b")
_COMPOUND = re.compile(r"[\w][\w-]*")
_OWN_LENGTH = re.compile(r"\s+words?\b")
_CAPITALISED = re.compile(r"\b[A-Z][\w]*(?:[ \t]+(?:of|the|and|for)?[ \t]*[A-Z][\w]*)*")
_NAME_WORD = re.compile(r"[A-Za-z][\w]*")

# fmt: off
US_STATES: dict[str, str] = {
    "alabama": "AL", "alaska": "AK", "arizona": "AZ", "arkansas": "AR", "california": "CA",
    "colorado": "CO", "connecticut": "CT", "delaware": "DE", "florida": "FL", "georgia": "GA",
    "hawaii": "HI", "idaho": "ID", "illinois": "IL", "indiana": "IN", "iowa": "IA",
    "kansas": "KS", "kentucky": "KY", "louisiana": "LA", "maine": "ME", "maryland": "MD",
    "massachusetts": "MA", "michigan": "MI", "minnesota": "MN", "mississippi": "MS",
    "missouri": "MO", "montana": "MT", "nebraska": "NE", "nevada": "NV", "new hampshire": "NH",
    "new jersey": "NJ", "new mexico": "NM", "new york": "NY", "north carolina": "NC",
    "north dakota": "ND", "ohio": "OH", "oklahoma": "OK", "oregon": "OR", "pennsylvania": "PA",
    "rhode island": "RI", "south carolina": "SC", "south dakota": "SD", "tennessee": "TN",
    "texas": "TX", "utah": "UT", "vermont": "VT", "virginia": "VA", "washington": "WA",
    "west virginia": "WV", "wisconsin": "WI", "wyoming": "WY",
}
# fmt: on
"""US state names and their postal codes (structured sources write the code)."""


def _starts_line(text: str, start: int) -> bool:
    return _LINE_START.search(text[:start]) is not None


def _enumerator(span: Span, text: str) -> bool:
    return _starts_line(text, span.start) and bool(_ENUMERATOR_END.match(text, span.end))


def _other_clock(span: Span, text: str, context: Sequence[str]) -> bool:
    """The hour of ``H:MM am/pm`` whose 24-hour value the source holds."""
    found = _CLOCK.match(text, span.end)
    if found is None or not span.text.isdigit() or not 1 <= int(span.text) <= 12:
        return False
    hour = int(span.text) % 12 + (12 if found.group(1).lower() == "p" else 0)
    return not measure_support(str(hour), context).unsupported_numbers


def _line_initial_word(span: Span, text: str, context: Sequence[str], question: str) -> bool:
    """A name that starts a line or list item: its first word is only capitalised there."""
    if not _starts_line(text, span.start):
        return False
    rest = span.text.split(maxsplit=1)
    if len(rest) == 1:
        return True
    return not measure_support(
        rest[1][:1].lower() + rest[1][1:], context, question
    ).unsupported_names


def _split_compound(span: Span, text: str, context: Sequence[str]) -> bool:
    """Part of a hyphenated word whose letters the source holds as one word."""
    for found in _COMPOUND.finditer(text):
        if found.start() <= span.start and span.end <= found.end():
            if "-" not in found.group(0):
                return False
            whole = re.sub(r"\W", "", found.group(0)).lower()
            return any(whole in re.sub(r"\W", "", chunk).lower() for chunk in context)
    return False


def _own_length(span: Span, text: str) -> bool:
    """``N words`` on a line that calls itself a summary: the answer's length, no claim."""
    line_start = text.rfind("\n", 0, span.start) + 1
    line_end = text.find("\n", span.end)
    line = text[line_start : len(text) if line_end < 0 else line_end].lower()
    return bool(_OWN_LENGTH.match(text, span.end)) and "summar" in line


def _norm(word: str) -> str:
    word = word.lower().removesuffix("'s").removesuffix("\u2019s")
    return word.replace("z", "s")


def _variant(word: str, source_words: set[str]) -> bool:
    """A word the source holds in another form: its stem, spelling variants included."""
    norm = _norm(word)
    stem = norm[: max(4, len(norm) - 3)]
    return any(w.startswith(stem) or (len(w) >= 4 and norm.startswith(w)) for w in source_words)


def _other_form(span: Span, text: str, context: Sequence[str]) -> bool:
    source = "\n".join(context)
    code = US_STATES.get(span.text.lower())
    if code is not None and re.search(rf"\b{code}\b", source):
        return True
    if span.text.isupper() and 2 <= len(span.text) <= 5:
        initials = {
            "".join(w[0] for w in _NAME_WORD.findall(m.group(0)) if w[0].isupper())
            for m in _CAPITALISED.finditer(source)
        }
        if span.text in initials:
            return True
    abbreviated = text[span.end : span.end + 1] == "." and " " not in span.text
    if abbreviated and re.search(rf"\b{re.escape(span.text)}[a-z]", source):
        return True
    source_words = {_norm(w) for w in _NAME_WORD.findall(source) if len(w) >= 3}
    words = _NAME_WORD.findall(span.text)
    return bool(words) and all(_variant(w, source_words) for w in words)


def is_artefact(
    span: Span, kind: str, response: str, context: Sequence[str], question: str = ""
) -> bool:
    """Whether a flagged `kind` (``"number"`` or ``"name"``) span is no claim of its own."""
    if kind == "number":
        return (
            _enumerator(span, response)
            or _other_clock(span, response, context)
            or _own_length(span, response)
        )
    return (
        _line_initial_word(span, response, context, question)
        or _split_compound(span, response, context)
        or _other_form(span, response, context)
    )
