"""Score records produced by geometry: plain, frozen values that serialise to JSON."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from pipeline.claims.units import ClaimSupport

Method = Literal["sgi", "dgi"]


@dataclass(frozen=True, slots=True)
class SGIResult:
    """Semantic Grounding Index: θ(r, q) / θ(r, c); higher means closer to the source.

    `best_chunk` is the index of the context chunk (or window) that scored best;
    `windows` counts the windows the context and response were cut into, so a record
    shows when a text was longer than the encoder's window.
    """

    value: float
    theta_rq: float
    theta_rc: float
    best_chunk: int
    n_chunks: int
    response_windows: int = 1
    context_windows: int = 1
    flagged: bool = False
    flag_reason: str = ""
    method: Method = "sgi"

    def to_dict(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in self.__slots__}


@dataclass(frozen=True, slots=True)
class DGIResult:
    """Directional Grounding Index: cos(unit(φ(r) − φ(q)), μ̂); used when there is no context."""

    value: float
    displacement_norm: float
    response_windows: int = 1
    flagged: bool = False
    flag_reason: str = ""
    method: Method = "dgi"

    def to_dict(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in self.__slots__}


@dataclass(frozen=True, slots=True)
class GroundingScore:
    """P(grounded) for one response, with the SGI and the features it came from.

    Produced by `pipeline.scores.grounding.score_grounding` when the policy carries a grounding
    model; the switch routes on `value` with the grounding cuts.
    """

    value: float
    sgi: SGIResult
    features: Mapping[str, float]
    method: str = "grounding"
    flagged: bool = False
    flag_reason: str = ""
    claim: ClaimSupport | None = field(default=None, compare=False)
    """The claim head's reading (weakest claim, its best window and score), when measured;
    evidence for the decision record, not part of the score's wire form."""
    reader: str = field(default="", compare=False)
    """The reader whose reading `claim` is (`pipeline.claims.readers.ReaderSpec.name`), when
    a reader was run; "" when `claim` is the head's. Evidence, not wire form."""
    guards: Mapping[str, Any] = field(default_factory=dict, compare=False)
    """What the guards read besides the fitted range, by name: the familiarity test's
    distance and cut (`pipeline.guards.familiarity`), the answer's and context's languages
    (`pipeline.guards.language`). Evidence for the decision record; a guard that fails flags the
    score, and its reason is the wire form's `out_of_range`."""

    @property
    def out_of_range(self) -> str:
        """Why the model's fitted domain does not cover this answer ("" when it does): a
        flag of the probability, not of the SGI beneath it."""
        return self.flag_reason if self.flagged and not self.sgi.flagged else ""

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"probability": self.value, "features": dict(self.features)}
        if self.out_of_range:
            out["out_of_range"] = self.out_of_range
        return out


GeometryResult = SGIResult | DGIResult


def score_record(score: SGIResult | DGIResult | GroundingScore) -> dict[str, object]:
    """A geometry score as the envelope and the decision record carry it: the SGI or DGI
    record's fields, plus `grounding` ({probability, features}) for P(grounded)."""
    if isinstance(score, GroundingScore):
        return {**score.sgi.to_dict(), "grounding": score.to_dict()}
    return score.to_dict()
