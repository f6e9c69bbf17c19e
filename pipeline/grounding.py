"""The calibrated grounding score: geometry and source support combined into P(grounded).

SGI alone separates little on realistic RAG answers (they stay on topic), so when a
context exists the geometry stage also measures how much of the response the source
actually supports — content-word coverage, the weakest sentences, unsupported words,
numbers and names, phrase-level (n-gram) support and local support (whether each
sentence's words sit together in a few neighbouring source sentences) — and a logistic
model fitted by `groundstream calibrate` turns these into one probability. The switch
routes on it with the same three zones as SGI (`Thresholds.grounding_accept` / `grounding_review`).

No length feature is used on purpose: answer length is a confound in the public data
(right answers are short), not evidence of grounding.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from pipeline.errors import PolicyError, ScoringError
from pipeline.results import SGIResult
from pipeline.support import measure_support, ngram_precision

BASE_FEATURES: tuple[str, ...] = (
    "log_sgi",
    "content_coverage",
    "min_sentence_coverage",
    "unsupported_numbers",
    "unsupported_names",
    "bigram_precision",
    "trigram_precision",
    "coverage_x_trigram",
    "fully_supported",
    "unsupported_words",
    "weak_sentence_share",
    "local_weak_share",
)
LONG_FORM = "long_form"
FEATURES: tuple[str, ...] = (
    *BASE_FEATURES,
    LONG_FORM,
    *(f"{name}:long" for name in BASE_FEATURES),
)
"""Feature order of the model's coefficients. Every base feature also enters once more
multiplied by `long_form` (1 when the response has several sentences or the context is
longer than one encoder window). Support means something else for a one-sentence answer
taken from one passage than for a paraphrasing summary of a long source, where common
words are found by chance and right answers also use words of their own; the two kinds
get their own weights instead of one compromise."""

_CAP = 3  # counts of unsupported numbers and names beyond this add no information
_WORD_CAP = 6  # nor do unsupported words beyond this
WEAK_SENTENCE = 0.8
"""A sentence whose content words the source covers less than this is weak."""
WEAK_LOCAL = 0.6
"""A sentence whose words no few neighbouring source sentences cover this much is weak
locally (see `pipeline.support.LOCAL_WINDOW`)."""


def grounding_features(
    question: str, context: Sequence[str], response: str, sgi: SGIResult
) -> dict[str, float]:
    """The model's inputs for one response; pure and deterministic."""
    report = measure_support(response, context, question)
    trigram = ngram_precision(response, context, 3)
    numbers = min(len(report.unsupported_numbers), _CAP)
    names = min(len(report.unsupported_names), _CAP)
    claims = [  # (coverage, local coverage) of the sentences that state something
        (cov, local)
        for cov, local, n in zip(
            report.sentence_coverage,
            report.sentence_local_coverage,
            report.sentence_content,
            strict=True,
        )
        if n
    ]
    base = {
        "log_sgi": math.log(max(sgi.value, 1e-3)),
        "content_coverage": report.content_coverage,
        "min_sentence_coverage": report.min_sentence_coverage,
        "unsupported_numbers": float(numbers),
        "unsupported_names": float(names),
        "bigram_precision": ngram_precision(response, context, 2),
        "trigram_precision": trigram,
        "coverage_x_trigram": report.content_coverage * trigram,
        "fully_supported": float(numbers == 0 and names == 0),
        "unsupported_words": float(min(len(report.unsupported_words), _WORD_CAP)),
        "weak_sentence_share": _share(cov < WEAK_SENTENCE for cov, _ in claims),
        "local_weak_share": _share(local < WEAK_LOCAL for _, local in claims),
    }
    long_form = float(len(report.sentence_spans) > 1 or sgi.context_windows > 1)
    return {
        **base,
        LONG_FORM: long_form,
        **{f"{name}:long": value * long_form for name, value in base.items()},
    }


def _share(flags: Iterable[bool]) -> float:
    values = list(flags)
    return sum(values) / len(values) if values else 0.0


@dataclass(frozen=True, slots=True)
class GroundingModel:
    """Logistic regression over `features`; `probability` is P(grounded)."""

    features: tuple[str, ...]
    coefficients: tuple[float, ...]
    intercept: float
    metrics: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = [f for f in self.features if f not in FEATURES]
        if unknown:
            raise PolicyError("grounding.features", unknown, f"names from {', '.join(FEATURES)}")
        if len(self.coefficients) != len(self.features):
            raise PolicyError(
                "grounding.coefficients", len(self.coefficients), f"{len(self.features)} numbers"
            )
        if not all(math.isfinite(c) for c in (*self.coefficients, self.intercept)):
            raise PolicyError("grounding.coefficients", self.coefficients, "finite numbers")

    def probability(self, features: Mapping[str, float]) -> float:
        z = self.intercept + sum(
            c * features[name] for name, c in zip(self.features, self.coefficients, strict=True)
        )
        return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, z))))

    def to_dict(self) -> dict[str, object]:
        return {
            "features": list(self.features),
            "coefficients": list(self.coefficients),
            "intercept": self.intercept,
            "metrics": dict(self.metrics),
        }

    @classmethod
    def from_mapping(cls, data: Mapping[str, object]) -> GroundingModel | None:
        """The model of a policy's `[grounding]` table; None when the table is empty."""
        if not data:
            return None
        known = {"features", "coefficients", "intercept", "metrics"}
        for key in data:
            if key not in known:
                raise PolicyError(
                    f"grounding.{key}", data[key], f"one of {', '.join(sorted(known))}"
                )
        features, coefficients = data.get("features"), data.get("coefficients")
        intercept = data.get("intercept", 0.0)
        if not isinstance(features, list) or not all(isinstance(f, str) for f in features):
            raise PolicyError("grounding.features", features, "a list of feature names")
        if not isinstance(coefficients, list) or not all(
            isinstance(c, int | float) and not isinstance(c, bool) for c in coefficients
        ):
            raise PolicyError("grounding.coefficients", coefficients, "a list of numbers")
        if isinstance(intercept, bool) or not isinstance(intercept, int | float):
            raise PolicyError("grounding.intercept", intercept, "a number")
        metrics = data.get("metrics", {})
        if not isinstance(metrics, Mapping):
            raise PolicyError("grounding.metrics", metrics, "a table")
        return cls(
            tuple(features), tuple(float(c) for c in coefficients), float(intercept), dict(metrics)
        )


@dataclass(frozen=True, slots=True)
class GroundingScore:
    """P(grounded) for one response, with the SGI and the features it came from."""

    value: float
    sgi: SGIResult
    features: Mapping[str, float]
    method: str = "grounding"
    flagged: bool = False
    flag_reason: str = ""

    def to_dict(self) -> dict[str, object]:
        return {"probability": self.value, "features": dict(self.features)}


def score_grounding(
    model: GroundingModel, question: str, context: Sequence[str], response: str, sgi: SGIResult
) -> GroundingScore:
    """Combine one response's SGI and support into P(grounded); a flagged SGI stays flagged."""
    features = grounding_features(question, context, response, sgi)
    if sgi.flagged:
        return GroundingScore(0.0, sgi, features, flagged=True, flag_reason=sgi.flag_reason)
    return GroundingScore(model.probability(features), sgi, features)


def fit_logistic(
    rows: np.ndarray, labels: np.ndarray, weights: np.ndarray | None = None, l2: float = 1.0
) -> tuple[np.ndarray, float]:
    """L2-regularised logistic regression by Newton's method (IRLS); deterministic.

    Features are standardised internally so one `l2` suits them all; the returned
    coefficients apply to the raw features.
    """
    x = np.asarray(rows, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    if x.ndim != 2 or len(x) != len(y) or len(x) == 0:
        raise ScoringError(
            "fit_logistic needs a non-empty 2-D feature matrix and one label per row"
        )
    if y.min() == y.max():
        raise ScoringError("fit_logistic needs both grounded and ungrounded examples")
    w = np.ones(len(y)) if weights is None else np.asarray(weights, dtype=np.float64)
    mean = np.average(x, axis=0, weights=w)
    std = np.sqrt(np.average((x - mean) ** 2, axis=0, weights=w))
    std = np.where(std < 1e-12, 1.0, std)
    z = np.column_stack([np.ones(len(x)), (x - mean) / std])
    beta = np.zeros(z.shape[1])
    penalty = np.full(z.shape[1], l2)
    penalty[0] = 0.0  # the intercept is not shrunk
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-np.clip(z @ beta, -50, 50)))
        gradient = z.T @ (w * (y - p)) - penalty * beta
        hessian = (z * (w * p * (1 - p))[:, None]).T @ z + np.diag(penalty)
        step = np.linalg.solve(hessian, gradient)
        beta += step
        if np.max(np.abs(step)) < 1e-10:
            break
    coefficients = beta[1:] / std
    intercept = float(beta[0] - np.sum(beta[1:] * mean / std))
    return coefficients, intercept


@dataclass(frozen=True, slots=True)
class GroundingFit:
    """A fitted model with its two cuts (accept / review) and how they were chosen."""

    model: GroundingModel
    accept: float
    review: float


def _balanced_weights(groups: np.ndarray) -> np.ndarray:
    """Each group (one data file) gets the same total weight, so a large set cannot drown a
    small one."""
    names, index, sizes = np.unique(groups, return_inverse=True, return_counts=True)
    return len(groups) / (len(names) * sizes[index])


def _probability(x: np.ndarray, coefficients: np.ndarray, intercept: float) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(intercept + x @ coefficients, -50, 50)))


def _fit_with_cuts(
    x: np.ndarray, y: np.ndarray, groups: np.ndarray, max_accept_error: float, l2: float
) -> tuple[np.ndarray, float, np.ndarray, float, float, bool]:
    """Coefficients, intercept, fitted probabilities, review cut, accept cut, accepts-nothing."""
    from pipeline.calibrate import strong_pass_cut
    from pipeline.metrics import youden_threshold

    coefficients, intercept = fit_logistic(x, y, _balanced_weights(groups), l2)
    p = _probability(x, coefficients, intercept)
    review = youden_threshold(p, y)
    accept, nothing = strong_pass_cut(p, y, review, max_accept_error)
    return coefficients, intercept, p, review, float(min(accept, 1.0)), nothing


def _fold_of(key: str, folds: int) -> int:
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % folds


def _accept_figures(accepted: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(share of grounded examples accepted, share of accepted examples that are ungrounded)."""
    rate = float(accepted[y].mean()) if y.any() else 0.0
    error = float((~y[accepted]).mean()) if accepted.any() else 0.0
    return rate, error


def cross_validate(
    x: np.ndarray,
    y: np.ndarray,
    groups: np.ndarray,
    contexts: Sequence[str],
    *,
    folds: int,
    max_accept_error: float,
    l2: float,
) -> dict[str, float]:
    """Out-of-fold figures of the whole fitting procedure, cuts included.

    Examples that share a context always fall in the same fold (six answers to one
    document, or a right and a wrong answer to one passage), so no fold is scored by a
    model that saw its source. This is the honest estimate of what the fitted policy does
    on new data of the same kind; the in-sample figures are optimistic.
    """
    from pipeline.metrics import auroc

    fold = np.array([_fold_of(c, folds) for c in contexts])
    p = np.zeros(len(y))
    accepted = np.zeros(len(y), dtype=bool)
    for k in range(folds):
        test, train = fold == k, fold != k
        if not test.any() or len(np.unique(y[train])) < 2:
            continue
        coefficients, intercept, _, _, accept, _ = _fit_with_cuts(
            x[train], y[train], groups[train], max_accept_error, l2
        )
        p[test] = _probability(x[test], coefficients, intercept)
        accepted[test] = p[test] >= accept
    metrics: dict[str, float] = {"cv_folds": float(folds)}
    for g in np.unique(groups):
        mask = groups == g
        rate, error = _accept_figures(accepted[mask], y[mask])
        metrics[f"{g}.cv_accept_rate_grounded"] = rate
        metrics[f"{g}.cv_accept_error"] = error
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
    l2: float = 1.0,
) -> GroundingFit:
    """Fit P(grounded) and its cuts on labelled feature rows.

    Each group (one data file) gets the same total weight. `review` is the Youden cut of
    the fitted probability; `accept` the lowest cut at or above it whose accepted set holds
    at most `max_accept_error` ungrounded examples — the same rules `fit_thresholds` uses
    for SGI. With `contexts` (one string per row naming its source) the metrics also hold
    `folds`-fold cross-validated figures, grouped by context (see `cross_validate`).
    """
    from pipeline.metrics import auroc

    y = np.asarray(labels, dtype=bool)
    x = np.array([[row[name] for name in FEATURES] for row in rows], dtype=np.float64)
    group = np.asarray(groups)
    coefficients, intercept, p, review, accept, nothing = _fit_with_cuts(
        x, y, group, max_accept_error, l2
    )
    metrics: dict[str, float] = {"auroc_in_sample": auroc(p, y), "n": float(len(y))}
    for g in np.unique(group):
        mask = group == g
        rate, error = _accept_figures(p[mask] >= accept, y[mask])
        metrics[f"{g}.accept_rate_grounded"] = rate
        metrics[f"{g}.accept_error"] = error
    if contexts is not None and folds > 1:
        metrics.update(
            cross_validate(
                x, y, group, contexts, folds=folds, max_accept_error=max_accept_error, l2=l2
            )
        )
    model = GroundingModel(
        FEATURES,
        tuple(float(c) for c in coefficients),
        intercept,
        {**metrics, "accepts_nothing": float(nothing), "max_accept_error": max_accept_error},
    )
    return GroundingFit(model, accept, review)
