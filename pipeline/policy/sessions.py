"""Session and turn holds (seed 003, "Sessions").

`initiator = user` starts a turn; `agent` steps continue it. Once a step of a turn
escalates, later agent steps of that turn are held (reason `turn_latched`) until the next
user turn; with `latch_escalation` the hold survives user turns too, except in shadow mode,
which always releases at the next user turn. The state is a small JSON-ready dict kept per
session by the worker (a table changelogged to a compacted topic inside each batch's
transaction), passed in and returned here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.policy.routing import Mode, RouteConfig


@dataclass(frozen=True, slots=True)
class SessionState:
    turn: int = -1
    latched: bool = False
    latched_at_turn: int = -1

    def to_dict(self) -> dict[str, Any]:
        return {"turn": self.turn, "latched": self.latched, "latched_at_turn": self.latched_at_turn}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> SessionState:
        if not data:
            return cls()
        return cls(
            int(data.get("turn", -1)),
            bool(data.get("latched", False)),
            int(data.get("latched_at_turn", -1)),
        )


def enter(
    state: SessionState, initiator: str, turn: int, route: RouteConfig
) -> tuple[bool, SessionState]:
    """Whether this step is held, and the session state once it has arrived."""
    if initiator == "user":
        keep = state.latched and route.latch_escalation and route.mode is not Mode.SHADOW
        state = SessionState(turn, keep, state.latched_at_turn if keep else -1)
        return keep, state
    return state.latched, SessionState(max(state.turn, turn), state.latched, state.latched_at_turn)


def leave(state: SessionState, escalated: bool, turn: int) -> SessionState:
    """The state after a step was decided: an escalation latches the turn."""
    if escalated and not state.latched:
        return SessionState(state.turn, True, turn)
    return state


def observe_outcome(state: SessionState, turn: int, escalated: bool) -> SessionState:
    """Fold a later stage's final outcome into the session: a step that ended anywhere but
    `state` latches its turn, unless the session has already moved on to a later turn."""
    if not escalated or turn < state.turn or state.latched:
        return state
    return SessionState(turn, True, turn)
