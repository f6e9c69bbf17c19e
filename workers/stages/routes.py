"""The routing table: every stage's verdict → the topic it sends a candidate to, and the
mode handling that decides where that destination is actually served.

It lives here, beside the stage adapters, because it joins two vocabularies that must
not know each other: `pipeline/` (the verdicts: `SwitchAction`, `RulesAction`,
`HumanVerdict`) never imports `topics/`, and `topics/` (the wire format a producer or
consumer needs) has no business with the ladder's decisions. The adapters and
`kit.conclude` are its only readers, so one table serves the Kafka workers and the
embedded runner alike.

A verdict is the key a stage routes on, not always the action it records: the judge
speaks the switch's vocabulary (yes = accept, a clear no = the route's `on_reject`,
unsure = escalate), consistency says whether the response `pass`es or the judge must
decide, and every gate (deadline, kill switch, latched turn, unavailable verifier) is a
`hold` that a person decides.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from pipeline.review import HumanVerdict
from pipeline.routing import Mode
from pipeline.rules import RulesAction
from pipeline.switch import SwitchAction
from topics.names import TERMINAL, Topic

HOLD = "hold"
"""A gate stopped automatic handling: a person decides (escalations.review)."""

SCORED = "scored"
"""Geometry scored the candidate; the switch decides."""
SKIP = "skip"
"""Geometry under mode `off`: no verification, straight to the safe path."""

ASK_JUDGE = "ask_judge"
"""Switch: geometry was not conclusive and a judge is configured (`pipeline.deferral`)."""

PASS = "pass"
"""Consistency: a committed meaning the response agrees with; on to rules."""
DEFER = "defer"
"""Consistency: anything else (competing meanings, unresolved, budget, no sampler)."""

_SWITCH = {
    SwitchAction.ACCEPT: Topic.RULES,
    SwitchAction.ESCALATE: Topic.CONSISTENCY,
    SwitchAction.FALLBACK: Topic.FALLBACK,
    SwitchAction.REGENERATE: Topic.REGENERATE,
    SwitchAction.REJECT: Topic.REJECT,
    HOLD: Topic.REVIEW,
}

ROUTES: Mapping[str, Mapping[str, Topic]] = MappingProxyType(
    {
        "geometry": MappingProxyType(
            {SCORED: Topic.SCORED, SKIP: Topic.FALLBACK, HOLD: Topic.REVIEW}
        ),
        "switch": MappingProxyType({**_SWITCH, ASK_JUDGE: Topic.JUDGE}),
        "consistency": MappingProxyType(
            {PASS: Topic.RULES, DEFER: Topic.JUDGE, HOLD: Topic.REVIEW}
        ),
        # Past the switch there is no rung left to escalate to: escalate means a person.
        "judge": MappingProxyType({**_SWITCH, SwitchAction.ESCALATE: Topic.REVIEW}),
        "rules": MappingProxyType(
            {
                RulesAction.PASS: Topic.STATE,
                RulesAction.REVIEW: Topic.REVIEW,
                RulesAction.REJECT: Topic.REJECT,
                HOLD: Topic.REVIEW,
            }
        ),
        # A person's accept still passes rules; only rules write to state.
        "review": MappingProxyType(
            {HumanVerdict.ACCEPT: Topic.RULES, HumanVerdict.REJECT: Topic.REJECT}
        ),
    }
)

SAFE_PATH = Topic.FALLBACK
"""Where `off` and `shadow` serve every terminal outcome: the caller's own fallback."""

_SAFE_MODES = frozenset({Mode.OFF, Mode.SHADOW})


def route(stage: str, verdict: str) -> Topic:
    """The topic `stage` sends a candidate to on `verdict`; KeyError for an unknown pair."""
    return ROUTES[stage][verdict]


def served(mode: Mode, decided: Topic) -> Topic:
    """Where a decided destination is served under `mode`: `off` and `shadow` serve every
    terminal outcome on the safe path; a candidate still on the ladder moves on as decided."""
    if decided in TERMINAL and mode in _SAFE_MODES:
        return SAFE_PATH
    return decided
