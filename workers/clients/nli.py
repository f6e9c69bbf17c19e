"""Meaning equivalence from an NLI cross-encoder, for grouping consistency samples.

Two texts mean the same when each entails the other: the similarity of a pair is the
smaller of the two entailment probabilities, so `consistency.same_meaning` reads as "both
directions entailed with at least this probability". GROUNDSTREAM_NLI_MODEL names the
model, loaded once per process: a claim reader trained here (`groundstream train claims`'s
output directory, or ``reader`` for one shipped in the package; `pipeline.claims.reader`,
ONNX Runtime, no torch), a published pair classifier `groundstream reader export` wrote
(``reader`` names GROUNDSTREAM_READER's, `Settings.nli_path`), or a local
sentence-transformers CrossEncoder directory (needs torch).
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
        return _both_ways(self._entailment, texts)

    def _entailment(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        logits = np.asarray(self.model.predict(pairs, convert_to_numpy=True), dtype=np.float64)
        logits = logits - logits.max(axis=1, keepdims=True)
        probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
        return probs[:, self.entailment]


READER = "reader"
"""GROUNDSTREAM_NLI_MODEL's name for the shipped claim reader."""


def _both_ways(directed_of, texts: Sequence[str]) -> np.ndarray:
    """min(P(i ⊨ j), P(j ⊨ i)) for every pair, 1 on the diagonal; ``directed_of`` maps
    (premise, hypothesis) pairs to entailment probabilities in one call."""
    n = len(texts)
    order = [(i, j) for i in range(n) for j in range(n) if i != j]
    out = np.eye(n)
    if not order:
        return out
    probs = directed_of([(texts[i], texts[j]) for i, j in order])
    for (i, j), p in zip(order, probs, strict=True):
        out[i, j] = p
    return np.minimum(out, out.T)


class ReaderSimilarity:
    """The claim reader as the NLI model: text j is entailed by text i when the reader
    finds claim j supported by evidence i. `reader`: an exported pair reader
    (`pipeline.claims.classifiers.PairClassifier`) instead of the one trained here."""

    def __init__(self, model_dir: Path, reader=None) -> None:
        if reader is None:
            from pipeline.claims.reader import ClaimReader

            reader = ClaimReader(model_dir)
        self.reader = reader

    def matrix(self, texts: Sequence[str]) -> np.ndarray:
        return _both_ways(lambda pairs: self.reader.probability([(h, p) for p, h in pairs]), texts)


@lru_cache(maxsize=2)
def load_nli(model_path: str) -> NliSimilarity | ReaderSimilarity:
    """`reader` (the claim reader shipped in the package), a directory `groundstream train
    claims` wrote (it holds ``reader.onnx``), a pair reader `groundstream reader export`
    wrote (checked against its reader.json), or a sentence-transformers CrossEncoder
    directory."""
    from pipeline.claims.classifiers import load_reader
    from pipeline.claims.reader import MODEL_FILE, bundled_reader_dir
    from pipeline.claims.readers import MODEL_FILE as EXPORTED_FILE

    directory = bundled_reader_dir() if model_path == READER else Path(model_path)
    if (directory / EXPORTED_FILE).is_file():
        reader = load_reader(directory)
        if not hasattr(reader, "probability"):
            raise ValueError(f"{directory}: a token classifier cannot compare two texts (NLI)")
        return ReaderSimilarity(directory, reader)
    if (directory / MODEL_FILE).is_file():
        return ReaderSimilarity(directory)
    if model_path == READER:
        raise FileNotFoundError(
            "no claim reader ships with this build (GROUNDSTREAM_NLI_MODEL=reader): set it to "
            "the directory `groundstream train claims --out DIR` wrote"
        )
    return NliSimilarity(model_path)
