"""observe_outcome: how a later stage's final outcome latches a session's turn."""

from __future__ import annotations

from pipeline.policy.sessions import SessionState, observe_outcome

AT_TURN_2 = SessionState(turn=2)


def test_an_outcome_that_reached_state_changes_nothing():
    assert observe_outcome(AT_TURN_2, 2, escalated=False) is AT_TURN_2


def test_an_escalation_on_the_current_turn_latches_it():
    assert observe_outcome(AT_TURN_2, 2, escalated=True) == SessionState(2, True, 2)


def test_an_escalation_on_a_later_turn_moves_the_session_there_and_latches():
    assert observe_outcome(AT_TURN_2, 3, escalated=True) == SessionState(3, True, 3)


def test_a_late_escalation_for_an_earlier_turn_is_ignored():
    # The session has moved on: a slow judge finishing turn 1 must not latch turn 2.
    assert observe_outcome(AT_TURN_2, 1, escalated=True) is AT_TURN_2


def test_a_latched_session_keeps_the_turn_it_latched_at():
    latched = SessionState(2, True, 2)
    assert observe_outcome(latched, 3, escalated=True) is latched


def test_a_fresh_session_latches_its_first_escalated_turn():
    assert observe_outcome(SessionState(), 0, escalated=True) == SessionState(0, True, 0)


def test_the_latch_survives_the_state_round_trip():
    latched = observe_outcome(AT_TURN_2, 2, escalated=True)
    assert SessionState.from_dict(latched.to_dict()) == latched
