"""The calibrated grounding score: geometry, source and claim support combined into P(grounded).

SGI alone separates little on realistic RAG answers (they stay on topic), so when a
context exists the geometry stage also measures what the source supports of what the
response *says* — content-word coverage, the weakest sentences, unsupported words,
numbers and names, phrase-level (n-gram) support, local support (whether each sentence's
words sit together in a few neighbouring source sentences) and the claim-support head's
score of the weakest claim (`pipeline.claims.head`) — and a logistic model fitted by
`groundstream calibrate` turns these into one probability. The switch routes on it with
the same three zones as SGI (`Thresholds.grounding_accept` / `grounding_review`, and the
long-form pair for long answers).

Content, not form. Every feature but claim support is measured on the answer's *core*
(`pipeline.claims.units.answer_core`): what a one-sentence answer adds to its question, without
the assistant's framing. In the public data right answers are short copied spans and
hallucinated ones fluent sentences; a model fed whole sentences learned that artefact and
sent "The capital of Australia is Canberra." to fallback while "Canberra" was accepted.
Measured on the core, both read "Canberra". No length feature is used for the same
reason. Fitting the model is offline work and lives in `pipeline.fit.grounding_model`; this
module only applies a fitted one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.claims.support import measure_support, ngram_precision
from pipeline.claims.units import ClaimSupport
from pipeline.errors import PolicyError
from pipeline.guards.domain import Domain, shape_inputs
from pipeline.guards.familiarity import Familiarity
from pipeline.scores.results import GroundingScore, SGIResult

CLAIM_SUPPORT = "claim_support"
"""The claim head's P(supported) of the response's weakest claim (0 when it was not
measured: no claim-support evidence is no evidence of support)."""
CLAIM_READER = "claim_reader"
"""The claim reader's (`pipeline.claims.reader`) P(supported) of the response's weakest
claim, each claim read against its candidate windows (0 when it was not measured)."""
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
    CLAIM_SUPPORT,
    CLAIM_READER,
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

FAMILIARITY = "familiarity"
"""The evidence key of the familiarity test's reading (distance, cut, familiar)."""

_CAP = 3  # counts of unsupported numbers and names beyond this add no information
_WORD_CAP = 6  # nor do unsupported words beyond this
WEAK_SENTENCE = 0.8
"""A sentence whose content words the source covers less than this is weak."""
WEAK_LOCAL = 0.6
"""A sentence whose words no few neighbouring source sentences cover this much is weak
locally (see `pipeline.claims.support.LOCAL_WINDOW`)."""


def grounding_features(
    question: str,
    context: Sequence[str],
    response: str,
    sgi: SGIResult,
    claim: ClaimSupport | None = None,
    reader: ClaimSupport | None = None,
) -> dict[str, float]:
    """The model's inputs for one response (its core, see `pipeline.claims.units.answer_core`,
    with `sgi` measured on the same text); pure and deterministic given `claim` (the claim
    head's reading of the whole response, `pipeline.claims.head.assess`) and `reader` (the
    claim reader's, `pipeline.claims.head.read`)."""
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
        CLAIM_SUPPORT: 0.0 if claim is None else claim.score,
        CLAIM_READER: 0.0 if reader is None else reader.score,
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
    """Logistic regression over `features`; `probability` is P(grounded).

    `domain` is what it was fitted on (`pipeline.guards.domain`); a policy written before domains
    were recorded has none, and its model is trusted everywhere as before. `familiarity`
    tells whether a candidate's topic is like the fitted data's.
    """

    features: tuple[str, ...]
    coefficients: tuple[float, ...]
    intercept: float
    metrics: Mapping[str, float] = field(default_factory=dict)
    domain: Domain | None = None
    familiarity: Familiarity | None = None
    """The test of whether a candidate looks like the fitted data (`pipeline.guards.familiarity`);
    None in a policy written before it existed: the model is trusted on any topic."""
    reader: Mapping[str, object] | None = None
    """The claim reader the model was fitted with (`calibrate --reader`): its ``name``,
    ``kind``, ``digest`` and ``files`` (`pipeline.claims.readers.reader_identity`), and the
    same fit without it (``without``); None when it was fitted without one. A model that
    weighs the reader is served only with that reader (`served_reader_problem`)."""

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
        out: dict[str, object] = {
            "features": list(self.features),
            "coefficients": list(self.coefficients),
            "intercept": self.intercept,
            "metrics": dict(self.metrics),
        }
        if self.domain is not None:
            out["domain"] = self.domain.to_dict()
        if self.familiarity is not None:
            out["familiarity"] = self.familiarity.to_dict()
        if self.reader is not None:
            out["reader"] = dict(self.reader)
        return out

    @classmethod
    def from_mapping(cls, data: Mapping[str, object]) -> GroundingModel | None:
        """The model of a policy's `[grounding]` table; None when the table is empty."""
        if not data:
            return None
        known = {
            "features",
            "coefficients",
            "intercept",
            "metrics",
            "domain",
            "familiarity",
            "reader",
        }
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
        domain = data.get("domain")
        if domain is not None and not isinstance(domain, Mapping):
            raise PolicyError("grounding.domain", domain, "a table")
        familiar = data.get("familiarity")
        if familiar is not None and not isinstance(familiar, Mapping):
            raise PolicyError("grounding.familiarity", familiar, "a table")
        reader = data.get("reader")
        if reader is not None and (
            not isinstance(reader, Mapping)
            or not all(isinstance(reader.get(k), str) for k in ("name", "kind", "digest"))
        ):
            raise PolicyError("grounding.reader", reader, "a table with name, kind and digest")
        return cls(
            tuple(features),
            tuple(float(c) for c in coefficients),
            float(intercept),
            dict(metrics),
            None if domain is None else Domain.from_mapping(domain, "grounding.domain"),
            None
            if familiar is None
            else Familiarity.from_mapping(familiar, "grounding.familiarity"),
            None if reader is None else dict(reader),
        )


def reads_claims(model: GroundingModel, feature: str = CLAIM_SUPPORT) -> bool:
    """Whether the model gives `feature` (the head's `claim_support`, or the reader's
    `claim_reader`) any weight, plain or in the long-form regime: only then is that model
    worth running."""
    return any(
        c != 0.0 and name.split(":")[0] == feature
        for name, c in zip(model.features, model.coefficients, strict=True)
    )


def score_grounding(
    model: GroundingModel,
    question: str,
    context: Sequence[str],
    response: str,
    sgi: SGIResult,
    task: str | None = None,
    claim: ClaimSupport | None = None,
    reader: ClaimSupport | None = None,
    familiar: np.ndarray | None = None,
) -> GroundingScore:
    """Combine one response's SGI and support into P(grounded); a flagged SGI stays flagged.

    An answer outside the model's fitted domain keeps its probability but is flagged with
    the reason (`GroundingScore.out_of_range`), so it escalates instead of being accepted
    or rejected on a model that never saw its like. `task` is the candidate's task kind,
    when it names one; `claim` the claim head's reading of the response, kept on the score
    so the decision record can name the weakest claim; `reader` the claim reader's, which
    the record names instead when it was measured. `familiar` is the answer's familiarity
    vector (`pipeline.guards.familiarity.familiarity_vector`): when the model carries a familiarity
    test, an answer unlike the fitted data is flagged too, with its distance and the cut,
    and the distance is kept as evidence (`GroundingScore.guards`) either way.
    """
    features = grounding_features(question, context, response, sgi, claim, reader)
    claim = reader or claim
    if sgi.flagged:
        return GroundingScore(
            0.0, sgi, features, flagged=True, flag_reason=sgi.flag_reason, claim=claim
        )
    p = model.probability(features)
    reasons, guards = [], {}
    if model.domain is not None:
        shape = shape_inputs(response, sgi.context_windows, bool(context))
        reasons.append(model.domain.outside({**features, **shape}, task))
    if model.familiarity is not None and familiar is not None:
        reasons.append(model.familiarity.unfamiliar(familiar))
        if len(familiar) == model.familiarity.dimension:
            guards[FAMILIARITY] = {
                "distance": model.familiarity.distance(familiar),
                "cut": model.familiarity.cut,
                "familiar": not reasons[-1],
            }
    reason = "; ".join(r for r in reasons if r)
    return GroundingScore(
        p, sgi, features, flagged=bool(reason), flag_reason=reason, claim=claim, guards=guards
    )


def _fitted_with(identity: Mapping[str, Any] | None) -> str:
    if not identity:
        return "a claim reader it does not name (fitted before policies recorded it)"
    return f"reader {identity.get('name')} (reader.json digest {str(identity.get('digest'))[:12]})"


def served_reader_problem(
    models: Iterable[tuple[str, Any]], served: str | Path | None
) -> str | None:
    """Why the reader directory `served` (None: no reader) cannot serve these grounding
    models, given as (where the policy holds it, model): a model that gives the claim
    reader weight (`reads_claims`) must be served the reader it
    was fitted with, which its ``reader`` names (`reader_identity`); a model fitted before
    policies named their reader must be served some reader. None when every model can be
    served; a model that gives the reader no weight never runs it and asks for nothing."""
    from pipeline.claims.readers import reader_identity

    found: dict[str, Any] | None = None
    for where, model in models:
        if model is None or not reads_claims(model, CLAIM_READER):
            continue
        fitted = model.reader
        if served is None:
            return f"{where} was fitted with {_fitted_with(fitted)} and gives it weight"
        if not fitted:
            continue
        found = found or reader_identity(served)
        if found["digest"] != fitted.get("digest"):
            return (
                f"{where} was fitted with {_fitted_with(fitted)} and gives it weight, not "
                f"with the reader served, {found['name']} (digest {found['digest'][:12]})"
            )
    return None
