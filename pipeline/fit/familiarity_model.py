"""Fitting the familiarity test (`pipeline.guards.familiarity`): principal components of the
calibration data's familiarity vectors and the cut within which a share of that data lies.

The share is held twice, and the cut is the lowest that holds both:

* *out of fold*: the rows are split into folds by their context (rows that share a source
  share a fold: `pipeline.fit.folds`, as in `pipeline.fit.grounding_model`), each fold's
  distances are taken under a test fitted on the other folds, and `share` of those
  distances lie within the cut: new data of the same kind is familiar;
* *in sample*: `share` of the rows' distances under the final test (fitted on every row,
  the one the policy stores) lie within it, so the stage, which computes exactly the
  vector the fit saw, counts the calibration data itself familiar.

In-sample distances are not smaller than out-of-fold ones here: the distance is in units
of the fit's own spread (each component's standard deviation, the mean residual), so a row
the components were fitted to, far along one of them, is far in those units; a held-out
row projects less onto components fitted without it. On HaluEval QA + RAGTruth the
out-of-fold 97% cut (1.54) held only 77% of the rows in sample (61% of RAGTruth's), and
on the 20 rows of the round-trip fixture 4 of its 10 right answers fell outside it at run
time (issue 34). The cut is placed in a gap of the fitted distances (out of fold and in
sample) at least 2 * SCORE_EPSILON wide, so no fitted row lies within float noise of it.
Deterministic: an SVD of the centred rows, folds by a fixed seed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pipeline.bounds.thresholds import SCORE_EPSILON
from pipeline.errors import ScoringError
from pipeline.fit.folds import group_folds
from pipeline.fit.metrics import cut_below, separable
from pipeline.guards.familiarity import DIMENSIONS, FAMILIAR_SHARE, Familiarity, as_float32, rounded

__all__ = ["fit_familiarity", "out_of_fold_distances"]

ROWS_PER_COMPONENT = 5
"""Rows of the smallest fold's complement per principal component kept."""


def _fit_test(x: np.ndarray, dimensions: int, cut: float = 1.0) -> Familiarity:
    """Mean, leading components, their scales and the residual of the rows `x`, rounded as
    the policy stores them; `cut` is a placeholder until the cut is fitted."""
    if len(x) <= dimensions:
        raise ScoringError(
            f"familiarity needs more than {dimensions} rows to fit {dimensions} components"
        )
    mean = as_float32(x.mean(axis=0))
    z = x - mean
    _, _, vt = np.linalg.svd(z, full_matrices=False)
    components = as_float32(vt[:dimensions])
    projected = z @ components.T
    scales = rounded(np.maximum(projected.std(axis=0), 1e-9))
    off = np.maximum((z * z).sum(axis=1) - (projected * projected).sum(axis=1), 0.0)
    residual = float(rounded(np.array([max(float(off.mean()), 1e-12)]))[0])
    return Familiarity(
        tuple(float(v) for v in mean),
        tuple(tuple(float(v) for v in row) for row in components),
        tuple(float(v) for v in scales),
        residual,
        cut,
        n=len(x),
    )


def out_of_fold_distances(
    x: np.ndarray, contexts: Sequence[str], *, folds: int = 5, dimensions: int = DIMENSIONS
) -> np.ndarray:
    """Each row's distance under a test fitted on the other folds (NaN where its fold's
    complement is too small to fit)."""
    fold = group_folds(contexts, folds)
    out = np.full(len(x), np.nan)
    for k in range(folds):
        test, train = fold == k, fold != k
        if test.any() and train.sum() > dimensions:
            out[test] = _fit_test(x[train], dimensions).distances(x[test])
    return out


def _holding(distances: np.ndarray, share: float) -> float:
    """The smallest of `distances` within which `share` of them lie."""
    ordered = np.sort(distances)
    return float(ordered[max(int(np.ceil(share * len(ordered))) - 1, 0)])


def familiar_cut(oof: np.ndarray, fitted: np.ndarray, share: float) -> float:
    """The lowest cut within which `share` of the out-of-fold distances `oof` and `share`
    of the in-sample distances `fitted` lie, moved up to the midpoint of the first gap at
    least 2 * SCORE_EPSILON wide among all of them, or SCORE_EPSILON above the largest."""
    known = oof[np.isfinite(oof)]
    if len(known) == 0:
        raise ScoringError("familiarity needs out-of-fold distances to fit its cut")
    inside = fitted[np.isfinite(fitted)]
    needed = max(_holding(known, share), _holding(inside, share) if len(inside) else 0.0)
    distinct = np.unique(np.concatenate([known, fitted[np.isfinite(fitted)]]))
    allowed = separable(distinct)
    for k in range(int(np.searchsorted(distinct, needed)) + 1, len(distinct)):
        if allowed[k]:
            return cut_below(distinct, k)
    return float(distinct[-1]) + SCORE_EPSILON


def fit_familiarity(
    vectors: np.ndarray,
    contexts: Sequence[str],
    *,
    share: float = FAMILIAR_SHARE,
    folds: int = 5,
    dimensions: int = DIMENSIONS,
    groups: Sequence[str] | None = None,
) -> tuple[Familiarity, dict[str, float]]:
    """The familiarity test of the calibration rows `vectors` (one per row, sources named
    by `contexts`) whose cut holds `share` of them familiar out of fold, and its figures:
    the cut, the out-of-fold share familiar overall and per group (`groups`, one data
    file per row)."""
    if not 0.0 < share <= 1.0:
        raise ScoringError(f"familiar share must lie in (0, 1], got {share}")
    x = np.asarray(vectors, dtype=np.float64)
    if x.ndim != 2 or len(x) != len(contexts):
        raise ScoringError("fit_familiarity needs one vector per context")
    # Few rows (a first handful of reviewed answers): fewer components, at least
    # `ROWS_PER_COMPONENT` rows each in every fold's complement, so no component is
    # fitted to a few rows' noise.
    fold = group_folds(contexts, folds)
    smallest = min(int((fold != k).sum()) for k in np.unique(fold)) if len(x) else 0
    dimensions = min(dimensions, x.shape[1], smallest // ROWS_PER_COMPONENT)
    if dimensions < 1:
        raise ScoringError(f"familiarity needs more rows than {len(x)} to fit")
    oof = out_of_fold_distances(x, contexts, folds=folds, dimensions=dimensions)
    test = _fit_test(x, dimensions)
    own = test.distances(x)
    cut = familiar_cut(oof, own, share)
    known = np.isfinite(oof)
    familiar = float((oof[known] <= cut).mean())
    in_sample = float((own <= cut).mean())
    fitted = Familiarity(
        test.mean,
        test.components,
        test.scales,
        test.residual,
        cut,
        share,
        familiar,
        len(x),
        in_sample,
    )
    metrics = {"familiarity_cut": cut, "cv_familiar": familiar, "familiar_in_sample": in_sample}
    if groups is not None:
        group = np.asarray(groups)
        for g in np.unique(group):
            mask = known & (group == g)
            if mask.any():
                metrics[f"{g}.cv_familiar"] = float((oof[mask] <= cut).mean())
            metrics[f"{g}.familiar_in_sample"] = float((own[group == g] <= cut).mean())
    return fitted, metrics
