"""check(): the human-readable verdict on a geometric score, and its audit line."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.bounds.thresholds import Thresholds
from pipeline.errors import PolicyError
from pipeline.policy.document import _thresholds
from pipeline.rungs.grounding_switch import GroundingSwitch
from pipeline.scores.check import Check, Level, check
from pipeline.scores.grounding import LONG_FORM
from pipeline.scores.results import DGIResult, GroundingScore, SGIResult


def sgi(value: float) -> SGIResult:
    return SGIResult(value, 0.5, 0.5, 0, 1)


def dgi(value: float) -> DGIResult:
    return DGIResult(value, 1.0)


def below(x: float) -> float:
    return math.nextafter(x, -math.inf)


class TestSgiLevels:
    @pytest.mark.parametrize("value", [1.20, 1.5, 10.0])
    def test_ok_zone(self, value):
        verdict = check(sgi(value))
        assert verdict.level is Level.OK
        assert verdict.label == "Supported by the document"
        assert verdict.escalate is False

    @pytest.mark.parametrize("value", [0.95, 1.0, below(1.20)])
    def test_review_zone(self, value):
        verdict = check(sgi(value))
        assert verdict.level is Level.REVIEW
        assert verdict.label == "Partly supported"
        assert verdict.escalate is True

    @pytest.mark.parametrize("value", [0.0, 0.5, below(0.95)])
    def test_risk_zone(self, value):
        verdict = check(sgi(value))
        assert verdict.level is Level.RISK
        assert verdict.label == "Not supported by the document"
        assert verdict.escalate is False

    def test_exact_cuts(self):
        assert check(sgi(1.20)).level is Level.OK
        assert check(sgi(below(1.20))).level is Level.REVIEW
        assert check(sgi(0.95)).level is Level.REVIEW
        assert check(sgi(below(0.95))).level is Level.RISK


class TestDgiLevels:
    def test_at_pass_is_ok(self):
        verdict = check(dgi(0.525))
        assert verdict.level is Level.OK
        assert verdict.label == "Moves like a grounded answer"
        assert verdict.escalate is False

    def test_just_below_pass_is_risk(self):
        verdict = check(dgi(below(0.525)))
        assert verdict.level is Level.RISK
        assert verdict.label == "Possibly fabricated"
        assert verdict.escalate is False

    @settings(max_examples=200, deadline=None)
    @given(value=st.floats(-1.0, 1.0, allow_nan=False))
    def test_dgi_is_never_review(self, value):
        assert check(dgi(value)).level is not Level.REVIEW


class TestFlagged:
    @pytest.mark.parametrize(
        "score",
        [
            SGIResult(0.0, 0.0, 0.0, -1, 1, flagged=True, flag_reason="question is zero"),
            DGIResult(0.0, 0.0, flagged=True, flag_reason="question is zero"),
        ],
    )
    def test_flagged_is_review_and_escalates(self, score):
        verdict = check(score)
        assert verdict.level is Level.REVIEW
        assert verdict.escalate is True
        assert verdict.label == "Cannot be scored"
        assert verdict.detail == "question is zero"
        assert verdict.method == score.method


class TestRender:
    @pytest.mark.parametrize(
        ("score", "level", "method", "number"),
        [
            (sgi(1.2345), "OK", "SGI", "1.234"),
            (sgi(1.0), "REVIEW", "SGI", "1.000"),
            (sgi(0.25), "RISK", "SGI", "0.250"),
            (dgi(0.6), "OK", "DGI", "0.600"),
            (dgi(-0.5), "RISK", "DGI", "-0.500"),
        ],
    )
    def test_render_has_level_method_and_score(self, score, level, method, number):
        line = check(score).render()
        assert level in line
        assert method in line
        assert number in line
        assert check(score).label in line

    def test_render_is_one_line(self):
        assert "\n" not in check(sgi(1.0)).render()

    def test_detail_names_the_cut(self):
        assert "1.2" in check(sgi(1.3)).detail
        assert "0.95" in check(sgi(0.5)).detail
        assert "0.525" in check(dgi(0.1)).detail


class TestThresholdsAndTypes:
    def test_custom_thresholds_move_the_zones(self):
        t = Thresholds(sgi_strong_pass=2.0, sgi_review=1.5, dgi_pass=0.8)
        assert check(sgi(1.9), t).level is Level.REVIEW
        assert check(sgi(1.2), t).level is Level.RISK
        assert check(sgi(2.0), t).level is Level.OK
        assert check(dgi(0.7), t).level is Level.RISK
        assert "2.0" in check(sgi(2.5), t).detail

    def test_check_of_a_check_is_itself(self):
        verdict = check(sgi(1.3))
        assert check(verdict) is verdict

    def test_unknown_type_is_a_type_error(self):
        with pytest.raises(TypeError):
            check(1.3)  # type: ignore[arg-type]

    def test_score_and_method_are_carried(self):
        verdict = check(dgi(0.7))
        assert isinstance(verdict, Check)
        assert verdict.score == 0.7
        assert verdict.method == "dgi"

    @settings(max_examples=300, deadline=None)
    @given(value=st.floats(-1.0, 12.0, allow_nan=False))
    def test_escalate_iff_review_for_sgi(self, value):
        verdict = check(sgi(value))
        assert verdict.escalate == (verdict.level is Level.REVIEW)

    @settings(max_examples=300, deadline=None)
    @given(a=st.floats(0.0, 12.0, allow_nan=False), b=st.floats(0.0, 12.0, allow_nan=False))
    def test_monotone(self, a, b):
        rank = {Level.RISK: 0, Level.REVIEW: 1, Level.OK: 2}
        low, high = sorted((a, b))
        assert rank[check(sgi(low)).level] <= rank[check(sgi(high)).level]


class TestLongFormCuts:
    """Short and long-form answers are judged by their own P(grounded) cuts."""

    T = Thresholds(
        grounding_accept=0.9,
        grounding_review=0.5,
        grounding_accept_long=0.7,
        grounding_review_long=0.3,
    )

    @staticmethod
    def score(p: float, long_form: bool) -> GroundingScore:
        return GroundingScore(p, SGIResult(1.0, 0.5, 0.5, 1, 1), {LONG_FORM: float(long_form)})

    def test_each_regime_has_its_own_cuts(self) -> None:
        assert check(self.score(0.8, long_form=True), self.T).level is Level.OK
        assert check(self.score(0.8, long_form=False), self.T).level is Level.REVIEW
        assert check(self.score(0.4, long_form=True), self.T).level is Level.REVIEW
        assert check(self.score(0.4, long_form=False), self.T).level is Level.RISK

    def test_a_switch_rechecking_a_record_applies_the_same_regime(self) -> None:
        verdict = check(self.score(0.8, long_form=True), self.T)
        assert "long-form" in verdict.detail
        assert GroundingSwitch.from_thresholds(self.T).decide(verdict).action.value == "accept"

    def test_without_long_cuts_both_regimes_share_one_pair(self) -> None:
        t = Thresholds(grounding_accept=0.9, grounding_review=0.5)
        assert t.grounding_cuts(True) == t.grounding_cuts(False) == (0.9, 0.5)

    def test_a_policy_table_with_short_cuts_only_applies_them_to_long_answers(self) -> None:
        t = _thresholds({"grounding_accept": 0.95, "grounding_review": 0.6}, "t", Thresholds())
        assert t.grounding_cuts(True) == (0.95, 0.6)

    def test_an_inverted_long_pair_is_refused(self) -> None:
        with pytest.raises(PolicyError, match="grounding_review_long"):
            Thresholds(grounding_accept_long=0.4, grounding_review_long=0.6)
