"""Fitting the geometric thresholds and the DGI reference direction on labelled data.

The seed's cut-points (SGI 1.20 / 0.95, DGI 0.525) were calibrated for one encoder on one
kind of data. This module refits them on examples labelled grounded / ungrounded, so the
switch and `check()` can run with cuts that match the deployment's encoder and domain:

    fit = fit_thresholds(examples)
    Thresholds(fit.sgi_strong_pass, fit.sgi_review, fit.dgi_pass)

How each cut is chosen (scores are "higher = more grounded"; a cut accepts ``score >= cut``):

* ``sgi_review`` and ``dgi_pass``: Youden's J (the cut maximising TPR − FPR), placed
  halfway between the lowest score it accepts and the highest it rejects.
* Every cut lies in a gap between fitted scores at least 2·`SCORE_EPSILON` wide, so no
  fitted score is within float noise of it (`pipeline.fit.metrics.separable`).
* ``sgi_strong_pass`` (auto-accept into state): the lowest cut at or above ``sgi_review``
  whose accepted set holds at most ``max_accept_error`` ungrounded examples as a share of
  the accepted set. If no cut qualifies, the cut is infinite (``inf`` in the policy), so
  auto-accept takes nothing — not even a new answer scoring above every fitted one — and
  ``metrics["sgi_strong_pass_accepts_nothing"]`` says so.

Failure posture: empty data, a method whose data is one-class, or malformed examples
raise `ScoringError`; a method with no examples keeps its default cut and the metrics
record that (``sgi_default_kept`` / ``dgi_default_kept``). Flagged geometry results
(zero-norm or NaN embeddings) are left out of the fit and counted. Pure: the encoder
and reference direction are passed in or loaded lazily by `pipeline.policy.defaults`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from pipeline.errors import PolicyError, ScoringError
from pipeline.fit.metrics import auroc, cut_below, separable, youden_j, youden_threshold
from pipeline.policy import defaults as shipped
from pipeline.scores.batch import core_sgi_batch
from pipeline.scores.geometric import compute_dgi_batch

__all__ = [
    "DEFAULT_CUTS",
    "FitResult",
    "fit_reference_direction",
    "fit_thresholds",
    "fit_thresholds_from_scores",
]

DEFAULT_CUTS: tuple[float, float, float] = (1.20, 0.95, 0.525)
"""(sgi_strong_pass, sgi_review, dgi_pass) kept for a method with no examples (the seed's)."""

_EPS_NORM = 1e-12
"""Displacements shorter than this are treated as zero (question and response coincide)."""

ScoredExample = tuple[float, bool]
MetricValue = float | int | bool | str | None


@dataclass(frozen=True, slots=True)
class FitResult:
    """Fitted cut-points with the counts and measurements behind them.

    ``metrics`` is a read-only mapping (a `MappingProxyType` over a private copy), so the
    record cannot be changed after construction. Keys always present: ``auroc_sgi``,
    ``auroc_dgi``, ``youden_j_sgi``, ``youden_j_dgi`` (None when the method kept its
    default), ``sgi_default_kept``, ``dgi_default_kept``, ``max_accept_error``,
    ``sgi_strong_pass_accepts_nothing``, ``accept_error_at_strong_pass`` (ungrounded share
    of the accepted set; None when nothing is accepted), the accept and reject rates per
    label at each cut, and ``n_*`` counts of examples per method and label.
    """

    sgi_strong_pass: float
    sgi_review: float
    dgi_pass: float
    n: int
    n_sgi: int
    n_dgi: int
    metrics: Mapping[str, MetricValue] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        for name in ("sgi_strong_pass", "sgi_review", "dgi_pass"):
            value = getattr(self, name)
            if not math.isfinite(value) and not (name == "sgi_strong_pass" and value == math.inf):
                raise PolicyError(f"fit.{name}", value, "a finite number (inf: accept nothing)")
        if self.sgi_review > self.sgi_strong_pass:
            raise PolicyError(
                "fit.sgi_review",
                self.sgi_review,
                f"a value <= fit.sgi_strong_pass ({self.sgi_strong_pass})",
            )
        object.__setattr__(self, "metrics", MappingProxyType(dict(self.metrics)))

    @property
    def cuts(self) -> tuple[float, float, float]:
        """(sgi_strong_pass, sgi_review, dgi_pass), the order `Thresholds` takes."""
        return (self.sgi_strong_pass, self.sgi_review, self.dgi_pass)

    def to_dict(self) -> dict[str, Any]:
        """A plain, JSON-ready copy (the metrics as an ordinary dict)."""
        return {
            "sgi_strong_pass": self.sgi_strong_pass,
            "sgi_review": self.sgi_review,
            "dgi_pass": self.dgi_pass,
            "n": self.n,
            "n_sgi": self.n_sgi,
            "n_dgi": self.n_dgi,
            "metrics": dict(self.metrics),
        }


def _split(data: Sequence[ScoredExample], method: str) -> tuple[np.ndarray, np.ndarray]:
    """Scores and labels of one method; non-finite scores are bad input."""
    scores = np.empty(len(data), dtype=np.float64)
    labels = np.empty(len(data), dtype=bool)
    for i, pair in enumerate(data):
        try:
            score, grounded = pair
        except (TypeError, ValueError) as exc:
            raise ScoringError(f"{method} example {i} is not a (score, grounded) pair") from exc
        if not isinstance(grounded, bool | np.bool_):
            raise ScoringError(f"{method} example {i}: grounded must be a bool, got {grounded!r}")
        scores[i] = float(score)
        labels[i] = bool(grounded)
        if not math.isfinite(scores[i]):
            raise ScoringError(f"{method} example {i}: score {score!r} is not finite")
    n_pos = int(labels.sum())
    if len(data) and (n_pos == 0 or n_pos == len(data)):
        only = "grounded" if n_pos else "ungrounded"
        raise ScoringError(
            f"{method} data is one-class: all {len(data)} examples are {only}; "
            "a cut needs both grounded and ungrounded examples"
        )
    return scores, labels


def _rate(mask: np.ndarray) -> float | None:
    """Share of True in ``mask``; None for an empty selection."""
    return float(mask.mean()) if mask.size else None


def check_accept_error(name: str, value: object) -> None:
    """Raise :class:`PolicyError` naming ``name`` unless ``value`` is a share in [0, 1)."""
    if isinstance(value, bool) or not (isinstance(value, int | float) and 0.0 <= value < 1.0):
        raise PolicyError(name, value, "a share in [0, 1)")


def strong_pass_cut(
    scores: np.ndarray, labels: np.ndarray, floor: float, max_accept_error: float
) -> tuple[float, bool]:
    """The auto-accept cut (see the module docstring) and whether it accepts nothing."""
    distinct = np.unique(scores)  # ascending
    allowed = separable(distinct)
    for k, cut in enumerate(distinct):
        if cut < floor or not allowed[k]:
            continue  # below the review cut, or too close to the score beneath to cut between
        accepted = scores >= cut
        ungrounded_share = float((~labels[accepted]).mean())
        if ungrounded_share <= max_accept_error:
            # In the gap below `cut`, never below the review cut: the same accepted set.
            return max(floor, cut_below(distinct, k)), False
    # No cut qualifies: accept nothing. A finite cut just above the highest fitted score
    # would accept a new answer scoring higher still, and on HaluEval the highest SGIs are
    # hallucinated.
    return math.inf, True


def fit_thresholds_from_scores(
    sgi: Sequence[ScoredExample],
    dgi: Sequence[ScoredExample],
    max_accept_error: float = 0.05,
    defaults: tuple[float, float, float] = DEFAULT_CUTS,
) -> FitResult:
    """Fit the cuts from already-computed scores.

    Args:
        sgi: ``(sgi_value, grounded)`` pairs of examples that had a context.
        dgi: ``(dgi_value, grounded)`` pairs of examples without a context.
        max_accept_error: largest tolerated share of ungrounded answers among those that
            SGI auto-accepts, in ``[0, 1)``.
        defaults: ``(sgi_strong_pass, sgi_review, dgi_pass)`` kept for a method with no
            examples.

    Raises:
        ScoringError: no examples at all, a method's data is one-class (named), a score
            is not finite or a label is not a bool.
        PolicyError: ``max_accept_error`` outside ``[0, 1)``.
    """
    check_accept_error("max_accept_error", max_accept_error)
    sgi, dgi = list(sgi), list(dgi)
    if not sgi and not dgi:
        raise ScoringError("cannot fit thresholds: no SGI and no DGI examples")
    strong, review, dgi_pass = (float(v) for v in defaults)
    metrics: dict[str, MetricValue] = {
        "max_accept_error": float(max_accept_error),
        "sgi_default_kept": not sgi,
        "dgi_default_kept": not dgi,
        "sgi_strong_pass_accepts_nothing": False,
    }

    s_scores, s_labels = _split(sgi, "sgi")
    d_scores, d_labels = _split(dgi, "dgi")
    metrics.update(_counts("sgi", s_labels))
    metrics.update(_counts("dgi", d_labels))

    sgi_keys = (
        "auroc_sgi",
        "youden_j_sgi",
        "accept_error_at_strong_pass",
        "accept_rate_grounded_at_strong_pass",
        "accept_rate_ungrounded_at_strong_pass",
        "reject_rate_grounded_at_review",
        "reject_rate_ungrounded_at_review",
    )
    dgi_keys = (
        "auroc_dgi",
        "youden_j_dgi",
        "accept_error_at_dgi_pass",
        "accept_rate_grounded_at_dgi_pass",
        "accept_rate_ungrounded_at_dgi_pass",
    )
    metrics.update(dict.fromkeys(sgi_keys + dgi_keys))

    if sgi:
        review = youden_threshold(s_scores, s_labels)
        strong, nothing = strong_pass_cut(s_scores, s_labels, review, max_accept_error)
        accepted = s_scores >= strong
        rejected = s_scores < review
        metrics.update(
            auroc_sgi=auroc(s_scores, s_labels),
            youden_j_sgi=youden_j(s_scores, s_labels),
            sgi_strong_pass_accepts_nothing=nothing,
            accept_error_at_strong_pass=_rate(~s_labels[accepted]),
            accept_rate_grounded_at_strong_pass=_rate(accepted[s_labels]),
            accept_rate_ungrounded_at_strong_pass=_rate(accepted[~s_labels]),
            reject_rate_grounded_at_review=_rate(rejected[s_labels]),
            reject_rate_ungrounded_at_review=_rate(rejected[~s_labels]),
        )
    if dgi:
        dgi_pass = youden_threshold(d_scores, d_labels)
        accepted = d_scores >= dgi_pass
        metrics.update(
            auroc_dgi=auroc(d_scores, d_labels),
            youden_j_dgi=youden_j(d_scores, d_labels),
            accept_error_at_dgi_pass=_rate(~d_labels[accepted]),
            accept_rate_grounded_at_dgi_pass=_rate(accepted[d_labels]),
            accept_rate_ungrounded_at_dgi_pass=_rate(accepted[~d_labels]),
        )
    return FitResult(
        sgi_strong_pass=strong,
        sgi_review=review,
        dgi_pass=dgi_pass,
        n=len(sgi) + len(dgi),
        n_sgi=len(sgi),
        n_dgi=len(dgi),
        metrics=metrics,
    )


def _counts(method: str, labels: np.ndarray) -> dict[str, MetricValue]:
    n_pos = int(labels.sum())
    return {
        f"n_{method}_grounded": n_pos,
        f"n_{method}_ungrounded": int(labels.size - n_pos),
    }


def _has_context(context: object) -> bool:
    """True for a non-empty string or a non-empty list of strings."""
    if context is None:
        return False
    if isinstance(context, str):
        return bool(context.strip())
    return isinstance(context, Sequence) and len(context) > 0


def fit_thresholds(
    examples: Iterable[Mapping[str, Any]],
    max_accept_error: float = 0.05,
    *,
    encoder: Any = None,
    reference_direction: np.ndarray | None = None,
) -> FitResult:
    """Score labelled examples with SGI / DGI and fit the cuts on them.

    Each example is a mapping with ``question`` and ``response`` (non-empty strings),
    ``grounded`` (bool) and optionally ``context`` (a string or a list of strings).
    Examples with a context are scored with SGI of the answer's core (as the geometry stage
    and `pipeline.compute_sgi` score it: `core_sgi_batch`), the others with DGI, in one
    encoder batch per method. ``encoder=None`` loads `pipeline.policy.defaults.default_encoder()`;
    ``reference_direction=None`` loads the shipped μ̂ (`pipeline.policy.defaults`), and only
    when some example has no context. Flagged results are left out and counted in
    ``metrics["n_flagged_sgi"]`` / ``metrics["n_flagged_dgi"]``.

    Raises:
        ScoringError: a malformed example (its index is named), or as
            `fit_thresholds_from_scores`.
    """
    sgi_items: list[tuple[str, Any, str]] = []
    sgi_labels: list[bool] = []
    dgi_items: list[tuple[str, str]] = []
    dgi_labels: list[bool] = []
    for i, example in enumerate(examples):
        question, response = example.get("question"), example.get("response")
        grounded, context = example.get("grounded"), example.get("context")
        for name, text in (("question", question), ("response", response)):
            if not isinstance(text, str) or not text.strip():
                raise ScoringError(f"example {i}: {name} must be a non-empty string")
        if not isinstance(grounded, bool):
            raise ScoringError(f"example {i}: grounded must be a bool, got {grounded!r}")
        if _has_context(context):
            sgi_items.append((question, context, response))
            sgi_labels.append(grounded)
        else:
            dgi_items.append((question, response))
            dgi_labels.append(grounded)
    if not sgi_items and not dgi_items:
        raise ScoringError("cannot fit thresholds: no examples")

    if encoder is None:
        encoder = shipped.default_encoder()
    sgi_pairs: list[ScoredExample] = []
    dgi_pairs: list[ScoredExample] = []
    n_flagged_sgi = n_flagged_dgi = 0
    if sgi_items:
        # The core, as the stage scores it: a cut is fitted on what it is applied to.
        for result, label in zip(core_sgi_batch(sgi_items, encoder), sgi_labels, strict=True):
            if result.flagged:
                n_flagged_sgi += 1
            else:
                sgi_pairs.append((result.value, label))
    if dgi_items:
        if reference_direction is None:
            reference_direction = shipped.default_reference()
        results = compute_dgi_batch(dgi_items, encoder, reference_direction)
        for result, label in zip(results, dgi_labels, strict=True):
            if result.flagged:
                n_flagged_dgi += 1
            else:
                dgi_pairs.append((result.value, label))

    fit = fit_thresholds_from_scores(sgi_pairs, dgi_pairs, max_accept_error)
    metrics = dict(fit.metrics, n_flagged_sgi=n_flagged_sgi, n_flagged_dgi=n_flagged_dgi)
    return FitResult(
        sgi_strong_pass=fit.sgi_strong_pass,
        sgi_review=fit.sgi_review,
        dgi_pass=fit.dgi_pass,
        n=fit.n,
        n_sgi=fit.n_sgi,
        n_dgi=fit.n_dgi,
        metrics=metrics,
    )


def fit_reference_direction(
    question_embeddings: np.ndarray, response_embeddings: np.ndarray
) -> np.ndarray:
    """The DGI reference direction μ̂ from embeddings of verified grounded pairs.

    μ̂ = normalise(mean over pairs of normalise(φ(r) − φ(q))), where φ is the
    L2-normalised embedding (as `pipeline.scores.geometric.dgi_from_embeddings` uses). Rows whose
    embeddings are zero or not finite, or whose displacement is zero, are skipped.
    Returns a float64 unit vector.

    Raises:
        ScoringError: shapes differ or are not 2-D, or no pair (or no mean) is usable.
    """
    q = np.asarray(question_embeddings, dtype=np.float64)
    r = np.asarray(response_embeddings, dtype=np.float64)
    if q.ndim != 2 or q.shape != r.shape:
        raise ScoringError(
            "question and response embeddings must be 2-D arrays of the same shape; "
            f"got {q.shape} and {r.shape}"
        )
    with np.errstate(invalid="ignore", divide="ignore"):
        q_norm = np.linalg.norm(q, axis=1, keepdims=True)
        r_norm = np.linalg.norm(r, axis=1, keepdims=True)
        d = r / r_norm - q / q_norm
        d_norm = np.linalg.norm(d, axis=1, keepdims=True)
        usable = (
            np.isfinite(d).all(axis=1)
            & (q_norm[:, 0] >= _EPS_NORM)
            & (r_norm[:, 0] >= _EPS_NORM)
            & (d_norm[:, 0] >= _EPS_NORM)
        )
    if not usable.any():
        raise ScoringError(
            f"no usable pair among {q.shape[0]}: every displacement is zero or not finite"
        )
    mean = (d[usable] / d_norm[usable]).mean(axis=0)
    norm = float(np.linalg.norm(mean))
    if norm < _EPS_NORM:
        raise ScoringError("the unit displacements cancel out: their mean is zero")
    return mean / norm
