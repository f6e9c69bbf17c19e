"""The floor under `encoder compare`'s SGI bar: how far SGI moves between the two fp32
runtimes of the same weights (torch, the default backend, and ONNX Runtime).

    PYTHONPATH=. python tools/sgi_floor.py ../shared/data/begin_dev.jsonl [--limit N]

Prints, per file, |SGI onnx − SGI torch| (max, p99, mean, share over 0.01) on the
whole response's SGI (`workers.eval.evaluation.whole_response_sgi`), as `encoder compare`
measures int8.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from pipeline.encoding.encoder import SentenceEncoder
from workers.eval.datasets import load_labelled
from workers.eval.evaluation import whole_response_sgi
from workers.eval.quantized import SGI_BAR


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="+", type=Path)
    parser.add_argument("--limit", type=int, default=None)
    args = parser.parse_args()
    torch_side, onnx_side = SentenceEncoder(backend="torch"), SentenceEncoder(backend="onnx")
    for path in args.data:
        candidates = [i.candidate for i in load_labelled(path, limit=args.limit)]
        a = whole_response_sgi(candidates, torch_side)
        b = whole_response_sgi(candidates, onnx_side)
        d = np.array([abs(a[k] - b[k]) for k in a])
        print(
            f"{path.name}: {len(d)} candidates  |SGI onnx - torch|: max {d.max():.2e}  "
            f"p99 {np.quantile(d, 0.99):.2e}  mean {d.mean():.2e}  "
            f"over {SGI_BAR}: {100 * (d > SGI_BAR).mean():.1f}%"
        )


if __name__ == "__main__":
    main()
