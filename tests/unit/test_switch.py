"""Stage 2: the GroundingSwitch turns a geometric score into a control action (seed 000)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.bounds.thresholds import DGI_PASS, SGI_REVIEW, SGI_STRONG_PASS, Thresholds
from pipeline.errors import PolicyError
from pipeline.rungs.grounding_switch import (
    ON_REJECT_ACTIONS,
    GroundingSwitch,
    SwitchAction,
    SwitchDecision,
)
from pipeline.scores.check import Check, Level, check
from pipeline.scores.results import DGIResult, SGIResult

ON_REJECT = ("fallback", "reject", "regenerate", "escalate")


def sgi(value: float) -> SGIResult:
    return SGIResult(value, 0.5, 0.5, 0, 1)


def dgi(value: float) -> DGIResult:
    return DGIResult(value, 1.0)


def below(x: float) -> float:
    return math.nextafter(x, -math.inf)


def action(score, **kwargs) -> SwitchAction:
    return GroundingSwitch(**kwargs).decide(score).action


class TestSeedConstants:
    def test_thresholds_are_the_seeds(self):
        assert SGI_STRONG_PASS == 1.20
        assert SGI_REVIEW == 0.95
        assert DGI_PASS == 0.525

    def test_defaults(self):
        switch = GroundingSwitch()
        assert switch.on_reject is SwitchAction.FALLBACK
        assert switch.thresholds.sgi_strong_pass == 1.20
        assert switch.thresholds.sgi_review == 0.95
        assert switch.thresholds.dgi_pass == 0.525


class TestSgiZones:
    def test_at_strong_pass_accepts(self):
        assert action(sgi(1.20)) is SwitchAction.ACCEPT

    def test_just_below_strong_pass_escalates(self):
        assert action(sgi(below(1.20))) is SwitchAction.ESCALATE

    def test_at_review_escalates(self):
        assert action(sgi(0.95)) is SwitchAction.ESCALATE

    def test_just_below_review_is_on_reject(self):
        assert action(sgi(below(0.95))) is SwitchAction.FALLBACK

    @pytest.mark.parametrize("value", [1.5, 3.0, 10.0])
    def test_high_scores_accept(self, value):
        assert action(sgi(value)) is SwitchAction.ACCEPT

    @pytest.mark.parametrize("value", [0.0, 0.3, 0.94])
    def test_low_scores_take_on_reject(self, value):
        assert action(sgi(value)) is SwitchAction.FALLBACK

    @pytest.mark.parametrize("value", [0.95, 1.0, 1.1, 1.19])
    def test_middle_band_escalates(self, value):
        assert action(sgi(value)) is SwitchAction.ESCALATE


class TestDgiZones:
    def test_at_pass_accepts(self):
        assert action(dgi(0.525)) is SwitchAction.ACCEPT

    def test_just_below_pass_is_on_reject(self):
        assert action(dgi(below(0.525))) is SwitchAction.FALLBACK

    @pytest.mark.parametrize("value", [-1.0, 0.0, 0.3, 0.5])
    def test_dgi_has_no_middle_band(self, value):
        assert action(dgi(value)) is SwitchAction.FALLBACK

    @pytest.mark.parametrize("value", [0.6, 0.9, 1.0])
    def test_high_dgi_accepts(self, value):
        assert action(dgi(value)) is SwitchAction.ACCEPT


class TestOnReject:
    @pytest.mark.parametrize("name", ON_REJECT)
    def test_sgi_negative_takes_each_on_reject(self, name):
        decision = GroundingSwitch(on_reject=name).decide(sgi(0.5))
        assert decision.action is SwitchAction(name)
        assert decision.write_to_state is False

    @pytest.mark.parametrize("name", ON_REJECT)
    def test_dgi_negative_takes_each_on_reject(self, name):
        decision = GroundingSwitch(on_reject=name).decide(dgi(0.1))
        assert decision.action is SwitchAction(name)
        assert decision.write_to_state is False

    @pytest.mark.parametrize("name", ON_REJECT)
    def test_on_reject_does_not_change_accept_or_escalate(self, name):
        switch = GroundingSwitch(on_reject=name)
        assert switch.decide(sgi(1.3)).action is SwitchAction.ACCEPT
        assert switch.decide(sgi(1.0)).action is SwitchAction.ESCALATE

    @pytest.mark.parametrize("name", ON_REJECT)
    def test_enum_and_string_are_the_same(self, name):
        assert GroundingSwitch(on_reject=SwitchAction(name)).on_reject is SwitchAction(name)
        assert GroundingSwitch(on_reject=name).on_reject is SwitchAction(name)

    def test_allowed_set(self):
        assert {a.value for a in ON_REJECT_ACTIONS} == set(ON_REJECT)
        assert SwitchAction.ACCEPT not in ON_REJECT_ACTIONS

    def test_accept_is_not_a_valid_on_reject(self):
        with pytest.raises(PolicyError) as info:
            GroundingSwitch(on_reject="accept")
        message = str(info.value)
        assert "on_reject" in message
        assert "'accept'" in message
        for name in ON_REJECT:
            assert name in message
        assert info.value.field == "on_reject"

    def test_accept_enum_is_not_a_valid_on_reject(self):
        with pytest.raises(PolicyError):
            GroundingSwitch(on_reject=SwitchAction.ACCEPT)

    @pytest.mark.parametrize("bad", ["drop", "", "FALLBACK", None, 3])
    def test_unknown_on_reject_is_a_value_error(self, bad):
        with pytest.raises(ValueError) as info:
            GroundingSwitch(on_reject=bad)
        assert isinstance(info.value, PolicyError)
        assert "on_reject" in str(info.value)
        assert "fallback" in str(info.value)


class TestConstruction:
    def test_inverted_sgi_thresholds_raise(self):
        with pytest.raises(ValueError) as info:
            GroundingSwitch(accept_threshold_sgi=0.9, reject_threshold_sgi=1.0)
        assert isinstance(info.value, PolicyError)
        assert "reject_threshold_sgi" in str(info.value)

    def test_equal_thresholds_leave_no_middle_band(self):
        switch = GroundingSwitch(accept_threshold_sgi=1.0, reject_threshold_sgi=1.0)
        assert switch.decide(sgi(1.0)).action is SwitchAction.ACCEPT
        assert switch.decide(sgi(below(1.0))).action is SwitchAction.FALLBACK

    @pytest.mark.parametrize("bad", [1.5, -1.5, math.nan])
    def test_dgi_threshold_outside_a_cosine_raises(self, bad):
        with pytest.raises(PolicyError):
            GroundingSwitch(accept_threshold_dgi=bad)

    @pytest.mark.parametrize(
        ("strong", "review"), [(-math.inf, -math.inf), (1.2, -math.inf), (math.inf, math.inf)]
    )
    def test_thresholds_must_be_finite(self, strong, review):
        # An infinite cut silently disables a zone (sgi_review = -inf never rejects); only
        # sgi_strong_pass = inf is allowed, as the explicit "accept nothing"
        # (tests/unit/test_accept_nothing.py).
        with pytest.raises(PolicyError) as info:
            Thresholds(sgi_strong_pass=strong, sgi_review=review)
        assert "thresholds." in str(info.value)

    def test_custom_thresholds(self):
        switch = GroundingSwitch(1.5, 1.0, 0.7, on_reject="reject")
        assert switch.decide(sgi(1.5)).action is SwitchAction.ACCEPT
        assert switch.decide(sgi(1.2)).action is SwitchAction.ESCALATE
        assert switch.decide(sgi(below(1.0))).action is SwitchAction.REJECT
        assert switch.decide(dgi(0.7)).action is SwitchAction.ACCEPT
        assert switch.decide(dgi(0.6)).action is SwitchAction.REJECT

    def test_repr_names_the_settings(self):
        text = repr(GroundingSwitch(on_reject="regenerate"))
        assert "regenerate" in text and "1.2" in text


class TestDecisionRecord:
    def test_write_to_state_only_for_accept(self):
        for name in ON_REJECT:
            switch = GroundingSwitch(on_reject=name)
            for score in [sgi(v / 20) for v in range(0, 40)] + [
                dgi(v / 10) for v in range(-10, 11)
            ]:
                decision = switch.decide(score)
                assert decision.write_to_state is (decision.action is SwitchAction.ACCEPT)

    def test_call_equals_decide(self):
        switch = GroundingSwitch()
        for score in (sgi(1.3), sgi(1.0), sgi(0.2), dgi(0.6), dgi(0.1)):
            assert switch(score) == switch.decide(score)

    def test_decision_fields(self):
        score = sgi(1.3)
        decision = GroundingSwitch().decide(score)
        assert isinstance(decision, SwitchDecision)
        assert decision.score == 1.3
        assert decision.method == "sgi"
        assert decision.level == "ok"
        assert decision.check == check(score)
        assert decision.reason

    def test_reject_reason_names_on_reject(self):
        decision = GroundingSwitch(on_reject="regenerate").decide(sgi(0.1))
        assert "regenerate" in decision.reason
        assert decision.level == "risk"

    def test_dgi_decision_method(self):
        decision = GroundingSwitch().decide(dgi(0.9))
        assert decision.method == "dgi"
        assert decision.level == "ok"


class TestNonGeometricAndFlagged:
    def consistency_check(self, level: Level = Level.OK) -> Check:
        return Check("Consistent", level, "samples agree", "5/5", "selfcheck_nli", 0.99, False)

    @pytest.mark.parametrize("level", list(Level))
    @pytest.mark.parametrize("name", ON_REJECT)
    def test_non_geometric_check_escalates(self, level, name):
        decision = GroundingSwitch(on_reject=name).decide(self.consistency_check(level))
        assert decision.action is SwitchAction.ESCALATE
        assert decision.write_to_state is False
        assert decision.method == "selfcheck_nli"
        assert "selfcheck_nli" in decision.reason

    @pytest.mark.parametrize("name", ON_REJECT)
    def test_flagged_sgi_escalates(self, name):
        flagged = SGIResult(0.0, 0.0, 0.0, -1, 1, flagged=True, flag_reason="response is zero")
        decision = GroundingSwitch(on_reject=name).decide(flagged)
        assert decision.action is SwitchAction.ESCALATE
        assert decision.write_to_state is False
        assert decision.level == "review"

    def test_flagged_dgi_escalates(self):
        flagged = DGIResult(0.9, 0.0, flagged=True, flag_reason="identical embeddings")
        decision = GroundingSwitch().decide(flagged)
        assert decision.action is SwitchAction.ESCALATE
        assert decision.write_to_state is False

    def test_flagged_high_value_still_escalates(self):
        flagged = SGIResult(5.0, 0.0, 0.0, -1, 1, flagged=True, flag_reason="bad")
        assert action(flagged) is SwitchAction.ESCALATE

    def test_geometric_check_is_rederived_under_the_switch_thresholds(self):
        verdict = check(sgi(1.1))  # review under the seed's cuts
        assert verdict.level is Level.REVIEW
        lenient = GroundingSwitch(accept_threshold_sgi=1.05, reject_threshold_sgi=0.9)
        assert lenient.decide(verdict).action is SwitchAction.ACCEPT
        assert GroundingSwitch().decide(verdict).action is SwitchAction.ESCALATE

    def test_flagged_check_stays_escalated(self):
        verdict = check(SGIResult(0.0, 0.0, 0.0, -1, 1, flagged=True, flag_reason="nan"))
        assert GroundingSwitch().decide(verdict).action is SwitchAction.ESCALATE


scores = st.floats(-2.0, 12.0, allow_nan=False, allow_infinity=False)
cuts = st.tuples(st.floats(0.1, 3.0, allow_nan=False), st.floats(0.1, 3.0, allow_nan=False)).map(
    sorted
)
dgi_cuts = st.floats(-1.0, 1.0, allow_nan=False)


class TestAgreesWithCheck:
    @pytest.mark.parametrize("name", ON_REJECT)
    def test_grid_under_custom_thresholds(self, name):
        t = Thresholds(sgi_strong_pass=1.4, sgi_review=0.8, dgi_pass=0.3)
        switch = GroundingSwitch.from_thresholds(t, on_reject=name)
        assert switch.thresholds.sgi_strong_pass == 1.4
        assert switch.on_reject is SwitchAction(name)
        for i in range(0, 301):
            for score in (sgi(i / 100), dgi(i / 150 - 1)):
                verdict = check(score, t)
                decision = switch.decide(score)
                assert decision.check == verdict
                expected = {
                    Level.OK: SwitchAction.ACCEPT,
                    Level.REVIEW: SwitchAction.ESCALATE,
                    Level.RISK: SwitchAction(name),
                }[verdict.level]
                assert decision.action is expected

    @settings(max_examples=300, deadline=None)
    @given(value=scores, pair=cuts, dgi_pass=dgi_cuts, name=st.sampled_from(ON_REJECT))
    def test_accept_iff_check_is_ok(self, value, pair, dgi_pass, name):
        review, strong = pair
        t = Thresholds(sgi_strong_pass=strong, sgi_review=review, dgi_pass=dgi_pass)
        switch = GroundingSwitch.from_thresholds(t, on_reject=name)
        for score in (sgi(value), dgi(max(-1.0, min(1.0, value / 6)))):
            verdict = check(score, t)
            decision = switch(score)
            assert (decision.action is SwitchAction.ACCEPT) == (verdict.level is Level.OK)
            assert decision.write_to_state == (verdict.level is Level.OK)
            assert decision.level == verdict.level.value

    @settings(max_examples=200, deadline=None)
    @given(value=scores)
    def test_decides_the_same_on_the_score_read_back_from_the_wire(self, value):
        # The geometry stage writes the score onto the envelope and the switch decides on
        # what it reads back: a field lost on the way (a flag) would change the decision.
        for score in (
            sgi(value),
            SGIResult(value, 0.5, 0.4, 1, 1, flagged=True, flag_reason="flag"),
        ):
            read_back = SGIResult(**score.to_dict())
            assert GroundingSwitch().decide(read_back) == GroundingSwitch().decide(score)

    @settings(max_examples=200, deadline=None)
    @given(a=scores, b=scores)
    def test_monotone_in_sgi(self, a, b):
        rank = {SwitchAction.FALLBACK: 0, SwitchAction.ESCALATE: 1, SwitchAction.ACCEPT: 2}
        low, high = sorted((a, b))
        assert rank[action(sgi(low))] <= rank[action(sgi(high))]


class TestPublicSwitchWithTheSeedCuts:
    """Issue 22: `pipeline.GroundingSwitch()` defaults to the fitted policy; given the seed's
    documented cuts (the README's worked example) it routes exactly as the seed says."""

    def test_the_seed_zones_at_their_cuts(self):
        import pipeline

        switch = pipeline.GroundingSwitch(
            accept_threshold_sgi=1.20, reject_threshold_sgi=0.95, accept_threshold_dgi=0.525
        )
        assert switch.decide(sgi(1.20)).action is SwitchAction.ACCEPT
        assert switch.decide(sgi(below(1.20))).action is SwitchAction.ESCALATE
        assert switch.decide(sgi(0.95)).action is SwitchAction.ESCALATE
        assert switch.decide(sgi(below(0.95))).action is SwitchAction.FALLBACK
        assert switch.decide(dgi(0.525)).action is SwitchAction.ACCEPT
        assert switch.decide(dgi(below(0.525))).action is SwitchAction.FALLBACK
        assert switch.decide(sgi(1.293)).write_to_state is True  # the worked example's
        assert switch.decide(sgi(1.106)).action is SwitchAction.ESCALATE  # its made-up answer

    def test_the_default_is_the_fitted_policy_not_the_seed(self):
        import pipeline

        fitted = pipeline.GroundingSwitch().thresholds
        assert fitted == pipeline.default_policy().thresholds
        assert fitted.sgi_review > 1.293  # why the worked example falls back there
        assert pipeline.GroundingSwitch().decide(sgi(1.293)).action is SwitchAction.FALLBACK

    def test_fit_thresholds_is_importable_where_the_readme_says(self):
        from pipeline.fit import fit_thresholds

        assert callable(fit_thresholds)
