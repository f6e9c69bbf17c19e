"""The judge share: which band of P(grounded) the judge is asked about, fitted for a share
of the answers the operator chooses (`groundstream calibrate DATA --judge-share S`).

Why: with a judge configured, asking it about every answer below the accept cut makes the
gate cost what judging everything costs. P(grounded) ranks answers well, so two cuts do
better: at or above the *accept* cut an answer goes to state unjudged, below the *reject*
cut it takes the route's on_reject unjudged, and only the band between is asked. This
module chooses the pair that puts the most right answers in state while the judge is asked
about at most a share S of the answers and at most `max_error` of state is wrong, for a
judge that is right a share A of the time (expected counts):

    right in state = grounded >= accept + A * grounded in the band
    wrong in state = ungrounded >= accept + (1 - A) * ungrounded in the band

The search runs over every pair of cuts on a grid of the fitted scores, with cumulative
counts, so one search answers every share of the frontier at once. Short and long-form
answers get their own pair, each regime within the share and the bound (so all answers
together are), as their accept cuts are fitted apart (`pipeline.fit.grounding_model`). The
frontier also says what the chosen band lets into state with the judge unavailable: the
band then goes to a person, and the unjudged accepts alone may be wrong more often than
the bound, since the judge's right answers no longer dilute them. Cuts are placed with
`cut_below` in gaps at least 2 * SCORE_EPSILON wide, so no fitted score lies within float
noise of a cut. Two bounds of the probability are the only exceptions, and nothing can
cross them: an accept-everything or ask-everything cut below a score under SCORE_EPSILON
lies at 0, and a reject cut above every score, when the highest lies within 2 *
SCORE_EPSILON of 1, lies at 1.

The veto cut (`judge_veto_cut`: a judge's yes below it goes to a person) is a third cut
between the two. In this accounting it never puts more right answers in state: a veto band
[reject, veto) sends to a person the yes's it would otherwise send to state, and to
on_reject the no's, so it leaves state exactly as raising the reject cut to the veto cut
does, and asks the judge about more answers. Every (accept, veto, reject) triple is thus
matched or beaten by the pair (accept, veto), and the search, which prefers fewer asks among
equal states, runs over pairs: the fit leaves the veto unset. `figures` still counts a
hand-set veto ("to a person"), and tests/unit/test_judge_share.py checks the dominance.

Failure posture: an invalid share or accuracy raises `PolicyError` naming the option; the
search always has an answer (accepting and asking nothing puts nothing in state, which
meets any bound), so it never fails on data. Pure numpy; no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.bounds.thresholds import SCORE_EPSILON
from pipeline.errors import PolicyError
from pipeline.fit.grounding_model import (
    L2,
    REGIME_MIN,
    fold_probabilities,
    long_rows,
    probabilities,
)
from pipeline.fit.metrics import cut_below, separable, wilson_interval
from pipeline.scores.grounding import GroundingModel

__all__ = [
    "BAND_ERROR_FLOOR",
    "BOUND_Z",
    "FRONTIER_SHARES",
    "Band",
    "Figures",
    "JudgeShare",
    "JudgeShareFit",
    "default_band_error",
    "every_answer",
    "figures",
    "fit_bands",
    "fit_judge_share",
]

FRONTIER_SHARES = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
"""The judge shares the frontier records besides the one chosen."""

GRID = 400
"""At most this many candidate positions per cut: the search is quadratic in them, and 400
positions resolve a share to a quarter of a percent of the answers."""

_TOLERANCE = 1e-9
"""Slack for float sums in the share and error constraints (counts are whole or A-weighted)."""

BOUND_Z = 0.5
"""How sure the fit must be that state's wrong share is within the bound: the band's
Wilson upper bound at this many standard errors (0.5: one-sided 69%), not its point
estimate, must be within it. Why: the search picks, among thousands of bands, the one with
the most right answers that just meets the bound, so the point estimate of the band it
picks is biased low, and out of fold the bound was exceeded (RAGTruth 5.4% at 5%, issue 31).
The margin is widest where state is small, where that selection bias is largest. Measured
out of fold on RAGTruth (`bench judge`'s frontier; docs/quality.md): at z = 0 an 85% judge's
state was 5.4% wrong at a 5% bound, at 0.5 4.8% (65.0% of right answers), at 1.0 4.0%
(58.2%); 0.5 keeps the bound at the least cost."""

ALL = "all"
"""The frontier's key for every answer fitted, beside one key per data file."""

# What happens to an answer under a band, as `_codes` writes it.
_REJECTED, _VETOED, _JUDGED, _ACCEPTED = 0, 1, 2, 3


@dataclass(frozen=True, slots=True)
class JudgeShare:
    """What the operator asked for: the judge asked about at most `share` of the answers,
    and a judge right `accuracy` of the time (at least half: a judge right less often than
    a coin is one to read backwards, not to ask)."""

    share: float
    accuracy: float = 1.0
    max_error: float | None = None
    """The band's bound on state's wrong share; None: the fit's `--max-accept-error`.
    The CLI sets `default_band_error(accuracy)` when no bound is given."""

    def __post_init__(self) -> None:
        for name, value, lowest in (
            ("--judge-share", self.share, 0.0),
            ("--judge-accuracy", self.accuracy, 0.5),
            *(() if self.max_error is None else (("--max-accept-error", self.max_error, 0.0),)),
        ):
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not lowest <= value <= 1.0
            ):
                raise PolicyError(name, value, f"a share in [{lowest:g}, 1]")

    @property
    def shares(self) -> tuple[float, ...]:
        """The frontier's shares: the grid and the chosen one, ascending."""
        return tuple(sorted({*FRONTIER_SHARES, float(self.share)}))


@dataclass(frozen=True, slots=True)
class Band:
    """Where answers go by P(grounded): >= accept to state unjudged, < reject to on_reject
    unjudged, between to the judge; a judge's yes below `veto` (when set) to a person."""

    accept: float
    reject: float
    veto: float | None = None

    def to_dict(self) -> dict[str, float]:
        out = {"accept": self.accept, "reject": self.reject}
        return out | ({} if self.veto is None else {"veto": self.veto})


@dataclass(frozen=True, slots=True)
class Figures:
    """Expected outcome counts of a set of answers under a band and a judge's accuracy."""

    n: int
    n_right: int
    right: float
    """Expected right (grounded) answers in state."""
    wrong: float
    """Expected wrong (ungrounded) answers in state."""
    asked: int
    """Answers the judge is asked about."""
    to_person: float
    """Expected answers a judge's yes sends to a person (below the veto cut)."""

    def __add__(self, other: Figures) -> Figures:
        return Figures(
            self.n + other.n,
            self.n_right + other.n_right,
            self.right + other.right,
            self.wrong + other.wrong,
            self.asked + other.asked,
            self.to_person + other.to_person,
        )

    @property
    def right_share(self) -> float:
        """The share of right answers that reach state."""
        return self.right / self.n_right if self.n_right else 0.0

    @property
    def wrong_share(self) -> float:
        """The share of state that is wrong (0 for an empty state)."""
        total = self.right + self.wrong
        return self.wrong / total if total > 0 else 0.0

    @property
    def asked_share(self) -> float:
        return self.asked / self.n if self.n else 0.0

    def to_dict(self, prefix: str = "") -> dict[str, float]:
        """The shares, as the policy's frontier records them."""
        return {
            f"{prefix}right": self.right_share,
            f"{prefix}wrong": self.wrong_share,
            f"{prefix}asked": self.asked_share,
            f"{prefix}to_person": self.to_person / self.n if self.n else 0.0,
        }


BAND_ERROR_FLOOR = 0.015
"""The strictest default bound of a band: a few thousand calibration answers cannot vouch
for less (at 1.5%, state's wrong share is already counted in single answers per fold)."""


def default_band_error(accuracy: float) -> float:
    """The band's bound when the operator gives none: a third of the judge's own error rate,
    and at least `BAND_ERROR_FLOOR`. Why: a judge right a share A of the time, asked about
    every answer, leaves about 1 - A of state wrong when half the answers are (RAGTruth: an
    85% judge 12.1%); a band worth its cuts leaves state clearly cleaner than that, and an
    always-right judge leaves nothing wrong, so there only geometry's accepts can be, and
    they are held to the floor. 85% right: 5%; always right: 1.5%."""
    return max(BAND_ERROR_FLOOR, (1.0 - accuracy) / 3.0)


def _codes(p: np.ndarray, band: Band) -> np.ndarray:
    """What happens to each answer under `band` (`_REJECTED` ... `_ACCEPTED`)."""
    p = np.asarray(p, dtype=np.float64)
    codes = np.full(p.shape, _REJECTED, dtype=np.int8)
    judged = p >= band.reject
    codes[judged] = _JUDGED
    if band.veto is not None:
        codes[judged & (p < band.veto)] = _VETOED
    codes[p >= band.accept] = _ACCEPTED
    return codes


def _figures_of(codes: np.ndarray, y: np.ndarray, accuracy: float) -> Figures:
    y = np.asarray(y, dtype=bool)

    def count(code: int, label: bool) -> int:
        return int(np.count_nonzero((codes == code) & (y == label)))

    return Figures(
        n=int(y.size),
        n_right=int(y.sum()),
        right=count(_ACCEPTED, True) + accuracy * count(_JUDGED, True),
        wrong=count(_ACCEPTED, False) + (1.0 - accuracy) * count(_JUDGED, False),
        asked=int(np.count_nonzero((codes == _JUDGED) | (codes == _VETOED))),
        to_person=accuracy * count(_VETOED, True) + (1.0 - accuracy) * count(_VETOED, False),
    )


def figures(p: np.ndarray, y: np.ndarray, band: Band, accuracy: float) -> Figures:
    """The expected outcome of answers with probabilities `p` and labels `y` under `band`."""
    return _figures_of(_codes(p, band), y, accuracy)


def every_answer(y: np.ndarray, accuracy: float) -> Figures:
    """Asking the judge about every answer: the frontier's last row."""
    codes = np.full(np.shape(y), _JUDGED, dtype=np.int8)
    return _figures_of(codes, y, accuracy)


def _accept_value(distinct: np.ndarray, k: int) -> float:
    """The accept cut that accepts ``distinct[k:]``; inf (accept nothing) past the end."""
    if k == distinct.size:
        return math.inf
    return max(0.0, cut_below(distinct, k))


def _reject_value(distinct: np.ndarray, k: int) -> float:
    """The reject cut below which ``distinct[:k]`` fall; past the end, above every score
    (a probability: at most 1)."""
    if k < distinct.size:
        return max(0.0, cut_below(distinct, k))
    top = float(distinct[-1])
    return top + (1.0 - top) / 2.0 if 1.0 - top >= 2.0 * SCORE_EPSILON else 1.0


def _positions(distinct: np.ndarray) -> np.ndarray:
    """Candidate cut positions k (a cut at k takes ``distinct[k:]``), ascending, the end
    (nothing) included: the separable ones, thinned evenly to at most `GRID`."""
    allowed = np.flatnonzero(separable(distinct))
    if allowed.size > GRID:
        allowed = allowed[np.unique(np.linspace(0, allowed.size - 1, GRID).round().astype(int))]
    return np.r_[allowed, distinct.size]


def fit_bands(
    p: np.ndarray,
    y: np.ndarray,
    shares: Iterable[float],
    max_error: float,
    accuracy: float,
    *,
    z: float = BOUND_Z,
) -> dict[float, Band]:
    """The band for each judge share: the most expected right answers in state with the
    judge asked about at most that share of the answers and state's wrong share within
    `max_error` at `z` standard errors (`BOUND_Z`; 0: the point estimate); among equals the
    fewest wrong, then the fewest asked, then the higher accept cut."""
    p = np.asarray(p, dtype=np.float64)
    y = np.asarray(y, dtype=bool)
    shares = tuple(shares)
    if p.size == 0:
        return {s: Band(math.inf, 1.0) for s in shares}
    distinct = np.unique(p)
    k = _positions(distinct)
    # Answers at or above each position: a cut at k takes every p >= distinct[k].
    order = np.sort(p)
    edges = np.r_[distinct, np.inf][k]
    above = p.size - np.searchsorted(order, edges, side="left")
    right_above = y.sum() - np.searchsorted(np.sort(p[y]), edges, side="left")
    wrong_above = above - right_above
    # Pairs (accept at i, reject at j <= i): the band is positions j..i.
    i, j = np.tril_indices(k.size)
    right = right_above[i] + accuracy * (right_above[j] - right_above[i])
    wrong = wrong_above[i] + (1.0 - accuracy) * (wrong_above[j] - wrong_above[i])
    asked = above[j] - above[i]
    # State's wrong share at its Wilson upper bound; an empty state (nothing in it) is not
    # wrong, which the interval, undefined there, leaves to this call to say.
    in_state = right + wrong
    upper = np.where(in_state > 0, wilson_interval(wrong, in_state, z)[1], 0.0)
    meets = upper <= max_error + _TOLERANCE
    # Best first: most right, fewest wrong, fewest asked, highest accept cut.
    rank = np.lexsort((-i, asked, wrong, -right))
    out = {}
    for share in shares:
        ok = meets[rank] & (asked[rank] <= share * p.size + _TOLERANCE)
        best = rank[int(np.argmax(ok))]  # (accept nothing, ask nothing) is always ok
        out[share] = Band(
            _accept_value(distinct, int(k[i[best]])), _reject_value(distinct, int(k[j[best]]))
        )
    return out


def _regime_bands(
    p: np.ndarray,
    y: np.ndarray,
    long: np.ndarray,
    shares: Sequence[float],
    bounds: tuple[float, float],
    accuracy: float,
    z: float,
) -> dict[float, tuple[Band, Band]]:
    """(short, long-form) bands per share, each regime fitted on its own answers under its
    own bound, as `pipeline.fit.grounding_model.regime_cuts` fits the accept cuts: each regime
    within the share and the bound keeps all answers within them. A regime too small for a
    fit of its own takes the band fitted on every answer at the short bound."""
    pooled = fit_bands(p, y, shares, bounds[0], accuracy, z=z)
    per = []
    for mask, bound in zip((~long, long), bounds, strict=True):
        enough = mask.sum() >= REGIME_MIN and y[mask].any() and (~y[mask]).any()
        per.append(fit_bands(p[mask], y[mask], shares, bound, accuracy, z=z) if enough else pooled)
    return {s: (per[0][s], per[1][s]) for s in shares}


def _codes_by_regime(p: np.ndarray, long: np.ndarray, bands: tuple[Band, Band]) -> np.ndarray:
    return np.where(long, _codes(p, bands[1]), _codes(p, bands[0]))


@dataclass(frozen=True, slots=True)
class Row:
    """One judge share of the frontier: in-sample figures and, with folds, out-of-fold ones."""

    share: float
    fitted: Figures
    cv: Figures | None = None

    def to_dict(self) -> dict[str, float]:
        cv = {} if self.cv is None else self.cv.to_dict("cv_")
        return {"share": self.share, **self.fitted.to_dict(), **cv}


@dataclass(frozen=True, slots=True)
class JudgeShareFit:
    """The fitted bands at the chosen share, and the frontier it was chosen from: per data
    file and over every answer (`ALL`), a row per share, then asking about every answer.
    `down` is the chosen bands with the judge unavailable: the band goes to a person and
    only the unjudged accepts reach state, whose error the bound does not cover (the
    judge's right answers in the band dilute it)."""

    spec: JudgeShare
    max_error: float
    max_error_long: float
    z: float
    short: Band
    long: Band
    frontier: Mapping[str, tuple[Row, ...]]
    every: Mapping[str, Figures]
    down: Mapping[str, Row]

    @property
    def cuts(self) -> dict[str, float]:
        """The route's P(grounded) cuts, as a policy's `thresholds` table names them."""
        return {
            "grounding_accept": self.short.accept,
            "grounding_review": self.short.reject,
            "grounding_accept_long": self.long.accept,
            "grounding_review_long": self.long.reject,
        }

    @property
    def veto(self) -> float | None:
        """The route's `judge_veto_cut`: set only when the fit found one for both regimes."""
        vetoes = {self.short.veto, self.long.veto}
        return vetoes.pop() if len(vetoes) == 1 else None

    def to_dict(self) -> dict[str, object]:
        """The provenance a route's `calibration` table records."""
        return {
            "judge_share": self.spec.share,
            "judge_accuracy": self.spec.accuracy,
            "max_accept_error": self.max_error,
            "max_accept_error_long": self.max_error_long,
            "bound_z": self.z,
            "band": {"short": self.short.to_dict(), "long": self.long.to_dict()},
            "frontier": {
                name: [row.to_dict() for row in rows]
                + [
                    {
                        "every_answer": True,
                        **self.every[name].to_dict(),
                        "n": self.every[name].n,
                        "n_right": self.every[name].n_right,
                    }
                ]
                for name, rows in self.frontier.items()
            },
            "judge_down": {name: row.to_dict() for name, row in self.down.items()},
        }


def _rows(
    codes: Mapping[float, np.ndarray],
    cv_codes: Mapping[float, np.ndarray] | None,
    y: np.ndarray,
    groups: np.ndarray,
    accuracy: float,
) -> Iterator[tuple[str, tuple[Row, ...]]]:
    for name in (*sorted(set(groups.tolist())), ALL):
        mask = np.ones(y.size, dtype=bool) if name == ALL else groups == name
        yield (
            name,
            tuple(
                Row(
                    share,
                    _figures_of(codes[share][mask], y[mask], accuracy),
                    None
                    if cv_codes is None
                    else _figures_of(cv_codes[share][mask], y[mask], accuracy),
                )
                for share in codes
            ),
        )


def fit_judge_share(
    x: np.ndarray,
    y: np.ndarray,
    groups: np.ndarray,
    model: GroundingModel,
    spec: JudgeShare,
    *,
    max_error: float,
    max_error_long: float | None = None,
    contexts: Sequence[str] | None = None,
    folds: int = 5,
    l2: float = L2,
    z: float = BOUND_Z,
) -> JudgeShareFit:
    """The bands of `model`'s P(grounded) on feature rows `x` (in `FEATURES` order) for
    `spec`, and the frontier. With `contexts`, the frontier also holds out-of-fold figures:
    the whole procedure (model and bands) refitted without each fold, folds grouped by
    context as `pipeline.fit.grounding_model.cross_validate` groups them."""
    y = np.asarray(y, dtype=bool)
    groups = np.asarray(groups)
    long = long_rows(x)
    if spec.max_error is not None:  # the band's own bound (the CLI's judge-aware default)
        max_error, max_error_long = spec.max_error, None
    bounds = (max_error, max_error if max_error_long is None else max_error_long)
    shares = spec.shares
    p = probabilities(model, x)
    bands = _regime_bands(p, y, long, shares, bounds, spec.accuracy, z)
    codes = {s: _codes_by_regime(p, long, bands[s]) for s in shares}
    cv_codes = None
    if contexts is not None and folds > 1:
        cv_codes = {s: np.full(y.size, _REJECTED, dtype=np.int8) for s in shares}
        for train, test, p_train, p_test in fold_probabilities(
            x, y, groups, contexts, folds=folds, l2=l2
        ):
            fold_bands = _regime_bands(
                p_train, y[train], long[train], shares, bounds, spec.accuracy, z
            )
            for s in shares:
                cv_codes[s][test] = _codes_by_regime(p_test, long[test], fold_bands[s])
    frontier = dict(_rows(codes, cv_codes, y, groups, spec.accuracy))
    every = {
        name: every_answer(y if name == ALL else y[groups == name], spec.accuracy)
        for name in frontier
    }
    chosen = {spec.share: _unjudged(codes[spec.share])}
    cv_chosen = None if cv_codes is None else {spec.share: _unjudged(cv_codes[spec.share])}
    down = {name: rows[0] for name, rows in _rows(chosen, cv_chosen, y, groups, spec.accuracy)}
    short, long_band = bands[spec.share]
    return JudgeShareFit(spec, bounds[0], bounds[1], z, short, long_band, frontier, every, down)


def _unjudged(codes: np.ndarray) -> np.ndarray:
    """`codes` with the judge unavailable: what it would have been asked goes to a person
    (counted neither in state nor asked)."""
    return np.where(codes == _ACCEPTED, _ACCEPTED, _REJECTED).astype(np.int8)
