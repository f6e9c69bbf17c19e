"""The seed's calibrated cut-points: one home for every geometric threshold.

Check and switch both read these (through a `Thresholds` value), so the human-readable
verdict and the machine action can never disagree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pipeline.errors import PolicyError

SGI_STRONG_PASS = 1.20
"""SGI at or above this: the response is clearly closer to the context than to the question."""

SGI_REVIEW = 0.95
"""SGI below this: the response has drifted away from the context (on_reject)."""

DGI_PASS = 0.525
"""DGI at or above this: the displacement points along the grounded reference direction."""

GROUNDING_ACCEPT = 0.80
"""Calibrated P(grounded) at or above this: accept (when the policy carries a grounding model)."""

GROUNDING_REVIEW = 0.50
"""Calibrated P(grounded) below this: on_reject; between the two: escalate."""

ACCEPT_CUTS = frozenset({"sgi_strong_pass", "grounding_accept", "grounding_accept_long"})
"""The auto-accept cuts: these alone may be infinite (`inf` in a policy), meaning accept
nothing — what `calibrate` writes when no cut meets the accept-error bound."""

LONG_CUTS = {
    "grounding_accept_long": "grounding_accept",
    "grounding_review_long": "grounding_review",
}
"""Each long-form cut and the short cut it defaults to."""

SCORE_EPSILON = 1e-4
"""How close to a cut a score may lie before its side of the cut is not a fact about the
answer but about float noise. Scores are computed in float64 from float32 embeddings: the
same text's embedding differs by ~1e-7 between torch builds and thread counts and by up to
2e-5 in SGI between the torch and ONNX backends (measured, docs/explanation/determinism.md). So
`calibrate` never places a cut within this distance of a score it was fitted on (a cut lies
in a gap at least twice as wide, at its midpoint), and a decision whose score lies this
close to a cut says so in its record (`near_cut`), which `replay` reports as such rather
than as a change."""

SGI_DEGENERATE = 10.0
"""Sentinel SGI when θ(r, c) ≈ 0: the response is the context, maximally grounded."""


@dataclass(frozen=True, slots=True)
class Thresholds:
    """The cut-points of one policy; validated so that the three SGI zones exist."""

    sgi_strong_pass: float = SGI_STRONG_PASS
    """SGI at or above this accepts (inf: SGI accepts nothing)."""
    sgi_review: float = SGI_REVIEW
    """SGI below this goes to on_reject; between the two cuts, escalate."""
    dgi_pass: float = DGI_PASS
    """DGI (answers without a context) at or above this accepts; below, on_reject."""
    grounding_accept: float = GROUNDING_ACCEPT
    """P(grounded) at or above this accepts, with a grounding model (inf: nothing)."""
    grounding_review: float = GROUNDING_REVIEW
    """P(grounded) below this goes to on_reject; between the two cuts, escalate."""
    grounding_accept_long: float | None = None
    """grounding_accept for long-form answers (see grounding_review_long)."""
    grounding_review_long: float | None = None
    """The P(grounded) cuts for long-form answers (several sentences, or a source longer
    than one encoder window): a one-sentence answer to a passage and a summary of a long
    document are different populations, and one cut over both lets the easy one subsidise
    the other's errors. None (the default) means the same cuts as short answers."""

    def __post_init__(self) -> None:
        for name, short in LONG_CUTS.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, getattr(self, short))
        for name in self.__slots__:
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not (math.isfinite(value) or (name in ACCEPT_CUTS and value == math.inf))
            ):
                expected = "a finite number or inf" if name in ACCEPT_CUTS else "a finite number"
                raise PolicyError(f"thresholds.{name}", value, expected)
        if self.sgi_review > self.sgi_strong_pass:
            raise PolicyError(
                "thresholds.sgi_review",
                self.sgi_review,
                f"a value <= thresholds.sgi_strong_pass ({self.sgi_strong_pass})",
            )
        if not -1.0 <= self.dgi_pass <= 1.0:
            raise PolicyError("thresholds.dgi_pass", self.dgi_pass, "a cosine in [-1, 1]")
        for accept_name, review_name in (
            ("grounding_accept", "grounding_review"),
            ("grounding_accept_long", "grounding_review_long"),
        ):
            accept, review = getattr(self, accept_name), getattr(self, review_name)
            if not 0.0 <= review <= accept or not (accept <= 1.0 or accept == math.inf):
                raise PolicyError(
                    f"thresholds.{review_name}",
                    review,
                    f"a probability <= thresholds.{accept_name} ({accept}, a probability or inf)",
                )

    def grounding_cuts(self, long_form: bool) -> tuple[float, float]:
        """(accept, review) for P(grounded) of a short or a long-form answer."""
        if long_form:
            return self.grounding_accept_long, self.grounding_review_long  # type: ignore[return-value]
        return self.grounding_accept, self.grounding_review

    def near_cuts(self, method: str, value: float, long_form: bool = False) -> tuple[str, ...]:
        """The cuts that decide a `method` score of `value` and lie within `SCORE_EPSILON`
        of it: where the same answer, scored by another build of the encoder, could fall on
        the other side."""
        if method == "sgi":
            names: tuple[str, ...] = ("sgi_strong_pass", "sgi_review")
        elif method == "dgi":
            names = ("dgi_pass",)
        elif method == "grounding":
            names = (
                ("grounding_accept_long", "grounding_review_long")
                if long_form
                else ("grounding_accept", "grounding_review")
            )
        else:
            return ()
        return tuple(n for n in names if abs(value - getattr(self, n)) < SCORE_EPSILON)

    @classmethod
    def seed(cls) -> Thresholds:
        """The seed's cuts (SGI 1.20 / 0.95, DGI 0.525, P(grounded) 0.80 / 0.50): what the
        core's `check` and `GroundingSwitch` use when given none. The library's public
        `pipeline.scores.check` / `pipeline.GroundingSwitch` use the shipped policy's instead."""
        return cls()

    def to_dict(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in self.__slots__}

    def to_record(self) -> dict[str, float | str]:
        """The cuts for a JSON record: an infinite cut (accept nothing) as the string "inf",
        which JSON cannot hold as a number (orjson would write null)."""
        return {name: record_cut(value) for name, value in self.to_dict().items()}


def record_cut(value: float) -> float | str:
    """A cut as a JSON value: itself, or "inf" / "-inf"."""
    return value if math.isfinite(value) else ("inf" if value > 0 else "-inf")
