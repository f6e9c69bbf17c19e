"""The agent client's rules, without a broker: first outcome wins, a resubmission is not
sent again, a reused id is refused, a timeout leaves the candidate in flight."""

from __future__ import annotations

import asyncio

import pytest

from pipeline.trail.records import content_hash, make_record
from topics.codec import dumps, loads
from workers.clients.agent import AgentClient, CandidateConflict, Outcome, OutcomeTimeout

CANDIDATE = {
    "id": "c-1",
    "session_id": "s-1",
    "question": "how long are deleted files kept?",
    "context": "deleted files are kept for 90 days",
    "response": "90 days",
}


def outcome_record(candidate: dict, topic: str, action: str) -> dict:
    return make_record(
        candidate_id=candidate["id"],
        session_id=candidate["session_id"],
        turn=0,
        stage="outcome",
        action=action,
        write_to_state=topic == "state",
        reason=f"switch: {action}",
        policy_version="p",
        decided_at=1_700_000_000.0,
        mode="evaluate",
        route="default",
        prev_hash="",
        topic=topic,
        content_hash=content_hash({"turn": 0, "initiator": "user", **candidate}),
    )


def ledger(record: dict) -> bytes:
    """The ledger entry the terminal writer writes with `record`."""
    return dumps({"candidate_id": record["candidate_id"], "topic": record["topic"],
                  "outcome": record})  # fmt: skip


class FakeProducer:
    """Sends nothing; the ladder answers each candidate with `decide(candidate)` later."""

    def __init__(self, client: AgentClient, decide) -> None:
        self.client, self.decide, self.sent = client, decide, []

    async def send_and_wait(self, topic, value, key=None):
        candidate = loads(value)
        self.sent.append(candidate)
        record = self.decide(candidate)
        if record is not None:
            asyncio.get_running_loop().call_later(0.01, self.client.index._add, ledger(record))


def client_with(decide) -> tuple[AgentClient, FakeProducer]:
    client = AgentClient("127.0.0.1:1", "t.")
    producer = FakeProducer(client, decide)
    client.producer = producer  # type: ignore[assignment]
    return client, producer


def accept(candidate):
    return outcome_record(candidate, "state", "accept")


class TestSubmit:
    async def test_accepted(self):
        client, producer = client_with(accept)
        outcome = await client.submit(CANDIDATE, timeout=5)
        assert outcome.accepted and outcome.action == "accept" and not outcome.resubmitted
        assert len(producer.sent) == 1

    async def test_escalation_carries_action_reason_and_record(self):
        client, _ = client_with(lambda c: outcome_record(c, "escalations.fallback", "fallback"))
        outcome = await client.submit(CANDIDATE, timeout=5)
        assert not outcome.accepted
        assert (outcome.action, outcome.reason) == ("fallback", "switch: fallback")
        assert outcome.record["topic"] == "escalations.fallback"

    async def test_a_resubmitted_id_gets_its_first_outcome_and_is_not_sent(self):
        client, producer = client_with(accept)
        first = await client.submit(CANDIDATE, timeout=5)
        again = await client.submit({**CANDIDATE, "deadline": 9_999_999_999}, timeout=5)
        assert again.resubmitted and again.record == first.record
        assert len(producer.sent) == 1

    async def test_a_reused_id_with_other_content_is_refused(self):
        client, producer = client_with(accept)
        await client.submit(CANDIDATE, timeout=5)
        with pytest.raises(CandidateConflict, match="already decided for other content"):
            await client.submit({**CANDIDATE, "response": "forever"}, timeout=5)
        assert len(producer.sent) == 1

    async def test_a_reused_id_decided_elsewhere_is_refused_when_its_outcome_arrives(self):
        other = {**CANDIDATE, "response": "forever"}
        client, _ = client_with(lambda c: accept(other))
        with pytest.raises(CandidateConflict):
            await client.submit(CANDIDATE, timeout=5)

    async def test_a_timeout_says_in_flight_and_the_outcome_still_arrives(self):
        client, producer = client_with(lambda c: None)
        with pytest.raises(OutcomeTimeout, match="still in flight"):
            await client.submit(CANDIDATE, timeout=0.05)
        client.index._add(ledger(accept(CANDIDATE)))
        assert (await client.outcome("c-1", timeout=1)).accepted
        assert len(producer.sent) == 1

    async def test_a_malformed_candidate_is_refused_before_sending(self):
        client, producer = client_with(accept)
        with pytest.raises(ValueError, match="missing field: response"):
            await client.submit({k: v for k, v in CANDIDATE.items() if k != "response"})
        assert producer.sent == []


class TestIndex:
    async def test_the_first_outcome_wins(self):
        client, _ = client_with(accept)
        client.index._add(ledger(accept(CANDIDATE)))
        client.index._add(ledger(outcome_record(CANDIDATE, "escalations.reject", "reject")))
        assert client.index.outcomes["c-1"]["topic"] == "state"

    async def test_entries_without_an_outcome_record_are_not_outcomes(self):
        client, _ = client_with(accept)
        stage = {**accept(CANDIDATE), "stage": "switch"}
        client.index._add(ledger(stage))
        client.index._add(dumps({"candidate_id": "c-1", "topic": "state"}))
        client.index._add(b"not json")
        client.index._add(None)
        assert client.index.outcomes == {}

    def test_a_dead_letter_is_an_outcome(self):
        record = outcome_record(CANDIDATE, "deadletter", "deadletter")
        assert Outcome.from_record(record).action == "deadletter"
