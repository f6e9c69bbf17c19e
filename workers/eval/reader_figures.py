"""`eval --reader DIR`: the reader measured beside the claim head on the same labelled data,
before it is given any say.

Answer level: each answer's weakest-claim P(supported), by the head and by the reader,
against the answer's label. Claim level: each claim's P(supported) against the claim's
label where the data gives one — every claim of a right answer is supported; a
hallucinated answer's claims overlapping a marked span (``metadata.spans``, as RAGTruth
marks them) are unsupported and the rest supported; a hallucinated answer without
locatable spans labels its claim only when it has exactly one. Answers without a context
are not read by either. AUROC is `pipeline.fit.metrics.auroc` (None for one class).

`calibrate --reader DIR`: `with_reader_record` gives the fitted grounding model the reader's
identity (`pipeline.claims.readers.reader_identity`), which start-up checks, and the same
fit without it — the reader's features read as 0, exactly as when no reader is served — so
the policy records, and the command prints, the cross-validated figures (folds grouped by
source, `pipeline.fit.grounding_model.cross_validate`) and the judge-share frontier with and
without the reader side by side. The reader keeps its weight only when the cross-validated
figures say it helps (`reader_verdict`: AUROC at least `READER_MIN_AUROC_GAIN` higher with
it, and no smaller share of grounded answers accepted under the same --max-accept-error);
otherwise the policy gets the fit without it — the reader's coefficients exactly 0, so it
is neither run nor asked for at start-up — and still records the reader measured, the
verdict and the figures of the fit with it (``reader.with``) for an auditor.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from pipeline.claims.head import ClaimHead
from pipeline.claims.units import ClaimSupport
from pipeline.encoding.chunks import context_chunks
from pipeline.errors import ScoringError
from pipeline.fit.grounding_model import GroundingFit, feature_matrix, fit_grounding
from pipeline.fit.judge_share import JudgeShare, fit_judge_share
from pipeline.fit.metrics import auroc
from pipeline.scores.batch import Reader, claim_reader_batch, claim_support_batch
from pipeline.scores.geometric import Encoder
from pipeline.scores.grounding import CLAIM_READER
from workers.eval.datasets import LabelledCandidate

__all__ = [
    "READER_MIN_AUROC_GAIN",
    "claim_labels",
    "fitted_reader_dir",
    "reader_figures",
    "reader_verdict",
    "with_reader_record",
    "without_reader",
]

BATCH = 64

READER_MIN_AUROC_GAIN = 0.005
"""The least rise in cross-validated AUROC (mean over the data files) that earns a reader
its weight in P(grounded): below it the difference is noise on data of calibration size,
and a reader that does not help costs a model call per batch and a dependency at
start-up."""


def _span_ranges(response: str, spans: Sequence[object]) -> list[tuple[int, int]]:
    out = []
    for span in spans:
        text = str(span).strip()
        at = response.find(text) if text else -1
        if at >= 0:
            out.append((at, at + len(text)))
    return out


def claim_labels(item: LabelledCandidate, support: ClaimSupport) -> list[bool | None]:
    """Each claim's label (True: supported), None where the data does not say."""
    claims = support.claims
    if item.grounded:
        return [True] * len(claims)
    response = str(item.candidate.get("response", ""))
    meta = item.candidate.get("metadata") or {}
    ranges = _span_ranges(response, meta.get("spans") or [])
    if ranges:
        return [not any(c.start < b and a < c.end for a, b in ranges) for c in claims]
    return [False] if len(claims) == 1 else [None] * len(claims)


def _auroc(scores: list[float], labels: list[bool]) -> float | None:
    try:
        return float(auroc(scores, labels)) if scores else None
    except ScoringError:
        return None


def reader_figures(
    items: Sequence[LabelledCandidate],
    encoder: Encoder,
    head: ClaimHead,
    reader: Reader,
    name: str,
) -> dict[str, Any]:
    """Claim- and answer-level AUROC of the head and of the reader on `items`."""
    scorable = [
        i
        for i in items
        if context_chunks(i.candidate.get("context"))
        and str(i.candidate.get("response", "")).strip()
    ]
    pairs = [
        (tuple(context_chunks(i.candidate["context"]) or ()), str(i.candidate["response"]))
        for i in scorable
    ]
    heads: list[ClaimSupport] = []
    reads: list[ClaimSupport] = []
    for start in range(0, len(pairs), BATCH):
        chunk = pairs[start : start + BATCH]
        heads += claim_support_batch(chunk, encoder, head)
        reads += claim_reader_batch(chunk, encoder, reader)
    answers: dict[str, list] = {"head": [], "reader": [], "label": []}
    claims: dict[str, list] = {"head": [], "reader": [], "label": []}
    for item, by_head, by_reader in zip(scorable, heads, reads, strict=True):
        if not by_head.claims:
            continue
        answers["head"].append(by_head.score)
        answers["reader"].append(by_reader.score)
        answers["label"].append(item.grounded)
        for label, h, r in zip(
            claim_labels(item, by_head), by_head.claim_scores, by_reader.claim_scores, strict=True
        ):
            if label is not None:
                claims["head"].append(h)
                claims["reader"].append(r)
                claims["label"].append(label)
    return {
        "name": name,
        "n_answers": len(answers["label"]),
        "n_claims": len(claims["label"]),
        "auroc_answers_head": _auroc(answers["head"], answers["label"]),
        "auroc_answers_reader": _auroc(answers["reader"], answers["label"]),
        "auroc_claims_head": _auroc(claims["head"], claims["label"]),
        "auroc_claims_reader": _auroc(claims["reader"], claims["label"]),
    }


def fitted_reader_dir() -> str | None:
    """The reader directory a fit in this process reads (`pipeline.policy.defaults.
    default_claim_reader`): GROUNDSTREAM_READER's (`calibrate --reader` sets it), else the
    shipped one when the package has it; None without one."""
    from pipeline.claims.reader import MODEL_FILE, bundled_reader_dir
    from pipeline.claims.readers import READER_ENV

    if os.environ.get(READER_ENV):
        return os.environ[READER_ENV]
    return str(bundled_reader_dir()) if (bundled_reader_dir() / MODEL_FILE).is_file() else None


def without_reader(rows: Sequence[Mapping[str, float]]) -> list[dict[str, float]]:
    """Feature rows as they are when no reader is served: its features read 0."""
    return [
        {k: (0.0 if k.split(":")[0] == CLAIM_READER else v) for k, v in row.items()} for row in rows
    ]


def _plain(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """TOML-writable figures: no None or non-finite values, no numpy scalars."""
    out = {}
    for key, value in metrics.items():
        value = value.item() if isinstance(value, np.generic) else value
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            continue
        out[key] = value
    return out


def _cv_means(metrics: Mapping[str, Any]) -> tuple[float | None, float]:
    """(mean cross-validated AUROC, mean cross-validated share of grounded answers
    accepted) over the data files, each counted once as the fit weighs them; the AUROC is
    None where no file has one (a file of one label)."""
    suffix = ".cv_accept_rate_grounded"
    files = sorted(k.removesuffix(suffix) for k in metrics if k.endswith(suffix))
    found = [metrics.get(f + ".cv_auroc") for f in files]
    aucs = [float(a) for a in found if a is not None and math.isfinite(float(a))]
    rates = [float(metrics[f + suffix]) for f in files]
    return (
        sum(aucs) / len(aucs) if aucs else None,
        sum(rates) / len(rates) if rates else 0.0,
    )


def reader_verdict(with_it: Mapping[str, Any], without: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether the reader earns its weight, and the figures that say so, from the metrics of
    the fit with it and of the same fit without it: its mean cross-validated AUROC (folds
    grouped by source) must be at least `READER_MIN_AUROC_GAIN` above the one without it,
    and its mean cross-validated share of grounded answers accepted (under the same accept
    error bound) no lower. A fit without cross-validated figures earns it nothing."""
    auc_with, rate_with = _cv_means(with_it)
    auc_without, rate_without = _cv_means(without)
    if auc_with is None or auc_without is None:
        return False, "no cross-validated AUROC to compare it by"
    figures = (
        f"cross-validated AUROC {auc_with:.3f} with it, {auc_without:.3f} without;"
        f" grounded answers accepted {rate_with:.1%} with it, {rate_without:.1%} without"
    )
    gain = auc_with - auc_without
    if gain < READER_MIN_AUROC_GAIN - 1e-12:
        return False, f"{figures} (AUROC {gain:+.3f}, less than +{READER_MIN_AUROC_GAIN})"
    if rate_with < rate_without - 1e-12:
        return False, f"{figures} (fewer grounded answers accepted)"
    return True, figures


def _side(
    fit: GroundingFit,
    rows: Sequence[Mapping[str, float]],
    labels: Sequence[bool],
    groups: Sequence[str],
    contexts: Sequence[str],
    max_accept_error: float,
    max_accept_error_long: float | None,
    judge_share: JudgeShare | None,
) -> dict[str, Any]:
    """One side of the comparison as the policy records it: the fit's cuts, its figures
    and, with `judge_share`, the judge-share frontier fitted on it."""
    (accept, review), (accept_long, review_long) = fit.pairs
    side: dict[str, Any] = {
        "thresholds": _plain(
            {
                "grounding_accept": accept,
                "grounding_review": review,
                "grounding_accept_long": accept_long,
                "grounding_review_long": review_long,
            }
        ),
        "metrics": _plain(fit.model.metrics),
    }
    if judge_share is not None:
        band = fit_judge_share(
            feature_matrix(rows),
            np.asarray(labels, dtype=bool),
            np.asarray(groups),
            fit.model,
            judge_share,
            max_error=max_accept_error,
            max_error_long=max_accept_error_long,
            contexts=contexts,
        )
        side["judge_share"] = band.to_dict()
    return side


def with_reader_record(
    grounding: GroundingFit,
    directory: str,
    rows: Sequence[Mapping[str, float]],
    labels: Sequence[bool],
    groups: Sequence[str],
    contexts: Sequence[str],
    *,
    max_accept_error: float,
    max_accept_error_long: float | None = None,
    judge_share: JudgeShare | None = None,
    fit_options: Mapping[str, Any] | None = None,
) -> tuple[GroundingFit, list[dict[str, float]]]:
    """The fit the policy keeps, naming the reader in `directory` (``reader``: its identity,
    ``weighed`` and the ``verdict`` of `reader_verdict`), and the feature rows that fit
    reads. `grounding` was fitted on `rows`, which read the reader; the same fit is refitted
    on the same rows without it (with `fit_options`, the other arguments `grounding` was
    fitted with) and recorded as ``reader.without`` (cuts, in-sample and cross-validated
    figures, and with `judge_share` its frontier). When the reader does not earn its weight
    the fit without it is kept — its coefficients for the reader exactly 0 — and the fit
    with it is recorded as ``reader.with``, its weights for the reader included."""
    from pipeline.claims.readers import reader_identity

    plain = without_reader(rows)
    baseline = fit_grounding(
        plain,
        labels,
        groups,
        contexts=contexts,
        max_accept_error=max_accept_error,
        max_accept_error_long=max_accept_error_long,
        **(fit_options or {}),
    )
    bounds = (max_accept_error, max_accept_error_long, judge_share)
    without = _side(baseline, plain, labels, groups, contexts, *bounds)
    weighed, verdict = reader_verdict(grounding.model.metrics, baseline.model.metrics)
    record: dict[str, Any] = {
        **reader_identity(directory),
        "weighed": weighed,
        "verdict": verdict,
        "without": without,
    }
    if weighed:
        return replace(grounding, model=replace(grounding.model, reader=record)), [
            dict(r) for r in rows
        ]
    weights = {
        name: float(c)
        for name, c in zip(grounding.model.features, grounding.model.coefficients, strict=True)
        if name.split(":")[0] == CLAIM_READER
    }
    record["with"] = {
        **_side(grounding, rows, labels, groups, contexts, *bounds),
        "weights": weights,
    }
    return replace(baseline, model=replace(baseline.model, reader=record)), plain
