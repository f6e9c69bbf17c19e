"""Inner topics are not an open door, and a person's verdict stands (issue 9, items 6-7):
with a stage key, only a signed envelope is read off an inner topic; a person's accept is
not undone by the deadline or the kill switch it was asked to rule on."""

from __future__ import annotations

from pipeline.policy.document import load_policy, parse_policy
from topics.codec import dumps, loads
from topics.conclusion import read_conclusion
from topics.names import Topic
from topics.schema import Envelope, HumanPayload, candidate_from_dict, parse_envelope
from topics.signing import signed, verify
from workers.interfaces import Emit, Inbound, StageContext
from workers.stages.geometry import GeometryStage
from workers.stages.rules import RulesStage
from workers.stages.terminal import deliver

KEY = b"stage-key"
NOW = 1_700_000_000.0
ACCEPTED = HumanPayload("accept", "alice", "", NOW - 5)


def envelope(human: HumanPayload | None = None, deadline: float | None = None) -> Envelope:
    c = candidate_from_dict(
        {
            "id": "c1",
            "session_id": "s1",
            "question": "What colour is the sky on a clear day?",
            "context": "On a clear day the sky looks blue to anyone standing outside.",
            "response": "The sky looks blue on a clear day.",
        }
    )
    return Envelope(c, route="default", mode="evaluate", deadline=deadline, human=human)


def ctx(key: bytes | None = KEY, kill_switch: bool = False) -> StageContext:
    c = StageContext(policy=load_policy(None), clock=lambda: NOW, stage_key=key)
    c.control.kill_switch = kill_switch
    return c


def inbound(env: Envelope, headers: tuple[tuple[str, bytes], ...] = ()) -> Inbound:
    return Inbound(b"s1", env.encode(), "t.rules", 0, 7, headers)


def delivered(emits: list[Emit]) -> list[Emit]:
    """The emits as the terminal writer delivers them: each conclusion becomes its outcome
    record and its terminal message."""
    out: list[Emit] = []
    for e in emits:
        if e.topic is Topic.CONCLUDED:
            out += deliver({}, read_conclusion(e.value, e.headers), NOW)
        else:
            out.append(e)
    return out


def where(emits: list[Emit]) -> list[Topic]:
    return [e.topic for e in delivered(emits) if e.topic is not Topic.DECISIONS]


def reason(emits: list[Emit]) -> str:
    (dead,) = [e for e in delivered(emits) if e.topic is Topic.DEADLETTER]
    return dict(dead.headers)["gs-reason"].decode()


class TestSignatures:
    async def test_an_unsigned_human_accept_is_dead_lettered(self):
        env = envelope(ACCEPTED)
        emits = await RulesStage().process([inbound(env)], ctx())
        assert where(emits) == [Topic.DEADLETTER]
        assert reason(emits) == "unsigned envelope on an inner topic"

    async def test_an_envelope_signed_for_another_topic_is_dead_lettered(self):
        env = envelope(ACCEPTED)
        emits = await RulesStage().process(
            [inbound(env, signed(KEY, "scored", env.encode()))], ctx()
        )
        assert reason(emits) == "envelope signature does not verify"

    async def test_a_signed_envelope_is_read_and_the_output_is_signed(self):
        env = envelope()
        emits = await RulesStage().process(
            [inbound(env, signed(KEY, "rules", env.encode()))], ctx()
        )
        (out,) = [e for e in delivered(emits) if e.topic is Topic.STATE]
        assert verify(KEY, "state", out.value, out.headers) is None

    async def test_without_a_key_nothing_is_checked_or_signed(self):
        emits = await RulesStage().process([inbound(envelope())], ctx(key=None))
        (out,) = [e for e in delivered(emits) if e.topic is Topic.STATE]
        assert all(k != "gs-hmac" for k, _ in out.headers)


class TestPersonsVerdictStands:
    async def test_not_subject_to_the_kill_switch(self):
        c = ctx(key=None, kill_switch=True)
        assert where(await RulesStage().process([inbound(envelope())], c)) == [Topic.REVIEW]
        emits = await RulesStage().process([inbound(envelope(ACCEPTED))], c)
        assert where(emits) == [Topic.STATE]
        rules = next(loads(e.value) for e in emits if e.topic is Topic.DECISIONS)
        assert rules["action"] == "accept" and rules["kill_switch"] is True

    async def test_not_subject_to_the_deadline(self):
        late = NOW - 60
        emits = await RulesStage().process([inbound(envelope(deadline=late))], ctx(key=None))
        assert where(emits) == [Topic.REVIEW]
        emits = await RulesStage().process(
            [inbound(envelope(ACCEPTED, deadline=late))], ctx(key=None)
        )
        assert where(emits) == [Topic.STATE]
        assert parse_envelope(delivered(emits)[-1].value).human == ACCEPTED


class TestRouteAccess:
    async def test_a_route_not_open_to_the_initiator_is_refused(self):
        policy = parse_policy(
            {"policy": {"version": "t"}, "routes": {"lenient": {"allowed_initiators": ["user"]}}}
        )
        c = StageContext(policy=policy, clock=lambda: NOW)
        body = envelope().candidate.to_dict() | {"route": "lenient", "initiator": "agent"}
        item = Inbound(b"s1", dumps(body), "t.candidates", 0, 3)
        emits = await GeometryStage().process([item], c)
        assert where(emits) == [Topic.DEADLETTER]
        assert reason(emits) == "route 'lenient' is not open to initiator 'agent'"


def test_a_stage_worker_signs_and_verifies_with_the_configured_key() -> None:
    """GROUNDSTREAM_STAGE_KEY reaches the Kafka worker's context: without it the stages
    neither signed nor checked an envelope, whatever the deployment's Secret said."""
    from workers.runtime.runner import build_loop
    from workers.runtime.settings import Settings

    assert build_loop("rules", Settings(stage_key="k" * 32)).ctx.stage_key == b"k" * 32
    assert build_loop("rules", Settings()).ctx.stage_key is None
