"""Message schemas: strict candidate parsing, dead-letter reasons, envelope round trips."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.scores.results import DGIResult, GroundingScore, SGIResult
from topics.codec import canonical, dumps, loads
from topics.names import TERMINAL, TOPIC_SPECS, Topic
from topics.schema import (
    MAX_ID_CHARS,
    Candidate,
    Envelope,
    GeometryPayload,
    HumanPayload,
    MalformedMessage,
    parse_candidate,
    parse_envelope,
)

MINIMAL = {"id": "c1", "session_id": "s1", "question": "q?", "response": "r."}


def raw(**changes) -> bytes:
    data = dict(MINIMAL)
    for key, value in changes.items():
        if value is ...:
            data.pop(key, None)
        else:
            data[key] = value
    return orjson.dumps(data)


def reason_of(payload: bytes, **kwargs) -> str:
    with pytest.raises(MalformedMessage) as info:
        parse_candidate(payload, **kwargs)
    assert isinstance(info.value, ValueError)
    assert info.value.reason == str(info.value)
    return info.value.reason


class TestValidCandidates:
    def test_minimal(self):
        c = parse_candidate(raw())
        assert c == Candidate(id="c1", session_id="s1", question="q?", response="r.")
        assert c.turn == 0
        assert c.initiator == "user"
        assert c.context is None and c.context_chunks is None
        assert c.samples is None and c.deadline is None and c.route is None
        assert c.metadata == {}

    def test_full(self):
        payload = raw(
            schema_version=1,
            turn=3,
            initiator="agent",
            context=["chunk one", "chunk two"],
            samples=["s1", "s2"],
            deadline=1_900_000_000.5,
            route="support",
            metadata={"tenant": "t", "n": 1},
        )
        c = parse_candidate(payload)
        assert c.turn == 3
        assert c.initiator == "agent"
        assert c.context == ("chunk one", "chunk two")
        assert c.context_chunks == ("chunk one", "chunk two")
        assert c.samples == ("s1", "s2")
        assert c.deadline == 1_900_000_000.5
        assert c.route == "support"
        assert c.metadata == {"tenant": "t", "n": 1}

    def test_context_string_is_one_chunk(self):
        c = parse_candidate(raw(context="the source"))
        assert c.context == "the source"
        assert c.context_chunks == ("the source",)

    def test_context_null_is_absent(self):
        assert parse_candidate(raw(context=None)).context is None

    def test_epoch_int_deadline(self):
        assert parse_candidate(raw(deadline=1_900_000_000)).deadline == 1_900_000_000.0

    @pytest.mark.parametrize(
        "iso",
        ["2030-03-17T12:00:00+00:00", "2030-03-17T12:00:00Z", "2030-03-17T14:00:00+02:00"],
    )
    def test_iso_deadline(self, iso):
        expected = datetime(2030, 3, 17, 12, 0, tzinfo=UTC).timestamp()
        assert parse_candidate(raw(deadline=iso)).deadline == expected

    def test_utf8_text(self):
        c = parse_candidate(raw(question="¿Qué? 日本語 🙂"))
        assert c.question == "¿Qué? 日本語 🙂"

    def test_max_bytes_boundary(self):
        payload = raw()
        assert parse_candidate(payload, max_bytes=len(payload)).id == "c1"


class TestMalformed:
    def test_none(self):
        assert "empty" in reason_of(None)  # type: ignore[arg-type]

    @pytest.mark.parametrize("payload", [b"", b"{", b"not json", b"{'id': 1}", b"[1,"])
    def test_not_json(self, payload):
        assert "not JSON" in reason_of(payload)

    def test_invalid_utf8(self):
        payload = b'{"id": "c1\xff", "session_id": "s", "question": "q", "response": "r"}'
        assert "UTF-8" in reason_of(payload)

    def test_oversize(self):
        payload = raw(response="x" * 500)
        reason = reason_of(payload, max_bytes=100)
        assert "oversize" in reason
        assert str(len(payload)) in reason and "100" in reason

    @pytest.mark.parametrize("payload", [b"[]", b'"text"', b"42", b"null"])
    def test_not_an_object(self, payload):
        assert "object" in reason_of(payload)

    @pytest.mark.parametrize("field", ["id", "session_id", "question", "response"])
    def test_missing_required_field(self, field):
        reason = reason_of(raw(**{field: ...}))
        assert "missing" in reason and field in reason

    @pytest.mark.parametrize("field", ["id", "session_id", "question", "response"])
    def test_required_field_null(self, field):
        assert field in reason_of(raw(**{field: None}))

    @pytest.mark.parametrize("field", ["id", "session_id", "question", "response", "route"])
    @pytest.mark.parametrize("value", [1, 1.5, True, ["x"], {"a": "b"}])
    def test_wrong_type_text(self, field, value):
        reason = reason_of(raw(**{field: value}))
        assert "wrong type" in reason and field in reason

    @pytest.mark.parametrize("field", ["id", "session_id", "question", "response", "route"])
    @pytest.mark.parametrize("value", ["", "   ", "\n\t"])
    def test_empty_strings(self, field, value):
        reason = reason_of(raw(**{field: value}))
        assert "empty" in reason and field in reason

    def test_overlong_id(self):
        reason = reason_of(raw(id="x" * (MAX_ID_CHARS + 1)))
        assert "id" in reason and str(MAX_ID_CHARS) in reason

    @pytest.mark.parametrize("turn", ["3", True, False, -1, 1.5, None, [1]])
    def test_bad_turn(self, turn):
        assert "turn" in reason_of(raw(turn=turn))

    @pytest.mark.parametrize("initiator", ["system", "User", "", 1, None])
    def test_bad_initiator(self, initiator):
        reason = reason_of(raw(initiator=initiator))
        assert "initiator" in reason and "user" in reason and "agent" in reason

    @pytest.mark.parametrize("version", [0, 2, "1", None, 1.5, True, 1.0])
    def test_bad_schema_version(self, version):
        assert "schema_version" in reason_of(raw(schema_version=version))

    @pytest.mark.parametrize(
        "context", [["ok", 3], [None], 5, {"a": "b"}, True, [], ["ok", ""], ["  "], ""]
    )
    def test_bad_context(self, context):
        assert "context" in reason_of(raw(context=context))

    @pytest.mark.parametrize("samples", ["one", ["a", 1], 3, {"a": 1}])
    def test_bad_samples(self, samples):
        assert "samples" in reason_of(raw(samples=samples))

    @pytest.mark.parametrize("metadata", [[], "x", 1, None, True])
    def test_metadata_not_an_object(self, metadata):
        assert "metadata" in reason_of(raw(metadata=metadata))

    @pytest.mark.parametrize(
        "deadline",
        ["2030-03-17T12:00:00", "tomorrow", True, 0, -5, [1], {"at": 1}, "2030-13-01T00:00:00Z"],
    )
    def test_bad_deadline(self, deadline):
        assert "deadline" in reason_of(raw(deadline=deadline))

    def test_deadline_without_timezone_says_so(self):
        assert "zone" in reason_of(raw(deadline="2030-03-17T12:00:00"))

    @pytest.mark.parametrize("token", [b"NaN", b"Infinity"])
    def test_non_finite_deadline_is_not_json(self, token):
        payload = raw()[:-1] + b',"deadline":' + token + b"}"
        reason_of(payload)


def _envelope(**overrides) -> Envelope:
    candidate = Candidate(
        id="c1",
        session_id="s1",
        question="q?",
        response="r.",
        turn=2,
        initiator="agent",
        context=("a", "b"),
        samples=("x",),
        deadline=1_900_000_000.25,
        route="default",
        metadata={"k": [1, 2]},
    )
    fields = {
        "candidate": candidate,
        "route": "default",
        "mode": "evaluate",
        "deadline": 1_900_000_000.25,
        "geometry": GeometryPayload(SGI),
        "trail": ({"stage": "geometry", "action": "scored"},),
        "last_hash": "ab" * 32,
        "timings": {"geometry": 1.25},
        "traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01",
        "human": HumanPayload("accept", "ana", "checked the source", 1_900_000_001.5),
        "policy_version": "v1",
    }
    fields.update(overrides)
    return Envelope(**fields)


class TestEnvelope:
    def test_round_trip(self):
        env = _envelope()
        assert parse_envelope(env.encode()) == env

    def test_round_trip_through_to_dict(self):
        env = _envelope()
        assert parse_envelope(dumps(env.to_dict())) == env

    def test_minimal_round_trip(self):
        env = Envelope(
            candidate=Candidate(id="c", session_id="s", question="q", response="r"),
            route="default",
            mode="shadow",
        )
        assert parse_envelope(env.encode()) == env

    def test_after_extends_trail_hash_and_timings(self):
        env = _envelope()
        later = env.after("switch", {"action": "accept"}, "cd" * 32, 0.12345)
        assert later.trail[-1] == {"stage": "switch", "action": "accept"}
        assert later.last_hash == "cd" * 32
        assert later.timings == {"geometry": 1.25, "switch": 0.123}
        assert env.trail == ({"stage": "geometry", "action": "scored"},)
        assert parse_envelope(later.encode()) == later

    @pytest.mark.parametrize(
        "mutate",
        [
            lambda d: d.update(schema_version=2),
            lambda d: d.update(schema_version=True),
            lambda d: d.update(route=1),
            lambda d: d.update(mode=None),
            lambda d: d.update(trail="x"),
            lambda d: d.update(trail=[1]),
            lambda d: d.update(geometry=[1]),
            lambda d: d.update(deadline="soon"),
            lambda d: d.update(deadline=True),
            lambda d: d.update(human="yes"),
            lambda d: d.update(candidate={"id": "c"}),
            lambda d: d.update(candidate=None),
        ],
    )
    def test_malformed_envelopes(self, mutate):
        data = _envelope().to_dict()
        mutate(data)
        with pytest.raises(MalformedMessage):
            parse_envelope(dumps(data))

    @pytest.mark.parametrize("payload", [None, b"", b"{", b"[]"])
    def test_not_an_envelope(self, payload):
        with pytest.raises(MalformedMessage):
            parse_envelope(payload)


SGI = SGIResult(1.3, 0.9, 0.7, 1, 2)
DGI = DGIResult(0.4, 0.8, flagged=True, flag_reason="short")
GROUNDED = GroundingScore(0.83, SGI, {"sgi": 1.3, "unsupported": 0.0})


class TestGeometryPayload:
    @pytest.mark.parametrize("score", [SGI, DGI, GROUNDED])
    def test_round_trip_keeps_the_score_value(self, score):
        payload = GeometryPayload(score)
        assert GeometryPayload.from_dict(loads(dumps(payload.to_dict()))).score == score

    def test_wire_form_is_the_record_plus_grounding(self):
        assert GeometryPayload(GROUNDED).to_dict() == {
            **SGI.to_dict(),
            "grounding": {"probability": 0.83, "features": {"sgi": 1.3, "unsupported": 0.0}},
        }

    @pytest.mark.parametrize(
        ("data", "reason"),
        [
            ([1], "geometry must be an object"),
            ({**SGI.to_dict(), "method": "xyz"}, "geometry.method"),
            ({k: v for k, v in SGI.to_dict().items() if k != "theta_rc"}, "geometry.theta_rc"),
            ({**SGI.to_dict(), "value": "1.3"}, "geometry.value"),
            ({**SGI.to_dict(), "best_chunk": True}, "geometry.best_chunk"),
            ({**SGI.to_dict(), "flagged": 1}, "geometry.flagged"),
            ({**SGI.to_dict(), "extra": 1}, "unknown field 'extra'"),
            ({**DGI.to_dict(), "theta_rq": 0.5}, "unknown field 'theta_rq'"),
            ({**DGI.to_dict(), "grounding": GROUNDED.to_dict()}, "only with an sgi"),
            ({**SGI.to_dict(), "grounding": {"probability": 0.5}}, "probability and features"),
            (
                {**SGI.to_dict(), "grounding": {"probability": 1.5, "features": {}}},
                "probability must be in [0, 1]",
            ),
            (
                {**SGI.to_dict(), "grounding": {"probability": 0.5, "features": {"a": "x"}}},
                "features must map names to finite numbers",
            ),
        ],
    )
    def test_malformed_geometry_is_dead_lettered_with_its_reason(self, data, reason):
        env = _envelope().to_dict() | {"geometry": data}
        with pytest.raises(MalformedMessage) as info:
            parse_envelope(dumps(env))
        assert reason in info.value.reason


class TestHumanPayload:
    def test_round_trip(self):
        human = HumanPayload("reject", "ana", "", 1_900_000_000.0)
        assert HumanPayload.from_dict(loads(dumps(human.to_dict()))) == human
        assert not human.accepted and HumanPayload("accept", "ana", "", 1.0).accepted

    @pytest.mark.parametrize(
        ("data", "reason"),
        [
            ("yes", "human must be an object"),
            ({"verdict": "accept", "by": "ana", "note": ""}, "needs verdict, by, note and at"),
            ({"verdict": "maybe", "by": "ana", "note": "", "at": 1.0}, "human.verdict"),
            ({"verdict": "accept", "by": " ", "note": "", "at": 1.0}, "human.by"),
            ({"verdict": "accept", "by": "ana", "note": 3, "at": 1.0}, "human.note"),
            ({"verdict": "accept", "by": "ana", "note": "", "at": "now"}, "human.at"),
        ],
    )
    def test_malformed_human_is_dead_lettered_with_its_reason(self, data, reason):
        env = _envelope().to_dict() | {"human": data}
        with pytest.raises(MalformedMessage) as info:
            parse_envelope(dumps(env))
        assert reason in info.value.reason


class TestCodecAndNames:
    def test_codec_round_trip(self):
        value = {"b": 1, "a": [1.5, "x", None, True]}
        assert loads(dumps(value)) == value
        assert canonical({"b": 1, "a": 2}) == b'{"a":2,"b":1}'

    def test_topic_values_match_names(self):
        assert Topic.FALLBACK.value == "escalations.fallback"
        assert Topic.STATE.full("t-") == "t-state"
        assert Topic.DEADLETTER in TERMINAL and Topic.STATE in TERMINAL
        assert Topic.DECISIONS not in TERMINAL
        assert {spec.topic for spec in TOPIC_SPECS} == set(Topic)

    def test_control_topic_is_compacted_single_partition(self):
        spec = next(s for s in TOPIC_SPECS if s.topic is Topic.CONTROL)
        assert spec.compacted and spec.fixed_partitions == 1
        assert spec.kafka_configs()["cleanup.policy"] == "compact"


non_empty = st.text(min_size=1, max_size=40).filter(lambda s: s.strip())
ids = st.text(min_size=1, max_size=MAX_ID_CHARS).filter(lambda s: s.strip())
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53), 2**53),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)


@st.composite
def candidates(draw) -> Candidate:
    context = draw(
        st.one_of(
            st.none(),
            non_empty,
            st.lists(non_empty, min_size=1, max_size=4).map(tuple),
        )
    )
    return Candidate(
        id=draw(ids),
        session_id=draw(ids),
        question=draw(non_empty),
        response=draw(non_empty),
        turn=draw(st.integers(0, 2**62)),
        initiator=draw(st.sampled_from(["user", "agent"])),
        context=context,
        samples=draw(st.one_of(st.none(), st.lists(st.text(max_size=20), max_size=4).map(tuple))),
        deadline=draw(
            st.one_of(st.none(), st.floats(min_value=1e-3, max_value=1e12, allow_infinity=False))
        ),
        route=draw(st.one_of(st.none(), non_empty)),
        metadata=draw(st.dictionaries(st.text(max_size=10), json_scalars, max_size=4)),
    )


class TestRoundTripProperty:
    @settings(max_examples=300, deadline=None)
    @given(candidate=candidates())
    def test_candidate_round_trips(self, candidate):
        assert parse_candidate(dumps(candidate.to_dict())) == candidate
        assert parse_candidate(orjson.dumps(candidate.to_dict())) == candidate

    @settings(max_examples=100, deadline=None)
    @given(candidate=candidates(), mode=st.sampled_from(["off", "shadow", "evaluate", "active"]))
    def test_envelope_round_trips(self, candidate, mode):
        env = Envelope(candidate=candidate, route="r", mode=mode, deadline=candidate.deadline)
        assert parse_envelope(env.encode()) == env
