"""Meaning equivalence from an NLI cross-encoder, for grouping consistency samples.

Two texts mean the same when each entails the other: the similarity of a pair is the
smaller of the two entailment probabilities, so `consistency.same_meaning` reads as "both
directions entailed with at least this probability". Loaded offline from a local
sentence-transformers CrossEncoder directory (GROUNDSTREAM_NLI_MODEL), once per process.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np


class NliSimilarity:
    def __init__(self, model_path: str) -> None:
        from sentence_transformers import CrossEncoder

        path = Path(model_path)
        if not path.is_dir():
            raise FileNotFoundError(
                f"NLI model directory not found: {path} (GROUNDSTREAM_NLI_MODEL)"
            )
        self.model = CrossEncoder(str(path), device="cpu", local_files_only=True)
        labels = {int(k): str(v).lower() for k, v in self.model.config.id2label.items()}
        found = [i for i, name in labels.items() if "entail" in name]
        if len(found) != 1:
            raise ValueError(f"NLI model {path} has no single entailment label: {labels}")
        self.entailment = found[0]

    def matrix(self, texts: Sequence[str]) -> np.ndarray:
        """n×n symmetric similarities: min(P(i ⊨ j), P(j ⊨ i)); 1 on the diagonal."""
        n = len(texts)
        pairs = [(texts[i], texts[j]) for i in range(n) for j in range(n) if i != j]
        out = np.eye(n)
        if not pairs:
            return out
        logits = np.asarray(self.model.predict(pairs, convert_to_numpy=True), dtype=np.float64)
        logits = logits - logits.max(axis=1, keepdims=True)
        probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
        entail = iter(probs[:, self.entailment])
        directed = np.eye(n)
        for i in range(n):
            for j in range(n):
                if i != j:
                    directed[i, j] = next(entail)
        return np.minimum(directed, directed.T)


@lru_cache(maxsize=2)
def load_nli(model_path: str) -> NliSimilarity:
    return NliSimilarity(model_path)
