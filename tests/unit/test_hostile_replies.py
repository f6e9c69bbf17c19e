"""Reply readers against a hostile server: NaN, a 400-digit logprob, 100,000-deep JSON,
an endless body. Every one is an outcome (malformed), never an exception, and nothing is
read past the size cap (issue 9, item 3)."""

from __future__ import annotations

import time

import orjson
import pytest

from pipeline.judge.question import JudgeConfig, JudgeStatus, JudgeVerdict, decide_judge
from pipeline.policy.breaker import BreakerConfig, BreakerStatus
from tests.fakes.openai_server import FakeOpenAIServer, Garbage, Verdict
from workers.clients.llm import CallKind, ChatEndpoint

JUDGE = JudgeConfig()
DIGITS_400 = "-" + "9" * 400


def reply(logprob: str) -> str:
    """A well-shaped judge reply whose logprobs are raw JSON text."""
    top = f'[{{"token": "Yes", "logprob": {logprob}}}, {{"token": "No", "logprob": -5.0}}]'
    return (
        '{"model": "m", "choices": [{"index": 0, "message": {"content": "Yes"}, "logprobs": '
        f'{{"content": [{{"token": "Yes", "logprob": {logprob}, "top_logprobs": {top}}}]}}}}]}}'
    )


def deep(depth: int) -> str:
    return '{"choices": ' + "[" * depth + "]" * depth + "}"


HOSTILE = {
    "nan": reply("NaN"),
    "infinity": reply("-Infinity"),
    "400_digit_logprob": reply(DIGITS_400),
    "400_digit_float": reply("-1e400"),
    "100000_deep": deep(100_000),
    "1000_deep": deep(1000),
    "not_an_object": "[1, 2, 3]",
    "bad_utf8_escape": '{"choices": "\\udc00"}',
}


def endpoint(server, **kwargs) -> ChatEndpoint:
    return ChatEndpoint(
        server.base_url, "judge-model", BreakerConfig(threshold=3), time.monotonic, **kwargs
    )


class TestJudgeReplies:
    @pytest.mark.parametrize("name", sorted(HOSTILE))
    async def test_hostile_reply_is_malformed_and_never_accepted(self, name):
        script = [Garbage(status=200, text=HOSTILE[name])]
        async with FakeOpenAIServer(script) as server, endpoint(server) as ep:
            readout, calls = await ep.judge("q", ["c"], "a", JUDGE, timeout=5.0)
            assert ep.breaker_state.status is BreakerStatus.CLOSED
        assert calls[-1].kind is CallKind.MALFORMED
        assert readout.status is JudgeStatus.MALFORMED
        assert decide_judge(readout, JUDGE).verdict is JudgeVerdict.UNSURE

    async def test_a_reply_over_the_cap_is_not_read(self):
        huge = Verdict(p_yes=0.99)
        script = [Garbage(status=200, text=" " * 200_000 + "{}"), huge]
        async with (
            FakeOpenAIServer(script) as server,
            endpoint(server, max_reply_bytes=10_000) as ep,
        ):
            readout, calls = await ep.judge("q", ["c"], "a", JUDGE, timeout=5.0)
            later, _ = await ep.judge("q", ["c"], "a", JUDGE, timeout=5.0)
        assert calls[-1].kind is CallKind.MALFORMED
        assert "10000" in calls[-1].error
        assert readout.status is JudgeStatus.MALFORMED
        assert later.status is JudgeStatus.OK  # the endpoint stays usable afterwards

    async def test_error_status_with_deep_json_body_is_an_http_error(self):
        async with (
            FakeOpenAIServer([Garbage(status=503, text=deep(100_000))]) as server,
            endpoint(server) as ep,
        ):
            readout, calls = await ep.judge("q", ["c"], "a", JUDGE, timeout=5.0)
        assert readout is None
        assert calls[-1].kind is CallKind.HTTP_ERROR and calls[-1].status == 503


class TestSamplerReplies:
    @pytest.mark.parametrize("name", ["100000_deep", "nan", "400_digit_logprob", "not_an_object"])
    async def test_hostile_reply_stops_sampling_as_a_failure(self, name):
        async with (
            FakeOpenAIServer([Garbage(status=200, text=HOSTILE[name])]) as server,
            endpoint(server) as ep,
        ):
            result = await ep.sample("q", ["c"], 3, 0.7, 32, timeout=5.0, token_budget=4000)
        assert result.samples == ()
        assert result.failure is CallKind.MALFORMED
        assert not result.complete

    async def test_samples_with_huge_numbers_in_usage_are_read(self):
        body = {
            "choices": [{"index": 0, "message": {"content": "Paris"}}],
            "usage": {"total_tokens": 2**63 - 1},
        }
        async with (
            FakeOpenAIServer([Garbage(status=200, text=orjson.dumps(body).decode())]) as server,
            endpoint(server) as ep,
        ):
            result = await ep.sample("q", ["c"], 1, 0.7, 32, timeout=5.0, token_budget=4000)
        assert result.samples == ("Paris",)
