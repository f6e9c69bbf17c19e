"""Geometry's rule: which route a candidate takes, what is refused or held before any
encoding (`screen`), and the scored verdict after it (`decide`).

The encoder call sits between the two: everything that can be decided without it is
decided first, so a candidate over the work caps, past its deadline or without evidence
costs milliseconds and never holds up its batch (`pipeline.guards.admission`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.bounds.thresholds import Thresholds
from pipeline.claims.units import ClaimSupport
from pipeline.guards.admission import WorkCaps, admit
from pipeline.guards.domain import task_of
from pipeline.guards.provenance import ContextEvidence
from pipeline.policy.document import UNKNOWN_ROUTE, Policy
from pipeline.policy.routing import Mode, RouteConfig, expired
from pipeline.scores.check import check
from pipeline.scores.results import DGIResult, GroundingScore, SGIResult, score_record
from pipeline.stages.inputs import CandidateView, evidence_context
from pipeline.trail.verdict import DEADLINE, SCORED, SKIP, Verdict, hold

OFF = "mode off: no verification, nothing is auto-accepted"


def route_of(candidate: CandidateView, policy: Policy, default_route: str) -> RouteConfig:
    """The route the candidate names, else the one serving its task kind, else the default."""
    return policy.route(
        policy.route_name(candidate.route, task_of(candidate.metadata), default_route)
    )


def refusal(candidate: CandidateView, route: RouteConfig) -> str | None:
    """Why the candidate is dead-lettered rather than decided (None when it is not)."""
    if candidate.initiator not in route.allowed_initiators:
        return f"route {route.name!r} is not open to initiator {candidate.initiator!r}"
    return None


def screen(
    candidate: CandidateView,
    route: RouteConfig,
    policy: Policy,
    deadline: float | None,
    now: float,
    caps: WorkCaps,
) -> Verdict | None:
    """The verdict reached before encoding, in order: mode `off` skips verification, an
    expired deadline and a candidate over the work caps go to a person, and so does one
    whose context has no chunk that counts as evidence. None: score it."""
    if route.mode is Mode.OFF:
        unknown = policy.unknown_route(route.name)
        if unknown is None:
            return Verdict(SKIP, SKIP, OFF)
        return Verdict(SKIP, SKIP, f"{unknown}: {OFF}", gate=UNKNOWN_ROUTE)
    if expired(deadline, now):
        return DEADLINE
    # The chunks are weighed as evidence (below) before any is encoded, at a cost of
    # their own, so the caps count every chunk.
    admitted = admit(candidate.question, candidate.context_chunks, candidate.response, caps)
    if not admitted.admitted:
        return hold(admitted.reason, "work_cap", evidence={"admission": admitted.to_dict()})
    counted, assessed = evidence_context(candidate, route)
    if assessed is not None and not counted:
        # A context was given and none of it may ground the answer (its own words, or
        # sources the route does not trust): fail closed.
        return hold(
            "no context chunk counts as evidence",
            "no_evidence",
            evidence={"provenance": assessed.to_dict()},
        )
    return None


def decide(
    scored: SGIResult | DGIResult | GroundingScore,
    thresholds: Thresholds,
    cuts: Mapping[str, float],
    encoder: str,
    assessed: ContextEvidence | None,
) -> Verdict:
    """The scored verdict: the check of the score against the route's cuts, with the
    score, the features and the weakest claim as evidence for the record."""
    checked = check(scored, thresholds)
    result = scored.sgi if isinstance(scored, GroundingScore) else scored
    evidence: dict[str, Any] = {"geometry": score_record(scored), "encoder": encoder}
    if assessed is not None:
        evidence["provenance"] = assessed.to_dict()
    if isinstance(scored, GroundingScore):
        evidence["grounding_probability"] = scored.value
        evidence["features"] = dict(scored.features)
        if scored.out_of_range:
            evidence["out_of_range"] = scored.out_of_range
        evidence.update(scored.guards)  # familiarity's distance, the languages read
        if scored.claim is not None and scored.claim.weakest is not None:
            evidence["weakest_claim"] = weakest(scored.claim)
        if scored.reader and scored.claim is not None:
            evidence["reader"] = reader_record(scored.reader, scored.claim)
    return Verdict(
        SCORED,
        SCORED,
        checked.render(),
        score=result.value,
        method=result.method,
        level=checked.level.value,
        evidence=evidence,
        thresholds=cuts,
        scored=scored,
    )


def weakest(claim: ClaimSupport) -> dict[str, Any]:
    """The claim the context backs least, the passage that backs it best and the head's
    score: what a reviewer reads to see which sentence failed."""
    claimed, window = claim.weakest, claim.window
    return {
        "claim": claimed.text if claimed else "",
        "window": window.text if window else "",
        "score": claim.score,
        "claims": len(claim.claims),
    }


def reader_record(name: str, claim: ClaimSupport) -> dict[str, Any]:
    """The reader that read the answer and its P(supported) of every claim, with the
    claim's span in the response: what `eval` and an auditor compare across readers."""
    return {
        "name": name,
        "claims": [
            {"text": c.text, "span": [c.start, c.end], "support": score}
            for c, score in zip(claim.claims, claim.claim_scores, strict=True)
        ],
    }
