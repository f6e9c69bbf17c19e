"""Judge budgets and the verdict cache on the real broker, two judge workers in one group
(the stage loops of `groundstream worker judge`, run in this process as in
test_tracing.py), the rules stage and the terminal writer, against a fake
OpenAI-compatible judge on a real socket that notes when each request arrived.

* A route of 12 calls a minute over 4 partitions and 40 answers: the endpoint never sees
  more than 12 requests in any 60 s, also across a restart of both judge workers (each
  partition's spend is restored from the changelog); the answers over budget go to review
  with gate `judge_budget`; a resubmitted answer gets the cached verdict with no request,
  after the restart too; every candidate has exactly one outcome and nothing reaches
  state without the judge's yes.
* Under `over_budget = "wait"`, with the window cut to 2 s (the production code path, a
  shorter window), 40 answers are all judged and accepted, never more than 12 requests in
  any 2 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiokafka.partitioner import DefaultPartitioner

from pipeline.judge.budget import GATE
from tests.fakes.openai_server import Behaviour, FakeOpenAIServer, Verdict
from topics.admin import create_topics
from topics.clients import KafkaConnection
from topics.names import TERMINAL, Topic
from topics.schema import Envelope, candidate_from_dict
from workers.runtime.loop import StageLoop
from workers.runtime.runner import build_loop, instance_settings, until_ready
from workers.runtime.settings import Settings

from .conftest import consume_all, produce
from .harness import FIXTURES, values

pytestmark = pytest.mark.timeout(600)

PARTITIONS = 4
BUDGET = 12  # calls a minute: 3 per partition
TEMPLATE = json.loads((FIXTURES / "ladder" / "judge_cases.jsonl").read_text().splitlines()[0])


@dataclass
class Timed(Behaviour):
    """A clear yes, noting when each request arrived."""

    at: list[float] = field(default_factory=list)

    async def respond(self, server: FakeOpenAIServer, body: dict[str, Any]) -> web.StreamResponse:
        self.at.append(time.monotonic())
        return await Verdict(p_yes=0.98).respond(server, body)


def most_in_any_window(times: Iterable[float], window: float) -> int:
    ordered = sorted(times)
    return max((sum(1 for t in ordered if s <= t < s + window) for s in ordered), default=0)


def sessions_by_partition(per_partition: int, tag: str) -> list[str]:
    """Session ids, `per_partition` hashing to each partition (the producer's partitioner)."""
    found: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    partitioner, n = DefaultPartitioner(), 0
    everyone = list(range(PARTITIONS))
    while any(len(v) < per_partition for v in found.values()):
        session = f"{tag}-{n}"
        mine = found[partitioner(session.encode(), everyone, everyone)]
        if len(mine) < per_partition:
            mine.append(session)
        n += 1
    return [s for p in range(PARTITIONS) for s in found[p]]


def envelope(cid: str, session: str, case: str) -> tuple[bytes, bytes]:
    raw = {**TEMPLATE, "id": cid, "session_id": session, "route": "default"}
    raw["question"] = f"{raw['question']} [case {case}]"
    env = Envelope(candidate=candidate_from_dict(raw), route="default", mode="evaluate")
    return session.encode(), env.encode()


def write_policy(path: Path, over_budget: str) -> Path:
    path.write_text(
        "[policy]\n"
        'version = "budget-test-1"\n'
        "[routes.default]\n"
        'mode = "evaluate"\n'
        "breaker_threshold = 1000\n"
        f"judge_calls_per_minute = {BUDGET}\n"
        f'over_budget = "{over_budget}"\n'
    )
    return path


@dataclass
class Ladder:
    settings: Settings
    window: float | None = None
    loops: dict[str, StageLoop] = field(default_factory=dict)
    tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)

    async def start(self, *names: str) -> None:
        for name in names:
            stage, _, instance = name.partition("@")
            mine = instance_settings(self.settings, instance or "x", partitions=PARTITIONS)
            loop = build_loop(stage, mine)
            if self.window is not None and stage == "judge":
                loop.stage.gate.window = self.window  # type: ignore[attr-defined]
            self.loops[name] = loop
            self.tasks[name] = asyncio.create_task(loop.run())
        await until_ready(self.loops, PARTITIONS, tasks=self.tasks, seconds=120.0)

    async def stop(self, *names: str) -> None:
        for name in names or list(self.tasks):
            task = self.tasks.pop(name)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await self.loops.pop(name).stage.close()


@contextlib.asynccontextmanager
async def ladder(
    kafka_bootstrap: str, prefix: str, tmp_path: Path, over_budget: str, window: float | None
) -> AsyncIterator[tuple[Ladder, Timed]]:
    timed = Timed()
    async with FakeOpenAIServer(default=timed) as server:
        settings = Settings(
            bootstrap_servers=kafka_bootstrap,
            topic_prefix=prefix,
            partitions=PARTITIONS,
            data_dir=str(tmp_path / "data"),
            policy=str(write_policy(tmp_path / "policy.toml", over_budget)),
            judge_url=server.base_url,
            judge_model="budget-judge",
        )
        await create_topics(KafkaConnection(kafka_bootstrap), prefix, PARTITIONS, 1)
        run = Ladder(settings, window)
        try:
            await run.start("judge@j1", "judge@j2", "rules", "terminal")
            yield run, timed
        finally:
            await run.stop()


async def records(bootstrap: str, prefix: str) -> list[dict]:
    read = await consume_all(
        bootstrap, Topic.DECISIONS.full(prefix), timeout=20, isolation_level="read_committed"
    )
    return values(read)


async def settle(bootstrap: str, prefix: str, ids: set[str], timeout: float = 120) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        got = await records(bootstrap, prefix)
        done = {r["candidate_id"] for r in got if r["stage"] == "outcome"} & ids
        if done == ids or time.monotonic() > deadline:
            assert done == ids, f"no outcome for {sorted(ids - done)}"
            return got
        await asyncio.sleep(0.5)


def audit(got: list[dict], ids: set[str]) -> dict[str, dict]:
    """Exactly one outcome per candidate, and state only after the judge's yes."""
    outcomes = [r for r in got if r["stage"] == "outcome" and r["candidate_id"] in ids]
    assert Counter(r["candidate_id"] for r in outcomes) == Counter(ids)
    judged = {r["candidate_id"]: r for r in got if r["stage"] == "judge"}
    for r in outcomes:
        assert r["topic"] in {t.value for t in TERMINAL}
        if r["topic"] == Topic.STATE.value:
            assert judged[r["candidate_id"]]["action"] == "accept", r
            assert judged[r["candidate_id"]]["gate"] is None
    return {r["candidate_id"]: r for r in outcomes}


async def send(bootstrap: str, prefix: str, items: list[tuple[bytes, bytes]]) -> None:
    await produce(bootstrap, Topic.JUDGE.full(prefix), items)


async def test_the_budget_holds_across_two_workers_and_a_restart_and_repeats_hit_the_cache(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    first = sessions_by_partition(5, "one")  # 5 a partition: 3 judged, 2 over budget
    second = sessions_by_partition(5, "two")
    ids1 = {f"b1-{i}" for i in range(len(first))}
    ids2 = {f"b2-{i}" for i in range(len(second))}
    async with ladder(kafka_bootstrap, topic_prefix, tmp_path, "review", None) as (run, timed):
        items = [envelope(f"b1-{i}", s, f"one-{i}") for i, s in enumerate(first)]
        await send(kafka_bootstrap, topic_prefix, items)
        got = await settle(kafka_bootstrap, topic_prefix, ids1)
        calls_before_restart = len(timed.at)

        # Both judge workers go; their successors restore each partition's spend.
        await run.stop("judge@j1", "judge@j2")
        await run.start("judge@j1", "judge@j2")
        items = [envelope(f"b2-{i}", s, f"two-{i}") for i, s in enumerate(second)]
        await send(kafka_bootstrap, topic_prefix, items)
        await settle(kafka_bootstrap, topic_prefix, ids2)
        second_done = time.monotonic()

        # One of the judged answers again, in its session: the cached verdict, no call.
        judged1 = sorted(
            r["candidate_id"]
            for r in got
            if r["stage"] == "judge" and r["candidate_id"] in ids1 and r["action"] == "accept"
        )
        again = judged1[0]
        index = int(again.split("-")[1])
        calls_before_repeat = len(timed.at)
        await send(kafka_bootstrap, topic_prefix, [envelope("b3-0", first[index], f"one-{index}")])
        got = await settle(kafka_bootstrap, topic_prefix, {*ids1, *ids2, "b3-0"})

    outcomes = audit(got, {*ids1, *ids2, "b3-0"})
    judge = {r["candidate_id"]: r for r in got if r["stage"] == "judge"}
    print(
        f"\nrequests {len(timed.at)} (before the restart {calls_before_restart}); "
        f"most in any 60 s: {most_in_any_window(timed.at, 60.0)}; outcomes by topic "
        f"{dict(Counter(r['topic'] for r in outcomes.values()))}"
    )
    assert most_in_any_window(timed.at, 60.0) <= BUDGET
    assert calls_before_restart == BUDGET  # each partition spent its share of 3
    if second_done - timed.at[0] < 60.0:  # still inside the first calls' minute:
        assert calls_before_repeat == BUDGET  # the restarted workers knew it was spent
    over = [cid for cid, r in judge.items() if r["gate"] == GATE]
    assert len(over) == len(ids1) + len(ids2) - calls_before_repeat
    for cid in over:
        assert outcomes[cid]["topic"] == Topic.REVIEW.value
        assert judge[cid]["evidence"]["budget"]["route"]["calls_left"] == 0
    assert sum(r["topic"] == Topic.STATE.value for r in outcomes.values()) == len(timed.at) + 1

    # The repeat: answered from the cache (restored after the restart), no request.
    assert len(timed.at) == calls_before_repeat
    hit = judge["b3-0"]
    assert hit["action"] == "accept" and hit["evidence"]["cache"] == "hit"
    assert hit["evidence"]["cached_for"] == again and hit["evidence"]["calls"] == []
    cached_at = datetime.fromisoformat(hit["evidence"]["cached_at"])
    assert abs((cached_at - datetime.fromisoformat(judge[again]["decided_at"])).total_seconds()) < 1
    assert outcomes["b3-0"]["topic"] == Topic.STATE.value


async def test_wait_holds_answers_until_the_window_frees_and_judges_them_all(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    window = 2.0
    sessions = sessions_by_partition(10, "w")
    ids = {f"w-{i}" for i in range(len(sessions))}
    async with ladder(kafka_bootstrap, topic_prefix, tmp_path, "wait", window) as (_, timed):
        items = [envelope(f"w-{i}", s, f"w-{i}") for i, s in enumerate(sessions)]
        await send(kafka_bootstrap, topic_prefix, items)
        got = await settle(kafka_bootstrap, topic_prefix, ids)

    outcomes = audit(got, ids)
    most = most_in_any_window(timed.at, window)
    print(f"\nrequests {len(timed.at)}; most in any {window} s: {most}")
    assert len(timed.at) == len(ids)
    assert most <= BUDGET
    assert all(r["topic"] == Topic.STATE.value for r in outcomes.values())
    states = Counter(
        r["evidence"]["budget"]["state"]
        for r in got
        if r["stage"] == "judge" and r["candidate_id"] in ids
    )
    assert states["waited"] >= len(ids) - BUDGET
