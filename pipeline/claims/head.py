"""The claim-support scorer: pair features and the small head that turns them into P(supported).

Why it exists
    A cross-encoder reads claim and passage together and would be the natural pair model,
    but fine-tuning and running one is too slow for this project's machines (measured:
    0.35 s per training pair, 20 pairs a second when scoring, on two shared cores). The
    model here keeps the shipped sentence encoder frozen and learns only a small head over
    a handful of facts about a (claim, window) pair: how close the two embeddings are, and
    what an embedding blurs — is every number and name of the claim in the window, does
    one statement of the window carry the claim on its own (with its numbers and names) or
    is it stitched from words scattered over the context, does the claim negate what the
    window does not. Feeding the embeddings' product and difference (a bi-encoder
    classifier's usual input) as well was measured and dropped: with a few thousand
    labelled claims it fitted the training contexts, and group-wise cross-validated claim
    AUROC on RAGTruth QA and Summary fell from 0.73 to 0.68.
    The head is a one-hidden-layer network (or a logistic model) stored as plain arrays,
    so scoring needs numpy only.

Failure posture
    Pure but for ``read_head`` (one file read); no torch. A head whose arrays do not fit
    together, or features of the wrong width, raise :class:`ScoringError`. A zero vector
    (an empty text) gives cosine 0.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from pipeline.claims.support import measure_support
from pipeline.claims.units import (
    DEFAULT_CANDIDATES,
    ClaimSupport,
    context_statements,
    rank_windows,
    split_claims,
    split_windows,
    summarise,
)
from pipeline.errors import ScoringError

__all__ = [
    "LEXICAL_FEATURES",
    "Candidates",
    "ClaimHead",
    "PairReader",
    "ReaderInput",
    "assess",
    "candidate_windows",
    "pair_features",
    "prepare_pairs",
    "read",
    "read_head",
    "reader_input",
]

LEXICAL_FEATURES = (
    "cosine",
    "window_coverage",
    "best_statement_coverage",
    "best_statement_entity_missing",
    "unsupported_number",
    "unsupported_name",
    "negation_mismatch",
    "context_coverage",
)
"""The pair features, in order."""

_NEGATION_RE = re.compile(r"\b(?:not|no|never|none|neither|nor|without)\b|n't\b", re.IGNORECASE)

Encode = Callable[[Sequence[str]], np.ndarray]
"""Texts to embedding rows (the sentence encoder's ``encode``)."""
PairReader = Callable[[Sequence[tuple[str, str]]], np.ndarray]
"""(claim, evidence) pairs to P(supported) (the claim reader, :mod:`pipeline.claims.reader`)."""


def _unit(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=-1, keepdims=True)
    return np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0)


def pair_features(
    claim: str,
    statements: Sequence[str],
    claim_vector: np.ndarray,
    window_vector: np.ndarray,
    context_coverage: float,
) -> np.ndarray:
    """Features of one (claim, window) pair (see ``LEXICAL_FEATURES``); ``statements`` are
    the window's statements, ``context_coverage`` the claim's content coverage over the
    whole context."""
    u, v = _unit(claim_vector.astype(np.float32)), _unit(window_vector.astype(np.float32))
    window = " ".join(statements)
    whole = measure_support(claim, [window])
    # The statement that carries most of the claim: are the claim's numbers and names in
    # *it*? ("The capital is Sydney" against "Canberra is the capital. Sydney is its
    # largest city." is covered by the window, not by any one statement.)
    best = whole
    if len(statements) > 1:
        best = max(
            (measure_support(claim, [s]) for s in statements), key=lambda r: r.content_coverage
        )
    negated = bool(_NEGATION_RE.search(claim)) != bool(_NEGATION_RE.search(window))
    return np.array(
        [
            float(u @ v),
            whole.content_coverage,
            best.content_coverage,
            float(bool(best.unsupported_numbers or best.unsupported_names)),
            float(bool(whole.unsupported_numbers)),
            float(bool(whole.unsupported_names)),
            float(negated),
            context_coverage,
        ],
        dtype=np.float32,
    )


@dataclass(frozen=True, slots=True)
class ClaimHead:
    """Standardisation and layers of the pair classifier: ReLU between layers, a sigmoid
    at the end. ``layers`` holds (weights, bias) pairs, weights shaped (inputs, outputs)."""

    mean: np.ndarray
    scale: np.ndarray
    layers: tuple[tuple[np.ndarray, np.ndarray], ...]

    def __post_init__(self) -> None:
        if not self.layers:
            raise ScoringError("a claim head needs at least one layer")
        width = self.mean.shape[0]
        if self.scale.shape != (width,):
            raise ScoringError(f"scale has shape {self.scale.shape}, expected ({width},)")
        for w, b in self.layers:
            if w.ndim != 2 or w.shape[0] != width or b.shape != (w.shape[1],):
                raise ScoringError(f"layer of shape {w.shape} does not follow width {width}")
            width = w.shape[1]
        if width != 1:
            raise ScoringError(f"the last layer must have one output, has {width}")

    @property
    def n_features(self) -> int:
        return int(self.mean.shape[0])

    def probability(self, features: np.ndarray) -> np.ndarray:
        """P(supported) for each row of ``features``."""
        x = np.atleast_2d(features).astype(np.float32)
        if x.shape[1] != self.n_features:
            raise ScoringError(f"features have width {x.shape[1]}, expected {self.n_features}")
        x = (x - self.mean) / self.scale
        for i, (w, b) in enumerate(self.layers):
            x = x @ w + b
            if i < len(self.layers) - 1:
                x = np.maximum(x, 0.0)
        return 1.0 / (1.0 + np.exp(-x[:, 0].astype(np.float64)))


def read_head(path: str | Path) -> ClaimHead:
    """The head stored at ``path`` (a ``head.npz`` written by ``groundstream train``)."""
    with np.load(path) as saved:
        n = sum(1 for name in saved.files if name.startswith("w"))
        layers = tuple(
            (saved[f"w{i}"].astype(np.float32), saved[f"b{i}"].astype(np.float32)) for i in range(n)
        )
        return ClaimHead(
            saved["mean"].astype(np.float32), saved["scale"].astype(np.float32), layers
        )


@dataclass(frozen=True, slots=True)
class Candidates:
    """A context's windows and, for each claim, its ``k`` best windows by the cheap ranking
    (lexical overlap plus the cosine of the bundled encoder's vectors)."""

    windows: tuple
    candidates: tuple[tuple[int, ...], ...]
    statements: tuple[str, ...]
    window_statements: tuple[tuple[str, ...], ...]
    claim_vectors: np.ndarray
    window_vectors: np.ndarray

    def evidence(self, i: int) -> str:
        """Claim ``i``'s candidate windows joined in context order: what the claim reader
        reads the claim against."""
        chosen = sorted(
            (self.windows[j] for j in self.candidates[i]), key=lambda w: (w.chunk, w.first)
        )
        return " ".join(w.text for w in chosen)


def candidate_windows(
    claims: Sequence[str],
    context: str | Sequence[str],
    encode: Encode,
    k: int = DEFAULT_CANDIDATES,
) -> Candidates:
    """The windows each claim is scored against, for the head and the reader alike. A
    window's vector is the mean of its statements' vectors (each statement embedded once)."""
    statements = context_statements(context)
    flat = [s for chunk in statements for s in chunk]
    windows = split_windows(context)
    offsets = np.cumsum([0] + [len(chunk) for chunk in statements])
    vectors = encode([*claims, *flat]) if (claims or flat) else np.zeros((0, 1))
    claim_vecs, stmt_vecs = vectors[: len(claims)], _unit(vectors[len(claims) :])
    window_stmts = [
        flat[offsets[w.chunk] + w.first : offsets[w.chunk] + w.first + w.size] for w in windows
    ]
    window_vecs = np.array(
        [
            stmt_vecs[offsets[w.chunk] + w.first : offsets[w.chunk] + w.first + w.size].mean(0)
            for w in windows
        ]
    ).reshape(len(windows), vectors.shape[1])
    texts = [w.text for w in windows]
    cands = rank_windows(claims, texts, claim_vecs, window_vecs, k) if windows else ()
    cands = cands or tuple(() for _ in claims)
    return Candidates(
        windows, cands, tuple(flat), tuple(map(tuple, window_stmts)), claim_vecs, window_vecs
    )


def prepare_pairs(
    claims: Sequence[str],
    context: str | Sequence[str],
    encode: Encode,
    k: int = DEFAULT_CANDIDATES,
) -> tuple[tuple, tuple[tuple[int, ...], ...], np.ndarray]:
    """Windows, candidates and the head's pair features for claim texts against a context."""
    found = candidate_windows(claims, context, encode, k)
    flat, cands = found.statements, found.candidates
    coverage = [measure_support(c, flat).content_coverage if flat else 0.0 for c in claims]
    rows = [
        pair_features(
            c,
            found.window_statements[j],
            found.claim_vectors[i],
            found.window_vectors[j],
            coverage[i],
        )
        for i, c in enumerate(claims)
        for j in cands[i]
    ]
    features = np.array(rows, dtype=np.float32).reshape(len(rows), len(LEXICAL_FEATURES))
    return found.windows, cands, features


@dataclass(frozen=True, slots=True)
class ReaderInput:
    """One response's claims, their windows, and the (claim, evidence) pairs to read: one
    pair per claim that has a candidate window, its evidence the candidates joined."""

    claims: tuple
    found: Candidates
    pairs: tuple[tuple[str, str], ...]

    def summarise(self, probabilities: Sequence[float]) -> ClaimSupport:
        """The :class:`ClaimSupport` given the reader's P(supported) of ``pairs``; the
        window named is each claim's best-ranked candidate."""
        if len(probabilities) != len(self.pairs):
            raise ScoringError(f"{len(probabilities)} reader scores for {len(self.pairs)} pairs")
        probs = iter(probabilities)
        cands = tuple(cand[:1] for cand in self.found.candidates)
        scores = [(float(next(probs)),) if cand else () for cand in cands]
        summary = summarise(self.claims, self.found.windows, cands, scores)
        # The reader reads a claim's candidates together, so their order is the ranking's.
        windows = self.found.windows
        ranked = tuple(tuple(windows[j] for j in cand) for cand in self.found.candidates)
        return replace(summary, ranked=ranked)


def reader_input(response: str, context: str | Sequence[str], encode: Encode) -> ReaderInput:
    """What the claim reader reads of a response: each claim against its candidate windows."""
    claims = split_claims(response)
    found = candidate_windows([c.text for c in claims], context, encode)
    pairs = tuple((c.text, found.evidence(i)) for i, c in enumerate(claims) if found.candidates[i])
    return ReaderInput(claims, found, pairs)


def read(
    response: str, context: str | Sequence[str], encode: Encode, reader: PairReader
) -> ClaimSupport:
    """The response's :class:`ClaimSupport` by the claim reader (see :class:`ReaderInput`)."""
    found = reader_input(response, context, encode)
    return found.summarise(reader(found.pairs) if found.pairs else ())


def assess(
    response: str, context: str | Sequence[str], encode: Encode, head: ClaimHead
) -> ClaimSupport:
    """The response's :class:`ClaimSupport`: every claim against its candidate windows."""
    claims = split_claims(response)
    windows, cands, features = prepare_pairs([c.text for c in claims], context, encode)
    probs = head.probability(features) if len(features) else np.zeros(0)
    scores, at = [], 0
    for cand in cands:
        scores.append(tuple(float(p) for p in probs[at : at + len(cand)]))
        at += len(cand)
    return summarise(claims, windows, cands, scores)
