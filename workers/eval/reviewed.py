"""`groundstream calibrate --from-decisions`: the verdicts reviewers already gave, as labels.

A person's verdict (`groundstream review decide`) is a decision record on `decisions` with
stage `review`, method `human`, action `accept` or `reject`, and the candidate's id and
route. Read together with the candidates they judged (from `candidates`, by id), they are
labelled examples of exactly the answers the ladder could not settle, from the
deployment's own traffic. With them the route's cuts are refitted on the current model's
P(grounded); with `MIN_LABELS_FOR_MODEL` of them (and `MIN_PER_LABEL_FOR_MODEL` of each
verdict) the model is refitted too. The report says how the operating point moved on those
labels: the share of accepted verdicts the gate would auto-accept, and the share of its
auto-accepts a person rejected, before and after.

With `--judge-share` and DATA, the same records give the judge's accuracy instead
(`judge_accuracy`): on the candidates both a person and the judge ruled on, how often the
judge's clear yes or no matched the person's verdict; the band is then fitted on DATA for
a judge that accurate.

Reviewed answers are the uncertain middle, not a sample of all traffic: cuts refitted on
them alone describe that middle. The figures are in-sample on the labels they were fitted
on; check them with `groundstream eval` on held-out data before shipping the policy. A
refitted model's cross-validated figures are printed too, and a model whose cross-validated
accepts break the bound beyond doubt (`pipeline.fit.grounding_model.bound_broken`) is written
accepting nothing: its route's answers keep going to the judge or to people.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.bounds.thresholds import Thresholds
from pipeline.encoding.chunks import context_chunks
from pipeline.errors import ScoringError
from pipeline.fit.grounding_model import bound_broken, operating_point, regime_cuts
from pipeline.fit.metrics import wilson_interval
from pipeline.guards.domain import task_of
from pipeline.policy.defaults import default_claim_head, default_claim_reader
from pipeline.policy.document import load_policy
from pipeline.scores.batch import measure_batch
from pipeline.scores.grounding import LONG_FORM, GroundingModel, grounding_features
from topics.codec import dumps, loads
from topics.names import Topic
from workers.eval.calibration import (
    Example,
    fit_examples,
    fitted_sections,
    grounding_cut_table,
    write_fit,
)
from workers.runtime.review import read_all
from workers.runtime.settings import Settings
from workers.stages.review import REVIEW_STAGE

MIN_LABELS_FOR_CUTS = 6
"""Fewer verdicts than this (or only one kind) refit nothing: two cuts need both kinds."""
MIN_LABELS_FOR_MODEL = 200
MIN_PER_LABEL_FOR_MODEL = 30
"""The model (25 coefficients) is refitted only from this many verdicts, and this many of
each kind; below, only its cuts move."""
GROUP = "decisions"


@dataclass(frozen=True, slots=True)
class Verdict:
    candidate_id: str
    grounded: bool
    route: str
    decided_at: float


def parse_since(text: str) -> float:
    """Epoch seconds from `--since`: epoch seconds, or an ISO date or time (UTC if no zone)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"--since {text!r}: expected an ISO date/time or epoch seconds") from None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def _epoch(value: object) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        return None


def human_verdicts(
    records: Iterable[Mapping[str, Any]], *, since: float | None = None, route: str | None = None
) -> dict[str, Verdict]:
    """Each candidate's latest human verdict, decided at or after `since`, on `route`."""
    out: dict[str, Verdict] = {}
    for record in records:
        if record.get("stage") != REVIEW_STAGE or record.get("method") != "human":
            continue
        action, cid, at = record.get("action"), record.get("candidate_id"), record.get("decided_at")
        when = _epoch(at)
        if action not in ("accept", "reject") or not isinstance(cid, str) or when is None:
            continue
        if since is not None and when < since:
            continue
        name = str(record.get("route") or "default")
        if route is not None and name != route:
            continue
        if cid not in out or out[cid].decided_at <= when:
            out[cid] = Verdict(cid, action == "accept", name, when)
    return out


@dataclass(frozen=True, slots=True)
class JudgeAccuracy:
    """How often the judge agreed with a person on the candidates both ruled on: the
    judge's clear yes or no (`level`) against the person's accept or reject."""

    n: int
    agreed: int
    yes_rejected: int
    """The judge said yes, a person rejected: the errors that would reach state."""
    no_accepted: int

    @property
    def accuracy(self) -> float | None:
        return self.agreed / self.n if self.n else None

    def interval(self, z: float = 1.96) -> tuple[float, float]:
        """The Wilson score interval of the accuracy (95% by default)."""
        if not self.n:
            return 0.0, 1.0
        low, high = wilson_interval(self.agreed, self.n, z)
        return max(0.0, float(low)), min(1.0, float(high))

    def render(self) -> str:
        if not self.n:
            return "no candidate both a person and the judge ruled on"
        low, high = self.interval()
        return (
            f"judge accuracy {self.accuracy:.3f} (95% interval {low:.3f}–{high:.3f}) from"
            f" {self.n} candidates both a person and the judge ruled on: the judge's yes on"
            f" {self.yes_rejected} a person rejected, its no on {self.no_accepted} a person"
            " accepted"
        )


def judge_accuracy(
    records: Iterable[Mapping[str, Any]], *, since: float | None = None, route: str | None = None
) -> JudgeAccuracy:
    """The judge's agreement with people on `decisions` records: per candidate, its latest
    human verdict (`human_verdicts`, at or after `since`, on `route`) against the judge's
    latest clear verdict on it (a `judge` record with `level` yes or no; a cached verdict
    counts, as it is the judge's word on that candidate). Unsure readouts, failed calls and
    answers over budget are no verdict. Reviewed answers are the ones the ladder sent to a
    person (an unsure judge, a veto, a `review` on_reject), not a sample of all traffic."""
    records = list(records)
    people = human_verdicts(records, since=since, route=route)
    judged: dict[str, tuple[float, bool]] = {}
    for record in records:
        cid = record.get("candidate_id")
        level = record.get("level")
        if record.get("stage") != "judge" or cid not in people or level not in ("yes", "no"):
            continue
        when = _epoch(record.get("decided_at")) or 0.0
        if cid not in judged or judged[cid][0] <= when:
            judged[cid] = (when, level == "yes")
    agreed = yes_rejected = no_accepted = 0
    for cid, (_, yes) in judged.items():
        accepted = people[cid].grounded
        agreed += yes == accepted
        yes_rejected += yes and not accepted
        no_accepted += accepted and not yes
    return JudgeAccuracy(len(judged), agreed, yes_rejected, no_accepted)


async def read_judge_accuracy(
    settings: Settings, *, since: float | None, route: str | None, timeout: float = 30.0
) -> JudgeAccuracy:
    """`judge_accuracy` over the `decisions` topic."""
    decisions = [loads(r.value) for r in await read_all(settings, Topic.DECISIONS, timeout)]
    return judge_accuracy((d for d in decisions if isinstance(d, dict)), since=since, route=route)


def labelled_examples(
    verdicts: Mapping[str, Verdict], candidates: Mapping[str, Mapping[str, Any]]
) -> tuple[list[Example], dict[str, int]]:
    """The judged candidates with a context, labelled; counts of those left out and why."""
    examples: list[Example] = []
    skipped = {"candidate_not_found": 0, "no_context": 0}
    for cid, verdict in sorted(verdicts.items()):
        candidate = candidates.get(cid)
        if candidate is None:
            skipped["candidate_not_found"] += 1
            continue
        ctx = candidate.get("context")
        if not ctx:
            skipped["no_context"] += 1
            continue
        chunks = context_chunks(ctx)
        examples.append(
            Example(
                GROUP,
                str(candidate.get("question", "")),
                chunks,
                str(candidate.get("response", "")),
                verdict.grounded,
                task_of(candidate.get("metadata")),
            )
        )
    return examples, skipped


@dataclass(frozen=True, slots=True)
class Refit:
    """How the route's operating point moved on the verdicts it was refitted on."""

    route: str | None
    n: int
    n_accepted: int
    model_refitted: bool
    cuts_before: tuple[float, float]
    cuts_after: tuple[float, float]
    before: tuple[float, float]
    after: tuple[float, float]
    sections: Mapping[str, Any]
    cross_validated: tuple[float, float] | None = None
    """A refitted model's (share of accepted verdicts auto-accepted, share of those
    rejected), out of fold; None when only the cuts were refitted."""
    accepts_nothing: str = ""
    """Why the refitted model was written accepting nothing ("" when it was not)."""

    def render(self) -> str:
        def cut(value: float) -> str:
            return "inf" if value == float("inf") else f"{value:.4f}"

        def point(p: tuple[float, float]) -> str:
            return f"{p[0]:.1%} of accepted verdicts auto-accepted, {p[1]:.1%} of those rejected"

        what = "model and cuts" if self.model_refitted else "cuts only"
        note = (
            ""
            if self.model_refitted
            else f" (the model needs {MIN_LABELS_FOR_MODEL} verdicts,"
            f" {MIN_PER_LABEL_FOR_MODEL} of each kind)"
        )
        lines = [
            f"route {self.route or '(policy default)'}: {self.n} verdicts "
            f"({self.n_accepted} accept, {self.n - self.n_accepted} reject); "
            f"refitted {what}{note}",
            f"accept cut {cut(self.cuts_before[0])} -> {cut(self.cuts_after[0])}, "
            f"review cut {cut(self.cuts_before[1])} -> {cut(self.cuts_after[1])}",
            f"before: {point(self.before)}",
            f"after:  {point(self.after)}",
        ]
        if self.cross_validated is not None:
            lines.append(f"cross-validated: {point(self.cross_validated)}")
        if self.accepts_nothing:
            lines.append(
                f"the refitted model accepts nothing: {self.accepts_nothing}; the route's"
                " answers go on to the judge or to people until more verdicts are in"
            )
        return "\n".join(lines)


def refit(
    examples: Sequence[Example],
    thresholds: Thresholds,
    model: GroundingModel,
    *,
    route: str | None,
    max_accept_error: float,
    encoder: Any,
) -> Refit:
    """Refit a route's cuts (and, with enough verdicts, its model) on reviewed examples."""
    measured = measure_batch(
        [(e.question, e.context or (), e.response) for e in examples],
        encoder,
        default_claim_head(),
        default_claim_reader(),
    )
    kept = [(e, m) for e, m in zip(examples, measured, strict=True) if not m.sgi.flagged]
    y = np.array([e.grounded for e, _ in kept], dtype=bool)
    n_accepted = int(y.sum())
    if len(kept) < MIN_LABELS_FOR_CUTS or n_accepted in (0, len(kept)):
        raise ScoringError(
            f"{len(kept)} usable verdicts ({n_accepted} accept): refitting needs at least "
            f"{MIN_LABELS_FOR_CUTS}, with both accepts and rejects"
        )
    rows = [
        grounding_features(e.question, e.context or (), m.core, m.sgi, m.claim, m.reader)
        for e, m in kept
    ]
    p_before = np.array([model.probability(row) for row in rows])
    long = np.array([bool(row[LONG_FORM]) for row in rows], dtype=bool)
    enough = (
        len(kept) >= MIN_LABELS_FOR_MODEL
        and min(n_accepted, len(kept) - n_accepted) >= MIN_PER_LABEL_FOR_MODEL
    )
    if enough:
        fit, grounding = fit_examples(
            [e for e, _ in kept], mu=None, max_accept_error=max_accept_error, encoder=encoder
        )
        if grounding is None:  # every example has a context, so there is a model
            raise ScoringError("no grounding model was fitted on the verdicts")
        metrics = grounding.model.metrics
        cross_validated = (
            metrics.get(f"{GROUP}.cv_accept_rate_grounded", 0.0),
            metrics.get(f"{GROUP}.cv_accept_error", 0.0),
        )
        withheld = bound_broken(metrics, GROUP, max_accept_error)
        if withheld:
            grounding = grounding.accepting_nothing()
        sections = fitted_sections(fit, grounding)
        sections["thresholds"] = grounding_cut_table(*grounding.pairs)
        p_after = np.array([grounding.model.probability(row) for row in rows])
        after = Thresholds(**(thresholds.to_dict() | sections["thresholds"]))
    else:
        cross_validated, withheld = None, ""
        short, long_cuts = regime_cuts(p_before, y, long, max_accept_error)
        cuts = grounding_cut_table(short[:2], long_cuts[:2])
        sections = {"thresholds": cuts}
        p_after = p_before
        after = Thresholds(**(thresholds.to_dict() | cuts))
    return Refit(
        route=route,
        n=len(kept),
        n_accepted=n_accepted,
        model_refitted=enough,
        cuts_before=(thresholds.grounding_accept, thresholds.grounding_review),
        cuts_after=(after.grounding_accept, after.grounding_review),
        before=operating_point(p_before, y, _accept_cut_per_row(thresholds, long)),
        after=operating_point(p_after, y, _accept_cut_per_row(after, long)),
        sections=sections,
        cross_validated=cross_validated,
        accepts_nothing=withheld,
    )


def _accept_cut_per_row(thresholds: Thresholds, long: np.ndarray) -> np.ndarray:
    """Each example's accept cut: the long-form one for long-form answers."""
    return np.where(long, thresholds.grounding_accept_long, thresholds.grounding_accept)


async def _judged(
    settings: Settings, since: float | None, route: str | None, timeout: float
) -> tuple[dict[str, Verdict], dict[str, Mapping[str, Any]]]:
    """The human verdicts on `decisions`, and the candidates they judged from `candidates`."""
    decisions = [loads(r.value) for r in await read_all(settings, Topic.DECISIONS, timeout)]
    verdicts = human_verdicts(decisions, since=since, route=route)
    candidates: dict[str, Mapping[str, Any]] = {}
    if verdicts:
        for record in await read_all(settings, Topic.CANDIDATES, timeout):
            try:
                value = loads(record.value)
            except ValueError:
                continue
            if isinstance(value, dict) and value.get("id") in verdicts:
                candidates[value["id"]] = value
    return verdicts, candidates


async def read_labels(
    settings: Settings, *, since: float | None, route: str | None, timeout: float = 30.0
) -> tuple[list[Example], dict[str, int]]:
    """The human verdicts on `decisions` with their candidates from `candidates`."""
    verdicts, candidates = await _judged(settings, since, route, timeout)
    examples, skipped = labelled_examples(verdicts, candidates)
    return examples, {"verdicts": len(verdicts), **skipped}


def labelled_candidates(
    verdicts: Mapping[str, Verdict], candidates: Mapping[str, Mapping[str, Any]]
) -> tuple[list[dict[str, Any]], int]:
    """The judged candidates as labelled records, in the candidates format `eval`,
    `calibrate` and `train --reviewed` read (`metadata.label`: right for a person's accept,
    hallucinated for a reject; `metadata.reviewed_at`, `metadata.route`), and how many
    verdicts had no candidate to go with."""
    out: list[dict[str, Any]] = []
    missing = 0
    for cid, verdict in sorted(verdicts.items()):
        candidate = candidates.get(cid)
        if candidate is None:
            missing += 1
            continue
        meta = candidate.get("metadata")
        out.append(
            {
                **{k: candidate[k] for k in EXPORTED if k in candidate},
                "metadata": {
                    **(meta if isinstance(meta, Mapping) else {}),
                    "label": "right" if verdict.grounded else "hallucinated",
                    "reviewed_at": verdict.decided_at,
                    "route": verdict.route,
                },
            }
        )
    return out, missing


EXPORTED = ("id", "session_id", "turn", "initiator", "question", "context", "response")
"""The candidate fields an export keeps (its metadata is kept too, with the verdict added)."""


async def export_reviewed(
    settings: Settings,
    out: Path,
    *,
    since: float | None,
    route: str | None,
    timeout: float = 30.0,
) -> tuple[int, int]:
    """`groundstream review export`: write the judged candidates, labelled by the verdicts,
    to `out` as JSON lines; returns (written, verdicts without a candidate)."""
    verdicts, candidates = await _judged(settings, since, route, timeout)
    records, missing = labelled_candidates(verdicts, candidates)
    out.write_bytes(b"".join(dumps(r) + b"\n" for r in records))
    return len(records), missing


async def calibrate_from_decisions(
    settings: Settings,
    out: Path,
    *,
    since: float | None,
    route: str | None,
    max_accept_error: float,
    encoder: Any,
    command: str,
) -> tuple[Refit, dict[str, int]]:
    """Read the verdicts, refit the route's cuts (or model) on them, write them into the
    policy `out` (`write_fit`) and say how the operating point moved."""
    started = time.time()
    policy = load_policy(out)
    thresholds = policy.thresholds if route is None else policy.thresholds_for(route)
    model = policy.grounding if route is None else policy.grounding_for(route)
    if model is None:
        raise ScoringError(f"{out} has no grounding model to refit the cuts of: calibrate first")
    examples, counts = await read_labels(settings, since=since, route=route)
    result = refit(
        examples,
        thresholds,
        model,
        route=route,
        max_accept_error=max_accept_error,
        encoder=encoder,
    )
    provenance = {
        "produced_by": command,
        "produced_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "from_decisions": settings.topic(Topic.DECISIONS),
        "since": since if since is not None else 0.0,
        "n": result.n,
        "n_accepted": result.n_accepted,
        "model_refitted": result.model_refitted,
        "max_accept_error": max_accept_error,
        "accept_rate_before": result.before[0],
        "accept_error_before": result.before[1],
        "accept_rate_after": result.after[0],
        "accept_error_after": result.after[1],
        **(
            {}
            if result.cross_validated is None
            else {
                "cv_accept_rate": result.cross_validated[0],
                "cv_accept_error": result.cross_validated[1],
            }
        ),
        **({"accepts_nothing": result.accepts_nothing} if result.accepts_nothing else {}),
        "seconds": round(time.time() - started, 1),
    }
    write_fit(out, route, dict(result.sections), provenance)
    return result, counts
