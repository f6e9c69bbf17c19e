"""The terminal writer: the first conclusion of an id is delivered with its outcome record;
any later one is recorded as superseded and reaches no terminal topic."""

from __future__ import annotations

from dataclasses import replace

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from pipeline.policy.document import load_policy
from pipeline.trail.records import SUPERSEDED_STAGE, make_record
from topics.codec import loads
from topics.conclusion import Conclusion, candidate_id_of, read_conclusion
from topics.names import Topic
from topics.security.keys import Signer, TrustedKeys, generate
from topics.security.signatures import sign
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


class TestAuthority:
    """The writer delivers only what a stage with the authority for its topic signed."""

    PAIRS = generate(("geometry", "rules"))
    TRUSTED = TrustedKeys({name: (key.public_key(),) for name, key in PAIRS.items()})

    def item(self, c: Conclusion, signer: str | None, offset: int = 5) -> Inbound:
        headers = c.wire_headers()
        if signer is not None:
            me = Signer(signer, self.PAIRS[signer])
            headers = sign(me, Topic.CONCLUDED.value, c.wire_key(), c.value, headers)
        return Inbound(c.wire_key(), c.value, "t.concluded", 0, offset, headers)

    async def run(self, items: list[Inbound], trusted: TrustedKeys | None) -> tuple:
        ctx = StageContext(policy=load_policy(None), trusted=trusted)
        stage = TerminalStage()
        return await stage.process(items, ctx), stage.ledger

    @staticmethod
    def reasons(emits: list[Emit]) -> list[str]:
        return [dict(e.headers)["gs-reason"].decode() for e in emits if e.topic is Topic.DEADLETTER]

    async def test_rules_signed_state_is_delivered_and_the_signature_not_passed_on(self) -> None:
        emits, ledger = await self.run(
            [self.item(conclusion("c1", Topic.STATE), "rules")], self.TRUSTED
        )
        assert stages(emits) == [("decisions", "outcome"), ("state", "")]
        assert emits[1].headers == (("traceparent", b"tp"),)
        assert ledger[b"c1"]["topic"] == "state"

    async def test_unsigned_forged_or_beyond_authority_state_is_dead_lettered(self) -> None:
        c = conclusion("c1", Topic.STATE)
        stranger = Signer("rules", Ed25519PrivateKey.generate())  # not a trusted rules key
        forged = Inbound(
            c.wire_key(), c.value, "t.concluded", 0, 9,
            sign(stranger, Topic.CONCLUDED.value, c.wire_key(), c.value, c.wire_headers()),
        )  # fmt: skip
        tampered = self.item(conclusion("c1", Topic.REVIEW), "rules")  # then retargeted
        tampered = Inbound(
            tampered.key, tampered.value, tampered.topic, 0, 10,
            tuple((k, b"state" if k == "gs-terminal" else v) for k, v in tampered.headers),
        )  # fmt: skip
        items = [self.item(c, None, 5), self.item(c, "geometry", 6), forged, tampered]
        emits, ledger = await self.run(items, self.TRUSTED)
        assert [e.topic for e in emits if e.topic is not Topic.DECISIONS] == [Topic.DEADLETTER] * 4
        assert self.reasons(emits) == [
            "conclusion refused: unsigned",
            "conclusion refused: geometry may not conclude to state",
            "conclusion refused: signature does not verify with rules's trusted keys",
            "conclusion refused: signature does not verify with rules's trusted keys",
        ]
        assert ledger == {}
        # Recorded under the message's own origin, not as the outcome of the id it names.
        outcomes = [loads(e.value) for e in emits if e.topic is Topic.DECISIONS]
        assert {r["candidate_id"] for r in outcomes} == {
            "t.concluded/0/5", "t.concluded/0/6", "t.concluded/0/9", "t.concluded/0/10"
        }  # fmt: skip

    @pytest.mark.parametrize("trusted", [None, "keys"])
    async def test_a_non_terminal_topic_is_dead_lettered_and_the_batch_goes_on(
        self, trusted: str | None
    ) -> None:
        keys = self.TRUSTED if trusted else None
        bad = self.item(replace(conclusion("c1", Topic.STATE), topic="candidates"), "rules", 1)
        good = self.item(conclusion("c2", Topic.STATE), "rules", 2)
        emits, ledger = await self.run([bad, good], keys)
        assert self.reasons(emits) == [
            "conclusion refused: conclusion names 'candidates', not a terminal topic"
        ]
        assert [e.topic for e in emits][-2:] == [Topic.DECISIONS, Topic.STATE]
        assert list(ledger) == [b"c2"]

    async def test_a_rollover_accepts_both_keys_and_a_removed_key_is_refused(self) -> None:
        old, new = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
        both = TrustedKeys({"rules": (old.public_key(), new.public_key())})
        only_new = TrustedKeys({"rules": (new.public_key(),)})

        def signed_by(key: Ed25519PrivateKey, cid: str) -> Inbound:
            c = conclusion(cid, Topic.STATE)
            headers = sign(
                Signer("rules", key), "concluded", c.wire_key(), c.value, c.wire_headers()
            )
            return Inbound(c.wire_key(), c.value, "t.concluded", 0, 0, headers)

        emits, ledger = await self.run([signed_by(old, "a"), signed_by(new, "b")], both)
        assert sorted(ledger) == [b"a", b"b"]
        emits, ledger = await self.run([signed_by(old, "a"), signed_by(new, "b")], only_new)
        assert list(ledger) == [b"b"]
        assert self.reasons(emits) == [
            "conclusion refused: signature does not verify with rules's trusted keys"
        ]
