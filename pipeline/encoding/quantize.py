"""int8 ONNX graphs: the one way this project quantises a transformer it exports.

The sentence encoder (`pipeline.encoding.onnx_encoder`, `groundstream encoder export --quantize
int8`) and the claim reader (`groundstream train claims`) both go through here, so the
two never drift apart. Needs ``onnxruntime`` (its ``quantization`` package) and ``onnx``;
nothing at run time does.

Two recipes, both measured on the encoder by ``groundstream encoder compare``
(docs/benchmarks.md, "Quantised encoder"):

* **dynamic** (`quantize_dynamic_int8`): weights int8 per output channel, activations
  quantised per batch at run time. No calibration data.
* **static** (`quantize_static_int8`): QDQ, activation ranges fixed from calibration
  batches. Fixed ranges clip BERT's outlier activations: worse than dynamic here.
* **weights** (`quantize_weights_int8`): weight-only, ONNX Runtime's `MatMulNBits` at 8
  bits in blocks of 128 per column; activations stay fp32, the weights are unpacked in
  the kernel. Sixteen times closer to fp32 than dynamic, and no faster than fp32 on
  this CPU (0.89-0.97x): a measurement of where int8's error comes from, not a speed-up.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from pipeline.files import replaced_whole

QUANTIZED_OPS = ("MatMul",)
"""Only the dense layers' MatMuls: the embedding tables (Gather) stay fp32, they cost no
compute and their rows feed every layer."""


def _quiet() -> None:
    # The quantiser logs "consider pre-processing" on every call; it is advice, not an error.
    logging.getLogger("root").setLevel(logging.ERROR)


def quantize_dynamic_int8(
    source: Path,
    target: Path,
    *,
    per_channel: bool = True,
    op_types: Sequence[str] | None = QUANTIZED_OPS,
    keep_fp32: Iterable[str] = (),
) -> Path:
    """`source` (fp32 ONNX) → `target` with int8 weights and dynamically quantised
    activations. `op_types` None: every op ONNX Runtime can quantise (the claim reader's
    recipe, as its figures were measured); `keep_fp32`: node names left in fp32."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    _quiet()
    with replaced_whole(target) as tmp:
        quantize_dynamic(
            str(source),
            str(tmp),
            weight_type=QuantType.QInt8,
            per_channel=per_channel,
            op_types_to_quantize=None if op_types is None else list(op_types),
            nodes_to_exclude=list(keep_fp32),
        )
    return target


def quantize_static_int8(
    source: Path,
    target: Path,
    feeds: Iterable[Mapping[str, np.ndarray]],
    *,
    keep_fp32: Iterable[str] = (),
) -> Path:
    """`source` → `target` as QDQ int8, activation ranges (min–max) taken from `feeds`
    (model inputs, one batch each): texts that are not what the graph is measured on."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    batches = iter(list(feeds))

    class _Reader(CalibrationDataReader):
        def get_next(self) -> dict[str, np.ndarray] | None:
            feed = next(batches, None)
            return None if feed is None else dict(feed)

    _quiet()
    with replaced_whole(target) as tmp:
        quantize_static(
            str(source),
            str(tmp),
            _Reader(),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            weight_type=QuantType.QInt8,
            activation_type=QuantType.QUInt8,
            op_types_to_quantize=list(QUANTIZED_OPS),
            nodes_to_exclude=list(keep_fp32),
        )
    return target


WEIGHTS_BLOCK = 128
"""Weights per scale in the weight-only recipe: 32 was closer to fp32 (mean cosine error
0.00014 against 0.00025 on 400 HaluEval texts) and slower still."""


def quantize_weights_int8(
    source: Path, target: Path, *, block_size: int = WEIGHTS_BLOCK, keep_fp32: Iterable[str] = ()
) -> Path:
    """`source` → `target` with each MatMul's weights as 8-bit blocks (`MatMulNBits`),
    symmetric, activations left in fp32. Needs the `onnx-ir` package (the quantiser's)."""
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    _quiet()
    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.ERROR)
    quantizer = MatMulNBitsQuantizer(
        onnx.load(str(source)),
        bits=8,
        block_size=block_size,
        is_symmetric=True,
        nodes_to_exclude=list(keep_fp32),
        op_types_to_quantize=QUANTIZED_OPS,
    )
    quantizer.process()
    with replaced_whole(target) as tmp:
        quantizer.model.save_model_to_file(str(tmp), use_external_data_format=False)
    return target
