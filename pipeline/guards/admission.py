"""How much work a candidate may cost, decided before any of it is done.

Place in the ladder
    The geometry stage asks `admit` before it encodes anything, and the rules stage before
    it measures source support: both costs grow with the text (encoding with the windows
    of the answer and its source, claim support with claims × windows, source support
    with answer × source). The consistency stage asks `admit_samples` before it reads
    the candidate's own samples: each is compared with the answer and with every other
    (encoded, or scored pair by pair by an NLI model). One 1 MB answer, within the size
    limit, held the geometry worker for minutes and everyone behind it. A candidate over
    a cap is decided without the expensive part; its reason names the measure, its
    value and the cap.

Measures
    Only what counting costs: words (whitespace-split) of the answer and of its source
    (question and context chunks together), and the answer's claims — counted only once
    the word caps hold, so counting itself stays bounded by them. Of the samples a
    candidate brings: how many (copies included; collapsing them is work too), and the
    words of the longest. Samples drawn from the sampler are bounded by the policy
    (`consistency.n_samples`, `max_tokens`) and the endpoint's reply size, not here.

Failure posture
    `WorkCaps` is validated on construction (`PolicyError` naming the cap); the workers
    build it from GROUNDSTREAM_MAX_* at start-up. Over a cap is never a pass: the geometry
    and consistency stages hold the candidate for a person, the rules stage records an
    unchecked `source_support` hit (review severity), so nothing unmeasured reaches
    `state` unseen.
    Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

from pipeline.claims.units import split_claims
from pipeline.errors import PolicyError

__all__ = [
    "CLAIMS",
    "RESPONSE_WORDS",
    "SAMPLES",
    "SAMPLE_WORDS",
    "SOURCE_WORDS",
    "Admission",
    "WorkCaps",
    "admit",
    "admit_samples",
]

# The default caps, GROUNDSTREAM_MAX_RESPONSE_WORDS / _SOURCE_WORDS / _CLAIMS (`WorkCaps`):
# twice the largest the shipped grounding model was fitted on (RAGTruth dev: answers of 342
# words, sources of 1,638, 47 claims). At 2,000 / 10,000 / 100, five candidates at the caps
# among 100 ordinary ones raised the ordinary median from 13 s to 164 s (bench fairness).
RESPONSE_WORDS = 700
SOURCE_WORDS = 3500
CLAIMS = 100
# GROUNDSTREAM_MAX_SAMPLES / _SAMPLE_WORDS: four times the samples the policy draws by
# default (`consistency.n_samples` = 5); a sample answers the same question, so it gets
# the answer's word cap.
SAMPLES = 20
SAMPLE_WORDS = RESPONSE_WORDS


@dataclass(frozen=True, slots=True)
class WorkCaps:
    """Per-candidate work caps. The defaults lie above the shipped grounding model's fitted
    range (see the constants), so nothing the model can judge is refused; between that
    range and a cap the candidate is scored and flagged out of range as before."""

    response_words: int = RESPONSE_WORDS
    source_words: int = SOURCE_WORDS
    """Words of the question and the context chunks together: what is encoded beside
    the answer, and what source support reads it against."""
    claims: int = CLAIMS
    samples: int = SAMPLES
    """Samples a candidate brings for the consistency stage, copies included."""
    sample_words: int = SAMPLE_WORDS
    """Words of each of those samples."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise PolicyError(f"caps.{f.name}", value, "an integer >= 1")


@dataclass(frozen=True, slots=True)
class Admission:
    """Whether a candidate gets the full work; when not, why (measure, value, cap)."""

    admitted: bool
    reason: str = ""
    measures: tuple[tuple[str, int], ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {"admitted": self.admitted, "reason": self.reason, **dict(self.measures)}


def _words(text: str) -> int:
    return len(text.split())


def admit(
    question: str,
    context: Sequence[str] | None,
    response: str,
    caps: WorkCaps,
    *,
    count_claims: bool = True,
) -> Admission:
    """The admission of one candidate under `caps`; see the module docstring.
    `count_claims` is off where the work does not scale with claims (rules)."""
    measures = [
        ("response_words", _words(response)),
        ("source_words", _words(question) + sum(_words(c) for c in context or ())),
    ]
    over = [
        f"{name} {value} over the cap of {getattr(caps, name)}"
        for name, value in measures
        if value > getattr(caps, name)
    ]
    if not over and count_claims:
        claims = len(split_claims(response))  # bounded: the answer is within its word cap
        measures.append(("claims", claims))
        if claims > caps.claims:
            over.append(f"claims {claims} over the cap of {caps.claims}")
    if over:
        return Admission(False, "over the work cap: " + "; ".join(over), tuple(measures))
    return Admission(True, "", tuple(measures))


def admit_samples(samples: Sequence[str], caps: WorkCaps) -> Admission:
    """The admission of the samples one candidate brings under `caps`: their number and
    the words of the longest (`sample_words`); see the module docstring."""
    measures = (
        ("samples", len(samples)),
        ("sample_words", max((_words(s) for s in samples), default=0)),
    )
    over = [
        f"{name} {value} over the cap of {getattr(caps, name)}"
        for name, value in measures
        if value > getattr(caps, name)
    ]
    if over:
        return Admission(False, "over the work cap: " + "; ".join(over), measures)
    return Admission(True, "", measures)
