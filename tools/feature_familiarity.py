"""The second published familiarity baseline, measured: a Mahalanobis distance over the
grounding model's own (standardised) features instead of the topic embeddings, fitted on the
calibration data with the same cut rule as the shipped test (a share familiar out of fold
and in sample, `pipeline.fit.familiarity_model`), and what it would flag of each set's accepts.

    python tools/new_domain.py --hold-out summedits --hold-out wice --begin --cache /tmp/new_domain
    python tools/feature_familiarity.py --cache /tmp/new_domain

Reads the caches `tools/new_domain.py` writes (features, labels, sources); no model is
loaded. For each share familiar and number of components: the calibration data's accepts
(the model fitted on all of it, the test out of fold), BEGIN's and each held-out claim
set's, without and with the test. Deterministic. Not shipped: see docs/quality.md
("Issue 34": the features' density flags the held-out sets about as often as BEGIN, and
their wrong accepts no more than their right ones).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from new_domain import concat, decide, figures, fit

from pipeline.fit.familiarity_model import fit_familiarity, out_of_fold_distances


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cache", type=Path, default=Path("/tmp/new_domain"))
    parser.add_argument("--hold-out", action="append", default=None)
    parser.add_argument("--n", type=int, default=600)
    args = parser.parse_args()
    load = lambda stem: dict(np.load(args.cache / f"{stem}.npz"))  # noqa: E731
    cal = concat(load("halueval_qa_dev"), load("ragtruth_dev"))
    others = {"begin": load("begin_dev")} | {
        name: load(f"claims_{name}_{args.n}") for name in args.hold_out or ["summedits", "wice"]
    }
    model = fit(cal, 0.97, 0.05)
    mean, spread = cal["x"].mean(axis=0), cal["x"].std(axis=0)
    varies = spread > 1e-6  # a constant feature has no spread to measure in

    def standard(data: dict[str, np.ndarray]) -> np.ndarray:
        return ((data["x"] - mean) / np.where(varies, spread, 1.0))[:, varies]

    # What the model accepts and each set's standardised rows do not depend on the test.
    keys, x_cal, y_cal = list(cal["key"]), standard(cal), cal["y"].astype(bool)
    _, cal_accepted = decide(model, cal)
    read = {
        name: (standard(data), decide(model, data)[1], data["y"].astype(bool))
        for name, data in others.items()
    }
    for share in (0.95, 0.97, 0.99):
        for dims in (4, 8, int(varies.sum())):
            test, _ = fit_familiarity(x_cal, keys, share=share, dimensions=dims)
            oof = out_of_fold_distances(x_cal, keys, dimensions=dims)
            print(f"share {share:.2f}, {dims} components: cut {test.cut:.3f}")
            print(
                f"  calibration data (test out of fold): {figures(cal_accepted, y_cal)}"
                f" -> {figures(cal_accepted & (oof <= test.cut), y_cal)}"
            )
            for name, (x, accepted, y) in read.items():
                familiar = test.distances(x) <= test.cut
                print(
                    f"  {name}: {1 - familiar.mean():.0%} flagged; {figures(accepted, y)}"
                    f" -> {figures(accepted & familiar, y)}"
                )


if __name__ == "__main__":
    main()
