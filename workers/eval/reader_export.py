"""`groundstream reader export HF_DIR --out DIR`: a Hugging Face checkpoint becomes a reader
directory (`pipeline.claims.readers`) served on ONNX Runtime, no torch.

What it does
    Reads ``config.json`` first, with no model library: the ``model_type`` must be one of
    `ARCHITECTURES`, the architecture a sequence classifier (a pair reader) or a token
    classifier (a token reader), and ``id2label`` must say which output is read
    (`map_labels`); each refusal is one line, before torch is imported. Then it loads the
    checkpoint with transformers (eager attention: the graph is traced), exports it with
    ``torch.onnx.export`` (the TorchScript exporter, opset 17, batch and sequence
    dynamic, traced on a padded batch, the wrapper in eval mode: the exporter leaves the
    wrapper's training flag on the model, and a new module is in training mode),
    runs the graph on ONNX Runtime against the torch model on a padded batch of its own
    tokenizer's pairs (refused beyond ``TOLERANCE``), and writes ``reader.json`` last, with
    the sha256 of every checkpoint file it read and every file it wrote.

Failure posture
    Needs torch and transformers (export only). A missing or unreadable checkpoint file,
    an unsupported architecture, an unmappable label set, a tokenizer it cannot write as
    ``tokenizer.json`` or a graph that disagrees with torch raise `ReaderError` (one line);
    a partly written directory has no ``reader.json`` and is refused by every loader.
"""

from __future__ import annotations

import inspect
import json
import shutil
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.claims.readers import (
    ARCHITECTURES,
    META_FILE,
    MODEL_FILE,
    TOKENIZER_FILE,
    ReaderKind,
    ReaderSpec,
    check_reader_dir,
    file_sha256,
    kind_of,
    map_labels,
    read_json_object,
)
from pipeline.errors import ReaderError

__all__ = ["TOLERANCE", "Exported", "export_reader", "read_checkpoint"]

TOLERANCE = 1e-4
"""Largest |logit difference| between the graph and the torch model on the check batch."""
OPSET = 17
PROBE = (
    ("The bridge opened in 1932 and is 503 metres long.", "It opened in 1932."),
    ("Ferries stopped running across the river in 1940.", "Ferries still run today."),
    ("short", "a much longer second text, so that the first row of the batch is padded"),
)
"""(first, second) texts of the check batch, of different lengths."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """What ``config.json`` says, checked: everything decided before torch is loaded."""

    directory: Path
    config: dict
    kind: ReaderKind
    architecture: str
    labels: tuple[str, ...]
    target: int
    max_tokens: int


@dataclass(frozen=True, slots=True)
class Exported:
    """A written reader directory, and how far its graph is from the torch model."""

    directory: Path
    spec: ReaderSpec
    max_difference: float

    def summary(self) -> str:
        spec = self.spec
        read = "supported" if spec.kind is ReaderKind.PAIR else "unsupported"
        what = "pair classifier" if spec.kind is ReaderKind.PAIR else "token classifier"
        return (
            f"wrote {self.directory}: {what} ({spec.architecture}), {read} = output "
            f"{spec.target} {spec.labels[spec.target]!r} of {list(spec.labels)}, reads "
            f"({', '.join(spec.order)}) up to {spec.max_tokens} tokens, fp32, max |logit "
            f"difference| to torch {self.max_difference:.1e}; GROUNDSTREAM_READER={self.directory}"
        )


def _json(path: Path) -> dict:
    return read_json_object(path, "a checkpoint directory holds config.json")


def _max_tokens(directory: Path, config: dict, asked: int | None) -> int:
    """The longest input the checkpoint takes: its position table (less RoBERTa's offset)
    and its tokenizer's ``model_max_length``, or less when asked."""
    limit = int(config.get("max_position_embeddings") or 512)
    if config.get("model_type") == "roberta":
        limit -= int(config.get("pad_token_id") or 0) + 1
    tokenizer_config = directory / "tokenizer_config.json"
    if tokenizer_config.is_file():
        told = _json(tokenizer_config).get("model_max_length")
        if isinstance(told, int) and 0 < told < 1_000_000:
            limit = min(limit, told)
    if asked is not None:
        if asked > limit:
            raise ReaderError(f"--max-tokens {asked} is over the checkpoint's {limit}")
        limit = asked
    return limit


def read_checkpoint(
    directory: Path, *, label: str | None = None, max_tokens: int | None = None
) -> Checkpoint:
    """Check a checkpoint's ``config.json`` (see the module docstring); `label` names the
    supported (pair) or unsupported (token) label where ``id2label`` does not say."""
    if not directory.is_dir():
        raise ReaderError(
            f"{directory}: not a checkpoint directory (config.json, weights, tokenizer)"
        )
    config = _json(directory / "config.json")
    model_type = str(config.get("model_type", ""))
    if model_type not in ARCHITECTURES:
        raise ReaderError(
            f"{directory}: model type {model_type!r} is not supported; supported: "
            f"{', '.join(ARCHITECTURES)}"
        )
    try:
        kind = kind_of(config.get("architectures"))
        labels, target = map_labels(config.get("id2label") or {}, kind, label)
    except ReaderError as exc:
        raise ReaderError(f"{directory}: {exc}") from None
    return Checkpoint(
        directory,
        config,
        kind,
        model_type,
        labels,
        target,
        _max_tokens(directory, config, max_tokens),
    )


def _source_hashes(directory: Path) -> dict[str, str]:
    """sha256 of every file at the top of the checkpoint directory (hidden ones aside)."""
    return {
        p.name: file_sha256(p)
        for p in sorted(directory.iterdir())
        if p.is_file() and not p.name.startswith(".")
    }


def _write_tokenizer(directory: Path, target: Path) -> None:
    """``tokenizer.json`` as the checkpoint ships it, else converted by transformers."""
    shipped = directory / TOKENIZER_FILE
    if shipped.is_file():
        shutil.copyfile(shipped, target)
        return
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
        tokenizer.backend_tokenizer.save(str(target))
    except Exception as exc:  # transformers raises many kinds for a missing vocabulary
        raise ReaderError(
            f"{directory}: no {TOKENIZER_FILE}, and its tokenizer cannot be converted to one "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
        ) from None


def _pad_id(config: dict, tokenizer) -> int:
    if isinstance(config.get("pad_token_id"), int):
        return int(config["pad_token_id"])
    padding = tokenizer.padding
    return int(padding["pad_id"]) if padding else 0


def export_reader(
    directory: Path,
    out: Path,
    *,
    label: str | None = None,
    max_tokens: int | None = None,
    order: tuple[str, str] | None = None,
) -> Exported:
    """Export the checkpoint in `directory` as a reader directory `out` (see the module
    docstring). `order`: which text the checkpoint reads first (default: the evidence, as
    NLI premises are read; the context for a token classifier)."""
    found = read_checkpoint(directory, label=label, max_tokens=max_tokens)
    order = order or (
        ("evidence", "claim") if found.kind is ReaderKind.PAIR else ("context", "answer")
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / META_FILE).unlink(missing_ok=True)  # a half-written directory loads nowhere
    _write_tokenizer(directory, out / TOKENIZER_FILE)
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(out / TOKENIZER_FILE))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    pad_id = _pad_id(found.config, tokenizer)
    tmp = out / (MODEL_FILE + ".tmp")
    with _quiet():
        model, inputs = _load_model(found)
        _trace(model, inputs, tmp, found.kind)
        difference = _compare(model, inputs, tmp, tokenizer, pad_id, found)
    tmp.replace(out / MODEL_FILE)
    spec = ReaderSpec(
        found.kind,
        found.architecture,
        found.labels,
        found.target,
        order,
        found.max_tokens,
        inputs,
        pad_id,
        tuple((name, file_sha256(out / name)) for name in (MODEL_FILE, TOKENIZER_FILE)),
        tuple(_source_hashes(directory).items()),
    )
    (out / META_FILE).write_text(json.dumps(spec.to_dict(), indent=2) + "\n", encoding="utf-8")
    checked = check_reader_dir(out)
    assert checked == spec
    return Exported(out, spec, difference)


@contextmanager
def _quiet() -> Iterator[None]:
    """The tracer's and loader's warnings and progress bars stay off the command's output:
    the check against torch (`_compare`) is what says whether the graph is right."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(verbosity)
        hf_logging.enable_progress_bar()


def _load_model(found: Checkpoint):
    """The torch model in eval mode and the graph's input names."""
    import transformers

    auto = (
        transformers.AutoModelForSequenceClassification
        if found.kind is ReaderKind.PAIR
        else transformers.AutoModelForTokenClassification
    )
    try:
        model = auto.from_pretrained(
            str(found.directory), local_files_only=True, attn_implementation="eager"
        ).eval()
    except OSError as exc:
        raise ReaderError(f"{found.directory}: {str(exc).splitlines()[0]}") from None
    accepted = inspect.signature(model.forward).parameters
    types = int(found.config.get("type_vocab_size") or 0) > 1 and "token_type_ids" in accepted
    inputs = ("input_ids", "attention_mask", *(("token_type_ids",) if types else ()))
    return model, inputs


def _trace(model, inputs: tuple[str, ...], target: Path, kind: ReaderKind) -> None:
    import torch

    class Logits(torch.nn.Module):
        def __init__(self, inner) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args):
            return self.inner(**dict(zip(inputs, args, strict=True))).logits

    # A padded second row, so that no shortcut a library takes for a batch without padding
    # is frozen into the traced graph (the check against torch below is on padding too).
    ids = torch.full((2, 16), 5, dtype=torch.long)
    mask = torch.ones_like(ids)
    mask[1, 10:] = 0
    types = torch.zeros_like(ids)
    types[:, 8:] = 1
    axes = {name: {0: "batch", 1: "sequence"} for name in inputs}
    axes["logits"] = {0: "batch"} if kind is ReaderKind.PAIR else {0: "batch", 1: "sequence"}
    with torch.no_grad():
        torch.onnx.export(
            Logits(model).eval(),  # eval: export leaves the wrapper's mode on the model
            (ids, mask, types)[: len(inputs)],
            str(target),
            input_names=list(inputs),
            output_names=["logits"],
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,
        )


def _compare(model, inputs, graph: Path, tokenizer, pad_id: int, found: Checkpoint) -> float:
    """Max |logit difference| between the graph and torch on a padded batch of the
    checkpoint's own tokenizer; refused beyond `TOLERANCE`."""
    import onnxruntime as ort
    import torch

    rows = [
        tokenizer.post_process(
            tokenizer.encode(a, add_special_tokens=False),
            tokenizer.encode(b, add_special_tokens=False),
        )
        for a, b in PROBE
    ]
    width = min(max(len(r.ids) for r in rows), found.max_tokens)
    feed = {
        "input_ids": np.full((len(rows), width), pad_id, dtype=np.int64),
        "attention_mask": np.zeros((len(rows), width), dtype=np.int64),
        "token_type_ids": np.zeros((len(rows), width), dtype=np.int64),
    }
    for i, r in enumerate(rows):
        n = min(len(r.ids), width)
        feed["input_ids"][i, :n] = r.ids[:n]
        feed["attention_mask"][i, :n] = 1
        feed["token_type_ids"][i, :n] = r.type_ids[:n]
    feed = {k: feed[k] for k in inputs}
    session = ort.InferenceSession(str(graph), providers=["CPUExecutionProvider"])
    (onnx_logits,) = session.run(["logits"], feed)
    with torch.no_grad():
        torch_logits = model(**{k: torch.from_numpy(v) for k, v in feed.items()}).logits
    kept = feed["attention_mask"].astype(bool)
    got, want = onnx_logits, torch_logits.numpy()
    if got.ndim == 3:  # per token: padding positions are nobody's score
        got, want = got[kept], want[kept]
    difference = float(np.abs(got - want).max())
    if not difference <= TOLERANCE:
        graph.unlink(missing_ok=True)
        raise ReaderError(
            f"{found.directory}: the ONNX graph's logits differ from torch's by "
            f"{difference:.2e} (over {TOLERANCE:.0e}); not written"
        )
    return difference
