"""Routing controls (seed 003): route config, deadlines, modes, and session holds."""

from __future__ import annotations

import pytest

from pipeline.errors import PolicyError
from pipeline.policy.routing import (
    ACTIVE_APPROVAL,
    Mode,
    RouteConfig,
    deadline_for,
    expired,
)
from pipeline.policy.sessions import SessionState, enter, leave
from pipeline.rungs.grounding_switch import SwitchAction


def policy_error(name: str, data: dict) -> PolicyError:
    with pytest.raises(PolicyError) as info:
        RouteConfig.from_mapping(name, data)
    return info.value


class TestRouteConfig:
    def test_defaults(self):
        route = RouteConfig.from_mapping("r", {})
        assert route.name == "r"
        assert route.mode is Mode.EVALUATE
        assert route.on_reject is SwitchAction.FALLBACK
        assert route.deadline_seconds is None
        assert route.latch_escalation is False

    def test_full_mapping(self):
        route = RouteConfig.from_mapping(
            "support",
            {
                "mode": "shadow",
                "deadline_seconds": 2,
                "on_reject": "regenerate",
                "latch_escalation": True,
                "breaker_threshold": 3,
                "breaker_cooldown_seconds": 5,
            },
        )
        assert route.mode is Mode.SHADOW
        assert route.deadline_seconds == 2.0
        assert route.on_reject is SwitchAction.REGENERATE
        assert route.latch_escalation is True
        assert route.breaker_threshold == 3
        assert route.breaker_cooldown_seconds == 5.0

    def test_unknown_key(self):
        err = policy_error("r", {"modes": "off"})
        assert err.field == "routes.r.modes"
        assert "routes.r.modes" in str(err)

    @pytest.mark.parametrize("mode", ["on", "ACTIVE", "", 1, None])
    def test_bad_mode(self, mode):
        err = policy_error("r", {"mode": mode})
        assert err.field == "routes.r.mode"
        for m in Mode:
            assert m.value in str(err)

    @pytest.mark.parametrize(
        "approval", [None, "", "yes", ACTIVE_APPROVAL.upper(), " " + ACTIVE_APPROVAL]
    )
    def test_active_needs_the_exact_approval(self, approval):
        data = {"mode": "active"}
        if approval is not None:
            data["active_approval"] = approval
        err = policy_error("prod", data)
        assert err.field == "routes.prod.active_approval"
        assert "routes.prod.active_approval" in str(err)
        assert ACTIVE_APPROVAL in str(err)

    def test_active_with_approval_starts(self):
        route = RouteConfig.from_mapping(
            "prod", {"mode": "active", "active_approval": ACTIVE_APPROVAL}
        )
        assert route.mode is Mode.ACTIVE

    def test_active_direct_construction_also_checked(self):
        with pytest.raises(PolicyError):
            RouteConfig(name="x", mode=Mode.ACTIVE)
        route = RouteConfig(name="x", mode=Mode.ACTIVE, active_approval=ACTIVE_APPROVAL)
        assert route.mode is Mode.ACTIVE

    def test_approval_is_ignored_outside_active(self):
        route = RouteConfig.from_mapping("r", {"mode": "shadow", "active_approval": "x"})
        assert route.mode is Mode.SHADOW
        assert route.active_approval == "x"

    def test_accept_is_not_an_on_reject(self):
        err = policy_error("r", {"on_reject": "accept"})
        assert err.field == "routes.r.on_reject"

    @pytest.mark.parametrize(
        ("key", "value"),
        [
            ("deadline_seconds", 0),
            ("deadline_seconds", -1),
            ("deadline_seconds", "5"),
            ("deadline_seconds", True),
            ("breaker_threshold", 0),
            ("breaker_threshold", True),
            ("breaker_threshold", 2.5),
            ("breaker_cooldown_seconds", -1),
            ("breaker_cooldown_seconds", 0),
            ("breaker_cooldown_seconds", "x"),
            ("latch_escalation", "yes"),
            ("latch_escalation", 1),
            ("active_approval", 5),
        ],
    )
    def test_bad_values_name_the_field(self, key, value):
        err = policy_error("r", {key: value})
        assert err.field == f"routes.r.{key}"

    def test_policy_error_is_a_value_error(self):
        with pytest.raises(ValueError):
            RouteConfig.from_mapping("r", {"mode": "nope"})


class TestDeadlines:
    def test_the_earlier_deadline_wins(self):
        route = RouteConfig(deadline_seconds=10)
        assert deadline_for(105.0, route, entered=100.0) == 105.0
        # A candidate cannot give itself longer than its route allows.
        assert deadline_for(500.0, route, entered=100.0) == 110.0

    def test_candidate_deadline_without_a_route_deadline(self):
        assert deadline_for(500.0, RouteConfig(), entered=100.0) == 500.0

    def test_route_default_from_entry(self):
        assert deadline_for(None, RouteConfig(deadline_seconds=2.5), entered=100.0) == 102.5

    def test_no_deadline(self):
        assert deadline_for(None, RouteConfig(), entered=100.0) is None

    def test_expired(self):
        assert expired(None, 1e12) is False
        assert expired(100.0, 99.999) is False
        assert expired(100.0, 100.0) is True
        assert expired(100.0, 100.001) is True


def route(**kwargs) -> RouteConfig:
    return RouteConfig(**kwargs)


def step(state, initiator, turn, r, escalated):
    """One step through the session gate: held?, then the state after its decision."""
    held, state = enter(state, initiator, turn, r)
    if not held:
        state = leave(state, escalated, turn)
    return held, state


class TestSessions:
    def test_fresh_session_is_not_held(self):
        held, state = enter(SessionState(), "user", 0, route())
        assert held is False
        assert state.turn == 0 and not state.latched

    def test_agent_step_after_escalated_user_step_is_held(self):
        r = route()
        _, state = step(SessionState(), "user", 1, r, escalated=True)
        assert state.latched and state.latched_at_turn == 1
        held, state = enter(state, "agent", 1, r)
        assert held is True
        held, _ = enter(state, "agent", 1, r)
        assert held is True

    def test_agent_step_after_accepted_user_step_is_not_held(self):
        r = route()
        _, state = step(SessionState(), "user", 1, r, escalated=False)
        held, _ = enter(state, "agent", 1, r)
        assert held is False

    def test_escalated_agent_step_holds_later_agent_steps(self):
        r = route()
        _, state = step(SessionState(), "user", 1, r, escalated=False)
        held, state = step(state, "agent", 1, r, escalated=True)
        assert held is False
        held, _ = enter(state, "agent", 1, r)
        assert held is True

    def test_next_user_turn_releases(self):
        r = route()
        _, state = step(SessionState(), "user", 1, r, escalated=True)
        held, state = enter(state, "user", 2, r)
        assert held is False
        assert not state.latched
        assert state.turn == 2
        held, _ = enter(state, "agent", 2, r)
        assert held is False

    def test_latch_escalation_keeps_the_hold_across_user_turns(self):
        r = route(latch_escalation=True)
        _, state = step(SessionState(), "user", 1, r, escalated=True)
        held, state = enter(state, "user", 2, r)
        assert held is True
        assert state.latched and state.latched_at_turn == 1
        held, state = enter(state, "agent", 2, r)
        assert held is True
        held, _ = enter(state, "user", 3, r)
        assert held is True

    def test_shadow_always_releases_at_the_next_user_turn(self):
        r = route(mode=Mode.SHADOW, latch_escalation=True)
        _, state = step(SessionState(), "user", 1, r, escalated=True)
        held, _ = enter(state, "agent", 1, r)
        assert held is True  # still held within the turn
        held, state = enter(state, "user", 2, r)
        assert held is False
        assert not state.latched

    def test_leave_does_not_relatch_or_move_latched_turn(self):
        state = SessionState(turn=3, latched=True, latched_at_turn=2)
        assert leave(state, True, 3) == state
        assert leave(SessionState(turn=3), False, 3) == SessionState(turn=3)

    def test_agent_step_keeps_the_highest_turn(self):
        _, state = enter(SessionState(turn=5), "agent", 4, route())
        assert state.turn == 5

    def test_state_round_trips_through_dict(self):
        state = SessionState(turn=4, latched=True, latched_at_turn=3)
        assert SessionState.from_dict(state.to_dict()) == state
        assert SessionState.from_dict(None) == SessionState()
        assert SessionState.from_dict({}) == SessionState()
