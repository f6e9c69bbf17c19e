"""Review claims: the first claim on a parking wins; claims read from the control topic
never raise; the loser is told who decided and when (issue 9, item 6)."""

from __future__ import annotations

from pipeline.policy.document import load_policy
from pipeline.stages.review import Claim, first_claim
from topics.codec import loads
from topics.names import Topic
from topics.schema import Envelope, candidate_from_dict, parse_envelope
from workers.interfaces import StageContext
from workers.runtime.control import KILL_SWITCH_KEY
from workers.runtime.review import AlreadyDecided, claim_key, encode_claim, read_claim
from workers.stages.review import review_emits


def claim(cid: str, by: str, parked: str = "p1", claim_id: str = "") -> Claim:
    return Claim(claim_id or f"{cid}-{by}", cid, parked, "accept", by, "", 1_700_000_000.0)


class TestClaims:
    def test_round_trip(self):
        c = claim("c1", "alice")
        assert read_claim(claim_key(c), encode_claim(c)) == c

    def test_other_messages_are_not_claims(self):
        c = claim("c1", "alice")
        assert read_claim(KILL_SWITCH_KEY, encode_claim(c)) is None
        assert read_claim(claim_key(c), None) is None
        assert read_claim(claim_key(c), b"{not json") is None
        assert read_claim(claim_key(c), b'{"claim_id": 1}') is None
        assert read_claim(claim_key(c), encode_claim(c).replace(b'"alice"', b"7")) is None

    def test_the_first_claim_on_the_parking_wins(self):
        claims = [
            claim("c2", "x"),
            claim("c1", "bob", "old"),
            claim("c1", "alice"),
            claim("c1", "bob"),
        ]
        assert first_claim(claims, "c1", "p1").by == "alice"
        assert first_claim(claims, "c1", "old").by == "bob"
        assert first_claim(claims, "c3", "p1") is None

    def test_the_loser_is_told_who_and_when(self):
        exc = AlreadyDecided("c1", "alice", 1_700_000_000.0, "reject")
        assert isinstance(exc, LookupError)
        assert str(exc) == (
            "'c1' is not waiting for review: already decided by alice at "
            "2023-11-14T22:13:20.000+00:00 (reject)"
        )


class TestRouting:
    def test_verdict_record_links_to_the_parking_and_carries_the_claim(self):
        c = candidate_from_dict({"id": "c1", "session_id": "s", "question": "q", "response": "r"})
        env = Envelope(c, route="default", mode="evaluate", last_hash="park-1")
        emits = review_emits(
            StageContext(policy=load_policy(None)), env, claim("c1", "alice", "park-1")
        )
        record = loads(emits[0].value)
        assert (record["stage"], record["prev_hash"]) == ("review", "park-1")
        assert record["evidence"] == {"reviewer": "alice", "note": ""}
        (routed,) = [e for e in emits if e.topic is Topic.RULES]
        human = parse_envelope(routed.value).human
        assert (human.by, human.verdict) == ("alice", "accept")
