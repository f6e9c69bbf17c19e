"""Claims and passage windows: the units a claim-support model reads, and how they meet.

Why it exists
    A response is grounded when every claim it makes is backed by some passage of its
    context, however the claim is worded. Scoring the whole response against the whole
    context (geometry) or counting copied words (lexical support) both reward answers that
    *look* extractive; a verifier that reads claims must first cut the response into claims
    and the context into passages small enough to compare one claim with. This module does
    that cutting and the bookkeeping around a pair scorer, and nothing else: the scorer (a
    trained model) lives in the worker shell and hands its pair scores back here.

Units
    * A *claim* is a response sentence (the same split :mod:`pipeline.claims.support` uses), or a
      clause of one when the sentence joins several with ``;`` or ``and``/``but`` and each
      side has a verb of its own ("Canberra is the capital, and Sydney is its largest
      city" is two claims; "salt and pepper" is not split). Sentences that state nothing
      (only stop and meta words: "I hope this helps!") are not claims. An assistant's
      lead-in ("Based on the passage, the answer is …", "… is the answer") is stripped from
      the claim text, so the wording of the wrapper cannot decide.
    * A *window* is 1 to ``max_sentences`` consecutive sentences of one context chunk
      (by default one sentence, see ``DEFAULT_WINDOW_SENTENCES``). A
      chunk that is a JSON object or array is read field by field: each leaf becomes the
      statement ``"path: value"``, and windows run over consecutive fields.

Failure posture
    Pure and deterministic: no model, no clock, no I/O, no torch. A response with no claims
    yields a :class:`ClaimSupport` of score 1.0 with no weakest claim (it claims nothing the
    context could contradict); callers that must refuse empty answers check emptiness
    themselves, as with :func:`pipeline.claims.support.measure_support`. Mismatched shapes between
    the claims, their candidates and the pair scores raise :class:`ScoringError`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.claims.support import META_WORDS, STOP_WORDS, _sentences, _tokens, stem
from pipeline.encoding.chunks import context_chunks
from pipeline.encoding.memo import text_memo
from pipeline.errors import ScoringError

__all__ = [
    "DEFAULT_CANDIDATES",
    "DEFAULT_WINDOW_SENTENCES",
    "Claim",
    "ClaimSupport",
    "Window",
    "answer_core",
    "context_statements",
    "lexical_overlap",
    "rank_windows",
    "split_claims",
    "split_windows",
    "statement_joint",
    "strip_lead_in",
    "summarise",
]

DEFAULT_WINDOW_SENTENCES = 1
"""Longest window, in source sentences. One: a two-sentence window holds the swapped-in
name of its neighbour ("The capital is Sydney" against "Canberra is the capital. Sydney is
its largest city."), and measured with the shipped head, single sentences kept the
cross-validated RAGTruth and BEGIN figures (claim AUROC 0.711 vs 0.706) while HaluEval QA
rose from 0.79 to 0.86; a claim stitched from several sentences is seen by the head's
whole-context coverage feature instead."""

DEFAULT_CANDIDATES = 3
"""Windows per claim handed to the (costly) pair scorer, chosen by the cheap ranking."""

_MAX_WINDOW_CHARS = 600
"""A window longer than this is not widened further: claim and window must fit the pair
model's 256-token input together."""


@dataclass(frozen=True, slots=True)
class Claim:
    """One claim of a response: ``text`` is what is scored, ``start``/``end`` locate the
    sentence or clause in the response (before any lead-in was stripped)."""

    text: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Window:
    """Consecutive statements ``first`` .. ``first + size - 1`` of context chunk ``chunk``."""

    text: str
    chunk: int
    first: int
    size: int


@dataclass(frozen=True, slots=True)
class ClaimSupport:
    """How well the context backs a response's weakest claim.

    ``score`` is the weakest claim's support (the minimum over claims of each claim's best
    window score); ``weakest`` and ``window`` say which claim and which passage, so a
    reviewer sees the sentence that failed. ``claim_scores`` follows ``claims``, and so does
    ``ranked``: each claim's candidate windows, best first by the scorer (what the judge
    reads of a long context, :mod:`pipeline.judge.context`).
    """

    score: float
    weakest: Claim | None
    window: Window | None
    claims: tuple[Claim, ...]
    claim_scores: tuple[float, ...]
    ranked: tuple[tuple[Window, ...], ...] = ()


# ----------------------------------------------------------------------------- claims

_WORD_RE = re.compile(r"[^\W_]+(?:['’][^\W\d_]+)*")
_NUMBER_RE = re.compile(r"^[0-9][0-9,.]*$")
# fmt: off
_VERBISH: frozenset[str] = frozenset({
    "is", "are", "was", "were", "be", "been", "being", "am", "has", "have", "had", "do",
    "does", "did", "will", "would", "can", "could", "should", "may", "might", "must",
    "shall", "isn't", "aren't", "wasn't", "weren't", "hasn't", "haven't", "hadn't",
    "doesn't", "didn't", "won't", "can't", "it's", "he's", "she's", "they're", "that's",
})
# fmt: on
"""Auxiliaries and copulas: with a past-tense ``-ed`` word, what marks a clause's verb."""

_CLAUSE_JOIN_RE = re.compile(r"\s*;\s+|,?\s+(?:and|but|while|whereas)\s+(?=\S)")
_LEAD_IN_RE = re.compile(
    r"^(?:(?:based on|according to|from|given)\s+(?:the|this|these)\s+"
    r"(?:provided\s+|given\s+)?(?:passages?|context|texts?|information|documents?|sources?)"
    r"(?:\s+provided)?\s*,?\s*)?"
    r"(?:(?:so|thus|therefore|overall)\s*,\s*)?"
    r"(?:the\s+(?:correct\s+|final\s+)?answer\s+(?:is|would be)\s*:?\s*)?",
    re.IGNORECASE,
)
_TRAILER_RE = re.compile(r"\s+is\s+the\s+(?:correct\s+)?answer\s*([.!]?)\s*$", re.IGNORECASE)
_UNCOUNTED = STOP_WORDS | META_WORDS


def _words(text: str) -> list[str]:
    return [m.group(0).lower().replace("’", "'") for m in _WORD_RE.finditer(text)]


@text_memo()
def _content_keys(text: str) -> frozenset[str]:
    """Stems of content words (and numbers, commas dropped) — the cheap lexical view.
    Cached: every claim of an answer is ranked against the same windows."""
    keys: set[str] = set()
    for w in _words(text):
        if _NUMBER_RE.match(w):
            keys.add(w.replace(",", ""))
        elif len(w) >= 3 and w not in _UNCOUNTED:
            keys.add(stem(w))
    return frozenset(keys)


def _has_verb(words: Sequence[str]) -> bool:
    return any(w in _VERBISH or (len(w) > 4 and w.endswith("ed")) for w in words)


def strip_lead_in(text: str) -> str:
    """``text`` without an assistant's wrapper: "Based on the passage, the answer is X." →
    "X."; "X is the answer." → "X.". Only the wrapper goes; a sentence without one is
    returned unchanged."""
    body = text.strip()
    stripped = _LEAD_IN_RE.sub("", body, count=1)
    stripped = _TRAILER_RE.sub(r"\1", stripped)
    if not stripped.strip(" .!,:"):
        return body
    return stripped[0].upper() + stripped[1:] if stripped[0].islower() else stripped


# fmt: off
_FILLER: frozenset[str] = frozenset({
    "a", "an", "the", "is", "are", "was", "were", "be", "been", "it", "it's", "its", "this",
    "that", "these", "those", "they", "he", "she", "of", "in", "on", "at", "by", "for", "to",
    "as", "from", "with", "and", "which", "who", "whom", "whose", "what", "where", "when",
    "there", "here", "called", "named", "known",
})
# fmt: on
"""Words a one-sentence answer uses to frame what it adds to the question ("The capital of
Australia *is* Canberra", "*It's* FX"): they state nothing the question had not asked.
Negations, quantifiers and comparatives are deliberately absent: "not", "only", "more"
change the claim, so an answer that carries one outside its new words is scored whole."""


def answer_core(response: str, question: str) -> str:
    """What a one-sentence answer adds to its question, as the source's words would say it.

    An assistant answers "What is the capital of Australia?" with "The capital of Australia
    is Canberra." where an extractive reader answers "Canberra"; both claim the same thing.
    The core is the shortest stretch of the (lead-in stripped) sentence that holds every
    word the question does not already give, less the framing words (`_FILLER`, stop-free
    meta words) around it: "Canberra" for both. Every new word stays inside the core, so
    nothing the answer claims is dropped; an answer with a negation, quantifier or other
    meaning-bearing word outside that stretch, one of several sentences, or one without a
    question is returned whole (lead-in stripped only for single sentences).
    """
    body = response.strip()
    if not question.strip() or len(_sentences(body)) != 1:
        return body
    body = strip_lead_in(body)
    given = {tok.key for tok in _tokens(question)}
    kept = [
        tok
        for tok in _tokens(body)
        if tok.key not in given and tok.surface not in _FILLER and tok.surface not in META_WORDS
    ]
    if not kept:
        return body
    core = body[kept[0].start : kept[-1].end]
    outside = (t for t in _tokens(body) if t.end <= kept[0].start or t.start >= kept[-1].end)
    if any(t.surface in STOP_WORDS and t.surface not in _FILLER for t in outside):
        return body  # a "not", "only" or "more" outside the core changes what it claims
    return core


def _clauses(text: str, offset: int) -> list[tuple[int, int]]:
    """Character ranges of the clauses of one sentence: split at ``;``/"and"/"but" only when
    every part has a verb and three words of its own, else the whole sentence."""
    cuts = [(m.start(), m.end()) for m in _CLAUSE_JOIN_RE.finditer(text)]
    if not cuts:
        return [(offset, offset + len(text))]
    parts: list[tuple[int, int]] = []
    start = 0
    for a, b in cuts:
        parts.append((start, a))
        start = b
    parts.append((start, len(text)))
    for a, b in parts:
        words = _words(text[a:b])
        if len(words) < 3 or not _has_verb(words):
            return [(offset, offset + len(text))]
    return [(offset + a, offset + b) for a, b in parts]


def split_claims(response: str) -> tuple[Claim, ...]:
    """The claims of ``response``, in order (see the module docstring)."""
    claims: list[Claim] = []
    for s_start, s_end in _sentences(response):
        for start, end in _clauses(response[s_start:s_end], s_start):
            text = strip_lead_in(response[start:end])
            if _content_keys(text):
                claims.append(Claim(text, start, end))
    return tuple(claims)


# ---------------------------------------------------------------------------- windows


def _json_statements(value: object, path: str = "") -> list[str]:
    if isinstance(value, dict):
        out: list[str] = []
        for key, item in value.items():
            out.extend(_json_statements(item, f"{path} {key}".strip()))
        return out
    if isinstance(value, list):
        if all(not isinstance(v, dict | list) for v in value):
            return [f"{path}: {', '.join(str(v) for v in value)}"] if value else []
        out = []
        for item in value:
            out.extend(_json_statements(item, path))
        return out
    if value is None or value == "":
        return []
    return [f"{path}: {value}" if path else str(value)]


def _as_json(chunk: str) -> object | None:
    text = chunk.strip()
    if not text.startswith(("{", "[")):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def context_statements(context: str | Sequence[str]) -> tuple[tuple[str, ...], ...]:
    """Per chunk, its statements: sentences for prose, ``"path: value"`` for JSON leaves."""
    out: list[tuple[str, ...]] = []
    for chunk in context_chunks(context) or ():
        parsed = _as_json(chunk)
        if parsed is not None:
            out.append(tuple(_json_statements(parsed)))
        else:
            out.append(tuple(chunk[a:b] for a, b in _sentences(chunk)))
    return tuple(out)


def statement_joint(chunk: str) -> str:
    """What joins consecutive statements of `chunk` into one passage: ``"; "`` between the
    fields of a JSON chunk, a space between sentences of prose."""
    return "; " if _as_json(chunk) is not None else " "


def split_windows(
    context: str | Sequence[str], max_sentences: int = DEFAULT_WINDOW_SENTENCES
) -> tuple[Window, ...]:
    """Every run of 1..``max_sentences`` consecutive statements within a chunk, shortest
    first at each start; a run is not widened past ``_MAX_WINDOW_CHARS``."""
    if max_sentences < 1:
        raise ScoringError(f"max_sentences must be at least 1, got {max_sentences}")
    windows: list[Window] = []
    chunks = context_chunks(context) or ()
    for c, statements in enumerate(context_statements(context)):
        joint = statement_joint(chunks[c])
        for first in range(len(statements)):
            text = statements[first]
            windows.append(Window(text, c, first, 1))
            for size in range(2, max_sentences + 1):
                if first + size > len(statements) or len(text) > _MAX_WINDOW_CHARS:
                    break
                text = f"{text}{joint}{statements[first + size - 1]}"
                windows.append(Window(text, c, first, size))
    return tuple(windows)


# ------------------------------------------------------------------------ candidates


def lexical_overlap(claim: str, window: str) -> float:
    """Share of the claim's content stems (numbers included) the window contains; 1.0 for
    a claim with none."""
    own = _content_keys(claim)
    if not own:
        return 1.0
    return len(own & _content_keys(window)) / len(own)


def rank_windows(
    claims: Sequence[str],
    windows: Sequence[str],
    claim_vectors: np.ndarray | None = None,
    window_vectors: np.ndarray | None = None,
    k: int = DEFAULT_CANDIDATES,
) -> tuple[tuple[int, ...], ...]:
    """For each claim, the indexes of its ``k`` best windows by a cheap score: lexical
    overlap, plus the cosine of the given vectors when both are given. Ties keep the
    earlier (shorter) window."""
    if (claim_vectors is None) != (window_vectors is None):
        raise ScoringError("give vectors for both claims and windows, or for neither")
    if not windows:
        return tuple(() for _ in claims)
    window_keys = [_content_keys(w) for w in windows]  # once per window, not per pair
    score = np.zeros((len(claims), len(windows)))
    for i, claim in enumerate(claims):
        own = _content_keys(claim)
        if not own:
            score[i] = 1.0
            continue
        score[i] = [len(own & keys) / len(own) for keys in window_keys]
    if claim_vectors is not None and window_vectors is not None:
        if claim_vectors.shape[0] != len(claims) or window_vectors.shape[0] != len(windows):
            raise ScoringError("vector rows must match the claims and windows")
        a = claim_vectors / np.maximum(np.linalg.norm(claim_vectors, axis=1, keepdims=True), 1e-12)
        b = window_vectors / np.maximum(
            np.linalg.norm(window_vectors, axis=1, keepdims=True), 1e-12
        )
        score = score + a @ b.T
    k = min(k, len(windows))
    return tuple(tuple(int(i) for i in np.argsort(-row, kind="stable")[:k]) for row in score)


def summarise(
    claims: Sequence[Claim],
    windows: Sequence[Window],
    candidates: Sequence[Sequence[int]],
    pair_scores: Sequence[Sequence[float]],
) -> ClaimSupport:
    """The :class:`ClaimSupport` of scored pairs: each claim keeps its best window, the
    response its weakest claim. A claim with no candidate window scores 0.0."""
    if not (len(claims) == len(candidates) == len(pair_scores)):
        raise ScoringError("claims, candidates and pair scores must have one row per claim")
    if not claims:
        return ClaimSupport(1.0, None, None, (), ())
    best: list[tuple[float, Window | None]] = []
    ranked: list[tuple[Window, ...]] = []
    for cand, scores in zip(candidates, pair_scores, strict=True):
        if len(cand) != len(scores):
            raise ScoringError("each claim needs one score per candidate window")
        order = sorted(range(len(cand)), key=lambda i: (-scores[i], i))
        ranked.append(tuple(windows[cand[i]] for i in order))
        if not cand:
            best.append((0.0, None))
            continue
        best.append((float(scores[order[0]]), windows[cand[order[0]]]))
    weakest = min(range(len(claims)), key=lambda i: (best[i][0], i))
    return ClaimSupport(
        score=best[weakest][0],
        weakest=claims[weakest],
        window=best[weakest][1],
        claims=tuple(claims),
        claim_scores=tuple(s for s, _ in best),
        ranked=tuple(ranked),
    )
