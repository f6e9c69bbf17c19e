"""Switch stage: scored → rules (accept) | consistency (escalate) | escalations.<on_reject>,
or judge where geometry is not conclusive and a judge is configured; a step of a latched
turn goes to review. The rule is `pipeline.stages.switch`; this adapter keeps the session
table (changelogged in the batch's transaction) and the route's switch, built once."""

from __future__ import annotations

import time
from collections.abc import Sequence

from pipeline.policy.document import Policy
from pipeline.policy.routing import RouteConfig
from pipeline.policy.sessions import SessionState, observe_outcome
from pipeline.rungs.grounding_switch import GroundingSwitch
from pipeline.stages import switch
from topics.names import Topic
from topics.schema import Envelope
from workers.interfaces import Emit, EndpointConfig, Inbound, StageContext
from workers.stages.common import EnvelopeStage, geometry_result, open_envelopes
from workers.stages.kit import conclude, key_of


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
            judged = self.judge_available
            cached = (
                ctx.policy.switch(route, judged),
                ctx.policy.thresholds_dict(route.name, judged),
            )
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
        if self.judge_available:  # a fitted judge band applies only where there is a judge
            route = ctx.policy.judged_route(route)
        key = key_of(env.candidate)
        before = SessionState.from_dict(ctx.sessions.get(key))
        rule, cuts = self._switch(ctx, route)
        verdict, after = switch.decide(
            env.candidate,
            route,
            before,
            geometry_result(env),
            rule,
            cuts,
            ctx.policy.grounding_for(route.name),
            self.judge_available,
        )
        # Only a changed session is written: each write is a changelog message in the
        # batch's transaction, and an unchanged one restores to the same table.
        if after != before:
            ctx.sessions[key] = after.to_dict()
        return conclude(ctx, self.name, env, verdict, started)

    def observe(self, record: dict, ctx: StageContext) -> None:
        """A final outcome from further up the ladder: an escalation latches its turn too."""
        latched = switch.escalated_turn(record)
        if latched is None:
            return
        session, turn = latched
        key = session.encode("utf-8")
        state = SessionState.from_dict(ctx.sessions.get(key))
        updated = observe_outcome(state, turn, escalated=True)
        if updated != state:
            ctx.sessions[key] = updated.to_dict()
