"""Honest timings (issue 23, item 3): a decision's stage time counts from when the stage
received its batch, queueing behind the batch's other candidates included; the metrics'
histogram reads the same figure, and the wait on the source topic is a metric apart."""

from __future__ import annotations

import time

from pipeline.policy.document import load_policy
from pipeline.trail.verdict import Verdict
from tests.fixtures.fakes import FakeProducer
from topics.codec import loads
from topics.names import Topic
from topics.schema import Envelope, candidate_from_dict
from workers.interfaces import Emit, StageContext
from workers.runtime.loop import StageLoop
from workers.runtime.metrics import StageMetrics
from workers.runtime.settings import Settings
from workers.runtime.telemetry import StageTelemetry
from workers.stages.common import EnvelopeStage
from workers.stages.kit import conclude

SLOW_S = 0.3


ACCEPT = Verdict("pass", "accept", "ok")


class BlockingFirst(EnvelopeStage):
    """Decides the first envelope of a batch slowly (CPU-bound, no await), the rest at once:
    the batch's other candidates queue behind it."""

    name = "rules"
    source = Topic.RULES

    def __init__(self) -> None:
        self.emits: list[Emit] = []

    async def decide_one(self, env: Envelope, ctx: StageContext) -> list[Emit]:
        started = time.perf_counter()
        if env.candidate.id == "slow":
            time.sleep(SLOW_S)
        emits = conclude(ctx, self.name, env, ACCEPT, started)
        self.emits += emits
        return emits


def envelope(cid: str) -> bytes:
    c = candidate_from_dict({"id": cid, "session_id": "s", "question": "q?", "response": "a."})
    return Envelope(c, route="default", mode="evaluate").encode()


class Record:
    topic, partition, key, headers = "p.rules", 0, b"s", ()

    def __init__(self, offset: int, value: bytes, timestamp_ms: int | None = None) -> None:
        self.offset, self.value, self.timestamp = offset, value, timestamp_ms


def timings(stage: BlockingFirst) -> dict[str, float]:
    records = [loads(e.value) for e in stage.emits if e.topic is Topic.DECISIONS]
    return {r["candidate_id"]: r["timings"]["rules"] for r in records if r["stage"] == "rules"}


def stage_loop(stage: BlockingFirst, metrics: StageMetrics | None = None) -> StageLoop:
    ctx = StageContext(policy=load_policy(None))
    return StageLoop(
        stage, Settings(topic_prefix="p."), ctx, StageTelemetry("rules", "p.x"), metrics=metrics
    )


async def test_a_candidate_queued_behind_a_slow_one_says_so() -> None:
    stage = BlockingFirst()
    records = [Record(0, envelope("slow")), Record(1, envelope("quick"))]
    await stage_loop(stage)._batch(FakeProducer(), records)  # type: ignore[arg-type]
    took = timings(stage)
    assert took["slow"] >= SLOW_S * 1000
    assert took["quick"] >= SLOW_S * 1000  # it waited for "slow"; it used to say ~0 ms


async def test_timing_counts_from_the_fetch_not_from_the_batch_start() -> None:
    stage = BlockingFirst()
    fetched = time.perf_counter() - 0.5  # e.g. held for the kill switch's state meanwhile
    await stage_loop(stage)._batch(FakeProducer(), [Record(0, envelope("quick"))], fetched)  # type: ignore[arg-type]
    assert timings(stage)["quick"] >= 500


async def test_the_histogram_reads_the_records_figure_and_waits_are_apart() -> None:
    stage = BlockingFirst()
    metrics = StageMetrics("rules", "p.rules")
    loop = stage_loop(stage, metrics)
    loop.telemetry = StageTelemetry("rules", "p.rules", metrics)
    now = time.time()
    records = [Record(0, envelope("slow"), int((now - 2.0) * 1000))]
    await loop._batch(FakeProducer(), records, time.perf_counter(), now)  # type: ignore[arg-type]
    sample = metrics.registry.get_sample_value
    decided = sample("groundstream_decision_seconds_sum", {"stage": "rules"})
    assert decided == timings(stage)["slow"] / 1000.0
    assert 1.9 <= sample("groundstream_queue_wait_seconds_sum", {"stage": "rules"}) <= 2.1


def test_outside_a_batch_a_decision_is_timed_from_its_own_start() -> None:
    ctx = StageContext(policy=load_policy(None))
    c = candidate_from_dict({"id": "c", "session_id": "s", "question": "q?", "response": "a."})
    env = Envelope(c, route="default", mode="evaluate")
    emits = conclude(ctx, "rules", env, ACCEPT, time.perf_counter())
    record = loads(emits[0].value)
    assert record["timings"]["rules"] < 100
