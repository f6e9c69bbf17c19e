"""Circuit breaker: pure state transitions and their invariants."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.errors import PolicyError
from pipeline.policy.breaker import (
    CLOSED,
    BreakerConfig,
    BreakerState,
    BreakerStatus,
    abandon_trial,
    allow,
    is_breaker_failure,
    on_failure,
    on_success,
)

CFG = BreakerConfig(threshold=3, cooldown_seconds=30.0)


def fail_n(n: int, state: BreakerState = CLOSED, now: float = 0.0) -> BreakerState:
    for _ in range(n):
        state = on_failure(state, CFG, now)
    return state


class TestOpening:
    def test_opens_after_threshold_consecutive_failures(self):
        state = fail_n(2)
        assert state.status is BreakerStatus.CLOSED and state.failures == 2
        state = on_failure(state, CFG, 5.0)
        assert state.status is BreakerStatus.OPEN
        assert state.opened_at == 5.0

    def test_success_resets_the_count(self):
        state = on_success(fail_n(2))
        assert on_failure(state, CFG, 0.0).status is BreakerStatus.CLOSED

    def test_closed_always_allows(self):
        ok, state = allow(fail_n(2), CFG, 0.0)
        assert ok and state.status is BreakerStatus.CLOSED

    def test_open_refuses_before_cooldown(self):
        state = fail_n(3, now=100.0)
        ok, same = allow(state, CFG, 129.999)
        assert not ok and same == state

    def test_late_failure_while_open_keeps_the_window(self):
        state = fail_n(3, now=100.0)
        state = on_failure(state, CFG, 120.0)
        assert state.opened_at == 100.0


class TestHalfOpen:
    def test_one_trial_after_cooldown(self):
        state = fail_n(3, now=100.0)
        ok, state = allow(state, CFG, 130.0)
        assert ok and state.status is BreakerStatus.HALF_OPEN
        ok2, state = allow(state, CFG, 130.1)
        assert not ok2  # the trial is outstanding
        ok3, _ = allow(state, CFG, 150.0)
        assert not ok3

    def test_good_trial_closes(self):
        _, state = allow(fail_n(3, now=0.0), CFG, 30.0)
        state = on_success(state)
        assert state == CLOSED
        assert allow(state, CFG, 30.0)[0]

    def test_failed_trial_reopens_with_new_opened_at(self):
        _, state = allow(fail_n(3, now=0.0), CFG, 31.0)
        state = on_failure(state, CFG, 32.0)
        assert state.status is BreakerStatus.OPEN
        assert state.opened_at == 32.0
        assert not allow(state, CFG, 61.9)[0]
        assert allow(state, CFG, 62.0)[0]

    def test_abandoned_trial_lets_the_next_call_try(self):
        _, state = allow(fail_n(3, now=0.0), CFG, 30.0)
        state = abandon_trial(state)
        assert state.status is BreakerStatus.OPEN
        ok, state = allow(state, CFG, 30.5)
        assert ok and state.status is BreakerStatus.HALF_OPEN

    def test_lost_trial_is_replaced_after_another_cooldown(self):
        _, state = allow(fail_n(3, now=0.0), CFG, 30.0)
        assert not allow(state, CFG, 59.9)[0]
        assert allow(state, CFG, 60.0)[0]


class TestFailureKinds:
    @pytest.mark.parametrize(
        ("status", "kind"),
        [
            (None, "timeout"),
            (None, "transport"),
            (502, "http_error"),
            (503, "http_error"),
            (504, "http_error"),
        ],
    )
    def test_counts(self, status, kind):
        assert is_breaker_failure(status, kind)

    @pytest.mark.parametrize(
        ("status", "kind"),
        [
            (400, "http_error"),
            (401, "http_error"),
            (404, "http_error"),
            (422, "http_error"),
            (429, "http_error"),
            (500, "http_error"),
            (200, "ok"),
            (200, "malformed"),
            (None, "breaker_open"),
        ],
    )
    def test_does_not_count(self, status, kind):
        assert not is_breaker_failure(status, kind)


class TestConfig:
    @pytest.mark.parametrize(
        ("kwargs", "field"),
        [
            ({"threshold": 0}, "breaker.threshold"),
            ({"threshold": 2.5}, "breaker.threshold"),
            ({"threshold": True}, "breaker.threshold"),
            ({"cooldown_seconds": 0}, "breaker.cooldown_seconds"),
            ({"cooldown_seconds": float("inf")}, "breaker.cooldown_seconds"),
        ],
    )
    def test_invalid(self, kwargs, field):
        with pytest.raises(PolicyError) as err:
            BreakerConfig(**kwargs)
        assert err.value.field == field

    def test_from_mapping_unknown_key(self):
        with pytest.raises(PolicyError) as err:
            BreakerConfig.from_mapping({"cooldown": 3})
        assert err.value.field == "breaker.cooldown"


# --- properties -------------------------------------------------------------------------

events = st.lists(
    st.tuples(
        st.sampled_from(["allow", "success", "failure", "abandon"]),
        st.floats(min_value=0.0, max_value=20.0, allow_nan=False),
    ),
    max_size=60,
)


def never_allows_while_open_before_cooldown(
    before: BreakerState, allowed: bool, now: float, config: BreakerConfig
) -> bool:
    if before.status is BreakerStatus.OPEN and before.opened_at is not None:
        return not (allowed and now - before.opened_at < config.cooldown_seconds)
    return True


def at_most_one_trial_outstanding(before: BreakerState, allowed: bool, now: float, config) -> bool:
    if before.status is BreakerStatus.HALF_OPEN and before.trial_started_at is not None:
        return not (allowed and now - before.trial_started_at < config.cooldown_seconds)
    return True


@settings(max_examples=300, deadline=None)
@given(
    threshold=st.integers(1, 6),
    cooldown=st.floats(min_value=0.5, max_value=40.0, allow_nan=False),
    script=events,
)
def test_invariants_hold_for_any_sequence(threshold, cooldown, script):
    config = BreakerConfig(threshold, cooldown)
    state, now = CLOSED, 0.0
    for event, step in script:
        now += step  # monotonic clock
        if event == "allow":
            allowed, after = allow(state, config, now)
            assert never_allows_while_open_before_cooldown(state, allowed, now, config)
            assert at_most_one_trial_outstanding(state, allowed, now, config)
            state = after
        elif event == "success":
            state = on_success(state)
            assert state.status is BreakerStatus.CLOSED and state.failures == 0
        elif event == "failure":
            state = on_failure(state, config, now)
            assert state.status is BreakerStatus.CLOSED or state.opened_at is not None
            if state.status is BreakerStatus.CLOSED:
                assert state.failures < threshold
        else:
            state = abandon_trial(state)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 10), st.floats(min_value=0.0, max_value=1e6, allow_nan=False))
def test_opens_exactly_at_threshold(threshold, now):
    config = BreakerConfig(threshold, 30.0)
    state = CLOSED
    for i in range(threshold):
        assert state.status is BreakerStatus.CLOSED, i
        state = on_failure(state, config, now)
    assert state.status is BreakerStatus.OPEN
    assert not allow(state, config, now)[0]
