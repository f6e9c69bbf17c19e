"""One of three Kafka nodes is lost for good mid-run (kill -9, never restarted): the
ladder (`groundstream worker all`, as users run it) goes on by itself.

Three KRaft nodes of the test's own (replication 3, min.insync.replicas 2), topics
created with GROUNDSTREAM_REPLICATION=3. N candidates in six chunks; after the second,
the node that coordinates the stages' transactions (one variant) or their consumer
groups (the other) is killed with SIGKILL and stays dead. Asserted: every candidate
exactly one outcome (none lost, none in two topics), the worker never restarted, and
outcomes flowing again within FLOWING_S of the kill (no gap between new outcomes
longer than that afterwards). Written for a user's report of 395 of 600 outcomes after
ten minutes, geometry redoing batches while its transactions went to the dead node
(`Cannot send AddPartitionsToTxnRequest to 2: NodeNotReadyError`); on aiokafka 0.14.0
here the producer marks the dead coordinator dead and finds the new one in about a
second, in both variants.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from tests.faults.chaos import POLICY, OutcomeWatch, audit, candidates, produce_paced
from tests.integration.harness import Workers, cli, three_node_cluster, worker_env
from topics.codec import dumps, loads
from topics.names import Topic
from workers.runtime.loop import group_id, member_prefix

pytestmark = pytest.mark.timeout(900)

N = 600
CHUNKS = 6
CHUNK_SECONDS = 2.0
STAGES = 6  # geometry, switch, consistency, judge, rules, terminal
INSTANCE = "loss"
FLOWING_S = 60.0
"""Longest wait from the kill to the next new outcome, and between new outcomes after."""
DONE_S = 300.0


def busy_candidates(n: int, unique: int) -> list[tuple[str, bytes, bytes]]:
    """`chaos.candidates`, the first `unique` with a response and context of their own (a
    reference number), so geometry encodes them as with real traffic, not from its
    cache: the user's stall had geometry busy encoding when the node died. The rest
    are cheap, to keep the test short."""
    out = list(candidates(n))
    for i, (cid, key, value) in enumerate(out[:unique]):
        body = loads(value)
        ref = f" Reference {cid[2:]}."
        for field in ("context", "response"):
            if field in body:
                body[field] += ref
        out[i] = (cid, key, dumps(body))
    return out


async def _coordinator(bootstrap: str, key: str, kind: int) -> int:
    """The node that coordinates `key`: kind 1 a transactional id, 0 a consumer group."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return await admin.find_coordinator(key, kind)
    finally:
        await admin.close()


async def _replication(bootstrap: str, topic: str) -> int:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (described,) = await admin.describe_topics([topic])
        return len(described["partitions"][0]["replicas"])
    finally:
        await admin.close()


@pytest.mark.parametrize("coordinating", ["transactions", "groups"])
def test_one_node_lost_for_good_the_ladder_goes_on(
    coordinating: str, topic_prefix: str, tmp_path: Path
) -> None:
    began = time.monotonic()
    with three_node_cluster(tmp_path / "kafka") as cluster:
        bootstrap = cluster.bootstrap
        env = worker_env(
            bootstrap,
            topic_prefix,
            tmp_path / "data",
            GROUNDSTREAM_POLICY=str(POLICY),
            GROUNDSTREAM_REPLICATION="3",
            GROUNDSTREAM_PARTITIONS="3",  # the default users run, not the suite's 2
            GROUNDSTREAM_INSTANCE_ID=INSTANCE,
        )
        cli(env, "topics", "create")
        source = Topic.CANDIDATES.full(topic_prefix)
        assert asyncio.run(_replication(bootstrap, source)) == 3
        items = busy_candidates(N, unique=2 * N // CHUNKS)
        ids = [cid for cid, _, _ in items]
        chunk = N // CHUNKS
        workers = Workers(env, "all", tmp_path / "workers.log", apps=STAGES)
        watch = OutcomeWatch(bootstrap, topic_prefix)
        workers.start()
        watch.start()
        try:
            for i in range(2):
                part = items[i * chunk : (i + 1) * chunk]
                produce_paced(bootstrap, source, part, CHUNK_SECONDS).join()
            # Mid-run: outcomes flowing, later stages busy with the first chunks.
            waited = time.monotonic() + 120
            while not watch.seen and time.monotonic() < waited:
                time.sleep(0.5)
            # Every stage's transactional id and group share one coordinator each
            # (local.sh: one partition of __transaction_state and __consumer_offsets).
            geometry = f"{member_prefix(topic_prefix, 'geometry')}{INSTANCE}"
            txn_node = asyncio.run(_coordinator(bootstrap, geometry, 1))
            group_node = asyncio.run(_coordinator(bootstrap, group_id(topic_prefix, "geometry"), 0))
            node = txn_node if coordinating == "transactions" else group_node
            at_kill = len(watch.seen)
            cluster.kill(node)
            killed = time.monotonic()
            live = ",".join(f"127.0.0.1:{cluster.port + n - 1}" for n in (1, 2, 3) if n != node)
            for i in range(2, CHUNKS):
                part = items[i * chunk : (i + 1) * chunk]
                produce_paced(live, source, part, CHUNK_SECONDS).join()
            deadline = time.monotonic() + DONE_S
            while len(watch.seen) < N and time.monotonic() < deadline:
                time.sleep(1)
            finished = time.monotonic()
            alive = workers.proc is not None and workers.proc.poll() is None
        finally:
            watch.stop()
            workers.stop()
        after = watch.after(killed)
        first = after[0] - killed if after else float("inf")
        gaps = [b - a for a, b in zip([killed, *after], after, strict=False)]
        figures = asyncio.run(audit(live, topic_prefix, ids))
    print(
        f"\n{coordinating}: killed node {node} (transactions' coordinator {txn_node},"
        f" groups' {group_node}) at {at_kill} outcomes; first new outcome"
        f" {first:.1f}s after the kill, longest gap after it {max(gaps, default=0):.1f}s,"
        f" all {len(watch.seen)} in {finished - killed:.1f}s; test {time.monotonic() - began:.0f}s;"
        f" {figures.render()}"
    )
    assert at_kill < N, "the kill must come mid-run"
    assert alive, f"the worker exited:\n{workers.tail()}"
    assert first < FLOWING_S, f"no new outcome for {FLOWING_S:.0f}s after the kill"
    assert max(gaps) < FLOWING_S, f"outcomes stalled {max(gaps):.0f}s after the kill"
    figures.assert_exactly_once()
