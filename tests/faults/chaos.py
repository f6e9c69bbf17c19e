"""What the fault tests share: cheap candidates, the ladder as one process per stage, a
paced producer, the audit that reads every terminal topic and `decisions` back at
read_committed and counts what went wrong, and a pause (SIGSTOP) that lands inside a
worker's open transaction (the broker's DescribeTransactions, which aiokafka lacks).

Candidates are cheap on purpose: a handful of distinct question/context/response texts,
so after the first batch every embedding comes from the encoder's cache and the 2-core CI
machine spends its time on delivery, not on the model. The ladder test policy escalates
every candidate with a context to consistency, so every candidate climbs at least
geometry, switch, consistency and then rules or judge: each stage has work to be killed in.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Int64,
    Schema,
    TaggedFields,
)

from pipeline.trail.records import make_record
from tests.integration.conftest import consume_all
from tests.integration.harness import FIXTURES, Workers, cli, local_sh, worker_env
from topics import clients
from topics.clients import KafkaConnection
from topics.codec import dumps, loads
from topics.conclusion import Conclusion
from topics.names import TERMINAL, Topic
from workers.bench.procs import free_port
from workers.runtime.ladder import STAGE_NAMES

POLICY = FIXTURES / "ladder" / "policy.toml"
_CASES = {
    c["id"]: c
    for c in map(json.loads, (FIXTURES / "ladder" / "ladder_cases.jsonl").read_text().splitlines())
}
TEMPLATES = (
    _CASES["cs-agree"],  # consistency commits → rules → state
    _CASES["cs-compete"],  # competing meanings → judge (no endpoint) → review
    _CASES["rl-deny"],  # committed, then a deny-list rule → review
    {"question": "What colour is the sky?", "response": "Blue."},  # no context → judge
)
MALFORMED_EVERY = 50
"""Every 50th candidate lacks its response: dead-lettered at geometry, under its id."""


def candidates(n: int, sessions: int = 200) -> list[tuple[str, bytes, bytes]]:
    """(id, session key, value) for `n` candidates over `sessions` sessions."""
    out = []
    for i in range(n):
        cid, session = f"f-{i:05d}", f"fs-{i % sessions:03d}"
        body = {
            k: v for k, v in TEMPLATES[i % len(TEMPLATES)].items() if k not in ("id", "session_id")
        }
        body.update(id=cid, session_id=session, turn=i // sessions + 1, initiator="user")
        if i % MALFORMED_EVERY == MALFORMED_EVERY - 1:
            body.pop("response")
        out.append((cid, session.encode(), dumps(body)))
    return out


class Ladder:
    """`groundstream worker NAME` for every stage, each its own process."""

    def __init__(self, bootstrap: str, prefix: str, tmp: Path, **extra: str) -> None:
        self.env = worker_env(
            bootstrap,
            prefix,
            tmp / "data",
            GROUNDSTREAM_POLICY=str(POLICY),
            GROUNDSTREAM_BATCH_SIZE="16",
            **extra,
        )
        self.workers = {name: Workers(self.env, name, tmp / f"{name}.log") for name in STAGE_NAMES}
        self.kills: Counter[str] = Counter()

    def create_topics(self) -> None:
        cli(self.env, "topics", "create")

    def start(self) -> None:
        for w in self.workers.values():
            w.start()

    def kill_and_restart(self, name: str) -> None:
        worker = self.workers[name]
        worker.kill()
        self.kills[name] += 1
        worker.stop()  # closes its log file; the process is already gone
        worker.start()

    def alive(self) -> dict[str, bool]:
        return {n: w.proc is not None and w.proc.poll() is None for n, w in self.workers.items()}

    def stop(self) -> None:
        for w in self.workers.values():
            w.stop()


def produce_paced(
    bootstrap: str, topic: str, items: list[tuple[str, bytes, bytes]], seconds: float
) -> threading.Thread:
    """Send `items` evenly over `seconds` in a background thread (idempotent producer)."""

    async def run() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=5
        )
        await producer.start()
        try:
            step = max(1, len(items) // max(1, int(seconds * 10)))
            started = time.monotonic()
            futures = []
            for i in range(0, len(items), step):
                for _, key, value in items[i : i + step]:
                    futures.append(await producer.send(topic, value, key=key))
                ahead = started + seconds * (i + step) / len(items) - time.monotonic()
                if ahead > 0:
                    await asyncio.sleep(ahead)
            await asyncio.gather(*futures)
        finally:
            await producer.stop()

    thread = threading.Thread(target=lambda: asyncio.run(run()), name="paced-producer")
    thread.start()
    return thread


def chaos(ladder: Ladder, rounds: int, gap: tuple[float, float], seed: int) -> threading.Thread:
    """Kill every stage's worker with SIGKILL `rounds` times, in a random order and at
    random moments `gap` seconds apart, restarting each at once."""
    rng = random.Random(seed)

    def run() -> None:
        for _ in range(rounds):
            names = list(STAGE_NAMES)
            rng.shuffle(names)
            for name in names:
                time.sleep(rng.uniform(*gap))
                ladder.kill_and_restart(name)

    thread = threading.Thread(target=run, name="chaos")
    thread.start()
    return thread


@dataclass
class Figures:
    """The audit of one run, by candidate id."""

    sent: int
    outcomes: int = 0
    lost: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    conflicting: list[str] = field(default_factory=list)
    superseded: int = 0
    by_topic: dict[str, int] = field(default_factory=dict)

    def render(self) -> str:
        return (
            f"sent={self.sent} outcomes={self.outcomes} lost={len(self.lost)} "
            f"duplicates={len(self.duplicates)} conflicting={len(self.conflicting)} "
            f"superseded={self.superseded} by_topic={self.by_topic}"
        )

    def assert_exactly_once(self) -> None:
        assert not self.lost, f"lost: {self.lost[:20]}"
        assert not self.duplicates, f"duplicates: {self.duplicates[:20]}"
        assert not self.conflicting, f"conflicting: {self.conflicting[:20]}"
        assert self.outcomes == self.sent


def _terminal_id(topic: Topic, value: bytes, headers: list[tuple[str, bytes]]) -> str | None:
    if topic is Topic.DEADLETTER:
        named = dict(headers).get("gs-candidate-id")
        return named.decode() if named else None
    return loads(value)["candidate"]["id"]


async def read_topic(bootstrap: str, topic: str, **client: object) -> list:
    """`client`: aiokafka's connection settings on a secured broker (its admin's)."""
    return await consume_all(
        bootstrap,
        topic,
        timeout=60,
        isolation_level="read_committed",
        max_partition_fetch_bytes=8 << 20,
        **client,
    )


async def audit(bootstrap: str, prefix: str, ids: list[str], **client: object) -> Figures:
    """Every terminal topic and `decisions`, committed messages only, counted by id."""
    placed: dict[str, list[str]] = defaultdict(list)
    for topic in TERMINAL:
        for r in await read_topic(bootstrap, topic.full(prefix), **client):
            cid = _terminal_id(topic, r.value, list(r.headers or ()))
            placed[cid or f"?{r.partition}/{r.offset}"].append(topic.value)
    outcome_topics: dict[str, list[str]] = defaultdict(list)
    superseded = 0
    for r in await read_topic(bootstrap, Topic.DECISIONS.full(prefix), **client):
        record = loads(r.value)
        if record["stage"] == "outcome":
            outcome_topics[record["candidate_id"]].append(record["topic"])
        elif record["stage"] == "superseded":
            superseded += 1
    figures = Figures(sent=len(ids), superseded=superseded)
    figures.outcomes = sum(1 for cid in ids if outcome_topics.get(cid))
    figures.by_topic = dict(Counter(t for cid in ids for t in placed.get(cid, [])[:1]))
    for cid in ids:
        topics, outcomes = placed.get(cid, []), outcome_topics.get(cid, [])
        if not topics or not outcomes:
            figures.lost.append(cid)
        elif len(topics) > 1 or len(outcomes) > 1:
            figures.duplicates.append(cid)
        if len(set(topics) | set(outcomes)) > 1:
            figures.conflicting.append(cid)
    strays = set(placed) - set(ids)
    figures.duplicates += sorted(strays)  # terminal messages of no sent candidate
    return figures


async def outcomes_so_far(bootstrap: str, prefix: str) -> int:
    """How many candidates have their outcome record now (`decisions` read to its end)."""
    records = await read_topic(bootstrap, Topic.DECISIONS.full(prefix))
    return len({loads(r.value)["candidate_id"] for r in records if b'"stage":"outcome"' in r.value})


async def wait_for_outcomes(
    bootstrap: str, prefix: str, ids: list[str], timeout: float, **client: object
) -> int:
    """Follow `decisions` (committed records only) until every id has an outcome record or
    `timeout` seconds pass; returns how many ids have one."""
    topic = Topic.DECISIONS.full(prefix)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        max_partition_fetch_bytes=8 << 20,
        **client,
    )
    await consumer.start()
    wanted, seen = set(ids), set()
    deadline = time.monotonic() + timeout
    try:
        partitions = consumer.partitions_for_topic(topic) or set()
        while not partitions:
            await asyncio.sleep(0.5)
            await consumer._client.force_metadata_update()
            partitions = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        while not wanted <= seen and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=1000)
            for records in batches.values():
                for r in records:
                    if b'"stage":"outcome"' in r.value:
                        seen.add(loads(r.value)["candidate_id"])
        return len(wanted & seen)
    finally:
        await consumer.stop()


def accepted_conclusion(cid: str, pad: int = 0) -> Conclusion:
    """A concluded candidate `cid`, accepted to state, as a stage hands it to the terminal
    writer; `pad` characters of padding make its message that much larger."""
    outcome = make_record(
        candidate_id=cid,
        session_id=f"s-{cid}",
        turn=1,
        stage="outcome",
        action="accept",
        write_to_state=True,
        reason="r",
        policy_version="p",
        decided_at=1_700_000_000.0,
        mode="evaluate",
        route="default",
        prev_hash="h0",
        topic=Topic.STATE.value,
    )
    value = dumps({"candidate": {"id": cid} | ({"pad": "x" * pad} if pad else {})})
    return Conclusion(cid, Topic.STATE.value, f"s-{cid}".encode(), value, outcome)


CATCH_S = 90.0
"""Longest wait for a pause that lands inside a transaction."""


class DescribeTransactionsResponse_v0(Response):
    API_KEY = 65
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "transaction_states",
            CompactArray(
                ("error_code", Int16),
                ("transactional_id", CompactString("utf-8")),
                ("transaction_state", CompactString("utf-8")),
                ("transaction_timeout_ms", Int32),
                ("transaction_start_time_ms", Int64),
                ("producer_id", Int64),
                ("producer_epoch", Int16),
                (
                    "topics",
                    CompactArray(
                        ("topic", CompactString("utf-8")),
                        ("partitions", CompactArray(Int32)),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class DescribeTransactionsRequest_v0(RequestStruct):
    FLEXIBLE_VERSION = True
    API_KEY = 65
    API_VERSION = 0
    RESPONSE_TYPE = DescribeTransactionsResponse_v0
    SCHEMA = Schema(
        ("transactional_ids", CompactArray(CompactString("utf-8"))), ("tags", TaggedFields)
    )


class DescribeTransactions(Request[DescribeTransactionsRequest_v0]):
    """Kafka's DescribeTransactions (aiokafka has none): a transactional id's state and
    the topics its open transaction has added."""

    API_KEY = 65

    def __init__(self, transactional_id: str) -> None:
        self.transactional_id = transactional_id

    def build(self, request_struct_class: type[DescribeTransactionsRequest_v0]) -> Any:
        return request_struct_class([self.transactional_id], {})


async def pause_in_a_transaction(
    bootstrap: str, transactional_id: str, pid: int, before_offsets: bool
) -> int:
    """SIGSTOP `pid` once its transaction is open (and, `before_offsets`, has not added
    the group's offsets), and still so a moment later (on a single broker, one node
    coordinates all); returns the tries it took."""
    admin = clients.admin(KafkaConnection(bootstrap))
    await admin.start()

    async def caught() -> bool:
        response = await admin._send_request(DescribeTransactions(transactional_id))
        [(_, _, state, *_, topics, _)] = response.transaction_states
        offsets = any(t[0] == "__consumer_offsets" for t in topics)
        return state == "Ongoing" and not (before_offsets and offsets)

    try:
        deadline, tries = time.monotonic() + CATCH_S, 0
        while time.monotonic() < deadline:
            if not await caught():
                await asyncio.sleep(0.005)
                continue
            tries += 1
            os.kill(pid, signal.SIGSTOP)
            await asyncio.sleep(0.3)
            if await caught():
                return tries
            os.kill(pid, signal.SIGCONT)  # it went on before the signal: again
    finally:
        await admin.close()
    raise AssertionError(f"{transactional_id}: no pause inside a transaction in {CATCH_S}s")


class InThread:
    """An asyncio loop (`_run`) in a daemon thread of its own, until `stop`: `_stop` tells
    `_run` to end."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    async def _run(self) -> None:
        raise NotImplementedError


class OutcomeWatch(InThread):
    """Follows `decisions` (committed records) in a thread of its own: when each
    candidate's outcome record was first seen (monotonic seconds)."""

    def __init__(self, bootstrap: str, prefix: str) -> None:
        super().__init__()
        self.bootstrap, self.topic = bootstrap, Topic.DECISIONS.full(prefix)
        self.seen: dict[str, float] = {}

    async def _run(self) -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            enable_auto_commit=False,
            isolation_level="read_committed",
            max_partition_fetch_bytes=8 << 20,
        )
        await consumer.start()
        try:
            partitions = consumer.partitions_for_topic(self.topic) or set()
            while not partitions:
                await asyncio.sleep(0.5)
                await consumer._client.force_metadata_update()
                partitions = consumer.partitions_for_topic(self.topic) or set()
            tps = [TopicPartition(self.topic, p) for p in partitions]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            while not self._stop.is_set():
                batches = await consumer.getmany(timeout_ms=500)
                now = time.monotonic()
                for records in batches.values():
                    for r in records:
                        if b'"stage":"outcome"' in r.value:
                            self.seen.setdefault(loads(r.value)["candidate_id"], now)
        finally:
            await consumer.stop()

    def after(self, t: float) -> list[float]:
        return sorted(at for at in list(self.seen.values()) if at > t)


class OwnBroker:
    """A single-node broker of this test's own, through local.sh."""

    def __init__(self, run_dir: Path) -> None:
        self.port = free_port()
        self.env = {
            "KAFKA_PORT": str(self.port),
            "KAFKA_CONTROLLER_PORT": str(free_port()),
            "GROUNDSTREAM_KAFKA_DIR": str(run_dir),
        }
        self.run_dir = run_dir
        self.bootstrap = f"127.0.0.1:{self.port}"

    def _sh(self, command: str) -> None:
        done = local_sh(command, env=self.env, timeout=300)
        assert done.returncode == 0, f"local.sh {command}:\n{done.stdout}\n{done.stderr}"

    def start(self) -> None:
        self._sh("start")

    def stop(self) -> None:
        self._sh("stop")

    def kill(self) -> None:
        pid = int((self.run_dir / "kafka.pid").read_text().strip())
        os.kill(pid, signal.SIGKILL)
        for _ in range(100):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)
