"""The claim-support model as a worker uses it: the shipped head, loaded once per process.

The artefact is ``pipeline/data/claims/head.npz`` (the head's arrays, float16 weights)
with ``head.json`` beside it (how it was trained, on what, and its figures), written by
``groundstream train``. Scoring embeds claims and context statements with the bundled
sentence encoder (offline, the same one geometry uses, so its cache is shared) and runs the
head over every (claim, candidate window) pair of a response in one batch.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

import pipeline
from pipeline.claims.head import ClaimHead, assess, pair_features, read_head
from pipeline.claims.support import measure_support
from pipeline.claims.units import ClaimSupport, context_statements

__all__ = ["DEFAULT_HEAD_DIR", "ClaimScorer", "head_metadata", "load_head", "load_scorer"]

DEFAULT_HEAD_DIR = Path(pipeline.__file__).resolve().parent / "data" / "claims"
"""The shipped head: package data of ``pipeline``, so an installed copy finds it too."""


@lru_cache(maxsize=4)
def load_head(directory: str | Path = DEFAULT_HEAD_DIR) -> ClaimHead:
    """The head stored in ``directory`` (``head.npz``), read once per process."""
    path = Path(directory) / "head.npz"
    if not path.is_file():
        raise FileNotFoundError(f"claim-support head not found: {path}")
    return read_head(path)


def head_metadata(directory: str | Path = DEFAULT_HEAD_DIR) -> dict:
    """The training record next to the head (seed, data hashes, figures)."""
    return json.loads((Path(directory) / "head.json").read_text())


def lexical_coverage(claim: str, passage: str) -> float:
    """The claim's content coverage over the passage (the passage is the whole context)."""
    return measure_support(claim, [passage]).content_coverage


class ClaimScorer:
    """The sentence encoder and the claim head together: scores pairs and whole responses."""

    def __init__(self, head: ClaimHead, encoder) -> None:
        self.head = head
        self._encoder = encoder

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """P(supported) of each (claim, passage) pair, the passage read as one window."""
        if not pairs:
            return np.zeros(0)
        claims = [c for c, _ in pairs]
        passages = [" ".join(s for chunk in context_statements(p) for s in chunk) for _, p in pairs]
        vectors = self._encoder.encode([*claims, *passages])
        rows = [
            pair_features(c, [p], vectors[i], vectors[len(pairs) + i], lexical_coverage(c, p))
            for i, (c, p) in enumerate(zip(claims, passages, strict=True))
        ]
        return self.head.probability(np.stack(rows))

    def assess(self, response: str, context: str | Sequence[str]) -> ClaimSupport:
        """The response's weakest claim, its best window and score (one batch per response)."""
        return assess(response, context, self._encoder.encode, self.head)


@lru_cache(maxsize=2)
def load_scorer(directory: str | Path = DEFAULT_HEAD_DIR) -> ClaimScorer:
    """The process's scorer for the head in ``directory`` and the bundled encoder."""
    from pipeline.encoding.encoder import load_encoder

    return ClaimScorer(load_head(directory), load_encoder(None))
