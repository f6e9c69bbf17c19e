"""The judge stage's gate (`workers.stages.judge_ledger`) on a fake OpenAI-compatible judge
over a real socket, no broker: a resubmitted answer is answered from the verdict cache
without a call, failures are asked again, over budget is never accepted unjudged, `wait`
holds answers until the window frees, and a replay answers cache and budget from the
recording. The broker-backed guarantees are tests/integration/test_judge_budget_kafka.py."""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from aiokafka import ConsumerRecord
from prometheus_client.exposition import generate_latest

from pipeline.encoding.tokens import TokenUsage
from pipeline.judge.budget import GATE
from pipeline.judge.question import JudgeReadout, JudgeStatus
from pipeline.policy.breaker import BreakerStatus
from pipeline.policy.document import parse_policy
from pipeline.trail.replay import RecordedTrail, trails
from tests.fakes.openai_server import Behaviour, FakeOpenAIServer, Status, Verdict
from tests.fixtures.fakes import FakeEncoder
from tests.fixtures.ladder_scenario import QUESTION as QUESTION_S
from tests.fixtures.ladder_scenario import R_MIDDLE, VECTORS, cand
from topics.codec import dumps, loads
from topics.names import Topic
from topics.schema import Candidate, Envelope
from workers.clients.llm import CallKind, CallResult
from workers.clients.recorded import Answers
from workers.interfaces import Emit, EndpointConfig, Inbound, StageContext
from workers.runtime.embedded import run_embedded
from workers.runtime.ladder import build_ladder
from workers.runtime.metrics import StageMetrics
from workers.runtime.replay import RecordedBook, replay_messages
from workers.runtime.settings import Settings
from workers.stages.judge import JudgeStage
from workers.stages.judge_ledger import JudgeBook, budget_key, placement, verdict_key
from workers.web.state import DashboardState

T0 = 1_700_000_000.0
QUESTION = "When did the bridge open?"
CONTEXT = "The bridge opened to traffic in 1932 after six years of work."
ANSWER = "It opened in 1932."


@dataclass
class Clock:
    now: float = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Timed(Behaviour):
    """Answers with `then`, noting when each request arrived (monotonic seconds)."""

    then: Behaviour
    at: list[float] = field(default_factory=list)

    async def respond(self, server: FakeOpenAIServer, body: dict[str, Any]) -> web.StreamResponse:
        self.at.append(time.monotonic())
        return await self.then.respond(server, body)


class CountingJudge:
    """An endpoint pool that says a clear yes, spending 50 + 1 tokens a call."""

    model = "counting-judge"
    configured = True

    def __init__(self) -> None:
        self.asked = 0

    @property
    def breaker_state(self) -> Any:
        return type("B", (), {"status": BreakerStatus.CLOSED})()

    def for_route(self, route: Any) -> CountingJudge:
        return self

    async def judge(self, *args: Any, **kwargs: Any) -> tuple[JudgeReadout, list[CallResult]]:
        self.asked += 1
        readout = JudgeReadout(
            JudgeStatus.OK, 0.95, 0.95, 0.05, (("yes", math.log(0.95)), ("no", math.log(0.05)))
        )
        call = CallResult(CallKind.OK, 200, None, 12.0, "closed", tokens=TokenUsage(50, 1))
        return readout, [call]

    async def close(self) -> None:
        return None


def envelope(cid: str, n: int = 0, **extra: Any) -> Envelope:
    deadline = extra.pop("deadline", None)
    c = Candidate(
        id=cid,
        session_id=extra.pop("session", "s-1"),
        question=f"{QUESTION} [{n}]" if n else QUESTION,
        response=ANSWER,
        context=CONTEXT,
        metadata=extra.pop("metadata", {}),
    )
    return Envelope(candidate=c, route="default", mode="evaluate", deadline=deadline)


def context(route: dict | None = None, clock: Any = None, partitions: int = 1) -> StageContext:
    policy = parse_policy({"policy": {"version": "gate-1"}, "routes": {"default": route or {}}})
    ctx = StageContext(policy=policy, clock=clock or Clock())
    ctx.source_partitions = partitions
    return ctx


async def run(
    stage: JudgeStage, envs: list[Envelope], ctx: StageContext, partition: int = 0
) -> list[Emit]:
    batch = [
        Inbound(e.candidate.session_id.encode(), e.encode(), "judge", partition, i)
        for i, e in enumerate(envs)
    ]
    return await stage.process(batch, ctx)


def records(emits: list[Emit]) -> dict[str, dict]:
    return {
        r["candidate_id"]: r
        for r in (loads(e.value) for e in emits if e.topic is Topic.DECISIONS)
        if r["stage"] == "judge"
    }


def judged_yes_sent_on(emits: list[Emit]) -> set[str]:
    """Candidates whose envelope went on towards state (to rules)."""
    return {loads(e.value)["candidate"]["id"] for e in emits if e.topic is Topic.RULES}


def stage_for(server: FakeOpenAIServer) -> JudgeStage:
    return JudgeStage(EndpointConfig(url=server.base_url, model="judge-m"))


class TestVerdictCache:
    def test_a_resubmitted_answer_is_answered_from_the_cache_without_a_call(self) -> None:
        async def scenario() -> tuple[dict, int, dict, int, dict]:
            async with FakeOpenAIServer(default=Verdict(p_yes=0.97)) as server:
                stage, clock = stage_for(server), Clock()
                ctx = context(clock=clock)
                first = records(await run(stage, [envelope("c-1")], ctx))
                clock.now += 60
                again = records(await run(stage, [envelope("c-2")], ctx))
                asked_after_resubmit = len(server.requests)
                clock.now += 3600  # past the default TTL
                late = records(await run(stage, [envelope("c-3")], ctx))
                await stage.close()
                return first, asked_after_resubmit, again, len(server.requests), late

        first, asked, again, asked_late, late = asyncio.run(scenario())
        assert asked == 1  # the resubmission cost no call
        assert first["c-1"]["evidence"]["cache"] == "miss"
        hit = again["c-2"]
        assert hit["action"] == "accept" and hit["evidence"]["cache"] == "hit"
        assert hit["evidence"]["cached_for"] == "c-1"
        assert hit["evidence"]["cached_at"] == first["c-1"]["decided_at"]
        assert hit["evidence"]["calls"] == []
        assert hit["evidence"]["readout"] == first["c-1"]["evidence"]["readout"]
        assert asked_late == 2 and late["c-3"]["evidence"]["cache"] == "miss"

    def test_another_partition_does_not_see_the_entry(self) -> None:
        async def scenario() -> int:
            async with FakeOpenAIServer(default=Verdict(p_yes=0.97)) as server:
                stage = stage_for(server)
                ctx = context(partitions=2)
                await run(stage, [envelope("c-1")], ctx, partition=0)
                await run(stage, [envelope("c-2")], ctx, partition=1)
                await stage.close()
                return len(server.requests)

        assert asyncio.run(scenario()) == 2

    @pytest.mark.parametrize(
        "first",
        [Status(500, "down"), Verdict(p_yes=0.5)],
        ids=["failure", "unsure"],
    )
    def test_only_a_clear_verdict_is_kept(self, first: Behaviour) -> None:
        async def scenario() -> tuple[int, dict]:
            async with FakeOpenAIServer([first], default=Verdict(p_yes=0.97)) as server:
                stage, ctx = stage_for(server), context()
                await run(stage, [envelope("c-1")], ctx)
                second = records(await run(stage, [envelope("c-2")], ctx))
                await stage.close()
                return len(server.requests), second

        asked, second = asyncio.run(scenario())
        assert asked == 2
        assert second["c-2"]["evidence"]["cache"] == "miss"
        assert second["c-2"]["action"] == "accept"

    def test_a_ttl_of_zero_turns_the_cache_off(self) -> None:
        async def scenario() -> tuple[int, dict, list[bytes]]:
            async with FakeOpenAIServer(default=Verdict(p_yes=0.97)) as server:
                stage, ctx = stage_for(server), context({"judge_cache_ttl_seconds": 0})
                await run(stage, [envelope("c-1")], ctx)
                second = records(await run(stage, [envelope("c-2")], ctx))
                await stage.close()
                return len(server.requests), second, list(stage.ledger)

        asked, second, kept = asyncio.run(scenario())
        assert asked == 2 and second["c-2"]["evidence"]["cache"] == "off"
        assert not any(k.split(b"|")[1] == b"v" for k in kept)


class TestOverBudget:
    @pytest.mark.parametrize("mode", ["review", "fallback", "reject", "wait"])
    def test_over_budget_is_never_accepted_unjudged(self, mode: str) -> None:
        route = {"judge_calls_per_minute": 2, "over_budget": mode}

        async def scenario() -> tuple[int, list[Emit]]:
            async with FakeOpenAIServer(default=Verdict(p_yes=0.99)) as server:
                stage, ctx = stage_for(server), context(route)
                envs = [envelope(f"c-{i}", n=i) for i in range(1, 6)]
                emits = await run(stage, envs, ctx)
                await stage.close()
                return len(server.requests), emits

        asked, emits = asyncio.run(scenario())
        got = records(emits)
        assert asked == 2
        judged = {cid for cid, r in got.items() if r["evidence"].get("calls")}
        assert len(judged) == 2 and judged_yes_sent_on(emits) == judged
        over = {cid: r for cid, r in got.items() if cid not in judged}
        assert len(over) == 3
        expected = {"review": "escalate", "reject": "reject"}.get(mode, "fallback")
        for r in over.values():
            assert r["action"] == expected and r["gate"] == GATE
            assert not r["write_to_state"]
            assert r["evidence"]["budget"]["state"] == "over"
            assert r["evidence"]["budget"]["route"]["calls_left"] == 0
            assert r["reason"].startswith("judge not asked")
        for cid in judged:
            assert got[cid]["action"] == "accept" and got[cid]["gate"] is None
            assert got[cid]["evidence"]["budget"]["state"] == "ok"

    def test_wait_holds_answers_until_the_window_frees(self) -> None:
        timed = Timed(Verdict(p_yes=0.99))

        async def scenario() -> tuple[list[Emit], float]:
            async with FakeOpenAIServer(default=timed) as server:
                stage = stage_for(server)
                stage.gate.window, stage.gate.guard = 0.3, 0.1  # the 60 s code path, shorter
                ctx = context({"judge_calls_per_minute": 1, "over_budget": "wait"}, time.time)
                started = time.monotonic()
                emits = await run(stage, [envelope(f"c-{i}", n=i) for i in range(1, 4)], ctx)
                await stage.close()
                return emits, time.monotonic() - started

        emits, took = asyncio.run(scenario())
        got = records(emits)
        assert all(r["action"] == "accept" for r in got.values()), got
        assert len(timed.at) == 3 and took >= 0.8
        gaps = [b - a for a, b in zip(timed.at, timed.at[1:], strict=False)]
        assert min(gaps) >= 0.38, gaps
        states = sorted(r["evidence"]["budget"]["state"] for r in got.values())
        assert states == ["ok", "waited", "waited"]

    def test_wait_gives_the_fallback_when_the_deadline_comes_first(self) -> None:
        async def scenario() -> tuple[int, dict]:
            async with FakeOpenAIServer(default=Verdict(p_yes=0.99)) as server:
                stage = stage_for(server)
                stage.gate.window = 5.0
                ctx = context({"judge_calls_per_minute": 1, "over_budget": "wait"}, time.time)
                soon = time.time() + 2.0
                envs = [envelope("c-1", n=1), envelope("c-2", n=2, deadline=soon)]
                got = records(await run(stage, envs, ctx))
                await stage.close()
                return len(server.requests), got

        asked, got = asyncio.run(scenario())
        assert asked == 1
        assert got["c-2"]["action"] == "fallback" and got["c-2"]["gate"] == GATE
        assert "the deadline" in got["c-2"]["reason"]

    def test_each_tenant_has_its_own_budget(self) -> None:
        route = {
            "judge_calls_per_minute": 10,
            "tenant_field": "metadata.tenant",
            "tenant_judge_calls_per_minute": 1,
        }

        async def scenario() -> tuple[int, dict]:
            async with FakeOpenAIServer(default=Verdict(p_yes=0.99)) as server:
                stage, ctx = stage_for(server), context(route)
                envs = [
                    envelope("a-1", n=1, metadata={"tenant": "a"}),
                    envelope("a-2", n=2, metadata={"tenant": "a"}),
                    envelope("b-1", n=3, metadata={"tenant": "b"}),
                ]
                got = records(await run(stage, envs, ctx))
                await stage.close()
                return len(server.requests), got

        asked, got = asyncio.run(scenario())
        assert asked == 2
        assert got["a-1"]["action"] == got["b-1"]["action"] == "accept"
        assert got["a-2"]["gate"] == GATE and "tenant 'a'" in got["a-2"]["reason"]
        assert got["b-1"]["evidence"]["tenant"] == "b"
        assert got["b-1"]["evidence"]["budget"]["tenant"]["calls_left"] == 0
        assert got["b-1"]["evidence"]["budget"]["route"]["calls_left"] == 8

    def test_each_partition_spends_its_share(self) -> None:
        async def scenario() -> int:
            async with FakeOpenAIServer(default=Verdict(p_yes=0.99)) as server:
                stage = stage_for(server)
                ctx = context({"judge_calls_per_minute": 4}, partitions=4)
                for p in (0, 3):
                    envs = [envelope(f"c-{p}-{i}", n=10 * p + i) for i in (1, 2)]
                    await run(stage, envs, ctx, partition=p)
                await stage.close()
                return len(server.requests)

        assert asyncio.run(scenario()) == 2  # one call a partition: 4 a minute over 4

    def test_tokens_count_the_replys_usage(self) -> None:
        async def scenario() -> dict:
            async with FakeOpenAIServer(default=Verdict(p_yes=0.99)) as server:
                stage, ctx = stage_for(server), context({"judge_tokens_per_day": 100_000})
                got = records(await run(stage, [envelope("c-1")], ctx))
                await stage.close()
                return got

        r = asyncio.run(scenario())["c-1"]
        assert r["evidence"]["tokens"]["estimated"] is False
        spent = (
            r["evidence"]["tokens"]["prompt_tokens"] + r["evidence"]["tokens"]["completion_tokens"]
        )
        assert r["evidence"]["budget"]["route"]["tokens_left"] == 100_000 - spent

    def test_metrics_count_calls_tokens_and_budget_left(self) -> None:
        async def scenario() -> str:
            async with FakeOpenAIServer(default=Verdict(p_yes=0.99)) as server:
                stage, ctx = stage_for(server), context({"judge_calls_per_minute": 5})
                metrics = StageMetrics("judge", "judge")
                metrics.follow(ctx, stage)
                for r in records(await run(stage, [envelope("c-1", n=1)], ctx)).values():
                    metrics.observe_record(r)
                for r in records(await run(stage, [envelope("c-2", n=1)], ctx)).values():
                    metrics.observe_record(r)
                await stage.close()
                return generate_latest(metrics.registry).decode()

        text = asyncio.run(scenario())
        assert 'groundstream_judge_calls_total{route="default",stage="judge",tenant=""} 1.0' in text
        assert 'groundstream_judge_cache_hits_total{route="default",stage="judge"} 1.0' in text
        assert (
            'groundstream_judge_budget_left{budget="calls",route="default",stage="judge",tenant=""}'
            " 4.0" in text
        )
        assert "groundstream_judge_tokens_total" in text


class TestTable:
    def test_entries_are_placed_on_their_input_partition(self) -> None:
        assert placement(budget_key(3, "r|x", "t")) == 3
        assert placement(verdict_key(11, "ab" * 32)) == 11
        assert placement(b"session-7") is None

    def test_the_sweep_drops_expired_verdicts_and_spent_out_budgets(self) -> None:
        table: dict = {
            verdict_key(0, "old"): {"readout": {"status": "ok"}, "at": 0.0, "for": "a"},
            verdict_key(0, "new"): {"readout": {"status": "ok"}, "at": 990.0, "for": "b"},
            budget_key(0, "r", None): {"calls": [1.0], "tokens": []},
            budget_key(1, "r", None): {"calls": [990.0], "tokens": []},
        }
        assert JudgeBook(table).sweep(1000.0, 100.0) == 2
        assert set(table) == {verdict_key(0, "new"), budget_key(1, "r", None)}


class TestReplay:
    def replay(self, recorded: dict) -> tuple[int, dict]:
        async def scenario() -> tuple[int, dict]:
            async with FakeOpenAIServer(default=Verdict(p_yes=0.01)) as server:
                stage, ctx = stage_for(server), context({"judge_calls_per_minute": 50})
                trail = RecordedTrail("c-9", {"judge": recorded})
                stage.gate.recorded = RecordedBook(Answers(trail), "judge")
                got = records(await run(stage, [envelope("c-9")], ctx))
                await stage.close()
                return len(server.requests), got["c-9"]

        return asyncio.run(scenario())

    def test_a_recorded_cache_hit_replays_as_one_without_a_call(self) -> None:
        readout = {
            "status": "ok",
            "score": 0.97,
            "p_yes": 0.97,
            "p_no": 0.03,
            "top_tokens": [["Yes", -0.03], ["No", -3.5]],
            "model": "m",
            "usage": None,
            "detail": "",
        }
        evidence = {
            "cache": "hit",
            "cached_at": "2026-01-01T00:00:00.000+00:00",
            "cached_for": "c-1",
            "readout": readout,
        }
        asked, got = self.replay({"stage": "judge", "action": "accept", "evidence": evidence})
        assert asked == 0
        assert got["action"] == "accept" and got["evidence"]["cache"] == "hit"
        assert got["evidence"]["cached_for"] == "c-1"

    def test_a_recorded_spent_budget_replays_spent(self) -> None:
        recorded = {
            "stage": "judge",
            "action": "escalate",
            "gate": GATE,
            "reason": "judge not asked: route 'default''s judge budget … is spent",
            "evidence": {"budget": {"state": "over", "partition": 0, "partitions": 1}},
        }
        asked, got = self.replay(recorded)
        assert asked == 0
        assert (got["action"], got["gate"]) == ("escalate", GATE)
        assert got["reason"] == recorded["reason"]


class TestDashboard:
    def test_spend_against_budget_per_route_and_tenant(self) -> None:
        state = DashboardState()
        for partition, left in ((0, 1), (1, 3), (0, 0)):
            budget = {
                "state": "ok",
                "partition": partition,
                "partitions": 4,
                "route": {"name": "default", "calls_share": 3, "calls_left": left},
                "tenant": {"name": "acme", "calls_share": 1, "calls_left": 0},
            }
            state.ingest(
                {
                    "candidate_id": f"c-{partition}-{left}",
                    "stage": "judge",
                    "action": "accept",
                    "route": "default",
                    "evidence": {"budget": budget},
                }
            )
        assert state.summary()["judge_budget"] == [
            {
                "route": "default",
                "tenant": "",
                "partitions_seen": 2,
                "partitions": 4.0,
                "calls_left": 3.0,  # the last figure of each partition: 0 and 3
                "calls_share": 6.0,
            },
            {
                "route": "default",
                "tenant": "acme",
                "partitions_seen": 2,
                "partitions": 4.0,
                "calls_left": 0.0,
                "calls_share": 2.0,
            },
        ]


class TestReplayReproduces:
    """A recording with a cache hit and a spent budget, replayed under its own policy,
    decides every candidate as recorded, without asking the judge."""

    async def test_cache_hits_and_spent_budgets_replay_unchanged(self) -> None:
        question2 = "How long can a deleted file be restored on the Business plan?"
        vectors = {**VECTORS, question2: VECTORS[QUESTION_S]}
        candidates = [
            cand("m-1", R_MIDDLE),
            cand("m-2", R_MIDDLE, session_id="s-m-1"),  # the same ask again: the cache
            cand("m-3", R_MIDDLE, question=question2),  # another ask: over budget
        ]
        pol = parse_policy(
            {
                "policy": {"version": "replay-budget-1"},
                "routes": {"default": {"judge_calls_per_minute": 1, "over_budget": "fallback"}},
            }
        )
        clock = [T0]
        judge = CountingJudge()
        stages = build_ladder(Settings())
        for stage in stages:
            if stage.name == "judge":
                stage.pool = judge  # type: ignore[attr-defined]
        ctx = StageContext(policy=pol, clock=lambda: clock[0])
        ctx.services["encoder"] = FakeEncoder(vectors)
        recorded = (await run_embedded(candidates, stages, ctx)).records
        judged = {r["candidate_id"]: r for r in recorded if r["stage"] == "judge"}
        assert judge.asked == 1
        assert judged["m-2"]["evidence"]["cache"] == "hit"
        assert judged["m-3"]["gate"] == GATE and judged["m-3"]["action"] == "fallback"

        messages = [
            ConsumerRecord("candidates", 0, i, int(T0 * 1000), 0, None, dumps(c), None, 0, 0, ())
            for i, c in enumerate(candidates)
        ]
        run = await replay_messages(
            messages, trails(recorded), Settings(), pol, services={"encoder": FakeEncoder(vectors)}
        )
        assert run.summary.changed == 0, [c.to_dict() for c in run.changes if c.changed]
        assert all(not c.stages for c in run.changes)
        again = {r["candidate_id"]: r for r in run.records if r["stage"] == "judge"}
        assert again["m-2"]["evidence"]["cache"] == "hit"
        assert again["m-3"]["gate"] == GATE
        assert judge.asked == 1  # the replay asked nobody
