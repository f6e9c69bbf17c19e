"""Consistency (where the switch escalates): a grounding decision over sampled answers
(seeds 000, 004).

When geometry alone cannot decide, the same question is answered several more times
(samples come with the candidate or are drawn from an OpenAI-compatible endpoint) and
the samples are grouped by meaning. Samples that mean the same thing, whichever source
or wording they came from, collapse into one *interpretation* that keeps its strongest
evidence; samples that mean different things are *competing* interpretations. The
result is a first-class decision, never a bare boolean:

* ``committed``: one interpretation, or a top one that beats the runner-up by at least
  ``dominance_margin``. Only when the candidate response also agrees with it
  (``passes``) does the candidate move on towards state.
* ``requires_clarification``: two or more meanings compete within the margin. This is
  the correct answer when the question does not determine one meaning, not a failure.
* ``unresolved``: fewer than ``min_samples`` usable (non-empty) samples.
* ``budget_exceeded``: sampling was cut short (timeout, sample or token budget,
  cancellation). A partial search is not evidence of a single meaning, so this never
  commits; what was found so far is exposed in ``partial_at_cutoff`` as a diagnostic.

Similarities come in as numbers (cosines from the sentence encoder, or 1/0 from a
bidirectional NLI cross-encoder); this module loads no model and does no I/O.

Failure posture: malformed inputs (shapes that do not match the samples) raise
`ScoringError`; invalid settings raise `PolicyError` naming ``consistency.<field>``.
Nothing here ever commits on missing, partial or NaN evidence.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from enum import StrEnum

import numpy as np

from pipeline.bounds.validation import config_from_table, finite
from pipeline.encoding.chunks import context_chunks
from pipeline.errors import PolicyError, ScoringError

EVIDENCE_MAX_ITEMS = 3
"""How many member samples an interpretation quotes as evidence (strongest first)."""

EVIDENCE_MAX_CHARS = 240
"""Each quoted sample is cut to this many characters, so records stay small."""

DOMINANCE_EPSILON = 1e-9
"""Float slack for the margin test: 3/5 - 2/5 must count as a lead of exactly 0.2."""

MAX_SAMPLES = 100
"""Upper bound for `n_samples`: a typo must not order a thousand completions."""


class GroundingOutcome(StrEnum):
    """What the consistency stage concluded; a str so it goes into JSON unchanged."""

    COMMITTED = "committed"
    REQUIRES_CLARIFICATION = "requires_clarification"
    UNRESOLVED = "unresolved"
    BUDGET_EXCEEDED = "budget_exceeded"


class BudgetLimit(StrEnum):
    """Which resource limit stopped sampling early, if any."""

    NONE = "none"
    MAX_SAMPLES = "max_samples"
    MAX_TOKENS = "max_tokens"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"


class ConsistencyLevel(StrEnum):
    """How much of the sampled evidence says what the response says."""

    CONSISTENT = "consistent"
    PARTLY = "partly"
    INCONSISTENT = "inconsistent"


# ---------------------------------------------------------------------------------------
# Config


_FLOAT_FIELDS = frozenset(
    {"same_meaning", "dominance_margin", "agree_threshold", "consistent", "partly", "temperature"}
)
_INT_FIELDS = frozenset({"min_samples", "n_samples", "max_tokens", "token_budget"})


@dataclass(frozen=True, slots=True)
class ConsistencyConfig:
    """Thresholds and sampling budget of the consistency stage, each field's meaning in
    its docstring (docs/reference/policy.md prints them)."""

    same_meaning: float = 0.80
    """Similarity at or above which two samples mean the same thing (and a sample matches
    the response)."""
    dominance_margin: float = 0.25
    """A top interpretation commits only if its score beats the runner-up's by this."""
    min_samples: int = 2
    """Fewer usable (non-empty) samples than this is unresolved."""
    agree_threshold: float = 0.75
    """The response agrees with the committed interpretation when its mean similarity to
    that interpretation's members is at least this."""
    consistent: float = 0.80
    """The consistency score at or above which the level is consistent."""
    partly: float = 0.55
    """The consistency score at or above which (below `consistent`) the level is partly."""
    n_samples: int = 5
    """Samples drawn from the sampler per candidate."""
    temperature: float = 0.7
    """The sampler's temperature."""
    max_tokens: int = 256
    """Tokens per sample drawn."""
    token_budget: int = 4000
    """Total tokens one candidate's sampling may spend."""

    def __post_init__(self) -> None:
        for name in _FLOAT_FIELDS:
            object.__setattr__(self, name, _as_float(name, getattr(self, name)))
        for name in _INT_FIELDS:
            _check_int(name, getattr(self, name))
        _check_range(
            "same_meaning", self.same_meaning, 0.0, 1.0, "a number in (0, 1]", low_open=True
        )
        _check_range(
            "dominance_margin", self.dominance_margin, 0.0, 1.0, "a number in (0, 1]", low_open=True
        )
        _check_range(
            "agree_threshold", self.agree_threshold, 0.0, 1.0, "a number in (0, 1]", low_open=True
        )
        _check_range("consistent", self.consistent, 0.0, 1.0, "a number in (0, 1]", low_open=True)
        _check_range("partly", self.partly, 0.0, 1.0, "a number in (0, 1]", low_open=True)
        if self.partly > self.consistent:
            raise PolicyError(
                "consistency.partly", self.partly, f"a value <= consistent ({self.consistent})"
            )
        _check_range("temperature", self.temperature, 0.0, 2.0, "a number in [0, 2]")
        if not 1 <= self.n_samples <= MAX_SAMPLES:
            raise PolicyError(
                "consistency.n_samples", self.n_samples, f"an integer in [1, {MAX_SAMPLES}]"
            )
        if not 1 <= self.min_samples <= self.n_samples:
            raise PolicyError(
                "consistency.min_samples",
                self.min_samples,
                f"an integer in [1, n_samples ({self.n_samples})]",
            )
        if self.max_tokens < 1:
            raise PolicyError("consistency.max_tokens", self.max_tokens, "an integer >= 1")
        if self.token_budget < self.max_tokens:
            raise PolicyError(
                "consistency.token_budget",
                self.token_budget,
                f"an integer >= max_tokens ({self.max_tokens})",
            )

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, object]) -> ConsistencyConfig:
        """A config from a policy table; an unknown key fails naming ``consistency.<key>``."""
        return config_from_table(cls, "consistency", mapping)

    def to_dict(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _as_float(name: str, value: object) -> float:
    return finite(value, f"consistency.{name}")


def _check_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PolicyError(f"consistency.{name}", value, "an integer")


def _check_range(
    name: str, value: float, low: float, high: float, expected: str, *, low_open: bool = False
) -> None:
    too_low = value <= low if low_open else value < low
    if too_low or value > high:
        raise PolicyError(f"consistency.{name}", value, expected)


# ---------------------------------------------------------------------------------------
# Records


@dataclass(frozen=True, slots=True)
class Interpretation:
    """One meaning found among the samples.

    signature:      stable short id, ``m0`` for the best-supported meaning, ``m1`` next...
    representative: index (into the samples) of the member with the strongest evidence,
                    i.e. the highest mean similarity to the other members.
    members:        indices of the samples that carry this meaning, ascending.
    score:          share of usable samples in this meaning group.
    evidence:       member texts, strongest first, at most `EVIDENCE_MAX_ITEMS`, each cut
                    to `EVIDENCE_MAX_CHARS`. The only place sample text appears.
    """

    signature: str
    representative: int
    members: tuple[int, ...]
    score: float
    evidence: tuple[str, ...]

    def to_dict(self) -> dict[str, object]:
        return {
            "signature": self.signature,
            "representative": self.representative,
            "members": list(self.members),
            "score": self.score,
            "evidence": list(self.evidence),
        }


@dataclass(frozen=True, slots=True)
class ConsistencyDecision:
    """The grounding decision over one candidate's samples; see the module docstring.

    committed:          the interpretation the stage is willing to stand behind, or None.
    competing:          every meaning still in contention when clarification is required
                        (each within `dominance_margin` of the leader).
    interpretations:    every meaning found, best-supported first (audit trail).
    partial_at_cutoff:  what sampling had found when a budget stopped it; diagnostic
                        only, never read to decide anything.
    consistency_score:  share of usable samples whose similarity to the response is at
                        least `same_meaning`; `level` grades it.
    response_agrees:    the response's mean similarity to the committed interpretation's
                        members (`agreement`) reaches `agree_threshold`.
    """

    outcome: GroundingOutcome
    committed: Interpretation | None
    competing: tuple[Interpretation, ...]
    reason: str
    budget_limit: BudgetLimit
    partial_at_cutoff: tuple[Interpretation, ...]
    consistency_score: float
    level: ConsistencyLevel
    response_agrees: bool
    interpretations: tuple[Interpretation, ...] = ()
    agreement: float | None = None
    usable_samples: int = 0
    total_samples: int = 0

    @property
    def passes(self) -> bool:
        """Only a committed meaning that the response agrees with moves towards state."""
        return self.outcome is GroundingOutcome.COMMITTED and self.response_agrees

    def to_dict(self) -> dict[str, object]:
        """JSON-ready; sample text appears only inside each interpretation's evidence."""
        return {
            "outcome": self.outcome.value,
            "passes": self.passes,
            "reason": self.reason,
            "committed": None if self.committed is None else self.committed.to_dict(),
            "competing": [i.to_dict() for i in self.competing],
            "interpretations": [i.to_dict() for i in self.interpretations],
            "budget_limit": self.budget_limit.value,
            "partial_at_cutoff": [i.to_dict() for i in self.partial_at_cutoff],
            "consistency_score": self.consistency_score,
            "level": self.level.value,
            "response_agrees": self.response_agrees,
            "agreement": self.agreement,
            "usable_samples": self.usable_samples,
            "total_samples": self.total_samples,
        }


# ---------------------------------------------------------------------------------------
# Grouping


def _square(similarity: object, n: int | None = None) -> np.ndarray:
    """A float64 n×n matrix, symmetrised conservatively; NaN means 'not the same'."""
    matrix = np.asarray(similarity, dtype=np.float64)
    if matrix.size == 0 and (n is None or n == 0):
        return np.zeros((0, 0), dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ScoringError(f"sample_similarity must be a square matrix, got shape {matrix.shape}")
    if n is not None and matrix.shape[0] != n:
        raise ScoringError(
            f"sample_similarity is {matrix.shape[0]}x{matrix.shape[1]} but there are {n} samples"
        )
    matrix = np.where(np.isnan(matrix), -np.inf, matrix)
    # Two samples mean the same only if each direction says so (bidirectional NLI).
    return np.minimum(matrix, matrix.T)


def group_by_meaning(similarity: np.ndarray, threshold: float) -> list[list[int]]:
    """Partition samples into same-meaning groups by complete-link clustering.

    Two groups merge only if *every* pair across them has similarity >= `threshold`, so a
    chain A~B, B~C does not put A and C together when A and C differ. Merges go highest
    link first, ties to the lowest indices, so the result is deterministic. A
    non-symmetric matrix (one-directional entailment) is read as min(s_ij, s_ji); NaN is
    never the same meaning. Returns groups of ascending indices, ordered by first index.
    """
    if isinstance(threshold, bool) or not isinstance(threshold, int | float):
        raise PolicyError("consistency.same_meaning", threshold, "a finite number")
    if not math.isfinite(threshold):
        raise PolicyError("consistency.same_meaning", threshold, "a finite number")
    link = _square(similarity).copy()
    n = link.shape[0]
    members: list[list[int]] = [[i] for i in range(n)]
    np.fill_diagonal(link, -np.inf)
    alive = np.ones(n, dtype=bool)
    while alive.sum() > 1:
        masked = np.where(np.triu(np.outer(alive, alive), k=1), link, -np.inf)
        flat = int(np.argmax(masked))
        a, b = divmod(flat, n)
        if masked[a, b] < threshold:
            break
        merged = np.minimum(link[a], link[b])
        link[a, :] = merged
        link[:, a] = merged
        link[a, a] = -np.inf
        alive[b] = False
        members[a].extend(members[b])
        members[b] = []
    groups = [sorted(m) for m, keep in zip(members, alive, strict=True) if keep]
    return sorted(groups, key=lambda g: g[0])


def _strength(matrix: np.ndarray, member: int, group: Sequence[int]) -> float:
    """Mean similarity of one member to the other members (1.0 for a lone sample)."""
    others = [m for m in group if m != member]
    if not others:
        return 1.0
    values = matrix[member, others]
    values = np.where(np.isfinite(values), values, 0.0)
    return float(values.mean())


def _interpretations(
    groups: Sequence[Sequence[int]], matrix: np.ndarray, samples: Sequence[str], usable: int
) -> tuple[Interpretation, ...]:
    ranked = []
    for group in groups:
        strengths = {m: _strength(matrix, m, group) for m in group}
        order = sorted(group, key=lambda m: (-strengths[m], m))
        cohesion = sum(strengths.values()) / len(group)
        ranked.append((len(group), cohesion, tuple(sorted(group)), order))
    ranked.sort(key=lambda r: (-r[0], -r[1], r[2][0]))
    out = []
    for rank, (size, _cohesion, group, order) in enumerate(ranked):
        evidence = tuple(_cut(samples[m]) for m in order[:EVIDENCE_MAX_ITEMS])
        out.append(Interpretation(f"m{rank}", order[0], group, size / usable, evidence))
    return tuple(out)


def _cut(text: str) -> str:
    text = " ".join(text.split())
    if len(text) <= EVIDENCE_MAX_CHARS:
        return text
    return text[: EVIDENCE_MAX_CHARS - 1] + "…"


# ---------------------------------------------------------------------------------------
# Decision


def level_for(score: float, config: ConsistencyConfig) -> ConsistencyLevel:
    """`consistent` at or above `config.consistent`, `partly` at or above `config.partly`."""
    if score >= config.consistent:
        return ConsistencyLevel.CONSISTENT
    if score >= config.partly:
        return ConsistencyLevel.PARTLY
    return ConsistencyLevel.INCONSISTENT


def decide_consistency(
    response_similarity: np.ndarray,
    sample_similarity: np.ndarray,
    samples: Sequence[str],
    config: ConsistencyConfig | None = None,
    *,
    budget_limit: BudgetLimit | str = BudgetLimit.NONE,
) -> ConsistencyDecision:
    """The grounding decision for one response over its samples.

    `response_similarity[i]` is the similarity of the response to sample i,
    `sample_similarity` the n×n similarities between samples, `samples` their texts
    (empty or whitespace-only samples are unusable and ignored). `budget_limit` says
    which limit, if any, cut sampling short. Rules, in order: any budget limit →
    budget_exceeded; fewer than `min_samples` usable → unresolved; a single meaning or a
    leader by `dominance_margin` → committed; otherwise requires_clarification.
    """
    config = config if config is not None else ConsistencyConfig()
    try:
        limit = BudgetLimit(budget_limit)
    except ValueError:
        allowed = ", ".join(b.value for b in BudgetLimit)
        raise PolicyError("budget_limit", budget_limit, f"one of {allowed}") from None
    total = len(samples)
    response = np.asarray(response_similarity, dtype=np.float64).reshape(-1)
    if response.shape[0] != total:
        raise ScoringError(
            f"response_similarity has {response.shape[0]} entries but there are {total} samples"
        )
    matrix = _square(sample_similarity, total)
    usable = [i for i, s in enumerate(samples) if isinstance(s, str) and s.strip()]
    n_usable = len(usable)

    sub = matrix[np.ix_(usable, usable)]
    groups = [[usable[j] for j in g] for g in group_by_meaning(sub, config.same_meaning)]
    found = _interpretations(groups, matrix, samples, n_usable) if n_usable else ()

    matches = int(np.count_nonzero(response[usable] >= config.same_meaning)) if n_usable else 0
    score = matches / n_usable if n_usable else 0.0
    level = level_for(score, config)

    def make(
        outcome: GroundingOutcome,
        reason: str,
        *,
        committed: Interpretation | None = None,
        competing: tuple[Interpretation, ...] = (),
        partial: tuple[Interpretation, ...] = (),
        agreement: float | None = None,
    ) -> ConsistencyDecision:
        agrees = agreement is not None and agreement >= config.agree_threshold
        return ConsistencyDecision(
            outcome=outcome,
            committed=committed,
            competing=competing,
            reason=reason,
            budget_limit=limit,
            partial_at_cutoff=partial,
            consistency_score=score,
            level=level,
            response_agrees=agrees,
            interpretations=found,
            agreement=agreement,
            usable_samples=n_usable,
            total_samples=total,
        )

    if limit is not BudgetLimit.NONE:
        return make(
            GroundingOutcome.BUDGET_EXCEEDED,
            f"sampling stopped by the {limit.value} limit after {n_usable} usable of "
            f"{total} samples, with {len(found)} partial interpretation(s); a partial "
            "search is not evidence of a single meaning, so nothing is committed",
            partial=found,
        )
    if n_usable < config.min_samples:
        what = "no usable samples" if n_usable == 0 else f"only {n_usable} usable sample(s)"
        return make(
            GroundingOutcome.UNRESOLVED,
            f"{what} of {total} (need at least {config.min_samples}); consistency cannot be judged",
        )

    top = found[0]
    lead = top.score - found[1].score if len(found) > 1 else 1.0
    if len(found) == 1 or lead >= config.dominance_margin - DOMINANCE_EPSILON:
        values = response[list(top.members)]
        agreement = float(np.where(np.isfinite(values), values, 0.0).mean())
        agrees = agreement >= config.agree_threshold
        basis = (
            f"all {n_usable} usable samples share one meaning"
            if len(found) == 1
            else (
                f"meaning {top.signature} holds {top.score:.0%} of {n_usable} usable samples "
                f"and leads the next by {lead:.2f} (margin {config.dominance_margin:.2f})"
            )
        )
        verdict = (
            f"the response agrees with it (similarity {agreement:.2f} >= "
            f"{config.agree_threshold:.2f})"
            if agrees
            else (
                f"but the response does not agree with it (similarity {agreement:.2f} < "
                f"{config.agree_threshold:.2f})"
            )
        )
        return make(
            GroundingOutcome.COMMITTED,
            f"{basis}; {verdict}",
            committed=top,
            agreement=agreement,
        )

    competing = tuple(
        i for i in found if top.score - i.score < config.dominance_margin - DOMINANCE_EPSILON
    )
    shares = ", ".join(f"{i.signature} {i.score:.0%}" for i in competing)
    return make(
        GroundingOutcome.REQUIRES_CLARIFICATION,
        f"{len(competing)} different meanings compete among {n_usable} usable samples "
        f"({shares}); the leader's margin {lead:.2f} is below {config.dominance_margin:.2f}, "
        "so the question needs clarification instead of a guess",
        competing=competing,
    )


# ---------------------------------------------------------------------------------------
# Sampling request (the I/O shell sends it)

SAMPLE_SYSTEM_PROMPT = (
    "Answer the user's question directly and concisely. When reference material is given, "
    "answer from it."
)


def build_sample_request(
    model: str,
    question: str,
    context: Sequence[str] | str | None,
    *,
    n: int,
    temperature: float,
    max_tokens: int,
) -> dict[str, object]:
    """An OpenAI chat body asking `n` independent answers to `question`."""
    chunks = [c for c in context_chunks(context) or () if c.strip()]
    if chunks:
        material = "\n\n".join(f"[{k + 1}] {c}" for k, c in enumerate(chunks))
        user = f"Reference material:\n{material}\n\nQuestion: {question}"
    else:
        user = f"Question: {question}"
    return {
        "model": model,
        "messages": [
            {"role": "system", "content": SAMPLE_SYSTEM_PROMPT},
            {"role": "user", "content": user},
        ],
        "n": n,
        "temperature": temperature,
        "max_tokens": max_tokens,
    }
