"""Lexical source support: how much of a response its context backs, word by word.

Why it exists
    The geometric score (SGI) says whether a response *points towards* its source; it
    cannot see that a response copied the source's sentence shape but swapped a name or a
    number. This module answers the narrower, auditable question "which words, numbers and
    names of the response does the context not contain?". It is used twice: by the
    ``source_support`` rule in :mod:`pipeline.rungs.rule_checks` (the last rung, on every path
    to ``state``) and as a numeric feature for the calibrated grounding score.

What counts
    * Tokens are words and numbers found by a regex, with character offsets into the
      response. Words are lower-cased, lose a possessive ``'s`` and pass through a tiny
      deterministic suffix stemmer (``files`` ~ ``file``, ``deleted`` ~ ``delete``);
      dotted abbreviations lose their dots (``U.S.`` ~ ``US``).
    * *Content words* are words of three letters or more that are neither stop words nor
      words about the source itself (``META_WORDS``: "based on the provided passage"),
      plus every number. Content words that also occur in the question are *given*: they need
      no support and are reported apart (``given_words``), outside the coverage.
    * A number is supported only when the same numeric value occurs in the context
      (``1,000`` = ``1000``, ``90`` = ``90.0``, ``19th`` = ``19``; ``seven`` = ``7``;
      ``1990s`` is its own value). ``one`` is treated as a stop word, not a number: as a
      pronoun ("one of the ...") it would flag ordinary prose.
    * A *name* is an acronym or a run of capitalised words that does not begin a sentence
      or follow a colon (such a word counts only when the next word is capitalised too, as
      in "New York"); AM/PM are not names. A name is supported when every one of its
      words occurs in the context (or the question).

Failure posture
    Pure and total on strings: no model, no clock, no I/O. A context that is not a
    sequence of strings (including a bare string, which would silently be read as
    characters) raises :class:`~pipeline.errors.ScoringError`. A response with no content
    words has coverage 1.0 — it claims nothing the context could contradict; callers that
    must refuse empty answers check emptiness themselves.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from types import MappingProxyType

from pipeline.encoding.chunks import context_chunks
from pipeline.encoding.memo import text_memo
from pipeline.errors import ScoringError

__all__ = [
    "LOCAL_WINDOW",
    "META_WORDS",
    "STOP_WORDS",
    "Span",
    "SupportReport",
    "measure_support",
    "stem",
]


@dataclass(frozen=True, slots=True)
class Span:
    """A piece of the response: ``text == response[start:end]``."""

    text: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class SupportReport:
    """How much of a response its context backs.

    ``content_coverage`` is the share of the response's content words (numbers included,
    question words excluded) that the context contains; 1.0 when there are none.
    ``n_content`` counts those content words (occurrences), ``n_given`` the content words
    that the question already supplies. ``sentence_coverage`` holds the same share per
    response sentence (naive split, in order; 1.0 for a sentence with no content word),
    ``sentence_spans`` the sentences themselves. ``sentence_local_coverage`` is each
    sentence's share of content words found within the best ``LOCAL_WINDOW`` consecutive
    source sentences (1.0 for a sentence with no content word): a claim stitched together
    from words scattered over a long source is covered, but not locally.
    ``sentence_content`` counts each sentence's content words (0: it claims nothing).
    """

    content_coverage: float
    unsupported_words: tuple[Span, ...]
    unsupported_numbers: tuple[Span, ...]
    unsupported_names: tuple[Span, ...]
    n_content: int
    sentence_coverage: tuple[float, ...]
    min_sentence_coverage: float
    given_words: tuple[Span, ...] = ()
    n_given: int = 0
    sentence_spans: tuple[Span, ...] = ()
    sentence_local_coverage: tuple[float, ...] = ()
    sentence_content: tuple[int, ...] = ()


# --------------------------------------------------------------------------- vocabulary

# fmt: off
STOP_WORDS: frozenset[str] = frozenset({
    "a", "about", "above", "after", "again", "against", "all", "almost", "along", "already",
    "also", "although", "always", "am", "among", "an", "and", "another", "any", "anybody",
    "anyone", "anything", "anyway", "anywhere", "are", "aren't", "around", "as", "at", "away",
    "be", "became", "because", "become", "becomes", "been", "before", "being", "below",
    "besides", "between", "both", "but", "by", "can", "can't", "cannot", "could", "couldn't",
    "did", "didn't", "do", "does", "doesn't", "doing", "don't", "done", "down", "during",
    "each", "either", "else", "enough", "etc", "even", "ever", "every", "everyone",
    "everything", "few", "for", "from", "further", "get", "gets", "got", "had", "hadn't", "has",
    "hasn't", "have", "haven't", "having", "he", "he'd", "he'll", "he's", "her", "here",
    "here's", "hers", "herself", "him", "himself", "his", "how", "how's", "however", "i", "i'd",
    "i'll", "i'm", "i've", "if", "in", "indeed", "into", "is", "isn't", "it", "it's", "its",
    "itself", "just", "let", "let's", "may", "maybe", "me", "might", "mine", "more", "most",
    "much", "must", "mustn't", "my", "myself", "neither", "no", "nobody", "none", "nor", "not",
    "nothing", "now", "of", "off", "often", "on", "once", "one", "ones", "only", "onto", "or",
    "other", "others", "otherwise", "ought", "our", "ours", "ourselves", "out", "over", "own",
    "perhaps", "quite", "rather", "really", "same", "shall", "shan't", "she", "she'd", "she'll",
    "she's", "should", "shouldn't", "since", "so", "some", "somebody", "someone", "something",
    "sometimes", "somewhat", "such", "than", "that", "that's", "the", "their", "theirs", "them",
    "themselves", "then", "there", "there's", "therefore", "these", "they", "they'd", "they'll",
    "they're", "they've", "this", "those", "though", "through", "thus", "to", "too", "toward",
    "towards", "under", "until", "unto", "up", "upon", "us", "very", "via", "was", "wasn't",
    "we", "we'd", "we'll", "we're", "we've", "were", "weren't", "what", "what's", "whatever",
    "when", "when's", "where", "where's", "whereas", "whether", "which", "while", "who",
    "who's", "whoever", "whom", "whose", "why", "why's", "will", "with", "within", "without",
    "won't", "would", "wouldn't", "yes", "yet", "you", "you'd", "you'll", "you're", "you've",
    "your", "yours", "yourself", "yourselves",
})
# fmt: on
"""Function words that never need support. Checked on the lower-cased surface form."""

# fmt: off
_NUMBER_WORDS: dict[str, str] = {
    word: str(value)
    for value, word in enumerate((
        "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
        "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
        "nineteen", "twenty",
    ), start=2)
}
# fmt: on
"""Spelled-out small numbers, read as their value (``one`` is a stop word, see above)."""

# fmt: off
META_WORDS: frozenset[str] = frozenset({
    "according", "additionally", "answer", "answers", "based", "context", "despite",
    "document", "furthermore", "given", "including", "information", "mentioned", "moreover",
    "overall", "particularly", "passage", "provided", "question", "stated", "summary", "text",
})
# fmt: on
"""Words an answer uses to talk about its source or to link clauses ("based on the provided
passage", "overall", "additionally"); they state no fact, so they never need support."""

_UNCOUNTED: frozenset[str] = STOP_WORDS | META_WORDS

_NOT_NAMES: frozenset[str] = frozenset({"am", "pm"})
"""Capitalised or upper-case tokens that are not names (times of day)."""

# fmt: off
_NAME_CONNECTORS: frozenset[str] = frozenset({
    "of", "the", "de", "del", "della", "der", "di", "du", "da", "van", "von", "la", "le", "y",
    "bin", "al",
})
# fmt: on
"""Lower-case words allowed inside a multi-word name ("Bank of America")."""

LOCAL_WINDOW = 3
"""Consecutive source sentences a response sentence's words are looked for in by the
local coverage: a statement and its neighbours, as a reader would check a claim."""

_MIN_CONTENT_LEN = 3
"""Words shorter than this never count as content ("an", "TV" as a word — acronyms are
still names)."""

# ------------------------------------------------------------------------------ tokens

_TOKEN_RE = re.compile(
    r"(?P<num>(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?)"
    r"(?P<suf>(?:st|nd|rd|th|s)(?![^\W\d_]))?%?"
    r"|(?P<abbr>(?:[^\W\d_]\.){2,})"
    r"|(?P<word>[^\W\d_]+(?:['’][^\W\d_]+)*['’]?)"
)
_SENTENCE_END_RE = re.compile(r"[.!?]+[\"'”’)\]]*\s+|\s*\n\s*")
_NAME_GAP_RE = re.compile(r"[ \t]+")
_VOWELS = "aeiouy"


class _Kind(StrEnum):
    WORD = "word"
    NUMBER = "number"


@dataclass(frozen=True, slots=True)
class _Token:
    text: str
    start: int
    end: int
    kind: _Kind
    key: str  # stem for words, canonical value for numbers
    surface: str  # lower-cased, possessive stripped (stop-word lookup)


def _number_key(digits: str, suffix: str) -> str:
    try:
        value = Decimal(digits.replace(",", ""))
    except InvalidOperation:  # pragma: no cover - the regex only yields digits
        return digits
    text = format(value.normalize(), "f")
    return text + "s" if suffix == "s" else text


def _surface(word: str) -> str:
    low = word.lower().replace("’", "'")
    if low.endswith("'s"):
        low = low[:-2]
    return low.rstrip("'")


def _stem(word: str) -> str:
    """Lower-case, strip a possessive and light suffixes.

    Deterministic, and inflected forms meet their base: ``files``/``file``,
    ``deleted``/``delete``, ``cities``/``city``, ``running``/``run``. Stems need not be
    words (``delet``); they are only compared with each other.
    """
    w = _surface(word)
    # 1. plurals
    if len(w) > 4 and w.endswith("ies"):
        w = w[:-3] + "i"
    elif len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    # 2. verb endings
    if len(w) > 4 and w.endswith("ied"):
        w = w[:-3] + "i"
    elif len(w) > 5 and w.endswith("ing"):
        w = w[:-3]
    elif len(w) > 4 and w.endswith("ed"):
        w = w[:-2]
    # 3. silent e, consonant-y and doubled final consonants
    if len(w) > 3 and w.endswith("e"):
        w = w[:-1]
    if len(w) > 2 and w.endswith("y") and w[-2] not in _VOWELS:
        w = w[:-1] + "i"
    if len(w) > 3 and w[-1] == w[-2] and w[-1] not in _VOWELS:
        w = w[:-1]
    return w


_stem_cached = functools.lru_cache(maxsize=65536)(_stem)
_STEM_CACHE_CHARS = 64


def stem(word: str) -> str:
    """`_stem` of ``word``, cached for words of ordinary length: a megabyte-long "word" of
    a hostile answer is stemmed but not kept."""
    return _stem_cached(word) if len(word) <= _STEM_CACHE_CHARS else _stem(word)


@text_memo()
def _tokens(text: str) -> tuple[_Token, ...]:
    """The tokens of ``text``. Cached: one candidate's context is read three times (support,
    bigrams, trigrams), the claim head reads every context statement once per claim, and
    the turns of a RAG session often share their source. Bounded by characters held
    (`pipeline.encoding.memo`), about a stage batch's claims, statements and windows."""
    out: list[_Token] = []
    for m in _TOKEN_RE.finditer(text):
        if m.group("num") is not None:
            key = _number_key(m.group("num"), m.group("suf") or "")
            out.append(_Token(m.group(0), m.start(), m.end(), _Kind.NUMBER, key, key))
            continue
        if m.group("abbr") is not None:  # U.S. ~ US, e.g. ~ eg
            word = m.group(0).replace(".", "")
            out.append(_Token(m.group(0), m.start(), m.end(), _Kind.WORD, stem(word), word.lower()))
            continue
        word = m.group("word")
        surface = _surface(word)
        if surface in _NUMBER_WORDS:
            value = _NUMBER_WORDS[surface]
            out.append(_Token(word, m.start(), m.end(), _Kind.NUMBER, value, surface))
        else:
            out.append(_Token(word, m.start(), m.end(), _Kind.WORD, stem(word), surface))
    return tuple(out)


def _is_content(tok: _Token) -> bool:
    if tok.kind is _Kind.NUMBER:
        return True
    return len(tok.surface) >= _MIN_CONTENT_LEN and tok.surface not in _UNCOUNTED


@text_memo()
def _sentences(text: str) -> tuple[tuple[int, int], ...]:
    """Character bounds of ``text``'s sentences. Cached like `_tokens`, for the same texts."""
    bounds: list[tuple[int, int]] = []
    start = 0
    for m in _SENTENCE_END_RE.finditer(text):
        body = text[start : m.start()]
        if body.strip():
            lead = len(body) - len(body.lstrip())
            bounds.append((start + lead, m.start() + len(m.group(0).rstrip())))
        start = m.end()
    body = text[start:]
    if body.strip():
        bounds.append((start + len(body) - len(body.lstrip()), len(text.rstrip())))
    return tuple(bounds)


# ------------------------------------------------------------------------------- names


def _is_capitalised(tok: _Token) -> bool:
    return tok.kind is _Kind.WORD and tok.text[0].isupper()


def _is_acronym(tok: _Token) -> bool:
    letters = [c for c in tok.text if c.isalpha()]
    return tok.kind is _Kind.WORD and len(letters) >= 2 and all(c.isupper() for c in letters)


def _names(text: str, toks: Sequence[_Token], starts: frozenset[int]) -> list[tuple[int, int]]:
    """Index ranges [i, j) of name runs in ``toks``; ``starts`` holds sentence-initial indexes."""

    def joined(i: int) -> bool:  # toks[i] and toks[i + 1] separated only by blanks
        return (
            i + 1 < len(toks)
            and i + 1 not in starts
            and _NAME_GAP_RE.fullmatch(text[toks[i].end : toks[i + 1].start]) is not None
        )

    runs: list[tuple[int, int]] = []
    i = 0
    while i < len(toks):
        tok = toks[i]
        if (
            not _is_capitalised(tok)
            or tok.surface in _NOT_NAMES
            or (tok.surface in _UNCOUNTED and not _is_acronym(tok))
        ):
            i += 1
            continue
        j = i + 1
        while j < len(toks) and joined(j - 1):
            if _is_capitalised(toks[j]):
                j += 1
            elif toks[j].surface in _NAME_CONNECTORS and joined(j) and _is_capitalised(toks[j + 1]):
                j += 2
            else:
                break
        if i not in starts or j - i > 1 or _is_acronym(tok):
            runs.append((i, j))
        i = j
    return runs


# ----------------------------------------------------------------------------- measure


def _span(text: str, start: int, end: int) -> Span:
    return Span(text[start:end], start, end)


def measure_support(response: str, context: Sequence[str], question: str = "") -> SupportReport:
    """Measure which content words, numbers and names of ``response`` ``context`` contains.

    ``context`` is one string per chunk (a bare string is refused). Words of ``question``
    count as given. Deterministic: the same inputs always give the same report.
    """
    if not isinstance(response, str):
        raise ScoringError(f"response must be a string, got {type(response).__name__}")
    if not isinstance(question, str):
        raise ScoringError(f"question must be a string, got {type(question).__name__}")
    chunks = context_chunks(context) or ()

    ctx_words, ctx_numbers, ctx_sentences_of = _context_index(chunks)
    q_words: set[str] = set()
    q_numbers: set[str] = set()
    for tok in _tokens(question):
        (q_numbers if tok.kind is _Kind.NUMBER else q_words).add(tok.key)

    toks = _tokens(response)
    sentences = _sentences(response)
    sentence_of = _sentence_index(toks, sentences)
    starts = {  # first word of a sentence, or of what follows a colon
        i
        for i, tok in enumerate(toks)
        if i == 0
        or sentence_of[i - 1] != sentence_of[i]
        or ":" in response[toks[i - 1].end : tok.start]
    }

    per_sentence_ok = [0] * len(sentences)
    per_sentence_keys: list[list[str]] = [[] for _ in sentences]
    words: list[Span] = []
    numbers: list[Span] = []
    given: list[Span] = []
    for i, tok in enumerate(toks):
        if not _is_content(tok):
            continue
        is_number = tok.kind is _Kind.NUMBER
        if tok.key in (q_numbers if is_number else q_words):
            given.append(_span(response, tok.start, tok.end))
            continue
        per_sentence_keys[sentence_of[i]].append(tok.key)
        if tok.key in (ctx_numbers if is_number else ctx_words):
            per_sentence_ok[sentence_of[i]] += 1
        else:
            (numbers if is_number else words).append(_span(response, tok.start, tok.end))

    known = ctx_words | q_words
    names: list[Span] = []
    for i, j in _names(response, toks, frozenset(starts)):
        keys = [t.key for t in toks[i:j] if t.surface not in _NAME_CONNECTORS]
        if not all(k in known for k in keys):
            names.append(_span(response, toks[i].start, toks[j - 1].end))

    per_sentence_total = [len(keys) for keys in per_sentence_keys]
    n_content = sum(per_sentence_total)
    n_ok = sum(per_sentence_ok)
    coverage = n_ok / n_content if n_content else 1.0
    sentence_cov = tuple(
        ok / total if total else 1.0
        for ok, total in zip(per_sentence_ok, per_sentence_total, strict=True)
    )
    return SupportReport(
        content_coverage=coverage,
        unsupported_words=tuple(words),
        unsupported_numbers=tuple(numbers),
        unsupported_names=tuple(names),
        n_content=n_content,
        sentence_coverage=sentence_cov,
        min_sentence_coverage=min(sentence_cov, default=1.0),
        given_words=tuple(given),
        n_given=len(given),
        sentence_spans=tuple(_span(response, a, b) for a, b in sentences),
        sentence_local_coverage=tuple(
            _local_coverage(keys, ctx_sentences_of) for keys in per_sentence_keys
        ),
        sentence_content=tuple(per_sentence_total),
    )


@text_memo()
def _context_index(
    chunks: tuple[str, ...],
) -> tuple[frozenset[str], frozenset[str], Mapping[str, frozenset[int]]]:
    """The context's word keys, number keys, and for each key the indexes of the source
    sentences (over all chunks, in order) that hold it. Cached: the claim head measures
    every claim against the same windows, and a session's turns share their source."""
    words: set[str] = set()
    numbers: set[str] = set()
    sentences_of: dict[str, set[int]] = {}
    n_sentences = 0
    for chunk in chunks:
        bounds = _sentences(chunk)
        toks = _tokens(chunk)
        for tok, k in zip(toks, _sentence_index(toks, bounds), strict=True):
            (numbers if tok.kind is _Kind.NUMBER else words).add(tok.key)
            sentences_of.setdefault(tok.key, set()).add(n_sentences + k)
        n_sentences += max(len(bounds), 1)
    frozen = MappingProxyType({key: frozenset(found) for key, found in sentences_of.items()})
    return frozenset(words), frozenset(numbers), frozen


def _sentence_index(toks: Sequence[_Token], bounds: Sequence[tuple[int, int]]) -> list[int]:
    """For each token, the index of the sentence (of ``bounds``, in order) it falls in."""
    out: list[int] = []
    k = 0
    for tok in toks:
        while k + 1 < len(bounds) and tok.start >= bounds[k + 1][0]:
            k += 1
        out.append(k)
    return out


def _local_coverage(keys: list[str], sentences_of: Mapping[str, AbstractSet[int]]) -> float:
    """Best share of ``keys`` (with repeats) found within LOCAL_WINDOW consecutive source
    sentences; found through an index of where each key occurs, so it stays linear in the
    number of occurrences rather than in the length of the source."""
    if not keys:
        return 1.0
    found: dict[int, int] = {}  # window start -> keys found in that window
    for key in keys:
        starts = {
            start
            for index in sentences_of.get(key, ())
            for start in range(max(0, index - LOCAL_WINDOW + 1), index + 1)
        }
        for start in starts:
            found[start] = found.get(start, 0) + 1
    return max(found.values(), default=0) / len(keys)


def ngram_precision(response: str, context: Sequence[str], n: int) -> float:
    """Share of the response's n-grams of normalised tokens that occur in the context.

    Phrase-level support: a verbatim or lightly inflected span of the source scores 1.0;
    a fluent sentence that recombines the source's words into a new claim scores lower.
    A response shorter than n tokens scores 1.0 when all its tokens occur, else 0.0.
    """
    chunks = context_chunks(context) or ()
    resp = [t.key for t in _tokens(response)]
    grams: set[tuple[str, ...]] = set()
    words: set[str] = set()
    for chunk in chunks:
        keys = [t.key for t in _tokens(chunk)]
        words.update(keys)
        grams.update(zip(*(keys[k:] for k in range(n)), strict=False))
    if len(resp) < n:
        return 1.0 if resp and all(w in words for w in resp) else 0.0
    own = list(zip(*(resp[k:] for k in range(n)), strict=False))
    return sum(g in grams for g in own) / len(own)
