"""Consistency's rule: which samples count, what a failed or late sampler means, and the
verdict over the samples' meanings (`pipeline.rungs.self_consistency`).

Samples come with the candidate (copies of its own answer count once) or from a sampler;
the adapter draws them and embeds them, and hands the similarity matrix over. Only a
committed interpretation that the response agrees with moves towards state; unresolved,
requires-clarification and budget-exceeded decisions go on to the judge. An unavailable
sampler fails closed the same way (up the ladder, never accepted here), and so does a
commitment resting on too few distinct samples of the candidate's own. Samples of its own
over the work caps (`screen`) go to a person before any is read (`pipeline.guards.admission`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.guards.admission import WorkCaps, admit_samples
from pipeline.guards.provenance import SampleEvidence, distinct_samples
from pipeline.policy.routing import RouteConfig, expired
from pipeline.rungs.self_consistency import BudgetLimit, ConsistencyConfig, decide_consistency
from pipeline.stages.inputs import CandidateView
from pipeline.trail.verdict import DEADLINE, DEFER, PASS, Verdict, hold


@dataclass(frozen=True, slots=True)
class Drawn:
    """What a sampler returned for one candidate, as the decision reads and records it."""

    samples: tuple[str, ...]
    requested: int
    budget_limit: BudgetLimit
    tokens_used: int
    calls: tuple[Mapping[str, Any], ...]
    breaker: str
    failure: str | None = None


def screen(candidate: CandidateView, caps: WorkCaps) -> Verdict | None:
    """The verdict before the candidate's own samples are read: over the work caps (how
    many, the words of the longest), a person decides, as geometry holds an answer over
    them; the record names the cap and the counts. None: go on."""
    admitted = admit_samples(candidate.samples or (), caps)
    if admitted.admitted:
        return None
    return hold(
        admitted.reason,
        "work_cap",
        evidence={"sample_source": "candidate", "admission": admitted.to_dict()},
    )


def supplied(candidate: CandidateView, route: RouteConfig) -> SampleEvidence:
    """The candidate's own samples, copies of its answer and of each other counted once."""
    return distinct_samples(candidate.samples or (), candidate.response, route.min_distinct_samples)


def samples_of(own: SampleEvidence, drawn: Drawn | None) -> list[str]:
    """The samples the decision compares: the candidate's own, else the sampler's."""
    return list(own.distinct) if own.distinct or drawn is None else list(drawn.samples)


def after_sampling(drawn: Drawn, deadline: float | None, now: float) -> Verdict | None:
    """The verdict when sampling itself decides: past the deadline a person decides; a
    sampler that failed short of what was asked leaves it to the judge. None: go on."""
    if expired(deadline, now):
        return DEADLINE
    if drawn.failure is not None and len(drawn.samples) < drawn.requested:
        return Verdict(
            DEFER,
            "escalate",
            f"sampler unavailable ({drawn.failure}); the judge decides",
            gate="sampler_unavailable",
            breaker={"sampler": drawn.breaker},
            evidence=_evidence(own=None, drawn=drawn),
        )
    return None


def decide(
    own: SampleEvidence,
    drawn: Drawn | None,
    similarity: np.ndarray | None,
    config: ConsistencyConfig,
    nli: bool,
) -> Verdict:
    """The verdict over the samples (`samples_of`): `similarity` is the matrix over the
    response and then each sample (None without samples); `nli` says whether it came from
    an NLI model or from embeddings, for the record."""
    samples = samples_of(own, drawn)
    budget = BudgetLimit.NONE if drawn is None or own.distinct else drawn.budget_limit
    if similarity is None or not samples:
        decision = decide_consistency(
            np.zeros((0,)), np.zeros((0, 0)), [], config, budget_limit=budget
        )
    else:
        decision = decide_consistency(
            similarity[0, 1:], similarity[1:, 1:], samples, config, budget_limit=budget
        )
    evidence = _evidence(own, None if own.distinct else drawn)
    evidence.update(decision.to_dict())
    evidence["similarity"] = "nli" if nli else "embedding"
    if decision.passes and own.distinct and not own.enough:
        return Verdict(
            DEFER,
            "unresolved",
            f"{len(own.distinct)} distinct sample(s) of the candidate's own, "
            f"{own.min_distinct} needed to commit; the judge decides",
            score=decision.consistency_score,
            method="consistency",
            level=decision.level.value,
            gate="too_few_distinct_samples",
            evidence=evidence,
        )
    return Verdict(
        PASS if decision.passes else DEFER,
        decision.outcome.value,
        decision.reason,
        score=decision.consistency_score,
        method="consistency",
        level=decision.level.value,
        evidence=evidence,
        breaker=None if drawn is None or own.distinct else {"sampler": drawn.breaker},
    )


def _evidence(own: SampleEvidence | None, drawn: Drawn | None) -> dict[str, Any]:
    """Where the samples came from, for the record; the sampler's answers as drawn, so a
    replay decides on them again instead of asking the sampler (workers.clients.recorded)."""
    if own is not None and own.distinct:
        return {"sample_source": "candidate", "distinct_samples": own.to_dict()}
    if drawn is None:
        return {"sample_source": "none"}
    return {
        "sample_source": "sampler",
        "tokens_used": drawn.tokens_used,
        "calls": [dict(call) for call in drawn.calls],
        "samples": list(drawn.samples),
        "budget_limit": drawn.budget_limit.value,
    }


def similarities(vectors: np.ndarray | Sequence[Sequence[float]]) -> np.ndarray:
    """Cosine similarity matrix of row vectors (float64)."""
    v = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    v = v / np.where(norms == 0, 1.0, norms)
    return v @ v.T
