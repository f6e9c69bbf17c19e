"""Switch stage: scored → rules (accept) | consistency (escalate) | escalations.<on_reject>,
or judge where geometry is not conclusive and a judge is configured (`pipeline.deferral`).

Also the session gate: a step of a latched turn is held for review (`turn_latched`)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from pipeline.deferral import defer_to_judge, reader_score
from pipeline.policy import Policy
from pipeline.routing import RouteConfig
from pipeline.sessions import SessionState, enter, leave, observe_outcome
from pipeline.switch import GroundingSwitch, SwitchAction
from topics.names import Topic
from topics.schema import Envelope
from workers.stages.common import (
    EnvelopeStage,
    geometry_result,
    hold_for_review,
    open_envelopes,
)
from workers.stages.kit import Emit, EndpointConfig, Inbound, StageContext, conclude, key_of
from workers.stages.routes import ASK_JUDGE


class SwitchStage(EnvelopeStage):
    name = "switch"
    source = Topic.SCORED

    def __init__(self, judge: EndpointConfig | None = None) -> None:
        self.judge_available = judge is not None and bool(judge.url)
        self._policy: Policy | None = None
        self._routes: dict[str, tuple[GroundingSwitch, dict[str, float]]] = {}

    def _switch(
        self, ctx: StageContext, route: RouteConfig
    ) -> tuple[GroundingSwitch, dict[str, float]]:
        """The route's switch and cuts, built once per policy, not once per envelope (both
        are pure values of the policy; the record copies the cuts)."""
        if ctx.policy is not self._policy:
            self._policy, self._routes = ctx.policy, {}
        cached = self._routes.get(route.name)
        if cached is None:
            cached = (ctx.policy.switch(route), ctx.policy.thresholds_dict(route.name))
            self._routes[route.name] = cached
        return cached

    async def process(self, batch: Sequence[Inbound], ctx: StageContext) -> list[Emit]:
        """No decision here awaits anything, so the batch is decided in one synchronous
        pass, in order: no task per envelope (EnvelopeStage gathers them, for stages whose
        model calls overlap); measured: 7% less CPU per envelope."""
        envelopes, emits = open_envelopes(self.name, batch, ctx, self.source)
        for env in envelopes:
            emits += self.decide(env, ctx)
        return emits

    async def decide_one(self, env: Envelope, ctx: StageContext) -> list[Emit]:
        return self.decide(env, ctx)

    def decide(self, env: Envelope, ctx: StageContext) -> list[Emit]:
        started = time.perf_counter()
        route = ctx.route_for(env.route)
        c = env.candidate
        key = key_of(c)
        before = SessionState.from_dict(ctx.sessions.get(key))
        held, session = enter(before, c.initiator, c.turn, route)
        if held:
            _save(ctx, key, before, session)
            return hold_for_review(
                self.name,
                env,
                ctx,
                started=started,
                gate="turn_latched",
                reason="turn_latched: an earlier step of this turn escalated",
            )
        result = geometry_result(env)
        if result is None:
            _save(ctx, key, before, leave(session, True, c.turn))
            return conclude(
                ctx,
                env,
                stage=self.name,
                action="escalate",
                started=started,
                verdict=SwitchAction.ESCALATE,
                reason="no usable geometry on the envelope",
            )
        switch, thresholds = self._switch(ctx, route)
        decision = switch.decide(result)
        # The reader's reading matters only where a judge may be asked: no lookup otherwise.
        reader = (
            reader_score(result, ctx.policy.grounding_for(route.name))
            if self.judge_available
            else None
        )
        deferred = defer_to_judge(decision, route, self.judge_available, reader)
        escalated = deferred is not None or decision.action is not SwitchAction.ACCEPT
        _save(ctx, key, before, leave(session, escalated, c.turn))
        return conclude(
            ctx,
            env,
            stage=self.name,
            action=decision.action.value if deferred is None else SwitchAction.ESCALATE.value,
            reason=decision.reason if deferred is None else deferred,
            verdict=decision.action if deferred is None else ASK_JUDGE,
            started=started,
            score=decision.score,
            method=decision.method,
            level=decision.level,
            evidence={"check": decision.check.render()},
            thresholds=thresholds,
        )

    def observe(self, record: dict, ctx: StageContext) -> None:
        """A final outcome from further up the ladder: an escalation latches its turn too."""
        # Shadow serves every outcome as fallback: what counts is what was decided.
        if record.get("stage") != "outcome" or record.get("decided_action") in ("accept", "skip"):
            return
        session = str(record.get("session_id", ""))
        turn = record.get("turn")
        if not session or not isinstance(turn, int) or record.get("topic") == "deadletter":
            return
        key = session.encode("utf-8")
        state = SessionState.from_dict(ctx.sessions.get(key))
        updated = observe_outcome(state, turn, escalated=True)  # filtered above
        if updated != state:
            ctx.sessions[key] = updated.to_dict()


def _save(ctx: StageContext, key: bytes, before: SessionState, after: SessionState) -> None:
    """Write the session only when it changed: each write is a changelog message in the
    batch's transaction, and an unchanged one restores to the same table."""
    if after != before:
        ctx.sessions[key] = after.to_dict()
