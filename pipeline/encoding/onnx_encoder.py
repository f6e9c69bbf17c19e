"""The sentence encoder on ONNX Runtime: the same all-MiniLM-L6-v2, without torch at run time.

A geometry worker that runs the 22M-parameter encoder on a CPU does not need torch's
several hundred MB (or PyPI's CUDA build of several GB). The transformer is exported once
from the model directory's weights to ONNX (that step needs torch and `onnx`), cached under
``~/.cache/groundstream/onnx/`` keyed by the weights file, and from then on encoding needs
only `onnxruntime` and `tokenizers`. Pooling (mean over the attention mask) and the L2
normalisation are the model's own sentence-transformers modules, done here in numpy; the
embeddings equal the torch path's to within 1e-4 cosine (tests/unit/test_onnx_encoder.py).

`precision="int8"` loads the same graph quantised by `pipeline.encoding.quantize` (dynamic, per
channel, the feed-forward output layers kept fp32), cached beside the fp32 file under a
name of its own. It is 1.3-1.4x as fast on a quiet machine and *not* as exact: measured
by `groundstream encoder compare`, it misses the quality bar (docs/benchmarks.md,
"Quantised encoder"), so it is opt-in (GROUNDSTREAM_ENCODER_BACKEND=onnx-int8).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pipeline.files import replaced_whole

EXPORT_VERSION = "1"
"""Part of the cache key: bump when the exported graph changes."""
OPSET = 17
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
PRECISIONS = ("fp32", "int8")
INT8_RECIPE = "1"
"""Part of the int8 file's name: bump when `quantize_int8`'s recipe changes."""
INT8_RECIPES = ("dynamic", "weights")
"""`quantize_int8`'s recipes; static (QDQ) needs calibration texts (`encoder compare`)."""
KEEP_FP32 = re.compile(r"/layer\.\d+/output/dense/MatMul$")
"""The feed-forward output MatMuls stay fp32: their inputs (after GELU) carry the widest
activations, and keeping them cut the embeddings' mean cosine error by 40% (0.0071 →
0.0040 on 400 HaluEval texts)."""


ONNX_DIR_ENV = "GROUNDSTREAM_ONNX_DIR"
"""Where exported graphs are kept, when set: an image exports at build time into a
directory of its own, which a read-only root and an emptyDir /tmp leave in place."""


def cache_root() -> Path:
    """$GROUNDSTREAM_ONNX_DIR, else $XDG_CACHE_HOME/groundstream/onnx (~/.cache by default)."""
    if os.environ.get(ONNX_DIR_ENV):
        return Path(os.environ[ONNX_DIR_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "groundstream" / "onnx"


def _weights(model_dir: Path) -> Path:
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (model_dir / name).is_file():
            return model_dir / name
    raise FileNotFoundError(f"no model.safetensors or pytorch_model.bin in {model_dir}")


def _precision(precision: str) -> str:
    if precision not in PRECISIONS:
        allowed = ", ".join(PRECISIONS)
        raise ValueError(f"encoder precision {precision!r}: expected one of {allowed}")
    return precision


def onnx_path(model_dir: Path, root: Path | None = None, precision: str = "fp32") -> Path:
    """Where the export of `model_dir` lives: keyed by its weights' path, size and mtime, so
    a changed model is exported again and two models never share a file. The int8 graph
    lies beside the fp32 one, its name keyed by the quantisation recipe."""
    weights = _weights(model_dir).resolve()
    stat = weights.stat()
    key = f"{EXPORT_VERSION}:{weights}:{stat.st_size}:{stat.st_mtime_ns}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    name = "model.onnx" if _precision(precision) == "fp32" else f"model.int8-r{INT8_RECIPE}.onnx"
    return (root or cache_root()) / digest / name


def kept_fp32(fp32: Path) -> list[str]:
    """The nodes of the `fp32` graph that every int8 recipe leaves in fp32 (`KEEP_FP32`)."""
    import onnx

    graph = onnx.load(str(fp32), load_external_data=False).graph
    return [n.name for n in graph.node if KEEP_FP32.search(n.name)]


def quantize_int8(fp32: Path, target: Path, recipe: str = "dynamic") -> Path:
    """`fp32` graph → `target` by one of `INT8_RECIPES` (`pipeline.encoding.quantize`); the int8
    backend's graph is the dynamic one, the others are measured by `encoder compare`."""
    from pipeline.encoding.quantize import quantize_dynamic_int8, quantize_weights_int8

    if recipe == "dynamic":
        return quantize_dynamic_int8(fp32, target, keep_fp32=kept_fp32(fp32))
    if recipe == "weights":
        return quantize_weights_int8(fp32, target)
    raise ValueError(f"int8 recipe {recipe!r}: expected one of {', '.join(INT8_RECIPES)}")


def export_onnx(model_dir: Path, root: Path | None = None, precision: str = "fp32") -> Path:
    """Export the transformer of `model_dir` to ONNX unless already cached; its path.
    `precision="int8"` quantises the fp32 export (exported first if need be).

    Needs torch, transformers and onnx (only here). Written to a temporary name and renamed,
    so workers starting together never read half a file."""
    target = onnx_path(model_dir, root, precision)
    if target.is_file():
        return target
    if precision == "int8":
        try:
            import onnx  # noqa: F401  (the quantiser reads the graph with it)
        except ImportError:  # a runtime without it (the image): say what to run, where
            raise FileNotFoundError(
                f"no int8 encoder graph at {target}: run `groundstream encoder export "
                "--quantize int8` where onnx is installed"
            ) from None
        return quantize_int8(export_onnx(model_dir, root), target)
    import torch
    from transformers import AutoModel

    class _Hidden(torch.nn.Module):
        """The model's last hidden state from positional inputs, as the exporter wants."""

        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, ids: torch.Tensor, mask: torch.Tensor, types: torch.Tensor):
            out = self.model(input_ids=ids, attention_mask=mask, token_type_ids=types)
            return out.last_hidden_state

    model = _Hidden(AutoModel.from_pretrained(str(model_dir), local_files_only=True).eval())
    ids = torch.ones(2, 8, dtype=torch.long)
    axes = {name: {0: "batch", 1: "sequence"} for name in (*INPUTS, "last_hidden_state")}
    with torch.no_grad(), replaced_whole(target) as tmp:
        torch.onnx.export(
            model,
            (ids, torch.ones_like(ids), torch.zeros_like(ids)),
            str(tmp),
            input_names=list(INPUTS),
            output_names=["last_hidden_state"],
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,
        )
    return target


def _threads() -> int:
    """ONNX Runtime's intra-op threads: OMP_NUM_THREADS when set (as torch honours it),
    else 0, ONNX Runtime's own default (one per physical core)."""
    raw = os.environ.get("OMP_NUM_THREADS", "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else 0


class OnnxModel:
    """all-MiniLM-style model directory → normalised mean-pooled embeddings via ONNX Runtime."""

    def __init__(
        self,
        model_dir: Path,
        *,
        cache: Path | None = None,
        precision: str = "fp32",
        graph: Path | None = None,
    ) -> None:
        """`graph`: run this ONNX file instead of the cached export (a measured variant)."""
        import onnxruntime as ort
        from tokenizers import Tokenizer

        path = graph or onnx_path(model_dir, cache, precision)
        if not path.is_file():
            path = export_onnx(model_dir, cache, precision)
        config = json.loads((model_dir / "sentence_bert_config.json").read_text())
        self.max_seq_length = int(config["max_seq_length"])
        pooling = json.loads((model_dir / "1_Pooling" / "config.json").read_text())
        if not pooling.get("pooling_mode_mean_tokens"):
            raise ValueError(f"{model_dir}: only mean pooling is supported by the ONNX backend")
        self.dimension = int(pooling["word_embedding_dimension"])
        modules = json.loads((model_dir / "modules.json").read_text())
        self._normalize = any(m["type"].endswith(".Normalize") for m in modules)
        tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.offsets_tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.offsets_tokenizer.no_truncation()
        self.offsets_tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=self.max_seq_length)
        tokenizer.enable_padding(pad_id=tokenizer.token_to_id("[PAD]") or 0)
        self._tokenizer = tokenizer
        options = ort.SessionOptions()
        options.intra_op_num_threads = _threads()
        options.inter_op_num_threads = 1
        self._session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def offsets(self, text: str) -> list[tuple[int, int]]:
        """Character spans of `text`'s tokens, no special tokens, no truncation."""
        return list(self.offsets_tokenizer.encode(text, add_special_tokens=False).offsets)

    def encode_one(self, text: str) -> np.ndarray:
        """The embedding of one text, run alone at its own length (no padding)."""
        return self._encode_batch([text])[0]

    def feed(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """The graph's inputs for one batch of `texts` (also a calibration batch)."""
        encodings = self._tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}

    def _encode_batch(self, texts: list[str]) -> np.ndarray:
        feed = self.feed(texts)
        mask = feed["attention_mask"]
        (hidden,) = self._session.run(None, feed)
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        if self._normalize:
            pooled /= np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
        return pooled.astype(np.float32)
