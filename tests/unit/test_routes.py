"""The routing table: every stage verdict has one destination, and modes serve it safely."""

from __future__ import annotations

import pytest

from pipeline.judge.question import JudgeVerdict
from pipeline.policy.routing import Mode
from pipeline.rungs.grounding_switch import SwitchAction
from pipeline.stages.review import HumanVerdict
from topics.names import TERMINAL, Topic
from workers.interfaces import EndpointConfig
from workers.runtime.ladder import LADDER, judge, sampler
from workers.runtime.settings import Settings
from workers.stages.routes import HOLD, KILL_SWITCH, ROUTES, SAFE_PATH, route, served

# The terminal writer concludes nothing itself: it has no verdicts and no row.
STAGE_VERDICTS = {row.name: set(row.verdicts) for row in LADDER if row.verdicts} | {
    "review": set(HumanVerdict)
}
NON_TERMINAL = [t for t in Topic if t not in TERMINAL]


class TestTable:
    @pytest.mark.parametrize("stage", sorted(STAGE_VERDICTS))
    def test_every_verdict_of_every_stage_has_a_row_and_no_row_is_orphaned(self, stage):
        assert set(ROUTES[stage]) == STAGE_VERDICTS[stage]

    def test_no_row_for_a_stage_that_does_not_exist(self):
        assert set(ROUTES) == set(STAGE_VERDICTS)

    def test_every_destination_is_terminal_or_read_by_a_stage(self):
        read = {Topic.SCORED, Topic.CONSISTENCY, Topic.JUDGE, Topic.RULES}
        for stage, rows in ROUTES.items():
            for verdict, topic in rows.items():
                assert topic in TERMINAL or topic in read, (stage, verdict, topic)

    def test_only_rules_reach_state(self):
        to_state = {
            (stage, verdict)
            for stage, rows in ROUTES.items()
            for verdict, topic in rows.items()
            if topic is Topic.STATE
        }
        assert to_state == {("rules", "pass")}

    @pytest.mark.parametrize("stage", sorted(set(ROUTES) - {"review"}))
    def test_every_automatic_gate_holds_for_a_person(self, stage):
        assert route(stage, HOLD) is Topic.REVIEW

    def test_escalate_climbs_the_ladder_at_the_switch_and_ends_with_a_person_at_the_judge(self):
        assert route("switch", SwitchAction.ESCALATE) is Topic.CONSISTENCY
        assert route("judge", JudgeVerdict.UNSURE) is Topic.REVIEW
        assert route("judge", JudgeVerdict.YES) is Topic.RULES
        with pytest.raises(KeyError):  # a judge does not accept: a yes goes on to rules
            route("judge", SwitchAction.ACCEPT)

    def test_the_kill_switch_row_turns_only_state_into_review(self):
        assert dict(KILL_SWITCH) == {Topic.STATE: Topic.REVIEW}

    @pytest.mark.parametrize(
        ("action", "topic"),
        [
            (SwitchAction.FALLBACK, Topic.FALLBACK),
            (SwitchAction.REGENERATE, Topic.REGENERATE),
            (SwitchAction.REJECT, Topic.REJECT),
        ],
    )
    @pytest.mark.parametrize("stage", ["switch", "judge"])
    def test_on_reject_actions_end_in_their_escalation_topic(self, stage, action, topic):
        assert route(stage, action) is topic

    def test_a_person_s_accept_still_passes_rules(self):
        assert route("review", HumanVerdict.ACCEPT) is Topic.RULES
        assert route("review", HumanVerdict.REJECT) is Topic.REJECT

    def test_unknown_pair_is_an_error(self):
        with pytest.raises(KeyError):
            route("rules", SwitchAction.ACCEPT)


class TestServed:
    @pytest.mark.parametrize("decided", TERMINAL)
    @pytest.mark.parametrize("mode", [Mode.OFF, Mode.SHADOW])
    def test_off_and_shadow_serve_the_safe_path(self, mode, decided):
        assert served(mode, decided) is SAFE_PATH is Topic.FALLBACK

    @pytest.mark.parametrize("decided", TERMINAL)
    @pytest.mark.parametrize("mode", [Mode.EVALUATE, Mode.ACTIVE])
    def test_evaluate_and_active_serve_the_decision(self, mode, decided):
        assert served(mode, decided) is decided

    @pytest.mark.parametrize("decided", NON_TERMINAL)
    @pytest.mark.parametrize("mode", list(Mode))
    def test_a_candidate_still_on_the_ladder_moves_on_as_decided(self, mode, decided):
        assert served(mode, decided) is decided


def test_terminal_set_in_display_order():
    assert [t.value for t in TERMINAL] == [
        "state",
        "escalations.fallback",
        "escalations.regenerate",
        "escalations.reject",
        "escalations.review",
        "deadletter",
    ]


def test_the_ladder_hands_each_stage_its_own_endpoint_config():
    settings = Settings(
        sampler_url="http://127.0.0.1:1/v1",
        sampler_model="s-model",
        sampler_timeout=3.0,
        sampler_api_key="s-key",
        judge_url="http://127.0.0.1:2/v1",
        judge_model="j-model",
        judge_timeout=4.0,
        judge_api_key="j-key",
    )
    assert sampler(settings) == EndpointConfig("http://127.0.0.1:1/v1", "s-model", 3.0, "s-key")
    assert judge(settings) == EndpointConfig("http://127.0.0.1:2/v1", "j-model", 4.0, "j-key")
