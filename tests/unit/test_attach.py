"""Attach's mapping: OpenAI chat and Responses pairs to candidates, the rest passed
through, the unreadable named; declarative selectors validated like the policy."""

from __future__ import annotations

import orjson
import pytest

from pipeline.errors import PolicyError
from pipeline.policy.attach import AttachMapping, Kind, map_message, resolve, text_of
from pipeline.policy.document import parse_policy

CHAT = AttachMapping.parse({"preset": "openai-chat"})
RESPONSES = AttachMapping.parse({"preset": "openai-responses"})
AT = {"topic": "agents.chat", "partition": 2, "offset": 17}


def chat_pair(**response_message) -> dict:
    return {
        "metadata": {"session_id": "s-42"},
        "request": {
            "model": "gpt-x",
            "messages": [
                {"role": "system", "content": "You are a helpful agent."},
                {"role": "user", "content": "Which river feeds the reservoir?"},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "t1"}]},
                {"role": "tool", "tool_call_id": "t1", "content": "The Arden river feeds it."},
                {"role": "system", "name": "retrieval", "content": [
                    {"type": "text", "text": "Lake Arden was completed in 1958."}
                ]},
            ],
        },
        "response": {
            "id": "chatcmpl-abc",
            "choices": [{"message": {"role": "assistant", **response_message}}],
        },
    }  # fmt: skip


def encode(doc) -> bytes:
    return orjson.dumps(doc)


class TestOpenAIChat:
    def test_a_completion_is_a_candidate(self):
        mapped = map_message(encode(chat_pair(content="The Arden river.")), b"k", CHAT, **AT)
        assert mapped.kind is Kind.CANDIDATE
        assert mapped.candidate == {
            "id": "chatcmpl-abc",
            "session_id": "s-42",
            "question": "Which river feeds the reservoir?",
            "response": "The Arden river.",
            "turn": 1,
            "context": ["The Arden river feeds it.", "Lake Arden was completed in 1958."],
        }

    def test_the_last_user_message_is_the_question_and_an_agent_step_says_so(self):
        pair = chat_pair(content="It was completed in 1958.")
        pair["request"]["messages"].insert(1, {"role": "user", "content": "An earlier question"})
        pair["request"]["messages"].append({"role": "tool", "content": "more"})
        candidate = map_message(encode(pair), None, CHAT, **AT).candidate
        assert candidate["question"] == "Which river feeds the reservoir?"
        assert candidate["turn"] == 2 and candidate["initiator"] == "agent"

    def test_a_tool_call_passes_through(self):
        mapped = map_message(encode(chat_pair(content=None, tool_calls=[{}])), None, CHAT, **AT)
        assert mapped.kind is Kind.PASS_THROUGH

    def test_a_user_turn_passes_through(self):
        doc = {"role": "user", "content": "hello", "session_id": "s-1"}
        assert map_message(encode(doc), None, CHAT, **AT).kind is Kind.PASS_THROUGH

    def test_the_key_is_the_session_when_the_message_names_none(self):
        pair = chat_pair(content="The Arden river.")
        del pair["metadata"]
        assert map_message(encode(pair), b"s-key", CHAT, **AT).candidate["session_id"] == "s-key"
        unread = map_message(encode(pair), None, CHAT, **AT)
        assert unread.kind is Kind.UNREADABLE and "session" in unread.reason

    def test_without_its_own_id_the_id_is_the_position(self):
        pair = chat_pair(content="The Arden river.")
        del pair["response"]["id"]
        candidate = map_message(encode(pair), None, CHAT, **AT).candidate
        assert candidate["id"] == "attach:agents.chat/2/17"
        again = map_message(encode(pair), None, CHAT, **AT).candidate
        assert again == candidate  # deterministic: attaching twice adds nothing new

    @pytest.mark.parametrize(
        ("raw", "reason"),
        [(b"not json", "not JSON"), (b"[1, 2]", "not a JSON object"), (b"", "not a JSON object")],
    )
    def test_unreadable_messages_say_why(self, raw, reason):
        mapped = map_message(raw, None, CHAT, **AT)
        assert mapped.kind is Kind.UNREADABLE and reason in mapped.reason

    def test_a_response_without_a_question_is_unreadable(self):
        pair = chat_pair(content="The Arden river.")
        pair["request"]["messages"] = [{"role": "system", "content": "x"}]
        mapped = map_message(encode(pair), None, CHAT, **AT)
        assert mapped.kind is Kind.UNREADABLE and "no question" in mapped.reason


class TestOpenAIResponses:
    def pair(self, output: list) -> dict:
        return {
            "request": {
                "metadata": {"session_id": "s-7"},
                "input": [
                    {"role": "user", "content": [{"type": "input_text", "text": "When?"}]},
                    {"type": "function_call", "call_id": "c1", "name": "lookup"},
                    {"type": "function_call_output", "call_id": "c1", "output": "in 1958"},
                ],
            },
            "response": {"id": "resp_1", "output": output},
        }

    def test_an_assistant_message_is_a_candidate(self):
        output = [{"type": "message", "role": "assistant",
                   "content": [{"type": "output_text", "text": "In 1958."}]}]  # fmt: skip
        candidate = map_message(encode(self.pair(output)), None, RESPONSES, **AT).candidate
        assert candidate == {
            "id": "resp_1",
            "session_id": "s-7",
            "question": "When?",
            "response": "In 1958.",
            "turn": 1,
            "initiator": "agent",
            "context": ["in 1958"],
        }

    def test_a_function_call_only_passes_through(self):
        output = [{"type": "function_call", "call_id": "c2", "name": "lookup"}]
        assert map_message(encode(self.pair(output)), None, RESPONSES, **AT).kind is (
            Kind.PASS_THROUGH
        )

    def test_a_string_input_is_the_question(self):
        pair = self.pair([])
        pair["request"]["input"] = "When was it built?"
        pair["response"]["output_text"] = "In 1958."
        candidate = map_message(encode(pair), None, RESPONSES, **AT).candidate
        assert candidate["question"] == "When was it built?"


class TestMappingSpec:
    def test_own_fields_replace_the_presets(self):
        mapping = AttachMapping.parse(
            {"preset": "openai-chat", "fields": {"session": ["/request/user"], "route": "/r"}}
        )
        pair = {**chat_pair(content="x"), "r": "strict"}
        pair["request"]["user"] = "u-9"
        candidate = map_message(encode(pair), None, mapping, **AT).candidate
        assert candidate["session_id"] == "u-9" and candidate["route"] == "strict"

    def test_a_mapping_of_its_own(self):
        mapping = AttachMapping.parse(
            {"fields": {"session": "/conv", "question": "/q", "response": "/a", "id": "/n"}}
        )
        doc = {"conv": "c1", "q": "why?", "a": "because", "n": 7}
        candidate = map_message(encode(doc), None, mapping, **AT).candidate
        assert candidate == {
            "id": "7",
            "session_id": "c1",
            "question": "why?",
            "response": "because",
        }

    @pytest.mark.parametrize(
        ("spec", "where"),
        [
            ({"preset": "anthropic"}, "attach.preset"),
            ({"fields": {"answer": "/a"}}, "attach.fields.answer"),
            ({"fields": {"question": "/q"}}, "attach.fields.response"),
            ({"fields": {"question": "q", "response": "/a"}}, "attach.fields.question[0].from"),
            (
                {"fields": {"question": {"from": "/q", "pick": "middle"}, "response": "/a"}},
                "attach.fields.question[0].pick",
            ),
        ],
    )
    def test_a_bad_mapping_names_its_field(self, spec, where):
        with pytest.raises(PolicyError, match=where.replace("[", r"\[").replace("]", r"\]")):
            AttachMapping.parse(spec)

    def test_pointers_follow_rfc_6901(self):
        doc = {"a/b": {"m~n": [10, 20]}}
        assert resolve(doc, "/a~1b/m~0n/1") == 20
        assert text_of([{"type": "text", "text": "a"}, {"type": "image"}, "b"]) == "a\nb"


class TestInThePolicy:
    def test_the_policy_carries_the_mapping(self):
        assert parse_policy({}).attach is None
        policy = parse_policy({"attach": {"preset": "openai-responses"}})
        assert policy.attach == RESPONSES

    def test_a_bad_mapping_fails_the_policy(self):
        with pytest.raises(PolicyError, match=r"attach\.preset"):
            parse_policy({"attach": {"preset": "nope"}})
