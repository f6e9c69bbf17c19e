"""Separation and calibration metrics for labelled scores.

Calibration (`pipeline.fit.calibrate`) and evaluation reports (`workers.eval.report`) measure how
well a score (SGI, DGI, a grounding probability) tells grounded answers from ungrounded
ones. Every function here takes plain arrays: ``scores`` (higher means more grounded)
and ``labels`` (``True`` = grounded = the positive class). The textbook statistics are
scikit-learn's (`roc_auc_score`, `roc_curve`, `calibration_curve`); what is here is the
project's conventions around them and the cut searches built on them. No I/O.

Conventions shared by every function:

* A NaN score (or NaN length or probability) drops that example; it is neither a hit
  nor a miss.
* Ties count half: a tied grounded/ungrounded pair contributes 0.5 to AUROC (the
  Mann–Whitney U statistic, which `roc_auc_score`'s trapezoids equal).
* A cut ``c`` predicts *grounded* for ``score >= c``, as the switch accepts at
  ``score >= threshold``.

Failure posture: input that cannot be measured (mismatched lengths, one class only,
nothing left after dropping NaNs) raises `ScoringError`; nothing returns a silent NaN.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.calibration import calibration_curve
from sklearn.metrics import roc_auc_score
from sklearn.metrics import roc_curve as sk_roc_curve

from pipeline.bounds.thresholds import SCORE_EPSILON
from pipeline.errors import ScoringError

__all__ = [
    "auroc",
    "cut_below",
    "expected_calibration_error",
    "length_bins",
    "length_matched_auroc",
    "reliability_bins",
    "roc_curve",
    "separable",
    "wilson_interval",
    "youden_j",
    "youden_threshold",
]

ArrayLike = Sequence[float] | np.ndarray
LabelLike = Sequence[bool] | np.ndarray


def _clean(
    scores: ArrayLike, labels: LabelLike, *extra: ArrayLike
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Return float64 scores, bool labels and extra columns with NaN rows dropped."""
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    y = np.asarray(labels).reshape(-1)
    cols = [np.asarray(e, dtype=np.float64).reshape(-1) for e in extra]
    for name, arr in (("labels", y), *((f"column {i + 2}", c) for i, c in enumerate(cols))):
        if arr.shape[0] != s.shape[0]:
            raise ScoringError(f"{name} has {arr.shape[0]} entries but scores has {s.shape[0]}")
    if y.dtype != np.bool_:
        if not np.all(np.isin(y, (0, 1))):
            raise ScoringError("labels must be booleans (True = grounded)")
        y = y.astype(bool)
    keep = ~np.isnan(s)
    for c in cols:
        keep &= ~np.isnan(c)
    return s[keep], y[keep], [c[keep] for c in cols]


def _require_two_classes(y: np.ndarray, what: str) -> tuple[int, int]:
    """Return (n_pos, n_neg); raise if either class is missing."""
    n_pos = int(y.sum())
    n_neg = int(y.size - n_pos)
    if n_pos == 0 or n_neg == 0:
        missing = "grounded" if n_pos == 0 else "ungrounded"
        raise ScoringError(f"{what} needs both classes; no {missing} example among {y.size} scored")
    return n_pos, n_neg


def auroc(scores: ArrayLike, labels: LabelLike) -> float:
    """Area under the ROC curve (`sklearn.metrics.roc_auc_score`): P(grounded score >
    ungrounded score) + 0.5·P(tie). 1.0 = perfect separation, 0.5 = no signal, 0.0 =
    perfectly reversed.

    Raises:
        ScoringError: mismatched lengths, non-boolean labels, or one class only.
    """
    s, y, _ = _clean(scores, labels)
    _require_two_classes(y, "AUROC")
    return float(roc_auc_score(y, s))


def roc_curve(scores: ArrayLike, labels: LabelLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ROC points for every distinct cut, highest cut first (`sklearn.metrics.roc_curve`,
    no point dropped: the cut searches below need every distinct score).

    Returns ``(fpr, tpr, thresholds)``: at ``thresholds[i]`` the rule
    ``score >= thresholds[i]`` accepts a share ``tpr[i]`` of grounded and ``fpr[i]`` of
    ungrounded examples. The first point is ``(0, 0)`` at ``+inf`` (accept nothing); the
    last is ``(1, 1)`` at the lowest score.
    """
    s, y, _ = _clean(scores, labels)
    _require_two_classes(y, "ROC curve")
    fpr, tpr, thresholds = sk_roc_curve(y, s, drop_intermediate=False)
    return fpr, tpr, thresholds


def wilson_interval(successes: ArrayLike, n: ArrayLike, z: float) -> tuple[np.ndarray, np.ndarray]:
    """The Wilson score interval (low, high) of `successes` of `n` at `z` standard errors,
    elementwise. Where n is 0 the interval is NaN: the caller says what an empty sample means.

    The reference is SciPy's ``binomtest(k, n).proportion_ci(confidence_level,
    method="wilson")`` with ``confidence_level = 2·Φ(z) − 1``, and tests/unit/test_metrics.py
    checks this equals it on whole counts. SciPy's takes one whole count at a time; the
    judge band's search (`pipeline.fit.judge_share`) needs the bound of tens of thousands
    of candidate bands at once, over expected counts that are fractional (a judge right
    85% of the time lets 0.15 of each wrong answer it is asked about into state), so this
    is the same closed form over arrays."""
    k, n = np.asarray(successes, dtype=np.float64), np.asarray(n, dtype=np.float64)
    safe = np.where(n > 0, n, 1.0)
    rate = np.clip(k / safe, 0.0, 1.0)
    z2 = z * z
    centre = (rate + z2 / (2.0 * safe)) / (1.0 + z2 / safe)
    half = z * np.sqrt(rate * (1.0 - rate) / safe + z2 / (4.0 * safe * safe)) / (1.0 + z2 / safe)
    empty = n <= 0
    return np.where(empty, np.nan, centre - half), np.where(empty, np.nan, centre + half)


def separable(distinct: np.ndarray, margin: float = SCORE_EPSILON) -> np.ndarray:
    """For each of the ascending `distinct` scores, whether a cut accepting it and every
    higher score can lie at least `margin` from every score: always below the lowest; above
    a lower neighbour only where the gap between them is at least twice `margin`. Scores
    closer than that are one score to the fit, since float noise could reorder them."""
    gaps = np.diff(distinct)
    return np.r_[True, gaps >= 2.0 * margin]


def cut_below(distinct: np.ndarray, k: int, margin: float = SCORE_EPSILON) -> float:
    """The cut that accepts ``distinct[k:]`` (ascending distinct scores): the midpoint of
    the gap below ``distinct[k]``, or `margin` below the lowest score for ``k == 0``."""
    if k == 0:
        return float(distinct[0]) - margin
    below, cut = float(distinct[k - 1]), float(distinct[k])
    return below + (cut - below) / 2.0


def youden_threshold(scores: ArrayLike, labels: LabelLike) -> float:
    """The cut maximising Youden's J = TPR − FPR, predicting grounded for ``score >= cut``.

    The returned cut sits halfway between the lowest score it accepts and the highest
    score it rejects, so the fitted data are classified exactly as at the optimal
    observed score while a new score in the gap is not decided by one example. Only gaps
    at least 2·`SCORE_EPSILON` wide are candidates (`separable`), so no fitted score lies
    within `SCORE_EPSILON` of the cut. When several cuts reach the same J the highest one
    wins (it accepts least). When the optimum accepts everything the cut lies
    `SCORE_EPSILON` below the lowest score.

    Raises:
        ScoringError: as `roc_curve`.
    """
    fpr, tpr, thresholds = roc_curve(scores, labels)
    distinct = thresholds[1:][::-1]  # ascending
    allowed = separable(distinct)[::-1]  # in roc order: highest cut first
    j = np.where(allowed, tpr[1:] - fpr[1:], -np.inf)  # skip +inf: a cut must accept something
    best = int(np.flatnonzero(j >= j.max() - 1e-12)[0])  # first = highest cut among ties
    return cut_below(distinct, distinct.size - 1 - best)


def youden_j(scores: ArrayLike, labels: LabelLike) -> float:
    """The maximum of TPR − FPR over all cuts (0 = no separation, 1 = perfect)."""
    fpr, tpr, _ = roc_curve(scores, labels)
    return float(np.max(tpr[1:] - fpr[1:]))


def length_matched_auroc(
    scores: ArrayLike, labels: LabelLike, lengths: ArrayLike, *, n_bins: int = 10
) -> float:
    """AUROC compared only within bins of similar response length.

    Removes the length confound of data such as HaluEval QA, where right answers are
    short and hallucinated ones long: a score that merely tracks length separates such
    data well overall but not within a length bin.

    Method: cut ``lengths`` at its quantiles into up to ``n_bins`` bins (duplicate edges
    merge, so heavily tied lengths give fewer bins). In every bin holding both classes,
    take its AUROC (`roc_auc_score`, ties 0.5) and its grounded×ungrounded pairs. The result
    is the within-bin AUROCs averaged with weights equal to their pair counts (ΣU / Σpairs),
    i.e. the probability that a grounded answer outscores an ungrounded one *of similar
    length*. Bins with one class only contribute nothing.

    Raises:
        ScoringError: as `auroc`; ``n_bins < 1``; or no bin holds both classes.
    """
    if n_bins < 1:
        raise ScoringError(f"n_bins must be at least 1, got {n_bins}")
    s, y, (lens,) = _clean(scores, labels, lengths)
    _require_two_classes(y, "length-matched AUROC")
    bins = _quantile_bins(lens, n_bins)
    total_u = 0.0
    total_pairs = 0
    for b in np.unique(bins):
        in_bin = bins == b
        yb = y[in_bin]
        pairs = int(yb.sum()) * int((~yb).sum())
        if pairs == 0:
            continue
        total_u += float(roc_auc_score(yb, s[in_bin])) * pairs
        total_pairs += pairs
    if total_pairs == 0:
        raise ScoringError(
            "length-matched AUROC: no length bin holds both grounded and ungrounded examples"
        )
    return total_u / total_pairs


def _quantile_bins(values: np.ndarray, n_bins: int) -> np.ndarray:
    """Bin index per value, cutting at the inner quantiles (duplicate edges merged)."""
    if n_bins == 1 or values.size == 0:
        return np.zeros(values.size, dtype=np.int64)
    inner = np.quantile(values, np.linspace(0.0, 1.0, n_bins + 1)[1:-1])
    edges = np.unique(inner)
    return np.searchsorted(edges, values, side="right")


def length_bins(lengths: ArrayLike, n_bins: int = 10) -> np.ndarray:
    """Public form of the quantile binning used by `length_matched_auroc`.

    Returns an integer bin index per length (NaN lengths are not allowed here).
    """
    lens = np.asarray(lengths, dtype=np.float64).reshape(-1)
    if np.isnan(lens).any():
        raise ScoringError("lengths must not contain NaN")
    if n_bins < 1:
        raise ScoringError(f"n_bins must be at least 1, got {n_bins}")
    return _quantile_bins(lens, n_bins)


def reliability_bins(probs: ArrayLike, labels: LabelLike, n_bins: int = 10) -> list[dict[str, Any]]:
    """Reliability table of predicted grounding probabilities: the bins
    `sklearn.calibration.calibration_curve` draws, with their counts.

    Splits ``[0, 1]`` into ``n_bins`` equal-width bins, each holding the probabilities above
    its lower edge up to and including its upper one (the first also holds 0), as
    scikit-learn bins them. Each entry holds ``lower``, ``upper``, ``count``,
    ``mean_predicted`` (mean probability in the bin) and ``observed_frequency`` (share
    grounded); the two means are ``None`` for an empty bin. Every bin is listed, empty or
    not, so tables line up across runs.

    Raises:
        ScoringError: mismatched lengths, ``n_bins < 1``, no usable probability, or a
            probability outside ``[0, 1]``.
    """
    if n_bins < 1:
        raise ScoringError(f"n_bins must be at least 1, got {n_bins}")
    p, y, _ = _clean(probs, labels)
    if p.size == 0:
        raise ScoringError("reliability table needs at least one probability")
    if p.min() < 0.0 or p.max() > 1.0:
        raise ScoringError(
            f"probabilities must lie in [0, 1]; got range [{p.min():.6g}, {p.max():.6g}]"
        )
    observed, predicted = calibration_curve(y.astype(np.int64), p, n_bins=n_bins)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    # calibration_curve returns the non-empty bins only; its own rule says which those are.
    counts = np.bincount(np.searchsorted(edges[1:-1], p), minlength=n_bins)
    filled = iter(zip(observed.tolist(), predicted.tolist(), strict=True))
    table: list[dict[str, Any]] = []
    for b in range(n_bins):
        count = int(counts[b])
        frequency, mean = next(filled) if count else (None, None)
        table.append(
            {
                "lower": float(edges[b]),
                "upper": float(edges[b + 1]),
                "count": count,
                "mean_predicted": mean,
                "observed_frequency": frequency,
            }
        )
    return table


def expected_calibration_error(probs: ArrayLike, labels: LabelLike, n_bins: int = 10) -> float:
    """Expected calibration error over the bins of `reliability_bins`.

    ECE = Σ_b (count_b / n) · |observed_frequency_b − mean_predicted_b| over non-empty
    bins: 0 for a perfectly calibrated probability, at most 1.
    """
    table = reliability_bins(probs, labels, n_bins)
    n = sum(row["count"] for row in table)
    return float(
        sum(
            row["count"] / n * abs(row["observed_frequency"] - row["mean_predicted"])
            for row in table
            if row["count"]
        )
    )
