"""Same answer, same decision (issue 33): a score within float noise of a cut is named as
such by the switch, in its record, and by replay — never counted as a policy's change."""

from __future__ import annotations

from pipeline.bounds.thresholds import SCORE_EPSILON, Thresholds
from pipeline.rungs.grounding_switch import GroundingSwitch, SwitchAction
from pipeline.scores.grounding import LONG_FORM
from pipeline.scores.results import DGIResult, GroundingScore, SGIResult
from pipeline.trail.replay import RecordedTrail, compare, summarize

EPS = SCORE_EPSILON
CUTS = Thresholds(
    sgi_strong_pass=1.3,
    sgi_review=1.0,
    dgi_pass=0.5,
    grounding_accept=0.8,
    grounding_review=0.5,
    grounding_accept_long=0.9,
    grounding_review_long=0.6,
)
SWITCH = GroundingSwitch.from_thresholds(CUTS)


def grounding(p: float, long_form: bool = False) -> GroundingScore:
    return GroundingScore(p, SGIResult(1.0, 0.0, 0.0, 0, 1), {LONG_FORM: float(long_form)})


class TestNearCuts:
    def test_within_epsilon_of_the_deciding_cut(self):
        assert CUTS.near_cuts("grounding", 0.8 + EPS / 2) == ("grounding_accept",)
        assert CUTS.near_cuts("grounding", 0.5 - EPS / 2) == ("grounding_review",)
        assert CUTS.near_cuts("sgi", 1.3 - EPS / 2) == ("sgi_strong_pass",)
        assert CUTS.near_cuts("dgi", 0.5) == ("dgi_pass",)

    def test_at_epsilon_or_beyond_is_not_near(self):
        assert CUTS.near_cuts("grounding", 0.8 + 1.01 * EPS) == ()
        assert CUTS.near_cuts("sgi", 1.0 - 2 * EPS) == ()

    def test_long_form_answers_are_measured_against_their_own_cuts(self):
        assert CUTS.near_cuts("grounding", 0.9, long_form=True) == ("grounding_accept_long",)
        assert CUTS.near_cuts("grounding", 0.8, long_form=True) == ()

    def test_other_methods_have_no_cut_here(self):
        assert CUTS.near_cuts("consistency", 0.8) == ()


class TestSwitchRecordsIt:
    def test_a_score_on_the_accept_cut_still_accepts_and_says_it_was_near(self):
        decision = SWITCH.decide(grounding(0.8 + EPS / 4))
        assert decision.action is SwitchAction.ACCEPT
        assert decision.near_cut == ("grounding_accept",)

    def test_a_clear_score_names_no_cut(self):
        assert SWITCH.decide(grounding(0.95)).near_cut == ()
        assert SWITCH.decide(SGIResult(1.0 - EPS / 2, 0.0, 0.0, 0, 1)).near_cut == ("sgi_review",)
        assert SWITCH.decide(DGIResult(0.9, 0.0)).near_cut == ()

    def test_long_form_p_grounded_near_its_cut(self):
        decision = SWITCH.decide(grounding(0.6 - EPS / 2, long_form=True))
        assert decision.near_cut == ("grounding_review_long",)


def switch_record(action: str, near: list[str] | None = None) -> dict:
    evidence: dict = {"check": "…"}
    if near:
        evidence["near_cut"] = near
    return {"candidate_id": "c1", "stage": "switch", "action": action, "evidence": evidence}


def outcome(action: str, topic: str) -> dict:
    return {"candidate_id": "c1", "stage": "outcome", "action": action, "topic": topic}


class TestReplayNamesIt:
    def test_a_flip_at_a_cut_is_not_counted_as_a_change(self):
        recorded = RecordedTrail(
            "c1",
            {"switch": switch_record("accept", ["grounding_accept"])},
            outcome("accept", "state"),
        )
        replayed = [switch_record("escalate"), outcome("review", "escalations.review")]
        change = compare(recorded, replayed, "c1")
        assert change.differs and not change.changed and change.near_cut_change
        assert change.near_cut == ("grounding_accept",)
        summary = summarize([change])
        assert (summary.changed, summary.near_cut) == (0, 1)
        assert summary.to_dict()["unchanged"] == 0

    def test_a_flip_away_from_any_cut_is_a_change(self):
        recorded = RecordedTrail(
            "c1", {"switch": switch_record("accept")}, outcome("accept", "state")
        )
        replayed = [switch_record("escalate"), outcome("review", "escalations.review")]
        change = compare(recorded, replayed, "c1")
        assert change.changed and not change.near_cut_change
        assert summarize([change]).changed == 1
