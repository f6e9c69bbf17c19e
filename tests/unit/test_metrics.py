"""pipeline.fit.metrics: AUROC, ROC, Youden cut, length matching, calibration tables and the
Wilson interval: the project's conventions around scikit-learn's statistics, and the Wilson
interval against SciPy's."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import binomtest, norm
from sklearn.calibration import calibration_curve

from pipeline.bounds.thresholds import SCORE_EPSILON
from pipeline.errors import ScoringError
from pipeline.fit.metrics import (
    auroc,
    expected_calibration_error,
    length_matched_auroc,
    reliability_bins,
    roc_curve,
    wilson_interval,
    youden_j,
    youden_threshold,
)

T, F = True, False


def brute_force_auroc(scores: list[float], labels: list[bool]) -> float:
    """P(pos > neg) + 0.5 P(tie), counted pair by pair."""
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


class TestAuroc:
    def test_perfect_separation_is_one(self) -> None:
        assert auroc([0.9, 0.8, 0.2, 0.1], [T, T, F, F]) == 1.0

    def test_reversed_is_zero(self) -> None:
        assert auroc([0.1, 0.2, 0.8, 0.9], [T, T, F, F]) == 0.0

    def test_all_tied_is_half(self) -> None:
        assert auroc([0.5, 0.5, 0.5, 0.5], [T, F, T, F]) == 0.5

    def test_one_tied_pair_counts_half(self) -> None:
        # pos {3, 2}, neg {2, 1}: pairs 3>2, 3>1, 2=2 (0.5), 2>1 -> 3.5 / 4
        assert auroc([3, 2, 2, 1], [T, T, F, F]) == pytest.approx(0.875)

    def test_hand_computed_mixed_case(self) -> None:
        # pos {0.8, 0.4}, neg {0.6, 0.2, 0.4}: 0.8 beats 3; 0.4 beats 0.2, ties 0.4 -> 4.5/6
        assert auroc([0.8, 0.6, 0.4, 0.2, 0.4], [T, F, T, F, F]) == pytest.approx(0.75)

    def test_nan_scores_are_dropped(self) -> None:
        assert auroc([0.9, math.nan, 0.1], [T, F, F]) == 1.0

    def test_integer_labels_are_accepted(self) -> None:
        assert auroc([0.9, 0.1], [1, 0]) == 1.0

    @pytest.mark.parametrize("labels", [[T, T, T], [F, F, F]])
    def test_one_class_raises(self, labels: list[bool]) -> None:
        with pytest.raises(ScoringError, match="both classes"):
            auroc([0.1, 0.2, 0.3], labels)

    def test_one_class_after_dropping_nan_raises(self) -> None:
        with pytest.raises(ScoringError):
            auroc([0.1, math.nan], [T, F])

    def test_length_mismatch_raises(self) -> None:
        with pytest.raises(ScoringError, match="entries"):
            auroc([0.1, 0.2], [T])

    def test_non_boolean_labels_raise(self) -> None:
        with pytest.raises(ScoringError, match="booleans"):
            auroc([0.1, 0.2], [2, 0])

    @given(
        st.lists(st.tuples(st.integers(0, 6), st.booleans()), min_size=2, max_size=40).filter(
            lambda xs: len({y for _, y in xs}) == 2
        )
    )
    def test_equals_pairwise_count(self, data: list[tuple[int, bool]]) -> None:
        scores = [float(s) for s, _ in data]
        labels = [y for _, y in data]
        assert auroc(scores, labels) == pytest.approx(brute_force_auroc(scores, labels))


class TestRocCurve:
    def test_points_and_thresholds(self) -> None:
        fpr, tpr, thresholds = roc_curve([0.9, 0.7, 0.7, 0.2], [T, T, F, F])
        assert thresholds[0] == np.inf
        np.testing.assert_allclose(thresholds[1:], [0.9, 0.7, 0.2])
        np.testing.assert_allclose(tpr, [0.0, 0.5, 1.0, 1.0])
        np.testing.assert_allclose(fpr, [0.0, 0.0, 0.5, 1.0])

    def test_trapezoid_area_equals_auroc(self) -> None:
        rng = np.random.default_rng(3)
        scores = rng.integers(0, 10, 200).astype(float)
        labels = rng.random(200) < 0.4
        fpr, tpr, _ = roc_curve(scores, labels)
        area = float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2))
        assert area == pytest.approx(auroc(scores, labels))


class TestYouden:
    def test_separated_classes_cut_in_the_gap(self) -> None:
        scores = [1.1, 1.3, 1.6, 0.6, 0.8, 1.0]
        labels = [T, T, T, F, F, F]
        cut = youden_threshold(scores, labels)
        assert 1.0 < cut < 1.1
        assert cut == pytest.approx(1.05)
        assert youden_j(scores, labels) == 1.0

    def test_cut_predicts_positive_at_or_above(self) -> None:
        scores = np.array([0.2, 0.4, 0.6, 0.8])
        labels = np.array([F, T, F, T])
        cut = youden_threshold(scores, labels)
        predicted = scores >= cut
        tpr = predicted[labels].mean()
        fpr = predicted[~labels].mean()
        assert tpr - fpr == pytest.approx(youden_j(scores, labels))

    def test_ties_in_j_choose_the_highest_cut(self) -> None:
        # J = 0.5 both at cut 0.8 (accept {0.8}) and at 0.4 (accept {0.4, 0.6, 0.8}).
        cut = youden_threshold([0.2, 0.4, 0.6, 0.8], [F, T, F, T])
        assert cut == pytest.approx(0.7)

    def test_optimum_accepting_everything_lies_epsilon_below_the_lowest_score(self) -> None:
        # Reversed scores: cut 0.9 gives J = -1, the lowest cut (accept all) J = 0. Not on
        # the lowest score itself: float noise could put that very answer under it.
        assert youden_threshold([0.1, 0.9], [T, F]) == pytest.approx(0.1 - SCORE_EPSILON)
        assert youden_j([0.1, 0.9], [T, F]) == 0.0

    def test_no_cut_between_scores_closer_than_twice_epsilon(self) -> None:
        # The best split is between 0.5 and 0.50005, but another build of the encoder may
        # swap them: the cut goes to the next gap that float noise cannot cross.
        scores = [0.2, 0.5, 0.5 + SCORE_EPSILON / 2, 0.8]
        cut = youden_threshold(scores, [F, F, T, T])
        assert cut == pytest.approx((0.5 + SCORE_EPSILON / 2 + 0.8) / 2)
        assert min(abs(np.array(scores) - cut)) >= SCORE_EPSILON


class TestLengthMatchedAuroc:
    def test_removes_a_pure_length_confound(self) -> None:
        # score == length; grounded share rises with length bin, but within a bin the
        # labels are random, so the score carries no signal beyond length.
        rng = np.random.default_rng(7)
        lengths = np.arange(10_000, dtype=float)
        labels = np.zeros(10_000, dtype=bool)
        for b in range(10):
            block = np.arange(b * 1000, (b + 1) * 1000)
            share = 0.05 + 0.1 * b
            labels[rng.choice(block, int(1000 * share), replace=False)] = True
        scores = lengths.copy()
        assert auroc(scores, labels) > 0.8
        assert length_matched_auroc(scores, labels, lengths) == pytest.approx(0.5, abs=0.02)

    def test_keeps_a_real_signal(self) -> None:
        lengths = np.repeat(np.arange(5.0), 4)
        labels = np.tile([T, T, F, F], 5)
        scores = np.where(labels, 1.0, 0.0) + lengths  # separates within every length
        assert length_matched_auroc(scores, labels, lengths, n_bins=5) == 1.0

    def test_is_pair_weighted_average_of_bins(self) -> None:
        # Bin A (len 1): pos {1}, neg {0, 0} -> AUROC 1, 2 pairs.
        # Bin B (len 9): pos {0, 0}, neg {1, 1} -> AUROC 0, 4 pairs. Pooled: 2 / 6.
        scores = [1, 0, 0, 0, 0, 1, 1]
        labels = [T, F, F, T, T, F, F]
        lengths = [1, 1, 1, 9, 9, 9, 9]
        assert length_matched_auroc(scores, labels, lengths, n_bins=2) == pytest.approx(1 / 3)

    def test_single_class_bins_are_skipped(self) -> None:
        scores = [0.9, 0.1, 0.5, 0.6]
        labels = [T, F, T, T]
        lengths = [1, 1, 9, 9]
        assert length_matched_auroc(scores, labels, lengths, n_bins=2) == 1.0

    def test_no_mixed_bin_raises(self) -> None:
        with pytest.raises(ScoringError, match="no length bin"):
            length_matched_auroc([0.9, 0.1], [T, F], [1, 100], n_bins=2)

    def test_bad_bin_count_raises(self) -> None:
        with pytest.raises(ScoringError, match="n_bins"):
            length_matched_auroc([0.9, 0.1], [T, F], [1, 1], n_bins=0)


class TestCalibration:
    def test_reliability_bins_hand_computed(self) -> None:
        table = reliability_bins([0.05, 0.15, 1.0], [F, T, T], n_bins=2)
        assert [row["count"] for row in table] == [2, 1]
        assert table[0]["mean_predicted"] == pytest.approx(0.1)
        assert table[0]["observed_frequency"] == pytest.approx(0.5)
        assert table[1]["mean_predicted"] == 1.0  # 1.0 falls in the last bin
        assert table[1]["observed_frequency"] == 1.0

    def test_empty_bins_are_listed_with_none(self) -> None:
        table = reliability_bins([0.95], [T], n_bins=4)
        assert len(table) == 4
        assert table[0] == {
            "lower": 0.0,
            "upper": 0.25,
            "count": 0,
            "mean_predicted": None,
            "observed_frequency": None,
        }

    def test_ece_hand_computed(self) -> None:
        # bin 0: |0.5 - 0.1| * 2/3; bin 1: |1 - 1| * 1/3
        ece = expected_calibration_error([0.05, 0.15, 1.0], [F, T, T], n_bins=2)
        assert ece == pytest.approx(0.4 * 2 / 3)

    def test_ece_of_perfect_calibration_is_zero(self) -> None:
        probs = [0.0, 0.0, 1.0, 1.0]
        assert expected_calibration_error(probs, [F, F, T, T]) == 0.0

    def test_probability_out_of_range_raises(self) -> None:
        with pytest.raises(ScoringError, match=r"\[0, 1\]"):
            reliability_bins([1.2], [T])

    def test_a_probability_on_an_edge_falls_in_the_lower_bin_as_scikit_learn_draws_it(
        self,
    ) -> None:
        table = reliability_bins([0.5, 0.9], [F, T], n_bins=2)
        assert [row["count"] for row in table] == [1, 1]
        assert table[0]["mean_predicted"] == 0.5

    def test_the_table_is_the_curve_scikit_learn_draws(self) -> None:
        rng = np.random.default_rng(4)
        probs = rng.random(300)
        labels = rng.random(300) < probs
        table = [row for row in reliability_bins(probs, labels) if row["count"]]
        observed, predicted = calibration_curve(labels, probs, n_bins=10)
        assert [row["observed_frequency"] for row in table] == pytest.approx(observed)
        assert [row["mean_predicted"] for row in table] == pytest.approx(predicted)
        assert sum(row["count"] for row in table) == 300


class TestWilsonInterval:
    def test_textbook_value(self) -> None:
        # 5 of 100 at 95% two-sided: Wilson's interval is [0.0215, 0.1118].
        low, high = wilson_interval(5, 100, 1.96)
        assert (float(low), float(high)) == pytest.approx((0.0215, 0.1118), abs=1e-4)

    @pytest.mark.parametrize("z", [0.5, 1.0, 1.96])
    def test_equals_scipys_wilson_interval_on_whole_counts(self, z: float) -> None:
        level = 2.0 * float(norm.cdf(z)) - 1.0  # z standard errors, two-sided
        for n in (1, 7, 60, 400):
            for k in sorted({0, 1, n // 3, n - 1, n}):
                expected = binomtest(k, n).proportion_ci(level, method="wilson")
                low, high = wilson_interval(k, n, z)
                assert float(low) == pytest.approx(expected.low, abs=1e-12), (k, n)
                assert float(high) == pytest.approx(expected.high, abs=1e-12), (k, n)

    def test_elementwise_over_fractional_counts(self) -> None:
        # Expected counts (a judge right 85% of the time) lie between whole ones.
        low, high = wilson_interval(np.array([2.0, 2.55, 3.0]), np.array([60.0] * 3), 1.0)
        assert low[0] < low[1] < low[2] and high[0] < high[1] < high[2]

    def test_an_empty_sample_is_nan(self) -> None:
        low, high = wilson_interval(np.array([0.0]), np.array([0.0]), 1.0)
        assert math.isnan(low[0]) and math.isnan(high[0])

    def test_z_zero_is_the_point_estimate(self) -> None:
        low, high = wilson_interval(3, 60, 0.0)
        assert float(low) == float(high) == pytest.approx(0.05)
