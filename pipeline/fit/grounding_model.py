"""Fitting P(grounded): the logistic model over `pipeline.scores.grounding.FEATURES` and its cuts.

`groundstream calibrate` fits the model on labelled feature rows and writes it, with its
accept / review cuts and in-sample and cross-validated figures, into a policy file; the
runtime (`pipeline.scores.grounding`) only applies the fitted model. The estimator and the
folds are scikit-learn's (`LogisticRegression`, `GroupKFold` via `pipeline.fit.folds`);
deterministic: Newton's method, folds by a fixed seed.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import sklearn
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler
from sklearn.utils.class_weight import compute_sample_weight

from pipeline.errors import ScoringError
from pipeline.fit.calibrate import check_accept_error, strong_pass_cut
from pipeline.fit.familiarity_model import fit_familiarity
from pipeline.fit.folds import FOLD_SEED, group_folds
from pipeline.fit.metrics import auroc, wilson_interval, youden_threshold
from pipeline.guards.domain import Domain
from pipeline.guards.familiarity import FAMILIAR_SHARE
from pipeline.scores.grounding import FEATURES, LONG_FORM, GroundingModel

L2 = 1.0
"""The L2 penalty on the standardised coefficients (scikit-learn's ``C = 1 / L2``), the
intercept unpenalised: what `fit_grounding` uses unless told otherwise, and what a policy's
calibration provenance records (`fit_settings`)."""

SOLVER = "newton-cholesky"
"""scikit-learn's solver: Newton's method, exact for a few dozen features, deterministic."""

TOLERANCE = 1e-8
"""The solver's stopping tolerance: tight, so a refit on the same rows gives the same
coefficients to far below the digits a cut is placed by."""


def fit_logistic(
    rows: np.ndarray, labels: np.ndarray, weights: np.ndarray | None = None, l2: float = L2
) -> tuple[np.ndarray, float]:
    """L2-regularised logistic regression (`sklearn.linear_model.LogisticRegression`) on the
    features standardised (`StandardScaler`, weighted like the rows) so one `l2` suits them
    all; returns (coefficients, intercept) for the raw features, as the runtime applies them
    (`pipeline.scores.grounding.GroundingModel`)."""
    x = np.asarray(rows, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    if x.ndim != 2 or len(x) != len(y) or len(x) == 0:
        raise ScoringError(
            "fit_logistic needs a non-empty 2-D feature matrix and one label per row"
        )
    if y.min() == y.max():
        raise ScoringError("fit_logistic needs both grounded and ungrounded examples")
    w = np.ones(len(y)) if weights is None else np.asarray(weights, dtype=np.float64)
    scaler = StandardScaler().fit(x, sample_weight=w)
    model = LogisticRegression(C=_inverse(l2), solver=SOLVER, tol=TOLERANCE, max_iter=100)
    model.fit(scaler.transform(x), y, sample_weight=w)
    coefficients = model.coef_[0] / scaler.scale_
    intercept = float(model.intercept_[0] - np.sum(coefficients * scaler.mean_))
    return coefficients, intercept


def _inverse(l2: float) -> float:
    """scikit-learn's C for an L2 penalty: inf (no penalty) for 0."""
    return math.inf if l2 == 0 else 1.0 / l2


def fit_settings(l2: float = L2, folds: int = 5) -> dict[str, object]:
    """How the grounding model was fitted, as a policy's calibration provenance records it:
    the estimator and its regularisation, the weights and the cross-validation split."""
    return {
        "estimator": "sklearn.linear_model.LogisticRegression",
        "scikit_learn": sklearn.__version__,
        "solver": SOLVER,
        "l2": l2,
        "C": _inverse(l2),
        "standardised": True,
        "sample_weight": "balanced by data file",
        "cv": f"sklearn.model_selection.GroupKFold by context, shuffled (seed {FOLD_SEED})",
        "cv_folds": folds,
    }


@dataclass(frozen=True, slots=True)
class GroundingFit:
    """A fitted model with its cuts (accept / review, for short and for long-form answers)."""

    model: GroundingModel
    accept: float
    review: float
    accept_long: float
    review_long: float

    @property
    def pairs(self) -> tuple[tuple[float, float], tuple[float, float]]:
        """(accept, review) of short answers, then of long-form ones."""
        return (self.accept, self.review), (self.accept_long, self.review_long)

    def accepting_nothing(self) -> GroundingFit:
        """The same fit with both accept cuts at infinity: nothing auto-accepts."""
        return replace(self, accept=math.inf, accept_long=math.inf)


BEYOND_DOUBT_Z = 1.96
"""Standard errors by which a fit's cross-validated accept error must exceed its bound
before `bound_broken` says the fit breaks it: the lower end of a 95% interval."""


def bound_broken(
    metrics: Mapping[str, float], group: str, bound: float, z: float = BEYOND_DOUBT_Z
) -> str:
    """Why the cross-validated accepts of `group` (a fit's `metrics`) break the accept-error
    `bound` beyond doubt, or "" when they do not: the lower end of the Wilson interval of
    their wrong share lies above the bound. A fit on a few hundred answers can meet its bound
    in sample and miss it by far on answers it did not see (a model refitted on 300
    reviewed SummEdits pairs: 0% wrong in sample, 50% cross-validated, 43.5% on the rest
    of the set, docs/quality.md "Issue 34"); its cross-validation says so beforehand."""
    accepted = float(metrics.get(f"{group}.cv_accepted", 0.0))
    if accepted < 1:
        return ""
    error = float(metrics.get(f"{group}.cv_accept_error", 0.0))
    low = float(wilson_interval(error * accepted, accepted, z)[0])
    if low <= bound:
        return ""
    return (
        f"cross-validated, {error:.1%} of its {accepted:.0f} accepts were wrong (95% interval"
        f" from {low:.1%}), above the bound {bound:.1%}"
    )


Cuts = tuple[float, float, bool]
"""(accept, review, accepts-nothing), as `fit_cuts` returns them."""

REGIME_MIN = 40
"""A regime (short or long-form answers) with fewer fitted examples than this, or with one
label only, takes the cuts fitted on all examples instead of its own."""


def long_rows(x: np.ndarray) -> np.ndarray:
    """Which feature rows (in `FEATURES` order) are long-form answers."""
    return np.asarray(x)[:, FEATURES.index(LONG_FORM)] > 0.5


def regime_cuts(
    p: np.ndarray,
    y: np.ndarray,
    long: np.ndarray,
    max_accept_error: float,
    max_accept_error_long: float | None = None,
) -> tuple[Cuts, Cuts]:
    """The cuts of short and of long-form answers, each fitted on its own examples: a
    one-sentence answer to a passage and a summary of a long source are different
    populations, and one cut over both lets the easy one subsidise the other's errors.
    `max_accept_error_long` bounds the long-form regime's accepts (None: the same bound);
    a regime too small for cuts of its own takes the pooled cuts at the short bound."""
    pooled = fit_cuts(p, y, max_accept_error)
    bounds = (max_accept_error, _long_bound(max_accept_error, max_accept_error_long))
    out = []
    for mask, bound in zip((~long, long), bounds, strict=True):
        enough = mask.sum() >= REGIME_MIN and y[mask].any() and (~y[mask]).any()
        out.append(fit_cuts(p[mask], y[mask], bound) if enough else pooled)
    return out[0], out[1]


def _long_bound(max_accept_error: float, max_accept_error_long: float | None) -> float:
    return max_accept_error if max_accept_error_long is None else max_accept_error_long


def accepted_by(p: np.ndarray, long: np.ndarray, cuts: tuple[Cuts, Cuts]) -> np.ndarray:
    """Which probabilities reach their regime's accept cut."""
    return np.asarray(p) >= np.where(long, cuts[1][0], cuts[0][0])


def _balanced_weights(groups: np.ndarray) -> np.ndarray:
    """Each group (one data file) gets the same total weight, so a large set cannot drown a
    small one: scikit-learn's "balanced" weights, over the data files."""
    return compute_sample_weight("balanced", np.asarray(groups))


def _probability(x: np.ndarray, coefficients: np.ndarray, intercept: float) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(intercept + x @ coefficients, -50, 50)))


def probabilities(model: GroundingModel, x: np.ndarray) -> np.ndarray:
    """P(grounded) of a fitted model for feature rows `x` in `FEATURES` order, as it was
    computed while fitting (the runtime's `GroundingModel.probability`, vectorised)."""
    if tuple(model.features) != FEATURES:
        raise ScoringError("probabilities needs a model over FEATURES in their order")
    return _probability(
        np.asarray(x, dtype=np.float64), np.asarray(model.coefficients), model.intercept
    )


def feature_matrix(rows: Sequence[Mapping[str, float]]) -> np.ndarray:
    """Feature rows (mappings) as a matrix whose columns are `FEATURES` in order."""
    return np.array([[row[name] for name in FEATURES] for row in rows], dtype=np.float64)


def fit_cuts(p: np.ndarray, y: np.ndarray, max_accept_error: float) -> tuple[float, float, bool]:
    """(accept, review, accepts-nothing) for probabilities `p` with labels `y`: review at
    Youden's J, accept the lowest cut at or above it whose accepted set holds at most
    `max_accept_error` ungrounded answers (inf when none does)."""
    review = youden_threshold(p, y)
    accept, nothing = strong_pass_cut(p, y, review, max_accept_error)
    return float(accept), review, nothing


def operating_point(p: np.ndarray, y: np.ndarray, accept: float) -> tuple[float, float]:
    """(share of grounded answers accepted, share of accepted answers that are ungrounded)
    when `p >= accept` auto-accepts."""
    return _accept_figures(np.asarray(p) >= accept, np.asarray(y, dtype=bool))


def _fit_with_cuts(
    x: np.ndarray,
    y: np.ndarray,
    groups: np.ndarray,
    max_accept_error: float,
    l2: float,
    max_accept_error_long: float | None = None,
) -> tuple[np.ndarray, float, np.ndarray, tuple[Cuts, Cuts]]:
    """Coefficients, intercept, fitted probabilities, and the (short, long-form) cuts."""
    coefficients, intercept = fit_logistic(x, y, _balanced_weights(groups), l2)
    p = _probability(x, coefficients, intercept)
    cuts = regime_cuts(p, y, long_rows(x), max_accept_error, max_accept_error_long)
    return coefficients, intercept, p, cuts


def _accept_figures(accepted: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(share of grounded examples accepted, share of accepted examples that are ungrounded)."""
    rate = float(accepted[y].mean()) if y.any() else 0.0
    error = float((~y[accepted]).mean()) if accepted.any() else 0.0
    return rate, error


def fold_probabilities(
    x: np.ndarray,
    y: np.ndarray,
    groups: np.ndarray,
    contexts: Sequence[str],
    *,
    folds: int,
    l2: float,
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """(train mask, test mask, P of the train rows, P of the test rows) for each fold, the
    model refitted on the train rows. Rows that share a context share a fold; a fold with
    nothing to test, or whose train rows hold one label only, is skipped."""
    fold = group_folds(contexts, folds)
    for k in range(folds):
        test, train = fold == k, fold != k
        if not test.any() or len(np.unique(y[train])) < 2:
            continue
        coefficients, intercept = fit_logistic(
            x[train], y[train], _balanced_weights(groups[train]), l2
        )
        yield (
            train,
            test,
            _probability(x[train], coefficients, intercept),
            _probability(x[test], coefficients, intercept),
        )


def cross_validate(
    x: np.ndarray,
    y: np.ndarray,
    groups: np.ndarray,
    contexts: Sequence[str],
    *,
    folds: int,
    max_accept_error: float,
    l2: float,
    max_accept_error_long: float | None = None,
) -> dict[str, float]:
    """Out-of-fold figures of the whole fitting procedure, cuts included.

    Examples that share a context always fall in the same fold (six answers to one
    document, or a right and a wrong answer to one passage), so no fold is scored by a
    model that saw its source. This is the honest estimate of what the fitted policy does
    on new data of the same kind; the in-sample figures are optimistic.
    """
    p = np.zeros(len(y))
    accepted = np.zeros(len(y), dtype=bool)
    for train, test, p_train, p_test in fold_probabilities(
        x, y, groups, contexts, folds=folds, l2=l2
    ):
        cuts = regime_cuts(
            p_train, y[train], long_rows(x[train]), max_accept_error, max_accept_error_long
        )
        p[test] = p_test
        accepted[test] = accepted_by(p_test, long_rows(x[test]), cuts)
    metrics: dict[str, float] = {"cv_folds": float(folds)}
    for g in np.unique(groups):
        mask = groups == g
        rate, error = _accept_figures(accepted[mask], y[mask])
        metrics[f"{g}.cv_accept_rate_grounded"] = rate
        metrics[f"{g}.cv_accept_error"] = error
        metrics[f"{g}.cv_accepted"] = float(accepted[mask].sum())
        metrics[f"{g}.cv_auroc"] = auroc(p[mask], y[mask])
    return metrics


def fit_grounding(
    rows: Sequence[Mapping[str, float]],
    labels: Sequence[bool],
    groups: Sequence[str],
    *,
    contexts: Sequence[str] | None = None,
    folds: int = 5,
    max_accept_error: float = 0.05,
    max_accept_error_long: float | None = None,
    l2: float = L2,
    shapes: Sequence[Mapping[str, float]] | None = None,
    tasks: Sequence[str | None] | None = None,
    vectors: np.ndarray | None = None,
    familiar_share: float = FAMILIAR_SHARE,
) -> GroundingFit:
    """Fit P(grounded) and its cuts on labelled feature rows.

    Each group (one data file) gets the same total weight. `review` is the Youden cut of
    the fitted probability; `accept` the lowest cut at or above it whose accepted set holds
    at most `max_accept_error` ungrounded examples (long-form answers:
    `max_accept_error_long`, when given) — the same rules `fit_thresholds` uses for SGI.
    With `contexts` (one string per row naming its source) the metrics also hold
    `folds`-fold cross-validated figures, grouped by context (see `cross_validate`).
    The model records its domain: the range of every feature, and of each row's `shapes`
    (`pipeline.guards.domain.shape_inputs`) and the task kinds in `tasks`, when given. With
    `vectors` (each row's familiarity vector, `pipeline.guards.familiarity`) it carries a
    familiarity test whose cut holds `familiar_share` of the rows familiar out of fold
    (`pipeline.fit.familiarity_model`), its figures in the metrics.
    """
    check_accept_error("max_accept_error", max_accept_error)
    if max_accept_error_long is not None:
        check_accept_error("max_accept_error_long", max_accept_error_long)
    y = np.asarray(labels, dtype=bool)
    x = feature_matrix(rows)
    group = np.asarray(groups)
    coefficients, intercept, p, cuts = _fit_with_cuts(
        x, y, group, max_accept_error, l2, max_accept_error_long
    )
    (accept, review, nothing), (accept_long, review_long, nothing_long) = cuts
    accepted = accepted_by(p, long_rows(x), cuts)
    metrics: dict[str, float] = {"auroc_in_sample": auroc(p, y), "n": float(len(y))}
    for g in np.unique(group):
        mask = group == g
        rate, error = _accept_figures(accepted[mask], y[mask])
        metrics[f"{g}.accept_rate_grounded"] = rate
        metrics[f"{g}.accept_error"] = error
    if contexts is not None and folds > 1:
        metrics.update(
            cross_validate(
                x,
                y,
                group,
                contexts,
                folds=folds,
                max_accept_error=max_accept_error,
                l2=l2,
                max_accept_error_long=max_accept_error_long,
            )
        )
    inputs = [
        {**{name: float(row[name]) for name in FEATURES}, **(shapes[i] if shapes else {})}
        for i, row in enumerate(rows)
    ]
    familiarity = None
    if vectors is not None:
        familiarity, familiar = fit_familiarity(
            vectors,
            contexts if contexts is not None else [str(i) for i in range(len(rows))],
            share=familiar_share,
            folds=max(folds, 2),
            groups=groups,
        )
        metrics.update(familiar)
    model = GroundingModel(
        FEATURES,
        tuple(float(c) for c in coefficients),
        intercept,
        {
            **metrics,
            "accepts_nothing": float(nothing),
            "accepts_nothing_long": float(nothing_long),
            "max_accept_error": max_accept_error,
            "max_accept_error_long": _long_bound(max_accept_error, max_accept_error_long),
        },
        Domain.fitted(inputs, tasks or ()),
        familiarity,
    )
    return GroundingFit(model, accept, review, accept_long, review_long)
