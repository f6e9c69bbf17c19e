"""The terminal writer: the first conclusion of an id is delivered with its outcome record;
any later one is recorded as superseded and reaches no terminal topic."""

from __future__ import annotations

import pytest

from pipeline.policy.document import load_policy
from pipeline.trail.records import SUPERSEDED_STAGE, make_record
from topics.codec import loads
from topics.conclusion import BadConclusion, Conclusion, candidate_id_of, read_conclusion
from topics.names import Topic
from workers.interfaces import Emit, Inbound, StageContext
from workers.stages.terminal import TerminalStage, deliver


def conclusion(cid: str, topic: Topic, *, human: bool = False, value: bytes = b"env") -> Conclusion:
    outcome = make_record(
        candidate_id=cid,
        session_id="s1",
        turn=1,
        stage="outcome",
        action="accept" if topic is Topic.STATE else "escalate",
        write_to_state=topic is Topic.STATE,
        reason="r",
        policy_version="p",
        decided_at=1_700_000_000.0,
        mode="evaluate",
        route="default",
        prev_hash="h0",
        topic=topic.value,
    )
    return Conclusion(cid, topic.value, b"s1", value, outcome, human, (("traceparent", b"tp"),))


def wire(c: Conclusion) -> Conclusion:
    """Through the `concluded` topic and back."""
    inbound = Inbound(c.wire_key(), c.value, "t.concluded", 0, 0, c.wire_headers())
    return read_conclusion(inbound.value, inbound.headers)


def stages(emits: list[Emit]) -> list[tuple[str, str]]:
    return [
        (e.topic.value, loads(e.value)["stage"] if e.topic is Topic.DECISIONS else "")
        for e in emits
    ]


def test_a_conclusion_survives_the_wire_unchanged() -> None:
    c = conclusion("c1", Topic.DEADLETTER, value=b"\xff not json", human=True)
    assert wire(c) == c


def test_the_first_outcome_is_delivered_as_the_stage_wrote_it() -> None:
    ledger: dict = {}
    c = conclusion("c1", Topic.STATE)
    emits = deliver(ledger, wire(c), 1.0)
    assert stages(emits) == [("decisions", "outcome"), ("state", "")]
    assert loads(emits[0].value) == c.outcome
    assert (emits[1].key, emits[1].value, emits[1].headers) == (b"s1", b"env", c.headers)
    assert ledger[b"c1"]["topic"] == "state"


def test_a_replay_is_superseded_even_when_it_decides_otherwise() -> None:
    ledger: dict = {}
    deliver(ledger, conclusion("c1", Topic.STATE), 1.0)
    emits = deliver(ledger, conclusion("c1", Topic.REVIEW), 2.0)
    assert stages(emits) == [("decisions", SUPERSEDED_STAGE)]
    record = loads(emits[0].value)
    assert record["evidence"]["first_topic"] == "state"
    assert record["evidence"]["attempted_topic"] == Topic.REVIEW.value
    assert "topic" not in record  # not an outcome: counted nowhere as one
    assert ledger[b"c1"]["topic"] == "state"


def test_a_persons_verdict_ends_a_review_once() -> None:
    ledger: dict = {}
    deliver(ledger, conclusion("c1", Topic.REVIEW), 1.0)
    first = deliver(ledger, conclusion("c1", Topic.STATE, human=True), 2.0)
    second = deliver(ledger, conclusion("c1", Topic.REJECT, human=True), 3.0)
    assert stages(first) == [("decisions", "outcome"), ("state", "")]
    assert stages(second) == [("decisions", SUPERSEDED_STAGE)]


def test_candidate_id_of_reads_candidates_and_envelopes_and_never_raises() -> None:
    assert candidate_id_of(b'{"id": "c1", "question": 3}') == "c1"
    assert candidate_id_of(b'{"candidate": {"id": "c2"}}') == "c2"
    for raw in (None, b"", b"\xff", b"[1]", b'{"id": 7}', b'{"id": "   "}', b"[" * 100_000):
        assert candidate_id_of(raw) is None


class TestSeal:
    """With a stage key, only a sealed conclusion is delivered."""

    KEY = b"stage-key"

    def test_a_sealed_conclusion_reads_back(self) -> None:
        c = conclusion("c1", Topic.STATE)
        assert read_conclusion(c.value, c.wire_headers(self.KEY), self.KEY) == c

    def test_an_unsealed_or_forged_conclusion_is_refused(self) -> None:
        c = conclusion("c1", Topic.STATE)
        with pytest.raises(BadConclusion):
            read_conclusion(c.value, c.wire_headers(), self.KEY)
        with pytest.raises(BadConclusion):
            read_conclusion(c.value, c.wire_headers(b"another key"), self.KEY)
        forged = [
            (k, b"escalations.review" if k == "gs-terminal" else v)
            for k, v in c.wire_headers(self.KEY)
        ]
        with pytest.raises(BadConclusion):
            read_conclusion(c.value, tuple(forged), self.KEY)

    async def test_the_writer_dead_letters_a_forged_conclusion_and_delivers_nothing(self) -> None:
        c = conclusion("c1", Topic.STATE)
        item = Inbound(c.wire_key(), c.value, "t.concluded", 0, 5, c.wire_headers())
        ctx = StageContext(policy=load_policy(None), stage_key=self.KEY)
        stage = TerminalStage()
        emits = await stage.process([item], ctx)
        assert [e.topic for e in emits] == [Topic.DECISIONS, Topic.DECISIONS, Topic.DEADLETTER]
        assert stage.ledger == {}
