"""The P(grounded) zones that the shipped policy routes on, in `check` and in the switch.

Cuts are deliberately not the seed's (0.7 / 0.4 instead of 0.8 / 0.5), so a test fails
if either function ignores the thresholds it is given. Each cut is probed exactly and
one float below it.
"""

from __future__ import annotations

import math

import pytest

from pipeline.bounds.thresholds import Thresholds
from pipeline.rungs.grounding_switch import GroundingSwitch, SwitchAction
from pipeline.scores.check import Level, check
from pipeline.scores.results import GroundingScore, SGIResult

CUTS = Thresholds(grounding_accept=0.7, grounding_review=0.4)
SGI = SGIResult(1.3, 1.0, 0.77, 0, 1)


def below(cut: float) -> float:
    """The largest float under `cut`: the first value on the other side of it."""
    return math.nextafter(cut, -math.inf)


def p(value: float) -> GroundingScore:
    return GroundingScore(value, SGI, {"sgi": SGI.value})


ZONES = [
    (1.0, Level.OK, SwitchAction.ACCEPT),
    (0.7, Level.OK, SwitchAction.ACCEPT),
    (below(0.7), Level.REVIEW, SwitchAction.ESCALATE),
    (0.4, Level.REVIEW, SwitchAction.ESCALATE),
    (below(0.4), Level.RISK, SwitchAction.REGENERATE),
    (0.0, Level.RISK, SwitchAction.REGENERATE),
]


class TestCheck:
    @pytest.mark.parametrize(("value", "level", "_action"), ZONES)
    def test_zone(self, value, level, _action):
        verdict = check(p(value), CUTS)
        assert verdict.level is level
        assert verdict.method == "grounding"
        assert verdict.score == value
        assert verdict.escalate is (level is Level.REVIEW)

    def test_detail_names_the_cuts_it_used(self):
        assert check(p(0.9), CUTS).detail == "P(grounded) 0.900 >= accept 0.7"
        assert check(p(0.5), CUTS).detail == "P(grounded) 0.500 in [0.4, 0.7)"
        assert check(p(0.1), CUTS).detail == "P(grounded) 0.100 < review 0.4"

    def test_the_sgi_inside_does_not_decide(self):
        # The SGI 1.3 would pass the SGI cut; the grounding score alone decides.
        assert check(p(0.1), CUTS).level is Level.RISK

    def test_flagged_score_escalates_whatever_its_value(self):
        flagged = GroundingScore(0.99, SGI, {}, flagged=True, flag_reason="empty response")
        verdict = check(flagged, CUTS)
        assert verdict.level is Level.REVIEW and verdict.escalate
        assert verdict.detail == "empty response"


class TestSwitch:
    @pytest.mark.parametrize(("value", "level", "action"), ZONES)
    def test_zone(self, value, level, action):
        decision = GroundingSwitch.from_thresholds(CUTS, on_reject="regenerate").decide(p(value))
        assert decision.action is action
        assert decision.level == level.value
        assert decision.method == "grounding"
        assert decision.write_to_state is (action is SwitchAction.ACCEPT)
        assert decision.check == check(p(value), CUTS)

    @pytest.mark.parametrize("on_reject", ["fallback", "reject", "regenerate", "escalate"])
    def test_below_review_takes_the_on_reject(self, on_reject):
        switch = GroundingSwitch.from_thresholds(CUTS, on_reject=on_reject)
        decision = switch.decide(p(below(0.4)))
        assert decision.action is SwitchAction(on_reject)
        assert decision.write_to_state is False
        assert f"on_reject={on_reject}" in decision.reason

    def test_flagged_score_escalates(self):
        flagged = GroundingScore(0.99, SGI, {}, flagged=True, flag_reason="empty response")
        decision = GroundingSwitch.from_thresholds(CUTS).decide(flagged)
        assert decision.action is SwitchAction.ESCALATE
        assert decision.write_to_state is False

    @pytest.mark.parametrize(("value", "_level", "action"), ZONES)
    def test_a_check_made_under_other_cuts_is_rechecked(self, value, _level, action):
        # A verdict from the seed's cuts (0.8 / 0.5) is re-derived under the switch's own.
        seed_verdict = check(p(value), Thresholds())
        switch = GroundingSwitch.from_thresholds(CUTS, on_reject="regenerate")
        assert switch.decide(seed_verdict).action is action
