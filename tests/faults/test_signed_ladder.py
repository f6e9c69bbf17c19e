"""The keys on the real broker: the workers sign and check with them.

The rules and terminal workers run with the shared envelope key (GROUNDSTREAM_STAGE_KEY),
as deploy/k8s gives every stage one from the Secret, and each with its own signing key
(`groundstream keys generate`); the writer holds the stages' public keys. A person's
accept written straight onto the inner `rules` topic without an envelope signature (what
anyone with Write on `rules` could do) is dead-lettered; the same verdict signed with the
envelope key reaches `state`, through a conclusion the rules worker signs with its own key
and the terminal writer checks. A conclusion for `state` signed with another stage's key
is dead-lettered by the writer. The workers once ran without the key whatever the Secret
said, and the unsigned accept reached `state`.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from tests.faults.chaos import POLICY, read_topic, wait_for_outcomes
from tests.integration.harness import Workers, cli, worker_env
from topics.codec import loads
from topics.conclusion import Conclusion
from topics.names import Topic
from topics.schema import Envelope, HumanPayload, candidate_from_dict
from topics.security.keys import Signer, load_signer, load_trusted
from topics.security.signatures import sign, verify
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


async def conclude_as(bootstrap: str, topic: str, envelope: Envelope, signer: Signer) -> None:
    """A conclusion for `state`, signed with `signer`'s key, written to `concluded`."""
    c = Conclusion(envelope.candidate.id, "state", b"s", envelope.encode(), {"stage": "outcome"})
    headers = sign(signer, Topic.CONCLUDED.value, c.wire_key(), c.value, c.wire_headers())
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(topic, c.value, key=c.wire_key(), headers=list(headers))
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
    keys = tmp_path / "keys"
    cli(env, "keys", "generate", "--out", str(keys))
    trusted = tmp_path / "trusted"
    trusted.mkdir()
    for public in keys.glob("*.pub"):
        (trusted / public.name).write_bytes(public.read_bytes())
    as_rules = env | {"GROUNDSTREAM_SIGNING_KEY_FILE": str(keys / "rules.key")}
    as_writer = env | {
        "GROUNDSTREAM_SIGNING_KEY_FILE": str(keys / "terminal.key"),
        "GROUNDSTREAM_TRUSTED_KEYS_DIR": str(trusted),
    }
    forged, genuine = accepted("forged"), accepted("genuine")
    with (
        Workers(as_rules, "rules", tmp_path / "rules.log"),
        Workers(as_writer, "terminal", tmp_path / "terminal.log"),
    ):
        rules = Topic.RULES.full(topic_prefix)
        asyncio.run(send(kafka_bootstrap, rules, [(forged, False), (genuine, True)]))
        ids = ["forged", "genuine"]
        done = asyncio.run(wait_for_outcomes(kafka_bootstrap, topic_prefix, ids, timeout=120))
        # The judge's key does not speak for rules: its conclusion for state is refused.
        posing = Signer("rules", load_signer(keys / "judge.key", "judge").key)
        concluded = Topic.CONCLUDED.full(topic_prefix)
        asyncio.run(conclude_as(kafka_bootstrap, concluded, accepted("posing"), posing))
        dead = wait_for_dead_letters(kafka_bootstrap, topic_prefix, 2)
    assert done == 2
    state = asyncio.run(read_topic(kafka_bootstrap, Topic.STATE.full(topic_prefix)))
    assert [loads(r.value)["candidate"]["id"] for r in state] == ["genuine"]
    reasons = {
        dict(r.headers).get("gs-candidate-id", b"-"): dict(r.headers)["gs-reason"] for r in dead
    }
    assert reasons == {
        b"forged": b"unsigned envelope on an inner topic",
        b"-": b"conclusion refused: signature does not verify with rules's trusted keys",
    }
    # What reached state was concluded and recorded under the rules key, checked by the writer.
    decisions = asyncio.run(read_topic(kafka_bootstrap, Topic.DECISIONS.full(topic_prefix)))
    public = load_trusted(trusted)
    signers = {
        (loads(r.value)["candidate_id"], loads(r.value)["stage"]): verify(
            public, "decisions", r.key, r.value, r.headers
        )
        for r in decisions
        if loads(r.value)["candidate_id"] == "genuine"
    }
    assert signers == {("genuine", "rules"): "rules", ("genuine", "outcome"): "terminal"}


def wait_for_dead_letters(bootstrap: str, prefix: str, n: int, timeout: float = 60) -> list:
    deadline = time.monotonic() + timeout
    while True:
        dead = asyncio.run(read_topic(bootstrap, Topic.DEADLETTER.full(prefix)))
        if len(dead) >= n or time.monotonic() > deadline:
            return dead
        time.sleep(1)
