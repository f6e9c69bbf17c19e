"""Routing controls from verification-gated routing (seed 003): routes, modes and
deadlines. Which topic each verdict leads to, and where a mode serves it, is the routing
table's job (`workers.stages.routes`), since it is written in topic names.

Fail-closed posture: an expired deadline, the kill switch or a latched turn can only
move a candidate *away* from state, never towards it. Pure: time comes in as `now`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum

from pipeline.bounds.validation import number, refuse_unknown, typed
from pipeline.errors import PolicyError
from pipeline.guards.language import parse_languages
from pipeline.guards.provenance import DEFAULT_GROUNDING_SOURCES, Source, parse_sources
from pipeline.judge.budget import ROUTE_KEYS as BUDGET_KEYS
from pipeline.judge.budget import JudgeBudget
from pipeline.judge.verdict_cache import DEFAULT_TTL_S, check_ttl
from pipeline.rungs.grounding_switch import SwitchAction, parse_on_reject

ACTIVE_APPROVAL = "prospective-validation-and-canary-approved"
"""The exact string a route must carry before `active` mode will start (seed 003)."""

BELOW_REVIEW_ON_REJECT = "on_reject"
BELOW_REVIEW_JUDGE = "judge"
BELOW_REVIEW_CHOICES = (BELOW_REVIEW_ON_REJECT, BELOW_REVIEW_JUDGE)
"""Where an answer below the review cut goes when a judge is configured
(`below_review_with_judge`): the route's on_reject as without one, or the judge."""


INITIATORS = frozenset({"user", "agent"})
"""Who a candidate's turn comes from (the candidate's `initiator`)."""


class Mode(StrEnum):
    """How much of the decision is served."""

    OFF = "off"  # no verification; nothing auto-accepted; everything takes the safe path
    SHADOW = "shadow"  # decide and record, serve the safe path
    EVALUATE = "evaluate"  # serve the decision, for isolated evaluation
    ACTIVE = "active"  # serve the decision in production; needs the approval string


@dataclass(frozen=True, slots=True)
class RouteConfig:
    """One `[routes.NAME]` table of the policy."""

    name: str = "default"
    mode: Mode = Mode.EVALUATE
    """How much of the decision is served (`active` needs `active_approval`)."""
    active_approval: str = ""
    """The approval string a route needs before mode = "active" may start."""
    deadline_seconds: float | None = None
    """Seconds from entering the ladder to a decision; past it, review. Unset: none."""
    on_reject: SwitchAction = SwitchAction.FALLBACK
    """Where this route's answers below the review cut go (`escalate`: up the ladder)."""
    latch_escalation: bool = False
    """Keep a session's turn hold across user turns too (not in shadow mode)."""
    breaker_threshold: int = 5
    """Failed calls in a row that open the route's breaker to an endpoint."""
    breaker_cooldown_seconds: float = 30.0
    """Seconds an open breaker fails fast before one trial call."""
    below_review_with_judge: str = BELOW_REVIEW_ON_REJECT
    """With a judge configured, answers below the review cut go here
    (`pipeline.policy.deferral`)."""
    judge_accept_cut: float | None = None
    """With a judge configured, P(grounded) auto-accepts below this go to the judge."""
    reader_accept_cut: float | None = None
    """With a judge configured, an auto-accept whose weakest claim the claim reader scores
    below this goes to the judge: geometry and the reader must both be conclusive."""
    reader_veto_cut: float | None = None
    """A judge's yes on an answer whose weakest claim the claim reader scores below this
    goes to review: two independent readers must agree before state."""
    judge_veto_cut: float | None = None
    """A judge's yes on an answer whose P(grounded) is below this goes to review: an answer
    the geometry finds clearly ungrounded is not made acceptable by the judge alone."""

    grounding_sources: frozenset[Source] = DEFAULT_GROUNDING_SOURCES
    """Context sources whose chunks may ground an answer (`pipeline.guards.provenance`)."""
    min_distinct_samples: int = 2
    """Distinct samples of the candidate's own (copies of the response or of each other
    count once) that consistency needs before it may commit."""
    allowed_initiators: frozenset[str] = INITIATORS
    """Who may ask for this route (the candidate's `initiator`); others are refused."""
    tasks: frozenset[str] = frozenset()
    """Task kinds (a candidate's `metadata.task`: QA, Summary, Data2txt, ...) this route
    serves when the candidate names no route: a QA answer and a summary are different
    populations, each judged by its own fit (`calibrate --route NAME --task KIND`)."""
    judge_budget: JudgeBudget = field(default_factory=JudgeBudget)
    """Judge calls per minute and tokens per day, for the route and per tenant, and what an
    answer gets over them (`pipeline.judge.budget`); set by the route table's flat keys."""
    judge_cache_ttl_seconds: float = DEFAULT_TTL_S
    """How long a judge's clear verdict answers the same question again
    (`pipeline.judge.verdict_cache`); 0: never."""
    languages: tuple[str, ...] | None = None
    """Languages (ISO 639-1) an answer and its context may be in to be accepted on
    geometry's word (`pipeline.guards.language`); ["*"] accepts any. None: the encoder's card's
    (`Policy.languages_for`), English for the default encoder."""

    def __post_init__(self) -> None:
        prefix = f"routes.{self.name}"
        if self.min_distinct_samples < 1:
            raise PolicyError(
                f"{prefix}.min_distinct_samples", self.min_distinct_samples, "an integer >= 1"
            )
        if not self.allowed_initiators or not self.allowed_initiators <= INITIATORS:
            raise PolicyError(
                f"{prefix}.allowed_initiators",
                sorted(self.allowed_initiators),
                f"a non-empty list of {', '.join(sorted(INITIATORS))}",
            )
        if self.below_review_with_judge not in BELOW_REVIEW_CHOICES:
            raise PolicyError(
                f"{prefix}.below_review_with_judge",
                self.below_review_with_judge,
                "one of " + ", ".join(BELOW_REVIEW_CHOICES),
            )
        for name in ("judge_accept_cut", "reader_accept_cut", "reader_veto_cut", "judge_veto_cut"):
            cut = getattr(self, name)
            if cut is not None and (
                isinstance(cut, bool) or not isinstance(cut, int | float) or not 0.0 <= cut <= 1.0
            ):
                raise PolicyError(f"{prefix}.{name}", cut, "a number in [0, 1]")
        check_ttl(self.judge_cache_ttl_seconds, f"{prefix}.judge_cache_ttl_seconds")
        if self.mode is Mode.ACTIVE and self.active_approval != ACTIVE_APPROVAL:
            raise PolicyError(
                f"{prefix}.active_approval",
                self.active_approval,
                f"{ACTIVE_APPROVAL!r} before mode = 'active' may start",
            )
        if self.deadline_seconds is not None and not self.deadline_seconds > 0:
            raise PolicyError(
                f"{prefix}.deadline_seconds", self.deadline_seconds, "a positive number"
            )
        if self.breaker_threshold < 1:
            raise PolicyError(
                f"{prefix}.breaker_threshold", self.breaker_threshold, "an integer >= 1"
            )
        if not self.breaker_cooldown_seconds > 0:
            raise PolicyError(
                f"{prefix}.breaker_cooldown_seconds",
                self.breaker_cooldown_seconds,
                "a positive number",
            )

    @classmethod
    def from_mapping(cls, name: str, data: Mapping[str, object]) -> RouteConfig:
        prefix = f"routes.{name}"
        known = [f.name for f in fields(cls) if f.name not in ("name", "judge_budget")]
        refuse_unknown(prefix, data, [*known, *BUDGET_KEYS])
        mode_value = data.get("mode", Mode.EVALUATE.value)
        try:
            mode = Mode(mode_value)
        except ValueError:
            raise PolicyError(
                f"{prefix}.mode", mode_value, "one of " + ", ".join(m.value for m in Mode)
            ) from None
        return cls(
            name=name,
            mode=mode,
            active_approval=typed(data, prefix, "active_approval", str, ""),
            deadline_seconds=number(data, prefix, "deadline_seconds", None),
            on_reject=parse_on_reject(data.get("on_reject", "fallback"), f"{prefix}.on_reject"),
            latch_escalation=typed(data, prefix, "latch_escalation", bool, False),
            breaker_threshold=typed(data, prefix, "breaker_threshold", int, 5),
            breaker_cooldown_seconds=number(data, prefix, "breaker_cooldown_seconds", 30.0),  # type: ignore[arg-type]
            grounding_sources=parse_sources(
                typed(data, prefix, "grounding_sources", list, sorted(DEFAULT_GROUNDING_SOURCES)),
                f"{prefix}.grounding_sources",
            ),
            min_distinct_samples=typed(data, prefix, "min_distinct_samples", int, 2),
            allowed_initiators=frozenset(
                map(str, typed(data, prefix, "allowed_initiators", list, sorted(INITIATORS)))
            ),
            below_review_with_judge=typed(
                data, prefix, "below_review_with_judge", str, BELOW_REVIEW_ON_REJECT
            ),
            judge_accept_cut=number(data, prefix, "judge_accept_cut", None),
            reader_accept_cut=number(data, prefix, "reader_accept_cut", None),
            reader_veto_cut=number(data, prefix, "reader_veto_cut", None),
            judge_veto_cut=number(data, prefix, "judge_veto_cut", None),
            tasks=frozenset(map(str, typed(data, prefix, "tasks", list, []))),
            judge_budget=JudgeBudget.from_route(data, prefix),
            judge_cache_ttl_seconds=number(data, prefix, "judge_cache_ttl_seconds", DEFAULT_TTL_S),  # type: ignore[arg-type]
            languages=None
            if "languages" not in data
            else parse_languages(data["languages"], f"{prefix}.languages"),
        )


def deadline_for(
    candidate_deadline: float | None, route: RouteConfig, entered: float
) -> float | None:
    """The absolute deadline: the earlier of the candidate's own and the route's
    `deadline_seconds` counted from when the candidate `entered` the ladder. A candidate
    may shorten its route's deadline, never extend it."""
    by_route = None if route.deadline_seconds is None else entered + route.deadline_seconds
    given = [d for d in (candidate_deadline, by_route) if d is not None]
    return min(given) if given else None


def expired(deadline: float | None, now: float) -> bool:
    return deadline is not None and now >= deadline
