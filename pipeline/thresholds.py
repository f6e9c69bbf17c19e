"""The seed's calibrated cut-points: one home for every geometric threshold.

Check and switch both read these (through a `Thresholds` value), so the human-readable
verdict and the machine action can never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.errors import PolicyError

SGI_STRONG_PASS = 1.20
"""SGI at or above this: the response is clearly closer to the context than to the question."""

SGI_REVIEW = 0.95
"""SGI below this: the response has drifted away from the context (on_reject)."""

DGI_PASS = 0.525
"""DGI at or above this: the displacement points along the grounded reference direction."""

SGI_DEGENERATE = 10.0
"""Sentinel SGI when θ(r, c) ≈ 0: the response is the context, maximally grounded."""


@dataclass(frozen=True, slots=True)
class Thresholds:
    """The cut-points of one policy; validated so that the three SGI zones exist."""

    sgi_strong_pass: float = SGI_STRONG_PASS
    sgi_review: float = SGI_REVIEW
    dgi_pass: float = DGI_PASS

    def __post_init__(self) -> None:
        for name in ("sgi_strong_pass", "sgi_review", "dgi_pass"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
                raise PolicyError(f"thresholds.{name}", value, "a finite number")
        if self.sgi_review > self.sgi_strong_pass:
            raise PolicyError(
                "thresholds.sgi_review",
                self.sgi_review,
                f"a value <= thresholds.sgi_strong_pass ({self.sgi_strong_pass})",
            )
        if not -1.0 <= self.dgi_pass <= 1.0:
            raise PolicyError("thresholds.dgi_pass", self.dgi_pass, "a cosine in [-1, 1]")
