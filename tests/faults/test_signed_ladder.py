"""GROUNDSTREAM_STAGE_KEY on the real broker: the workers sign and check with it.

The rules and terminal workers run with a stage key, as deploy/k8s gives every stage one
from the Secret. A person's accept written straight onto the inner `rules` topic without
a signature (what anyone with Write on `rules` could do) is dead-lettered; the same
verdict signed with the key reaches `state`, through a conclusion the rules worker seals
and the terminal writer checks. The workers once ran without the key whatever the Secret
said, and the unsigned accept reached `state`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from tests.faults.chaos import POLICY, read_topic, wait_for_outcomes
from tests.integration.harness import Workers, cli, worker_env
from topics.codec import loads
from topics.names import Topic
from topics.schema import Envelope, HumanPayload, candidate_from_dict
from topics.signing import signed

pytestmark = pytest.mark.timeout(300)

KEY = "k" * 32


def accepted(cid: str) -> Envelope:
    """A candidate a person accepted in review, as the review tool routes it to `rules`."""
    candidate = candidate_from_dict(
        {
            "id": cid,
            "session_id": f"s-{cid}",
            "question": "What colour is the sky on a clear day?",
            "context": "On a clear day the sky looks blue to anyone standing outside.",
            "response": "The sky looks blue on a clear day.",
        }
    )
    human = HumanPayload("accept", "alice", "", 1_700_000_000.0)
    return Envelope(candidate, route="default", mode="evaluate", human=human)


async def send(bootstrap: str, topic: str, messages: list[tuple[Envelope, bool]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for envelope, sign in messages:
            value = envelope.encode()
            headers = signed(KEY.encode(), Topic.RULES.value, value) if sign else ()
            key = envelope.candidate.session_id.encode()
            await producer.send_and_wait(topic, value, key=key, headers=list(headers))
    finally:
        await producer.stop()


def test_an_unsigned_verdict_is_dead_lettered_and_a_signed_one_delivered(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    env = worker_env(
        kafka_bootstrap, topic_prefix, tmp_path / "data",
        GROUNDSTREAM_POLICY=str(POLICY), GROUNDSTREAM_STAGE_KEY=KEY,
    )  # fmt: skip
    cli(env, "topics", "create")
    forged, genuine = accepted("forged"), accepted("genuine")
    with (
        Workers(env, "rules", tmp_path / "rules.log"),
        Workers(env, "terminal", tmp_path / "terminal.log"),
    ):
        rules = Topic.RULES.full(topic_prefix)
        asyncio.run(send(kafka_bootstrap, rules, [(forged, False), (genuine, True)]))
        ids = ["forged", "genuine"]
        done = asyncio.run(wait_for_outcomes(kafka_bootstrap, topic_prefix, ids, timeout=120))
    assert done == 2
    state = asyncio.run(read_topic(kafka_bootstrap, Topic.STATE.full(topic_prefix)))
    assert [loads(r.value)["candidate"]["id"] for r in state] == ["genuine"]
    dead = asyncio.run(read_topic(kafka_bootstrap, Topic.DEADLETTER.full(topic_prefix)))
    reasons = {dict(r.headers)["gs-candidate-id"]: dict(r.headers)["gs-reason"] for r in dead}
    assert reasons == {b"forged": b"unsigned envelope on an inner topic"}
