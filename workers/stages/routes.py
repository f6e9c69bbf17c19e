"""The routing table: every stage's verdict → the topic it sends a candidate to, and the
mode handling that decides where that destination is actually served.

It lives here, beside the stage adapters, because it joins two vocabularies that must
not know each other: `pipeline/` (the verdicts: `SwitchAction`, `RulesAction`,
`JudgeVerdict`, `HumanVerdict`) never imports `topics/`, and `topics/` (the wire format a
producer or consumer needs) has no business with the ladder's decisions. The adapters and
`kit.conclude` are its only readers, so one table serves the Kafka workers and the
embedded runner alike.

A verdict's `routing` (`pipeline.trail.verdict.Verdict`) is the key a stage routes on,
not always the action it records: the judge routes on yes / unsure / the route's
`on_reject` and records yes as `accept`, consistency says whether the response `pass`es
or the judge must decide, and every gate (deadline, kill switch, latched turn,
unavailable verifier, the claim reader's veto) is a `hold` that a person decides. The
kill switch's own row (`KILL_SWITCH`) turns an automatic outcome for state into review.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from pipeline.judge.question import JudgeVerdict
from pipeline.policy.routing import Mode
from pipeline.rungs.grounding_switch import SwitchAction
from pipeline.rungs.rule_checks import RulesAction
from pipeline.stages.review import HumanVerdict
from pipeline.trail.verdict import ASK_JUDGE, DEFER, HOLD, PASS, SCORED, SKIP
from topics.names import TERMINAL, Topic

__all__ = [
    "ASK_JUDGE",
    "DEFER",
    "HOLD",
    "KILL_SWITCH",
    "PASS",
    "ROUTES",
    "SAFE_PATH",
    "SCORED",
    "SKIP",
    "route",
    "served",
]

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
        # A clear no is served as the route's on_reject; past the switch there is no rung
        # left to escalate to, so an on_reject of escalate, and unsure, mean a person.
        "judge": MappingProxyType(
            {
                JudgeVerdict.YES: Topic.RULES,
                JudgeVerdict.UNSURE: Topic.REVIEW,
                SwitchAction.FALLBACK: Topic.FALLBACK,
                SwitchAction.REGENERATE: Topic.REGENERATE,
                SwitchAction.REJECT: Topic.REJECT,
                SwitchAction.ESCALATE: Topic.REVIEW,
                HOLD: Topic.REVIEW,
            }
        ),
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

KILL_SWITCH: Mapping[Topic, Topic] = MappingProxyType({Topic.STATE: Topic.REVIEW})
"""While the kill switch is on, where an automatic outcome decided for a topic is served
instead (a person's verdict stands): nothing reaches state without a person."""

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
