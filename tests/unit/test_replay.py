"""Replay: a recording re-decided in the embedded ladder reproduces itself exactly; a
stricter policy's changes are named; time, judge answers and encoders come from the
recording, not from the replay."""

from __future__ import annotations

import math

import pytest
from aiokafka import ConsumerRecord

from pipeline.judge.question import JudgeReadout, JudgeStatus
from pipeline.policy.breaker import BreakerStatus
from pipeline.policy.document import parse_policy
from pipeline.rungs.self_consistency import BudgetLimit
from pipeline.trail.replay import (
    EncoderChanged,
    Position,
    check_encoder,
    compare,
    parse_position,
    recorded_encoders,
    summarize,
    trails,
)
from tests.fixtures.fakes import FakeEncoder
from tests.fixtures.ladder_scenario import MALFORMED, SAMPLES, STANDARD, VECTORS, cand
from topics.codec import dumps
from workers.clients.llm import CallKind, CallResult, SampleResult
from workers.interfaces import StageContext
from workers.runtime.embedded import run_embedded
from workers.runtime.ladder import build_ladder
from workers.runtime.replay import encoder_id, replay_messages
from workers.runtime.settings import Settings

T0 = 1_700_000_000.0
SETTINGS = Settings()


class FakeJudge:
    """A judge endpoint that says yes at P(yes) 0.95, and can make time pass meanwhile."""

    model = "fake-judge"
    configured = True

    def __init__(self, clock: list[float], takes: float = 0.0) -> None:
        self.clock, self.takes, self.asked = clock, takes, 0

    @property
    def breaker_state(self):
        return type("B", (), {"status": BreakerStatus.CLOSED})()

    def for_route(self, route):
        return self

    async def judge(self, *args, **kwargs):
        self.asked += 1
        self.clock[0] += self.takes
        readout = JudgeReadout(
            JudgeStatus.OK, 0.95, 0.95, 0.05, (("yes", math.log(0.95)), ("no", math.log(0.05)))
        )
        return readout, [CallResult(CallKind.OK, 200, None, 12.0, "closed")]

    async def close(self) -> None:
        return None


def policy(**judge) -> object:
    routes = {"default": {}, "timed": {"deadline_seconds": 50}}
    data: dict = {"policy": {"version": "test-1"}, "routes": routes}
    if judge:
        data["judge"] = judge
    return parse_policy(data)


class FakeSampler(FakeJudge):
    """A sampler that draws the scenario's samples."""

    model = "fake-sampler"

    async def sample(self, *args, **kwargs):
        self.asked += 1
        call = CallResult(CallKind.OK, 200, None, 5.0, "closed")
        return SampleResult(SAMPLES, 40, BudgetLimit.NONE, (call,), len(SAMPLES))


async def record(candidates, *, takes: float = 0.0, sampler: FakeSampler | None = None):
    """The recording: the ladder with a live (fake) judge and a clock of its own."""
    clock = [T0]
    judge = FakeJudge(clock, takes)
    stages = build_ladder(SETTINGS)
    for stage in stages:
        if stage.name == "judge":
            stage.pool = judge
        if stage.name == "consistency" and sampler is not None:
            stage.pool = sampler
    ctx = StageContext(policy=policy(), clock=lambda: clock[0])
    ctx.services["encoder"] = FakeEncoder(VECTORS)
    result = await run_embedded(candidates, stages, ctx)
    return result.records, judge


def messages(candidates) -> list[ConsumerRecord]:
    out = []
    for offset, c in enumerate(candidates):
        value = c if isinstance(c, bytes) else dumps(c)
        out.append(
            ConsumerRecord("candidates", 0, offset, int(T0 * 1000), 0, None, value, None, 0, 0, ())
        )
    return out


async def replay(candidates, records, pol):
    return await replay_messages(
        messages(candidates),
        trails(records),
        SETTINGS,
        pol,
        services={"encoder": FakeEncoder(VECTORS)},
    )


class TestReproduces:
    async def test_recorded_policy_changes_nothing(self):
        candidates = [*STANDARD, *MALFORMED]
        records, _ = await record(candidates)
        run = await replay(candidates, records, policy())
        assert run.summary.total == len(candidates)
        assert run.summary.changed == 0, [c.to_dict() for c in run.changes if c.changed]
        assert all(not c.stages for c in run.changes)
        by_id = {c.candidate_id: c for c in run.changes}
        assert by_id["middle"].recorded == by_id["middle"].replayed == "accept"
        assert by_id["candidates/0/4"].replayed == "deadletter"

    async def test_the_judge_is_not_asked_again(self):
        records, judge = await record(STANDARD)
        asked = judge.asked
        run = await replay(STANDARD, records, policy())
        assert judge.asked == asked == 1
        judged = [r for r in run.records if r["stage"] == "judge"]
        assert [r["evidence"]["readout"]["score"] for r in judged] == [0.95]

    async def test_deadlines_are_judged_at_recorded_times(self):
        # The judge took 100 s on a 50 s route: the recording escalated on the deadline.
        timed = [cand("slow", STANDARD[2]["response"], route="timed")]
        records, _ = await record(timed, takes=100.0)
        assert [r["gate"] for r in records if r["stage"] == "judge"] == ["deadline"]
        run = await replay(timed, records, policy())
        (change,) = run.changes
        assert not change.changed and change.replayed == "escalate"

    async def test_the_sampler_is_not_asked_again(self):
        # R_MIDDLE without samples of its own: the sampler's draw decides consistency.
        sampler = FakeSampler([T0])
        records, _ = await record([STANDARD[2]], sampler=sampler)
        drawn = [r for r in records if r["stage"] == "consistency"]
        assert drawn[0]["evidence"]["sample_source"] == "sampler"
        assert drawn[0]["action"] == "committed"
        run = await replay([STANDARD[2]], records, policy())
        assert sampler.asked == 1
        (change,) = run.changes
        assert not change.changed and not change.stages


class TestStricterPolicy:
    async def test_changes_are_named_with_their_transition(self):
        records, _ = await record(STANDARD)
        run = await replay(STANDARD, records, policy(accept_bar=0.99))
        summary = run.summary
        assert summary.changed == 1
        assert summary.transitions == {"accept → escalate": 1}
        (changed,) = [c for c in run.changes if c.changed]
        assert changed.candidate_id == "middle"
        assert changed.stages == ("judge", "rules")  # rules is no longer reached
        assert changed.replayed_topic == "escalations.review"

    async def test_a_stage_never_reached_fails_closed(self):
        # Nothing was recorded for the judge on this path: a replay may not invent a yes.
        records, _ = await record([STANDARD[0]])
        strict = {"policy": {"version": "s"}, "routes": {"default": {}}}
        strict = parse_policy({**strict, "thresholds": {"sgi_strong_pass": 50.0}})
        run = await replay([STANDARD[0]], records, strict)
        (change,) = run.changes
        assert change.transition == "accept → escalate"
        judged = [r for r in run.records if r["stage"] == "judge"]
        assert "could not be reached" in judged[0]["reason"]


class TestPure:
    def test_positions(self):
        assert parse_position("42") == Position(offset=42)
        assert parse_position("2023-11-14T22:13:20Z") == Position(epoch_ms=1_700_000_000_000)
        with pytest.raises(ValueError, match="time zone"):
            parse_position("2023-11-14T22:13:20")
        with pytest.raises(ValueError, match="neither"):
            parse_position("yesterday")

    def test_encoder_change_is_refused_unless_allowed(self):
        recorded = {"sentence-transformers/all-MiniLM-L6-v2"}
        check_encoder(recorded, "sentence-transformers/all-MiniLM-L6-v2", allow_change=False)
        with pytest.raises(EncoderChanged, match="--allow-encoder-change"):
            check_encoder(recorded, "/models/other", allow_change=False)
        check_encoder(recorded, "/models/other", allow_change=True)

    def test_the_policy_names_its_encoder_without_loading_it(self):
        assert encoder_id(policy()) == "sentence-transformers/all-MiniLM-L6-v2"
        other = parse_policy({"encoder": {"model": "/models/other"}})
        assert encoder_id(other) == "/models/other"

    async def test_recorded_encoders_come_from_geometry_evidence(self):
        records, _ = await record(STANDARD)
        assert recorded_encoders(records) == {"fake"}

    def test_superseded_attempts_are_not_the_trail(self):
        first = {"candidate_id": "a", "stage": "outcome", "action": "accept", "topic": "state"}
        later = {"candidate_id": "a", "stage": "superseded", "action": "fallback"}
        again = {**first, "action": "fallback", "topic": "escalations.fallback"}
        (trail,) = trails([first, later, again]).values()
        assert trail.outcome == first
        change = compare(trail, [again], "a")
        assert change.transition == "accept → fallback" and change.changed
        assert summarize([change]).to_dict()["changed"] == 1

    def test_a_candidate_without_a_recorded_outcome_is_counted(self):
        change = compare(None, [{"candidate_id": "z", "stage": "outcome", "action": "accept"}], "z")
        assert change.recorded == "unrecorded"
        assert summarize([change]).unrecorded == 1
