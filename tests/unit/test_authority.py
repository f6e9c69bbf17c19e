"""Who may overrule whom (pipeline.bounds.authority), what the rules hold under each acceptor,
and when the switch defers to a configured judge (pipeline.policy.deferral)."""

from __future__ import annotations

import pytest

from pipeline.bounds.authority import Authority, accepted_by, opinion_may_hold
from pipeline.bounds.thresholds import Thresholds
from pipeline.errors import PolicyError
from pipeline.policy.deferral import defer_to_judge, reader_score, veto_judge_yes
from pipeline.policy.routing import RouteConfig
from pipeline.rungs.grounding_switch import GroundingSwitch, SwitchAction
from pipeline.rungs.rule_checks import RuleInput, RulesAction, RulesConfig, evaluate_rules
from pipeline.scores.grounding import CLAIM_READER, GroundingModel
from pipeline.scores.results import GroundingScore, SGIResult

CONTEXT = ("Canberra is the capital city of Australia. Sydney is its largest city.",)
PARAPHRASE = "Australia's seat of government sits in Canberra, not in its biggest metropolis."
INVENTED = "Canberra was founded by Walter Burley Griffin in 1913."


def rules(response: str, accepter: Authority | None):
    inp = RuleInput("What is the capital of Australia?", CONTEXT, response)
    return evaluate_rules(inp, RulesConfig(), accepter)


class TestOrder:
    def test_person_over_judge_over_the_support_models(self) -> None:
        assert Authority.PERSON.outranks(Authority.JUDGE)
        for model in (Authority.GEOMETRY, Authority.CLAIM_SUPPORT, Authority.CONSISTENCY):
            assert Authority.JUDGE.outranks(model)
            assert not model.outranks(Authority.GEOMETRY)  # peers settle nothing alone

    @pytest.mark.parametrize(
        ("trail", "person", "expected"),
        [
            ([{"stage": "geometry"}, {"stage": "switch", "action": "accept"}], False, "geometry"),
            ([{"stage": "switch"}, {"stage": "consistency"}], False, "consistency"),
            ([{"stage": "switch"}, {"stage": "judge", "action": "accept"}], False, "judge"),
            ([{"stage": "judge"}, {"stage": "rules"}, {"stage": "review"}], True, "person"),
            ([], False, None),
            ([{"stage": "somewhere"}], False, None),
        ],
    )
    def test_the_acceptor_is_read_from_the_trail(self, trail, person, expected) -> None:
        found = accepted_by(trail, person)
        assert (None if found is None else found.value) == expected

    def test_an_unknown_acceptor_lets_opinions_hold(self) -> None:
        assert opinion_may_hold(1, None)
        assert opinion_may_hold(1, Authority.GEOMETRY)
        assert not opinion_may_hold(1, Authority.JUDGE)


class TestRulesUnderAnAcceptor:
    def test_coverage_holds_geometry_and_unknown_acceptors(self) -> None:
        for accepter in (None, Authority.GEOMETRY, Authority.CONSISTENCY):
            verdict = rules(PARAPHRASE, accepter)
            assert verdict.action is RulesAction.REVIEW
            assert "covers" in verdict.hits[0].message
            assert verdict.findings == ()

    def test_coverage_is_only_a_finding_under_the_judge_or_a_person(self) -> None:
        for accepter in (Authority.JUDGE, Authority.PERSON):
            verdict = rules(PARAPHRASE, accepter)
            assert verdict.action is RulesAction.PASS
            (finding,) = verdict.findings
            assert finding.rule == "source_support" and "covers" in finding.message
            assert verdict.to_dict()["findings"][0]["message"] == finding.message

    def test_numbers_and_names_absent_from_every_source_still_block_the_judge(self) -> None:
        verdict = rules(INVENTED, Authority.JUDGE)
        assert verdict.action is RulesAction.REVIEW
        blocked = {hit.span.text for hit in verdict.hits if hit.span is not None}
        assert {"1913", "Walter Burley Griffin"} <= blocked

    def test_no_findings_key_when_there_are_none(self) -> None:
        assert "findings" not in rules("Canberra", Authority.JUDGE).to_dict()


def decide(p: float):
    thresholds = Thresholds(grounding_accept=0.8, grounding_review=0.6)
    switch = GroundingSwitch.from_thresholds(thresholds)
    return switch.decide(GroundingScore(p, SGIResult(1.0, 0.5, 0.5, 0, 1), {}))


JUDGING = RouteConfig(below_review_with_judge="judge", judge_accept_cut=0.95)


class TestDeferral:
    @pytest.mark.parametrize("p", [0.1, 0.7, 0.85, 0.99])
    def test_without_a_judge_the_switch_verdict_stands(self, p: float) -> None:
        assert defer_to_judge(decide(p), JUDGING, judge_available=False) is None

    def test_below_the_review_cut_goes_to_the_judge(self) -> None:
        decision = decide(0.1)
        assert decision.action is SwitchAction.FALLBACK
        assert "the judge decides" in defer_to_judge(decision, JUDGING, True)
        assert defer_to_judge(decision, RouteConfig(judge_accept_cut=0.95), True) is None

    def test_inconclusive_accepts_go_to_the_judge_conclusive_ones_do_not(self) -> None:
        assert decide(0.85).action is SwitchAction.ACCEPT
        assert "judge_accept_cut 0.950" in defer_to_judge(decide(0.85), JUDGING, True)
        assert defer_to_judge(decide(0.99), JUDGING, True) is None
        assert defer_to_judge(decide(0.85), RouteConfig(), True) is None

    def test_the_middle_zone_already_escalates(self) -> None:
        assert decide(0.7).action is SwitchAction.ESCALATE
        assert defer_to_judge(decide(0.7), JUDGING, True) is None


READING = RouteConfig(reader_accept_cut=0.7, reader_veto_cut=0.2)
WITH_READER = GroundingModel(("log_sgi", CLAIM_READER), (1.0, 2.0), 0.0)


def scored(reader: float) -> GroundingScore:
    return GroundingScore(0.9, SGIResult(1.0, 0.5, 0.5, 0, 1), {CLAIM_READER: reader})


class TestReaderGuards:
    """With a judge at hand, geometry and the claim reader must both be conclusive to skip
    it; and the reader's clear 'unsupported' holds the judge's yes for a person."""

    def test_the_reader_is_read_only_where_the_model_weighs_it(self) -> None:
        assert reader_score(scored(0.31), WITH_READER) == pytest.approx(0.31)
        ignoring = GroundingModel(("log_sgi", CLAIM_READER), (1.0, 0.0), 0.0)
        assert reader_score(scored(0.31), ignoring) is None  # never run: 0.0 is no reading
        assert reader_score(scored(0.31), None) is None
        assert reader_score(SGIResult(1.0, 0.5, 0.5, 0, 1), WITH_READER) is None

    def test_an_accept_the_reader_doubts_goes_to_the_judge(self) -> None:
        sure = decide(0.99)
        assert sure.action is SwitchAction.ACCEPT
        reason = defer_to_judge(sure, READING, True, reader=0.5)
        assert "reader_accept_cut 0.700" in reason and "0.500" in reason
        assert defer_to_judge(sure, READING, True, reader=0.9) is None
        assert defer_to_judge(sure, READING, True, reader=None) is None
        assert defer_to_judge(sure, READING, False, reader=0.5) is None  # no judge: stands

    def test_the_reader_never_sends_a_non_accept_to_the_judge(self) -> None:
        assert defer_to_judge(decide(0.7), READING, True, reader=0.0) is None

    def test_a_judge_yes_on_a_clearly_unsupported_claim_goes_to_a_person(self) -> None:
        reason = veto_judge_yes(0.05, READING)
        assert reason is not None and "reader_veto_cut 0.200" in reason
        assert veto_judge_yes(0.5, READING) is None
        assert veto_judge_yes(None, READING) is None
        assert veto_judge_yes(0.05, RouteConfig()) is None  # no cut set: the yes stands


class TestRouteSettings:
    def test_read_from_the_policy_table(self) -> None:
        route = RouteConfig.from_mapping(
            "default", {"below_review_with_judge": "judge", "judge_accept_cut": 0.9}
        )
        assert route.below_review_with_judge == "judge" and route.judge_accept_cut == 0.9
        assert RouteConfig.from_mapping("x", {}).judge_accept_cut is None

    @pytest.mark.parametrize(
        ("data", "field"),
        [
            ({"below_review_with_judge": "person"}, "routes.r.below_review_with_judge"),
            ({"below_review_with_judge": 1}, "routes.r.below_review_with_judge"),
            ({"judge_accept_cut": 1.5}, "routes.r.judge_accept_cut"),
            ({"judge_accept_cut": "0.9"}, "routes.r.judge_accept_cut"),
            ({"judge_accept_cut": True}, "routes.r.judge_accept_cut"),
            ({"reader_accept_cut": 2}, "routes.r.reader_accept_cut"),
            ({"reader_veto_cut": -0.1}, "routes.r.reader_veto_cut"),
            ({"reader_veto_cut": "low"}, "routes.r.reader_veto_cut"),
        ],
    )
    def test_invalid_settings_name_the_field(self, data: dict, field: str) -> None:
        with pytest.raises(PolicyError, match=field.replace(".", r"\.")):
            RouteConfig.from_mapping("r", data)
