"""A slow judge holds no one up, and a crash mid-flight costs nothing (issue 35).

The judge worker keeps up to GROUNDSTREAM_JUDGE_MAX_IN_FLIGHT calls open and concludes
each answer as its call returns, committing the contiguous concluded prefix of each
partition and naming the rest in the offset's metadata (`workers.runtime.inflight`).
Killed with -9 while 64 calls are open, its successor redoes what was not committed and
skips what was: every candidate one outcome, and one committed judge decision. An
endpoint that answers 429 with Retry-After for 10 s is waited out: every answer judged,
none escalated for it."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from aiohttp import web

from tests.fakes.openai_server import (
    Behaviour,
    FakeOpenAIServer,
    RateLimited,
    Verdict,
    serve_in_thread,
)
from tests.faults.chaos import Ladder, audit, produce_paced, read_topic, wait_for_outcomes
from topics.codec import dumps, loads
from topics.names import Topic

pytestmark = pytest.mark.timeout(600)

IN_FLIGHT = 64


class Latency(Behaviour):
    """A verdict after a latency drawn for each request (seeded), yes or no by the answer."""

    def __init__(self, low: float, high: float, seed: int = 35) -> None:
        self.low, self.high, self.random = low, high, random.Random(seed)
        self.lock = threading.Lock()

    async def respond(self, server: FakeOpenAIServer, body: dict) -> web.StreamResponse:
        with self.lock:
            pause = self.random.uniform(self.low, self.high)
        await asyncio.sleep(pause)
        p_yes = 0.97 if "even" in str(body.get("messages")) else 0.02
        return await Verdict(p_yes=p_yes).respond(server, body)


class LimitedFor(Behaviour):
    """429 with Retry-After: 2 until `seconds` after the first request, then verdicts."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.first, self.limited = seconds, None, 0

    async def respond(self, server: FakeOpenAIServer, body: dict) -> web.StreamResponse:
        now = time.monotonic()
        self.first = now if self.first is None else self.first
        if now - self.first < self.seconds:
            self.limited += 1
            return await RateLimited("2").respond(server, body)
        return await Verdict(p_yes=0.97).respond(server, body)


def judged(n: int, tag: str) -> list[tuple[str, bytes, bytes]]:
    """Candidates without a context (the test policy sends them straight to the judge),
    each with an answer of its own, so no verdict comes from the cache."""
    out = []
    for i in range(n):
        cid, session = f"{tag}-{i:04d}", f"{tag}s-{i % 40:02d}"
        parity = "even" if i % 2 == 0 else "odd"
        body = {
            "id": cid,
            "session_id": session,
            "turn": i // 40 + 1,
            "initiator": "user",
            "question": "What colour is the sky?",
            "response": f"Blue, reading {i} ({parity}).",
        }
        out.append((cid, session.encode(), dumps(body)))
    return out


async def judge_decisions(bootstrap: str, prefix: str) -> list[dict]:
    records = [loads(r.value) for r in await read_topic(bootstrap, Topic.DECISIONS.full(prefix))]
    return [r for r in records if r["stage"] == "judge"]


def run_ladder(ladder: Ladder, bootstrap: str, prefix: str, items, during) -> object:
    ladder.create_topics()
    ladder.start()
    try:
        producer = produce_paced(bootstrap, f"{prefix}candidates", items, 2.0)
        during()
        producer.join()
        ids = [cid for cid, _, _ in items]
        done = asyncio.run(wait_for_outcomes(bootstrap, prefix, ids, timeout=300))
        assert all(ladder.alive().values()), ladder.alive()
    finally:
        ladder.stop()
    assert done == len(items)
    return asyncio.run(audit(bootstrap, prefix, ids))


def test_kill_9_with_64_calls_open_loses_and_doubles_nothing(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    items = judged(400, "jf")
    behaviour = Latency(1.0, 4.0)
    with serve_in_thread(default=behaviour) as server:
        ladder = Ladder(
            kafka_bootstrap,
            topic_prefix,
            tmp_path,
            GROUNDSTREAM_JUDGE_URL=server.base_url,
            GROUNDSTREAM_JUDGE_MODEL="slow-judge",
            GROUNDSTREAM_JUDGE_MAX_IN_FLIGHT=str(IN_FLIGHT),
        )
        open_at_kill: list[int] = []

        def kill_mid_flight() -> None:
            deadline = time.monotonic() + 240
            # Past the first commits, with the worker's whole window open.
            while (server.open < IN_FLIGHT or len(server.requests) < 150) and (
                time.monotonic() < deadline
            ):
                time.sleep(0.05)
            open_at_kill.extend((server.open, server.most_open))
            ladder.kill_and_restart("judge")

        figures = run_ladder(ladder, kafka_bootstrap, topic_prefix, items, kill_mid_flight)
        asked = len(server.requests)
    print(f"\nkill -9 with {open_at_kill[0]} calls open; {asked} calls: {figures.render()}")
    # The worker held exactly its limit open, and never more (the server counts its own
    # handlers: after the kill the dead worker's calls run on beside its successor's).
    assert open_at_kill == [IN_FLIGHT, IN_FLIGHT]
    assert asked > len(items)  # the calls open at the kill were made again...
    figures.assert_exactly_once()
    decisions = asyncio.run(judge_decisions(kafka_bootstrap, topic_prefix))
    per_candidate = Counter(d["candidate_id"] for d in decisions)
    # ...and what was concluded before the kill, beyond a partition's committed offset,
    # was skipped, not judged again: one committed judge decision a candidate.
    assert sorted(per_candidate) == sorted(cid for cid, _, _ in items)
    assert set(per_candidate.values()) == {1}


def test_a_rate_limit_is_waited_out_and_escalates_nothing(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    items = judged(40, "rl")
    behaviour = LimitedFor(10.0)
    with serve_in_thread(default=behaviour) as server:
        ladder = Ladder(
            kafka_bootstrap,
            topic_prefix,
            tmp_path,
            GROUNDSTREAM_JUDGE_URL=server.base_url,
            GROUNDSTREAM_JUDGE_MODEL="limited-judge",
        )
        figures = run_ladder(ladder, kafka_bootstrap, topic_prefix, items, lambda: None)
    figures.assert_exactly_once()
    decisions = asyncio.run(judge_decisions(kafka_bootstrap, topic_prefix))
    assert behaviour.limited >= len(items)  # every answer met the limit at least once
    assert len(decisions) == len(items)
    assert {d["action"] for d in decisions} == {"accept"}, Counter(d["reason"] for d in decisions)
    calls = [c for d in decisions for c in d["evidence"]["calls"]]
    assert all(c["kind"] == "ok" for c in calls)
    # The record says how often the answer waited: the limit lasted 10 s, 2 s a wait.
    assert all(c.get("rate_limited", 0) >= 1 for c in calls)
    assert sum(c.get("rate_limited", 0) for c in calls) == behaviour.limited
