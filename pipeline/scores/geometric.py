"""Geometric grounding scores (the geometry rung): SGI with a context, DGI without one.

Pure float64 math over embeddings, plus batch helpers that ask an `Encoder` for all the
embeddings a batch needs in one call. Nothing here loads a model or a policy: the encoder
and μ̂ are passed in (`pipeline.policy.defaults` supplies the shipped ones), so `import pipeline`
stays light.

Failure posture: empty text is bad input (`ScoringError`); a zero-norm or NaN embedding
gives a *flagged* result with value 0.0, never an exception, so the switch can refuse it.
Long texts are never silently truncated: the encoder cuts them into overlapping windows,
a context window is scored like a chunk, and a response is embedded as the mean of its
windows; the result records how many windows were used.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

import numpy as np

from pipeline.bounds.thresholds import SGI_DEGENERATE
from pipeline.encoding.chunks import context_chunks
from pipeline.errors import ScoringError
from pipeline.scores.results import DGIResult, SGIResult

_EPS_NORM = 1e-12
_EPS_THETA = 1e-6  # radians; below this θ(r, c) counts as zero (response == context)

Vector = np.ndarray


class Encoder(Protocol):
    """What geometry needs from a sentence encoder."""

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embeddings, one row per text (any norm; scores normalise in float64)."""
        ...

    def windows(self, text: str) -> list[str]:
        """The text cut into overlapping windows that each fit the encoder (one if it fits)."""
        ...


def unit(vector: Vector) -> Vector | None:
    """L2-normalised float64 copy, or None when the vector is zero or not finite."""
    v = np.asarray(vector, dtype=np.float64)
    if not np.all(np.isfinite(v)):
        return None
    norm = float(np.linalg.norm(v))
    return None if norm < _EPS_NORM else v / norm


def angle(a: Vector, b: Vector) -> float:
    """θ = arccos of the clipped cosine of two unit vectors, in radians."""
    return float(np.arccos(np.clip(float(np.dot(a, b)), -1.0, 1.0)))


def mean_embedding(rows: np.ndarray) -> Vector:
    """Mean of per-window embeddings, each normalised first so no window dominates."""
    rows = np.asarray(rows, dtype=np.float64)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    safe = np.where(norms < _EPS_NORM, 1.0, norms)
    return (rows / safe).mean(axis=0)


def sgi_from_embeddings(
    question: Vector,
    response: Vector,
    chunks: Sequence[Vector],
    *,
    response_windows: int = 1,
    context_windows: int | None = None,
) -> SGIResult:
    """SGI = θ(r, q) / θ(r, c), best over the context chunks; see the module docstring."""
    n_chunks = len(chunks)
    windows = n_chunks if context_windows is None else context_windows
    if n_chunks == 0:
        raise ScoringError("SGI needs at least one context chunk")
    q, r = unit(question), unit(response)
    bad = "question" if q is None else "response" if r is None else ""
    if bad:
        return SGIResult(
            0.0,
            0.0,
            0.0,
            -1,
            n_chunks,
            response_windows,
            windows,
            True,
            f"{bad} embedding is zero or not finite",
        )
    theta_rq = angle(r, q)
    best: tuple[float, float, int] | None = None
    for index, chunk in enumerate(chunks):
        c = unit(chunk)
        if c is None:
            continue
        theta_rc = angle(r, c)
        value = SGI_DEGENERATE if theta_rc < _EPS_THETA else theta_rq / theta_rc
        if best is None or value > best[0]:
            best = (value, theta_rc, index)
    if best is None:
        return SGIResult(
            0.0,
            theta_rq,
            0.0,
            -1,
            n_chunks,
            response_windows,
            windows,
            True,
            "every context embedding is zero or not finite",
        )
    value, theta_rc, index = best
    return SGIResult(value, theta_rq, theta_rc, index, n_chunks, response_windows, windows)


def dgi_from_embeddings(
    question: Vector, response: Vector, reference: Vector, *, response_windows: int = 1
) -> DGIResult:
    """DGI = cos(unit(φ(r) − φ(q)), μ̂) with unit φ and unit reference direction μ̂."""
    q, r, mu = unit(question), unit(response), unit(reference)
    if q is None or r is None or mu is None:
        which = "question" if q is None else "response" if r is None else "reference direction"
        return DGIResult(0.0, 0.0, response_windows, True, f"{which} is zero or not finite")
    displacement = r - q
    d = unit(displacement)
    if d is None:
        return DGIResult(
            0.0, 0.0, response_windows, True, "response and question embed identically"
        )
    value = float(np.clip(np.dot(d, mu), -1.0, 1.0))
    return DGIResult(value, float(np.linalg.norm(displacement)), response_windows)


def _require_text(name: str, text: object) -> str:
    if not isinstance(text, str) or not text.strip():
        raise ScoringError(f"{name} must be a non-empty string")
    return text


def as_chunks(context: str | Sequence[str]) -> list[str]:
    """A context as a list of non-empty chunks; a plain string is one chunk."""
    chunks = list(context_chunks(context) or ())
    if not chunks:
        raise ScoringError("context must be a non-empty string or a non-empty list of strings")
    for i, chunk in enumerate(chunks):
        _require_text(f"context[{i}]", chunk)
    return chunks


class _Plan:
    """Collects the distinct texts of a batch so the encoder sees each once."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self._index: dict[str, int] = {}

    def add(self, text: str) -> int:
        if text not in self._index:
            self._index[text] = len(self.texts)
            self.texts.append(text)
        return self._index[text]

    def add_windows(self, encoder: Encoder, text: str) -> list[int]:
        return [self.add(w) for w in encoder.windows(text)]

    def embed(self, encoder: Encoder) -> np.ndarray:
        if not self.texts:
            return np.zeros((0, 0))
        return np.asarray(encoder.encode(self.texts), dtype=np.float64)


def compute_sgi_batch(
    items: Sequence[tuple[str, str | Sequence[str], str]], encoder: Encoder
) -> list[SGIResult]:
    """SGI for many (question, context, response) triples with one encoder call."""
    plan = _Plan()
    layout = []
    for question, context, response in items:
        q = plan.add(_require_text("question", question))
        r = plan.add_windows(encoder, _require_text("response", response))
        c = [plan.add_windows(encoder, chunk) for chunk in as_chunks(context)]
        layout.append((q, r, c))
    emb = plan.embed(encoder)
    results = []
    for q, r, chunk_windows in layout:
        flat = [emb[i] for windows in chunk_windows for i in windows]
        result = sgi_from_embeddings(
            emb[q],
            mean_embedding(emb[r]),
            flat,
            response_windows=len(r),
            context_windows=len(flat),
        )
        results.append(_with_chunk_index(result, chunk_windows))
    return results


def _with_chunk_index(result: SGIResult, chunk_windows: list[list[int]]) -> SGIResult:
    """Map the best window back to the caller's chunk index; n_chunks is the caller's count."""
    owner = [chunk for chunk, windows in enumerate(chunk_windows) for _ in windows]
    best = owner[result.best_chunk] if result.best_chunk >= 0 else -1
    return replace(result, best_chunk=best, n_chunks=len(chunk_windows))


def compute_dgi_batch(
    items: Sequence[tuple[str, str]], encoder: Encoder, reference: Vector
) -> list[DGIResult]:
    """DGI for many (question, response) pairs with one encoder call."""
    plan = _Plan()
    layout = [
        (
            plan.add(_require_text("question", q)),
            plan.add_windows(encoder, _require_text("response", r)),
        )
        for q, r in items
    ]
    emb = plan.embed(encoder)
    return [
        dgi_from_embeddings(emb[q], mean_embedding(emb[r]), reference, response_windows=len(r))
        for q, r in layout
    ]


def compute_sgi(
    question: str, context: str | Sequence[str], response: str, encoder: Encoder
) -> SGIResult:
    """SGI of one response, the seed's formula on the whole text given (`pipeline.compute_sgi`
    reads the answer's core instead, as the geometry stage does, and fills in the encoder)."""
    return compute_sgi_batch([(question, context, response)], encoder)[0]


def compute_dgi(question: str, response: str, encoder: Encoder, reference: Vector) -> DGIResult:
    """DGI of one response against μ̂ (`pipeline.compute_dgi` fills in the shipped one)."""
    return compute_dgi_batch([(question, response)], encoder, reference)[0]
