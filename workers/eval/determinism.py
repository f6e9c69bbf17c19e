"""`groundstream determinism`: the same candidates decided at several batch sizes and on
several encoder backends, every decision compared (issue 33).

On the Kafka path a candidate is scored in whatever batch the consumer fetched; `verify`,
`calibrate` and `replay` batch it otherwise again. A decision may depend on none of that.
This runs the embedded ladder (the workers' own stages) over the same candidates once per
(backend, batch size), each run with an empty embedding cache, and reports:

* how many candidates got the same decision at every stage in every run, and which did
  not — a difference where the switch's score lay within `SCORE_EPSILON` of a cut is
  named as such (the record's `near_cut`), any other is a failure;
* how far the switch's score moved between runs, within a backend and across backends;
* how close any score came to a cut that decides it (the margin `calibrate` keeps).

Failure posture: a data file that cannot be read raises `DataFileError` (one line at the
CLI); the comparison itself never raises — a difference is a finding, reported and
returned, and the command exits non-zero on one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.bounds.thresholds import SCORE_EPSILON
from pipeline.encoding.encoder import load_encoder
from pipeline.policy.document import Policy
from workers.runtime.settings import Settings
from workers.runtime.verify import run_lines

GEOMETRIC_CUTS = {
    "sgi": ("sgi_strong_pass", "sgi_review"),
    "dgi": ("dgi_pass",),
    "grounding": (
        "grounding_accept",
        "grounding_review",
        "grounding_accept_long",
        "grounding_review_long",
    ),
}
"""The cuts that may decide a switch score of each method (as `Thresholds.near_cuts`)."""


@dataclass(frozen=True, slots=True)
class Run:
    """One pass of the ladder: every stage's action per candidate, the switch's scores."""

    backend: str
    batch_size: int
    actions: Mapping[str, tuple[tuple[str, Any], ...]]
    scores: Mapping[str, float]
    near_cut: Mapping[str, tuple[str, ...]]
    margin: float
    """The closest any switch score came to a cut of its method (inf: no geometric score)."""

    @property
    def name(self) -> str:
        return f"{self.backend}@{self.batch_size}"


@dataclass(frozen=True, slots=True)
class Report:
    """What the runs agreed on."""

    runs: tuple[Run, ...]
    differing: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Candidates decided differently, with the runs whose decisions differ from the first."""
    near_cut: frozenset[str] = frozenset()
    """Of those, the ones whose switch score lay within `SCORE_EPSILON` of a cut."""

    @property
    def candidates(self) -> int:
        return len(self.runs[0].actions) if self.runs else 0

    @property
    def failures(self) -> list[str]:
        """Candidates decided differently away from any cut."""
        return sorted(set(self.differing) - self.near_cut)

    def spread(self, same_backend: bool) -> float:
        """The largest move of one candidate's switch score between two runs on the same
        backend (`same_backend`) or on different ones."""
        worst = 0.0
        for i, a in enumerate(self.runs):
            for b in self.runs[i + 1 :]:
                if (a.backend == b.backend) != same_backend:
                    continue
                for cid, score in a.scores.items():
                    if cid in b.scores:
                        worst = max(worst, abs(score - b.scores[cid]))
        return worst

    def lines(self) -> list[str]:
        """The report as the command prints it."""
        runs = ", ".join(r.name for r in self.runs)
        margin = min((r.margin for r in self.runs), default=float("inf"))
        same = self.candidates - len(self.differing)
        out = [
            f"determinism: {self.candidates} candidates, {len(self.runs)} runs ({runs})",
            f"  same decision at every stage in every run: {same} of {self.candidates}",
            f"  differing within ε of a cut (named, not a failure): {len(self.near_cut)}",
            f"  differing away from any cut: {len(self.failures)}",
            f"  switch score moved: within a backend by {self.spread(True):.2e}, "
            f"across backends by {self.spread(False):.2e}",
            f"  closest switch score to a deciding cut: {margin:.2e} (ε = {SCORE_EPSILON:.0e})",
        ]
        for cid in self.failures[:20]:
            out.append(f"  DIFFERS {cid}: {', '.join(self.differing[cid])}")
        return out


def decide_once(
    candidates: Sequence[Mapping[str, Any]], policy: Policy, backend: str, batch_size: int
) -> Run:
    """The embedded ladder over `candidates` on `backend` with `batch_size`, from an empty
    embedding cache (a cached row would hide what the batch did to it)."""
    load_encoder(policy.encoder_model, backend).clear_cache()
    settings = Settings(batch_size=batch_size, encoder_backend=backend)
    result = run_lines([dict(c) for c in candidates], settings, policy, progress=False)
    actions: dict[str, list[tuple[str, Any]]] = {}
    scores: dict[str, float] = {}
    near: dict[str, tuple[str, ...]] = {}
    margin = float("inf")
    for record in result.records:
        cid, stage = str(record.get("candidate_id")), str(record.get("stage"))
        actions.setdefault(cid, []).append((stage, record.get("action")))
        if stage != "switch" or record.get("method") not in GEOMETRIC_CUTS:
            continue
        score = float(record["score"])
        scores[cid] = score
        evidence = record.get("evidence") or {}
        near[cid] = tuple(evidence.get("near_cut", ()))
        cuts = record.get("thresholds") or {}
        for name in GEOMETRIC_CUTS[str(record["method"])]:
            cut = cuts.get(name)
            if isinstance(cut, int | float):
                margin = min(margin, abs(score - cut))
    return Run(
        backend,
        batch_size,
        {cid: tuple(sorted(a, key=str)) for cid, a in actions.items()},
        scores,
        near,
        margin,
    )


def compare_runs(runs: Sequence[Run]) -> Report:
    """Every run's decisions against the first run's."""
    if not runs:
        return Report(())
    first = runs[0]
    differing: dict[str, list[str]] = {}
    for run in runs[1:]:
        for cid in first.actions.keys() | run.actions.keys():
            if first.actions.get(cid) != run.actions.get(cid):
                differing.setdefault(cid, []).append(run.name)
    near = frozenset(cid for cid in differing if any(run.near_cut.get(cid) for run in runs))
    return Report(tuple(runs), {k: tuple(v) for k, v in differing.items()}, near)


def check_determinism(
    candidates: Sequence[Mapping[str, Any]],
    policy: Policy,
    backends: Sequence[str],
    batch_sizes: Sequence[int],
) -> Report:
    """Decide `candidates` once per (backend, batch size) and compare."""
    runs = [
        decide_once(candidates, policy, backend, size)
        for backend in backends
        for size in batch_sizes
    ]
    return compare_runs(runs)
