"""Circuit breaker for one external endpoint (routing controls, seed 003).

A breaker keeps a broken judge or sampling endpoint from stalling every candidate: after
`threshold` consecutive breaker failures (transport errors, timeouts, HTTP 502/503/504)
it opens and calls fail fast; after `cooldown_seconds` exactly one trial call is let
through (half-open). A successful trial closes the breaker, a failed one re-opens it
with a fresh `opened_at`.

Pure and immutable: every function takes a `BreakerState` and returns a new one; time is
the caller's `now` (seconds, monotonic). The I/O shell (`workers/clients/llm.py`) holds
the current state and calls `allow` before, and `on_success`/`on_failure` after, a call.

Failure posture: an open breaker refuses, and the caller treats the refusal like any
other unavailable verifier (fail closed: never accept). Client errors (400, 422, other
4xx) prove the endpoint is up, so they do not count towards opening.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum

from pipeline.bounds.validation import config_from_table, finite
from pipeline.errors import PolicyError

BREAKER_HTTP_STATUSES = frozenset({502, 503, 504})
"""HTTP statuses that count as breaker failures: the endpoint (or its proxy) is down."""

BREAKER_FAILURE_KINDS = frozenset({"timeout", "transport"})
"""Call kinds that count as breaker failures whatever the status."""


class BreakerStatus(StrEnum):
    """Where the breaker stands; a str so it goes into JSON and logs unchanged."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True, slots=True)
class BreakerConfig:
    """How many consecutive failures open the breaker, and how long it stays open."""

    threshold: int = 5
    cooldown_seconds: float = 30.0

    def __post_init__(self) -> None:
        if isinstance(self.threshold, bool) or not isinstance(self.threshold, int):
            raise PolicyError("breaker.threshold", self.threshold, "an integer >= 1")
        if self.threshold < 1:
            raise PolicyError("breaker.threshold", self.threshold, "an integer >= 1")
        expected = "a finite number of seconds > 0"
        cooldown = finite(self.cooldown_seconds, "breaker.cooldown_seconds", expected)
        if cooldown <= 0:
            raise PolicyError("breaker.cooldown_seconds", cooldown, expected)
        object.__setattr__(self, "cooldown_seconds", cooldown)

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, object]) -> BreakerConfig:
        """A config from policy keys `threshold` and `cooldown_seconds`; unknown keys fail."""
        return config_from_table(cls, "breaker", mapping)


@dataclass(frozen=True, slots=True)
class BreakerState:
    """One endpoint's breaker.

    `failures` counts consecutive breaker failures; `opened_at` is when it last opened
    (None while closed). In half-open, `trial_started_at` is when the single trial was
    let through; while it is outstanding every other call is refused.
    """

    status: BreakerStatus = BreakerStatus.CLOSED
    failures: int = 0
    opened_at: float | None = None
    trial_started_at: float | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "status": self.status.value,
            "failures": self.failures,
            "opened_at": self.opened_at,
            "trial_started_at": self.trial_started_at,
        }


CLOSED = BreakerState()
"""A fresh, closed breaker."""


def allow(state: BreakerState, config: BreakerConfig, now: float) -> tuple[bool, BreakerState]:
    """Whether a call may go out now, and the state to keep.

    Closed: always. Open: refused until `cooldown_seconds` after `opened_at`, then the
    breaker turns half-open and this one call is the trial. Half-open: refused while the
    trial is outstanding; a trial that never reported back within another cooldown is
    presumed lost (its caller was cancelled) and a new trial is let through.
    """
    if state.status is BreakerStatus.CLOSED:
        return True, state
    if state.status is BreakerStatus.OPEN:
        opened_at = state.opened_at if state.opened_at is not None else now
        if now - opened_at >= config.cooldown_seconds:
            return True, replace(state, status=BreakerStatus.HALF_OPEN, trial_started_at=now)
        return False, state
    started = state.trial_started_at if state.trial_started_at is not None else now
    if now - started >= config.cooldown_seconds:
        return True, replace(state, trial_started_at=now)
    return False, state


def on_success(state: BreakerState) -> BreakerState:
    """A call succeeded (or failed in a way that proves the endpoint is up): close."""
    return CLOSED


def on_failure(state: BreakerState, config: BreakerConfig, now: float) -> BreakerState:
    """A breaker failure: count it; open at the threshold; a failed trial re-opens."""
    failures = state.failures + 1
    if state.status is BreakerStatus.HALF_OPEN:
        return BreakerState(BreakerStatus.OPEN, failures, now, None)
    if state.status is BreakerStatus.OPEN:
        # A call let out before the breaker opened failed late: keep the original window.
        return replace(state, failures=failures)
    if failures >= config.threshold:
        return BreakerState(BreakerStatus.OPEN, failures, now, None)
    return replace(state, failures=failures)


def abandon_trial(state: BreakerState) -> BreakerState:
    """The half-open trial was cancelled before it reported: let the next call try again."""
    if state.status is BreakerStatus.HALF_OPEN:
        return replace(state, status=BreakerStatus.OPEN, trial_started_at=None)
    return state


def is_breaker_failure(status: int | None, kind: str) -> bool:
    """Whether a finished call counts towards opening the breaker.

    Transport errors and timeouts count, and so do HTTP 502/503/504. 400, 422 and every
    other 4xx are the caller's problem, not the endpoint's, and do not count; neither do
    other 5xx, a well-formed refusal from a live server.
    """
    if kind in BREAKER_FAILURE_KINDS:
        return True
    return status in BREAKER_HTTP_STATUSES
