"""Attach's routing of one source message: candidates, pass-through untouched, dead
letters with the reason, ids attached before skipped."""

from __future__ import annotations

import orjson
from aiokafka import ConsumerRecord

from pipeline.policy.attach import AttachMapping
from topics.codec import loads
from workers.runtime.attach import route_message
from workers.runtime.settings import Settings

CHAT = AttachMapping.parse({"preset": "openai-chat"})
SETTINGS = Settings(topic_prefix="t.")
HEADERS = (("traceparent", b"00-abc-def-01"),)


def message(doc, offset: int = 3, key: bytes | None = b"s-1") -> ConsumerRecord:
    value = doc if isinstance(doc, bytes) else orjson.dumps(doc)
    return ConsumerRecord("chat", 0, offset, 0, 0, key, value, None, 0, 0, HEADERS)


def pair(content) -> dict:
    return {
        "request": {"messages": [{"role": "user", "content": "How long?"}]},
        "response": {"id": "chatcmpl-1", "choices": [{"message": {"content": content}}]},
    }


def route(doc, known=None, **kw):
    return route_message(
        message(doc, **kw), CHAT, SETTINGS, "chat.passthrough", known or set(), 1.0
    )


def test_a_candidate_goes_to_candidates_keyed_by_session():
    routed = route(pair("Ninety days."))
    (send,) = routed.sends
    assert routed.counted == "candidates" and routed.candidate_id == "chatcmpl-1"
    assert (send.topic, send.key, send.headers) == ("t.candidates", b"s-1", HEADERS)
    assert loads(send.value)["response"] == "Ninety days."


def test_an_id_attached_before_is_skipped():
    routed = route(pair("Ninety days."), known={"chatcmpl-1"})
    assert routed.counted == "duplicate" and routed.sends == ()


def test_pass_through_is_untouched():
    raw = b'{"role": "user", "content": "hi"}'
    routed = route(raw)
    (send,) = routed.sends
    assert routed.counted == "pass_through"
    assert (send.topic, send.key, send.value, send.headers) == (
        "chat.passthrough",
        b"s-1",
        raw,
        HEADERS,
    )


def test_unreadable_goes_to_deadletter_with_the_reason():
    routed = route(b"\xff not json")
    assert routed.counted == "deadletter"
    topics = [s.topic for s in routed.sends]
    assert "t.deadletter" in topics and "t.decisions" in topics
    dead = next(s for s in routed.sends if s.topic == "t.deadletter")
    assert dead.value == b"\xff not json"
    assert dict(dead.headers)["gs-reason"].startswith(b"not JSON")


def test_a_candidate_the_schema_refuses_is_dead_lettered_by_attach():
    doc = pair("Ninety days.")
    doc["response"]["id"] = "x" * 300
    routed = route(doc)
    dead = next(s for s in routed.sends if s.topic == "t.deadletter")
    assert b"attach mapping: bad value: id longer than" in dict(dead.headers)["gs-reason"]


def test_a_position_dead_lettered_before_is_skipped():
    routed = route(b"\xff not json", known={"chat/0/3"})
    assert routed.counted == "duplicate" and routed.sends == ()
