"""strong_pass_cut: the lowest auto-accept cut whose accepted set is clean enough."""

from __future__ import annotations

import math

import numpy as np

from pipeline.bounds.thresholds import SCORE_EPSILON
from pipeline.fit.calibrate import strong_pass_cut


def fit(scores, labels, floor=0.95, max_accept_error=0.0):
    return strong_pass_cut(
        np.array(scores, dtype=np.float64), np.array(labels, dtype=bool), floor, max_accept_error
    )


SCORES = [0.5, 1.0, 2.0, 3.0]
LABELS = [False, False, True, True]


def test_cut_lies_halfway_below_the_lowest_clean_score():
    # From 2.0 up every answer is grounded; halfway to 1.0 accepts exactly that set.
    cut, accepts_nothing = fit(SCORES, LABELS)
    assert (cut, accepts_nothing) == (1.5, False)
    assert list(np.array(SCORES) >= cut) == [False, False, True, True]


def test_tolerated_error_lowers_the_cut():
    # At 1.0 one of three accepted answers is ungrounded: allowed by 0.34, not by 0.33.
    assert fit(SCORES, LABELS, max_accept_error=0.34) == (0.95, False)
    assert fit(SCORES, LABELS, max_accept_error=0.33) == (1.5, False)


def test_never_below_the_floor():
    assert fit([0.5, 2.0], [False, True], floor=1.2) == (1.25, False)
    assert fit([0.5, 2.0], [False, True], floor=1.8) == (1.8, False)


def test_scores_under_the_floor_are_never_cut_at():
    # A cut at 0.5 would be clean (and, floored, give 1.0); under the floor it is skipped,
    # so the cut is halfway below 2.0.
    assert fit([0.5, 2.0], [True, True], floor=1.0) == (1.25, False)


def test_lowest_score_qualifying_cuts_epsilon_below_itself():
    # Not on the score: float noise in its embedding must not move that answer out.
    assert fit([1.0, 2.0], [True, True], floor=0.5) == (1.0 - SCORE_EPSILON, False)


def test_no_cut_between_scores_closer_than_twice_epsilon():
    # Clean from 2.0 up, but 2.0 and the ungrounded 2.0 - ε/2 are one score to float noise:
    # the cut moves up to the next gap that noise cannot cross.
    scores = [1.0, 2.0 - SCORE_EPSILON / 2, 2.0, 3.0]
    cut, _ = fit(scores, [False, False, True, True])
    assert cut == 2.5
    assert min(abs(np.array(scores) - cut)) >= SCORE_EPSILON


def test_no_clean_cut_accepts_nothing():
    # Infinite, not just above the highest score: a new answer scoring higher still (on
    # HaluEval the highest SGIs are hallucinated) must not be auto-accepted either.
    cut, accepts_nothing = fit([1.0, 2.0], [True, False])
    assert accepts_nothing is True
    assert cut == math.inf
    assert not (np.array([2.0, 1e9]) >= cut).any()
