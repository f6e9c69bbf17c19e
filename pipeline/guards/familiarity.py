"""Whether a candidate looks like the answers a model was fitted on: its topic, read from
the encoder's embeddings of the answer and of the context.

The fitted domain (`pipeline.guards.domain`) bounds lengths and window counts, but an answer about
sales calls or COVID news is ordinary in length: it is unfamiliar in *topic*, and the
grounding model is as sure of it as of its own data (19.5% of what reached `state` on
held-out claim domains was unsupported). So every fitted model keeps a familiarity test:
the candidate's *familiarity vector* — the unit embedding of the answer's core beside the
unit embedding of its context, each the mean of its encoder windows, the embeddings the
geometry stage has already computed — projected onto the fit's leading principal
components, and its Mahalanobis distance there, plus the part of it the projection does
not hold (`Familiarity.distance`). A candidate farther than the fitted `cut` is
unfamiliar: its score is flagged with the distance and the cut in the reason, and a flagged
score escalates (to the judge where there is one, else to the route's escalation), never
accepts. The cut is fitted so that a share of the calibration data itself (`FAMILIAR_SHARE`,
95% or more) counts as familiar both out of fold and under the stored test itself (the
stage reads a training answer exactly as the fit did; `pipeline.fit.familiarity_model`).

What is stored is compact and exact: the mean (768 numbers) and the `DIMENSIONS`
components are float32, written as little-endian bytes in base64 (70 KB of the policy per
test; one decimal a line took 250 KB), and their scales, the residual's scale and the cut
are decimals at `DIGITS` significant digits. Each is rounded so before the cut is fitted,
so the policy holds exactly what the fit measured with. A policy that lists the mean and
components as numbers (written before 2026-12-04) is read as written.

Pure numpy on vectors the caller computes; nothing here loads a model.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from pipeline.errors import PolicyError

DIMENSIONS = 16
"""Principal components kept of the 768-dimensional familiarity vector."""
DIGITS = 6
"""Significant digits every stored number is rounded to."""
FAMILIAR_SHARE = 0.97
"""The share of the calibration data that counts as familiar, out of fold and in sample, by
default: at least 95% by design, 97% by measurement. With a cut from out-of-fold distances
alone, 95% cost BEGIN's dialogue replies (never fitted on) 3.2 points of right answers
accepted and 97% 1.6; with the cut that also holds 97% in sample, none on BEGIN, HaluEval QA
or RAGTruth (`tools/new_domain.py`, docs/quality.md "Issue 34")."""


def familiarity_vector(answer: np.ndarray, context: np.ndarray) -> np.ndarray:
    """The unit answer embedding beside the unit context embedding (zeros where a norm is
    zero: such a score is flagged before familiarity is asked)."""
    parts = []
    for v in (answer, context):
        v = np.asarray(v, dtype=np.float64)
        norm = float(np.linalg.norm(v))
        parts.append(v / norm if norm > 1e-12 and math.isfinite(norm) else np.zeros_like(v))
    return np.concatenate(parts)


def rounded(values: np.ndarray) -> np.ndarray:
    """`values` at `DIGITS` significant digits, as the policy stores the scales and the
    residual."""
    return np.array([float(f"{v:.{DIGITS}g}") for v in np.ravel(values)]).reshape(np.shape(values))


def as_float32(values: np.ndarray) -> np.ndarray:
    """`values` as float32 holds them, as the policy stores the mean and the components."""
    return np.asarray(values, dtype=np.float32).astype(np.float64)


def packed(values: np.ndarray) -> str:
    """`values` (flattened) as little-endian float32 bytes in base64."""
    return base64.b64encode(np.asarray(values, dtype="<f4").tobytes()).decode("ascii")


def unpacked(text: str, where: str) -> tuple[float, ...]:
    """The numbers `packed` wrote; PolicyError naming `where` for anything else."""
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise PolicyError(where, text[:40], "base64 of little-endian float32") from None
    if len(raw) % 4:
        raise PolicyError(where, f"{len(raw)} bytes", "a whole number of float32 (4 bytes)")
    values = np.frombuffer(raw, dtype="<f4").astype(np.float64)
    if not np.isfinite(values).all():
        raise PolicyError(where, "a non-finite number", "finite numbers")
    return tuple(values.tolist())


@dataclass(frozen=True, slots=True)
class Familiarity:
    """A fitted familiarity test: the mean and leading principal components of the
    calibration data's familiarity vectors, the standard deviation along each (`scales`),
    the mean squared residual off them (`residual`), and the `cut` on `distance` beyond
    which a vector is unfamiliar. `share` is the share of the calibration data fitted to
    lie within the cut out of fold and in sample, `familiar` the share that did out of
    fold, `in_sample` the share that does under this test; `n` the rows fitted."""

    mean: tuple[float, ...]
    components: tuple[tuple[float, ...], ...]
    scales: tuple[float, ...]
    residual: float
    cut: float
    share: float = FAMILIAR_SHARE
    familiar: float = 0.0
    n: int = 0
    in_sample: float = 0.0

    def __post_init__(self) -> None:
        d, k = len(self.mean), len(self.components)
        if d == 0 or k == 0 or any(len(c) != d for c in self.components):
            raise PolicyError(
                "grounding.familiarity.components", k, f"rows of {d} numbers each (the mean's)"
            )
        if len(self.scales) != k or not all(s > 0 and math.isfinite(s) for s in self.scales):
            raise PolicyError(
                "grounding.familiarity.scales", list(self.scales), f"{k} positive numbers"
            )
        if not (self.residual > 0 and math.isfinite(self.residual)):
            raise PolicyError("grounding.familiarity.residual", self.residual, "a positive number")
        if not (self.cut > 0 and math.isfinite(self.cut)):
            raise PolicyError("grounding.familiarity.cut", self.cut, "a positive number")
        if not 0.0 < self.share <= 1.0:
            raise PolicyError("grounding.familiarity.share", self.share, "a share in (0, 1]")

    @property
    def dimension(self) -> int:
        return len(self.mean)

    def distances(self, vectors: np.ndarray) -> np.ndarray:
        """`distance` of each row of `vectors`."""
        z = np.atleast_2d(np.asarray(vectors, dtype=np.float64)) - np.asarray(self.mean)
        projected = z @ np.asarray(self.components).T
        inside = ((projected / np.asarray(self.scales)) ** 2).sum(axis=1)
        off = np.maximum((z * z).sum(axis=1) - (projected * projected).sum(axis=1), 0.0)
        return np.sqrt(inside / len(self.scales) + off / self.residual)

    def distance(self, vector: np.ndarray) -> float:
        """How far `vector` lies from the calibration data: the mean squared Mahalanobis
        coordinate along the kept components plus the squared residual off them in units
        of its mean, under a root. About 1.4 for a typical calibration row."""
        return float(self.distances(vector)[0])

    def unfamiliar(self, vector: np.ndarray) -> str:
        """Why `vector` is unfamiliar ("" when it is not): its distance and the cut."""
        if len(vector) != self.dimension:
            return (
                f"unfamiliar: a familiarity vector of {len(vector)} numbers, the fit's has "
                f"{self.dimension} (another encoder?)"
            )
        d = self.distance(vector)
        if d <= self.cut:
            return ""
        return (
            f"unfamiliar: distance {d:.3f} from the fitted data is above the cut "
            f"{self.cut:.3f}, within which {self.share:.0%} of the calibration data lies"
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "n": self.n,
            "share": self.share,
            "familiar": self.familiar,
            "in_sample": self.in_sample,
            "cut": self.cut,
            "residual": self.residual,
            "scales": list(self.scales),
            "mean": packed(np.asarray(self.mean)),
            "components": packed(np.asarray(self.components)),
        }

    @classmethod
    def from_mapping(cls, data: Mapping[str, object], where: str) -> Familiarity:
        """A policy's `familiarity` table (`where` names it in errors)."""
        known = {
            "n",
            "share",
            "familiar",
            "in_sample",
            "cut",
            "residual",
            "scales",
            "mean",
            "components",
        }
        for key in data:
            if key not in known:
                raise PolicyError(f"{where}.{key}", data[key], f"one of {', '.join(sorted(known))}")
        for key in ("cut", "residual", "mean", "components", "scales"):
            if key not in data:
                raise PolicyError(f"{where}.{key}", None, "present")

        def numbers(value: object, name: str) -> tuple[float, ...]:
            if isinstance(value, str):
                return unpacked(value, f"{where}.{name}")
            if not isinstance(value, list) or not all(_is_number(v) for v in value):
                raise PolicyError(f"{where}.{name}", value, "a list of finite numbers")
            return tuple(float(v) for v in value)

        mean = numbers(data["mean"], "mean")
        scales = numbers(data["scales"], "scales")
        rows = data["components"]
        if isinstance(rows, str):  # packed: rows as long as the mean, one after another
            flat = unpacked(rows, f"{where}.components")
            d = len(mean)
            if d == 0 or not flat or len(flat) % d:
                raise PolicyError(
                    f"{where}.components", f"{len(flat)} numbers", f"rows of {d} (the mean's)"
                )
            components = tuple(flat[i : i + d] for i in range(0, len(flat), d))
        elif isinstance(rows, list):
            components = tuple(numbers(row, "components") for row in rows)
        else:
            raise PolicyError(f"{where}.components", rows, "a list of lists of numbers")
        scalars = {}
        for key, default in (
            ("cut", None),
            ("residual", None),
            ("share", FAMILIAR_SHARE),
            ("familiar", 0.0),
            ("in_sample", 0.0),
        ):
            value = data.get(key, default)
            if not _is_number(value):
                raise PolicyError(f"{where}.{key}", value, "a finite number")
            scalars[key] = float(value)  # type: ignore[arg-type]
        n = data.get("n", 0)
        if isinstance(n, bool) or not isinstance(n, int):
            raise PolicyError(f"{where}.n", n, "a count")
        return cls(
            mean,
            components,
            scales,
            scalars["residual"],
            scalars["cut"],
            scalars["share"],
            scalars["familiar"],
            n,
            scalars["in_sample"],
        )


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
