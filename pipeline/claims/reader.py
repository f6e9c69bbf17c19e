"""The claim reader: a cross-encoder that reads a claim and its evidence together.

Why it exists
    The claim head (:mod:`pipeline.claims.head`) sees a claim and a window only through
    frozen sentence embeddings and word overlap, so it cannot read a relation: the right
    entity in the wrong role, a swapped number, a value read from the wrong key. The
    reader is the bundled all-MiniLM-L6-v2 fine-tuned by ``groundstream train claims`` as
    a pair classifier over ``[CLS] claim [SEP] evidence [SEP]``; it outputs P(supported).

Artefact
    A directory holding ``reader.onnx`` (int8, dynamically quantised), ``tokenizer.json``
    and ``reader.json`` (how it was trained: data hashes, seed, minutes, figures, and the
    ``max_tokens`` it was trained at). It runs on ONNX Runtime with the ``tokenizers``
    package: no torch at serving time.

Failure posture
    Loading raises ``FileNotFoundError`` naming the missing file, and ``ScoringError`` for
    a model whose output is not one logit per pair. Scoring is deterministic; an empty
    evidence text is scored like any other (the model learned that nothing supports
    nothing).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pipeline.errors import ScoringError

__all__ = ["MODEL_FILE", "ClaimReader", "bundled_reader_dir"]

MODEL_FILE = "reader.onnx"
META_FILE = "reader.json"
TOKENIZER_FILE = "tokenizer.json"
BATCH = 32
"""Pairs per ONNX Runtime call; pairs are sorted by length first, so little is padding."""


def bundled_reader_dir() -> Path:
    """Where the reader trained here ships (inside the package, read-only)."""
    return Path(__file__).resolve().parent / "data" / "reader"


def _threads() -> int:
    raw = os.environ.get("OMP_NUM_THREADS", "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else 0


class ClaimReader:
    """P(supported) for (claim, evidence) pairs from an exported reader directory."""

    def __init__(self, model_dir: str | Path) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.model_dir = Path(model_dir)
        for name in (MODEL_FILE, META_FILE, TOKENIZER_FILE):
            if not (self.model_dir / name).is_file():
                raise FileNotFoundError(f"claim reader file missing: {self.model_dir / name}")
        self.metadata = json.loads((self.model_dir / META_FILE).read_text())
        self.max_tokens = int(self.metadata["max_tokens"])
        tokenizer = Tokenizer.from_file(str(self.model_dir / TOKENIZER_FILE))
        tokenizer.enable_truncation(max_length=self.max_tokens, strategy="longest_first")
        tokenizer.enable_padding(pad_id=tokenizer.token_to_id("[PAD]") or 0)
        self._tokenizer = tokenizer
        options = ort.SessionOptions()
        options.intra_op_num_threads = _threads()
        options.inter_op_num_threads = 1
        self._session = ort.InferenceSession(
            str(self.model_dir / MODEL_FILE), options, providers=["CPUExecutionProvider"]
        )

    @property
    def version(self) -> str:
        """A short name of the artefact for decision records (its weights' digest)."""
        return str(self.metadata.get("onnx_sha256", ""))[:12]

    def logits(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """One logit per (claim, evidence) pair, in input order."""
        out = np.zeros(len(pairs), dtype=np.float64)
        order = sorted(range(len(pairs)), key=lambda i: -len(pairs[i][0]) - len(pairs[i][1]))
        for start in range(0, len(order), BATCH):
            chosen = order[start : start + BATCH]
            encodings = self._tokenizer.encode_batch([pairs[i] for i in chosen])
            feed = {
                "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
                "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
                "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
            }
            (logits,) = self._session.run(None, feed)
            if logits.shape != (len(chosen), 1):
                raise ScoringError(f"claim reader output has shape {logits.shape}, expected (n, 1)")
            out[chosen] = logits[:, 0]
        return out

    def probability(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """P(supported) for each pair."""
        return 1.0 / (1.0 + np.exp(-self.logits(pairs)))
