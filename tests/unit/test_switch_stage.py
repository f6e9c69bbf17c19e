"""The switch stage's reading of the envelope: the score geometry left there, rebuilt."""

from __future__ import annotations

import asyncio

from pipeline.policy.document import parse_policy
from pipeline.scores.results import DGIResult, GroundingScore, SGIResult
from topics.codec import dumps, loads
from topics.names import Topic
from topics.schema import Candidate, Envelope, GeometryPayload, parse_envelope
from workers.interfaces import Inbound, StageContext
from workers.stages.switch import SwitchStage, geometry_result

SGI = SGIResult(1.31, 0.9, 0.69, 0, 1)
DGI = DGIResult(0.61, 0.4)
FLAGGED = SGIResult(0.0, 0.0, 0.0, 0, 1, flagged=True, flag_reason="zero-norm embedding")


def envelope(geometry: GeometryPayload | None) -> Envelope:
    candidate = Candidate(id="c1", session_id="s1", question="q?", response="r.")
    return Envelope(candidate=candidate, route="default", mode="evaluate", geometry=geometry)


def read_back(score) -> object:
    """What the switch sees after the envelope went over the wire."""
    return geometry_result(parse_envelope(envelope(GeometryPayload(score)).encode()))


class TestGeometryResult:
    def test_sgi(self):
        assert read_back(SGI) == SGI

    def test_dgi(self):
        assert read_back(DGI) == DGI

    def test_grounding_score_keeps_probability_features_and_sgi(self):
        score = read_back(GroundingScore(0.72, SGI, {"sgi": 1.31, "unsupported": 0.25}))
        assert isinstance(score, GroundingScore)
        assert (score.value, score.sgi, dict(score.features)) == (
            0.72,
            SGI,
            {"sgi": 1.31, "unsupported": 0.25},
        )

    def test_a_flagged_sgi_keeps_its_flag_under_grounding(self):
        score = read_back(GroundingScore(0.0, FLAGGED, {}, flagged=True, flag_reason="x"))
        assert score.flagged and score.flag_reason == "zero-norm embedding"

    def test_no_geometry_is_none(self):
        assert geometry_result(parse_envelope(envelope(None).encode())) is None


def switch(raw: bytes) -> list[tuple[Topic, dict]]:
    ctx = StageContext(policy=parse_policy({"policy": {"version": "test-1"}}), clock=lambda: 1e9)
    emits = asyncio.run(SwitchStage().process([Inbound(b"s1", raw, "scored", 0, 7)], ctx))
    return [(e.topic, e.value) for e in emits]


class TestSwitchOnTheEnvelope:
    def test_no_geometry_escalates_up_the_ladder(self):
        emits = switch(envelope(None).encode())
        assert [t for t, _ in emits] == [Topic.DECISIONS, Topic.CONSISTENCY]
        assert loads(emits[0][1])["reason"] == "no usable geometry on the envelope"

    def test_malformed_geometry_is_dead_lettered(self):
        data = envelope(GeometryPayload(SGI)).to_dict()
        data["geometry"]["theta_rq"] = "wide"
        emits = switch(dumps(data))
        # The record, then the dead letter on its way to the terminal writer, under its id.
        assert [t for t, _ in emits] == [Topic.DECISIONS, Topic.CONCLUDED]
        record = loads(emits[0][1])
        assert "geometry.theta_rq" in record["reason"]
        assert record["candidate_id"] == "c1"


class TestSessionWrites:
    """Each session write is a changelog message in the batch's transaction: the switch
    writes a session only when the step changed it."""

    def decide(self, ctx: StageContext, turn: int, initiator: str = "user") -> None:
        env = envelope(GeometryPayload(SGI))
        env = Envelope(
            candidate=Candidate(
                id=f"c{turn}-{initiator}",
                session_id="s1",
                question="q?",
                response="r.",
                turn=turn,
                initiator=initiator,
            ),
            route="default",
            mode="evaluate",
            geometry=env.geometry,
        )
        asyncio.run(SwitchStage().process([Inbound(b"s1", env.encode(), "scored", 0, 7)], ctx))

    def test_a_step_that_changes_nothing_writes_nothing(self):
        writes: list[bytes] = []

        class Table(dict):
            def __setitem__(self, key, value):
                writes.append(key)
                super().__setitem__(key, value)

        ctx = StageContext(policy=parse_policy({"policy": {"version": "test-1"}}), sessions=Table())
        self.decide(ctx, turn=2)
        assert writes == [b"s1"] and ctx.sessions[b"s1"]["turn"] == 2
        self.decide(ctx, turn=2, initiator="agent")  # same turn, nothing latched: unchanged
        assert writes == [b"s1"]
        self.decide(ctx, turn=3)
        assert writes == [b"s1", b"s1"] and ctx.sessions[b"s1"]["turn"] == 3

    def test_a_new_policy_object_gets_its_own_switch(self):
        stage = SwitchStage()
        seed = StageContext(policy=parse_policy({"policy": {"version": "test-1"}}))
        route = seed.route_for(None)
        first = stage._switch(seed, route)
        assert stage._switch(seed, route) is first
        other = StageContext(policy=parse_policy({"policy": {"version": "test-2"}}))
        assert stage._switch(other, other.route_for(None)) is not first
