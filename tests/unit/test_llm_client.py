"""The async endpoint client against a real scripted HTTP server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from pipeline.errors import PolicyError
from pipeline.judge.question import JudgeConfig, JudgeStatus, JudgeVerdict, decide_judge
from pipeline.policy.breaker import BreakerConfig, BreakerStatus
from pipeline.rungs.self_consistency import BudgetLimit
from tests.fakes.openai_server import (
    Drop,
    FakeOpenAIServer,
    Garbage,
    NoLogprobs,
    RateLimited,
    RejectThinkingSwitch,
    Samples,
    Slow,
    Status,
    Verdict,
    serve_in_thread,
)
from workers.clients.llm import CallKind, ChatEndpoint, failure_kind, retry_after_header

JUDGE = JudgeConfig()


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def endpoint(server, *, threshold=3, clock=None, **kwargs) -> ChatEndpoint:
    return ChatEndpoint(
        server.base_url,
        "judge-model",
        BreakerConfig(threshold=threshold, cooldown_seconds=30.0),
        clock or time.monotonic,
        **kwargs,
    )


def spy_timeouts(ep: ChatEndpoint) -> list[float]:
    """Record the time budget of every call `ep` makes: what the code asked asyncio for,
    so the budget arithmetic is checked without timing the test itself."""
    seen: list[float] = []
    complete = ep.complete

    async def recording(body, *, timeout: float, patience: float | None = None):
        seen.append(timeout)
        return await complete(body, timeout=timeout, patience=patience)

    ep.complete = recording  # type: ignore[method-assign]
    return seen


async def judge(ep: ChatEndpoint, timeout: float = 5.0):
    return await ep.judge(
        "What is the capital of France?", ["Paris is..."], "Paris", JUDGE, timeout=timeout
    )


class TestJudge:
    async def test_yes_verdict(self):
        async with FakeOpenAIServer([Verdict(p_yes=0.97)]) as server, endpoint(server) as ep:
            readout, calls = await judge(ep)
        assert [c.kind for c in calls] == [CallKind.OK]
        assert readout.status is JudgeStatus.OK
        assert readout.score == pytest.approx(0.97, abs=1e-6)
        assert readout.model == "judge-model"
        assert decide_judge(readout, JUDGE).verdict is JudgeVerdict.YES
        sent = server.requests[0]
        assert sent["max_tokens"] == 1
        assert sent["temperature"] == 0
        assert sent["logprobs"] is True
        assert sent["top_logprobs"] >= 5
        assert sent["reasoning_effort"] == "none"
        assert sent["chat_template_kwargs"] == {"enable_thinking": False}
        assert server.paths == ["/v1/chat/completions"]

    async def test_no_verdict(self):
        async with FakeOpenAIServer([Verdict(p_yes=0.02)]) as server, endpoint(server) as ep:
            readout, _ = await judge(ep)
        assert decide_judge(readout, JUDGE).verdict is JudgeVerdict.NO

    async def test_lowercase_tokens(self):
        script = [Verdict(p_yes=0.95, yes_token=" yes", no_token=" no")]
        async with FakeOpenAIServer(script) as server, endpoint(server) as ep:
            readout, _ = await judge(ep)
        assert readout.score == pytest.approx(0.95, abs=1e-6)

    async def test_missing_logprobs(self):
        async with FakeOpenAIServer([NoLogprobs()]) as server, endpoint(server) as ep:
            readout, calls = await ep.judge(  # logprobs only: `auto` would ask for votes
                "What is the capital of France?",
                ["Paris is..."],
                "Paris",
                JudgeConfig(readout="logprobs"),
                timeout=5.0,
            )
        assert calls[0].ok
        assert readout.status is JudgeStatus.NO_LOGPROBS
        assert decide_judge(readout, JUDGE).verdict is JudgeVerdict.UNSURE

    @pytest.mark.parametrize("status", [400, 422])
    async def test_thinking_switch_rejected_is_retried_once_without_it(self, status):
        script = [RejectThinkingSwitch(status=status, then=Verdict(p_yes=0.96))]
        async with FakeOpenAIServer(script) as server, endpoint(server) as ep:
            readout, calls = await judge(ep)
            assert ep.breaker_state.status is BreakerStatus.CLOSED
        assert [c.kind for c in calls] == [CallKind.HTTP_ERROR, CallKind.OK]
        assert calls[0].status == status
        assert len(server.requests) == 2
        first, retry = server.requests
        assert first["chat_template_kwargs"] == {"enable_thinking": False}
        assert first["reasoning_effort"] == "none"
        assert "chat_template_kwargs" not in retry and "reasoning_effort" not in retry
        # Everything else is preserved on the retry.
        assert {
            k: v for k, v in first.items() if k not in ("chat_template_kwargs", "reasoning_effort")
        } == retry
        assert readout.status is JudgeStatus.OK
        assert readout.score == pytest.approx(0.96, abs=1e-6)

    async def test_retry_happens_only_once(self):
        script = [Status(400), Status(400), Verdict(p_yes=0.99)]
        async with FakeOpenAIServer(script) as server, endpoint(server) as ep:
            readout, calls = await judge(ep)
        assert readout is None
        assert len(calls) == 2 and len(server.requests) == 2

    async def test_send_thinking_switch_off(self):
        async with (
            FakeOpenAIServer([Verdict(0.97)]) as server,
            endpoint(server, send_thinking_switch=False) as ep,
        ):
            await judge(ep)
        assert "chat_template_kwargs" not in server.requests[0]

    async def test_500_is_a_failure(self):
        async with FakeOpenAIServer([Status(500)]) as server, endpoint(server) as ep:
            readout, calls = await judge(ep)
        assert readout is None
        assert calls[0].kind is CallKind.HTTP_ERROR and calls[0].status == 500
        assert "scripted error" in calls[0].error
        assert failure_kind(calls[0]) == "http_5xx"
        assert len(server.requests) == 1  # a 500 is not retried

    async def test_slow_past_the_timeout(self):
        async with FakeOpenAIServer([Slow(5.0)]) as server, endpoint(server) as ep:
            budgets = spy_timeouts(ep)
            readout, calls = await judge(ep, timeout=0.3)
        # The server would answer after 5 s: a TIMEOUT means the 0.3 s budget cut it off.
        assert readout is None
        assert budgets == [0.3]
        assert calls[0].kind is CallKind.TIMEOUT
        assert calls[0].error == "no answer within 0.300s"
        assert calls[0].duration_ms > 0

    async def test_judge_timeout_capped_by_config(self):
        config = JudgeConfig(timeout_seconds=0.2)
        async with FakeOpenAIServer([Slow(5.0)]) as server, endpoint(server) as ep:
            budgets = spy_timeouts(ep)
            _, calls = await ep.judge("q", None, "r", config, timeout=30.0)
        assert budgets == [0.2]
        assert calls[0].kind is CallKind.TIMEOUT

    async def test_retry_shares_the_time_budget(self):
        script = [RejectThinkingSwitch(400, then=Slow(5.0))]
        async with FakeOpenAIServer(script) as server, endpoint(server) as ep:
            budgets = spy_timeouts(ep)
            _, calls = await judge(ep, timeout=0.4)
        assert [c.kind for c in calls] == [CallKind.HTTP_ERROR, CallKind.TIMEOUT]
        # The retry gets what is left of the one budget, not a fresh 0.4 s.
        assert budgets[0] == 0.4
        assert 0 < budgets[1] < 0.4

    async def test_garbage_is_malformed(self):
        async with FakeOpenAIServer([Garbage()]) as server, endpoint(server) as ep:
            readout, calls = await judge(ep)
        assert calls[0].kind is CallKind.MALFORMED
        assert readout.status is JudgeStatus.MALFORMED
        assert decide_judge(readout, JUDGE).verdict is JudgeVerdict.UNSURE

    async def test_dropped_connection_is_transport(self):
        async with FakeOpenAIServer([Drop()]) as server, endpoint(server) as ep:
            readout, calls = await judge(ep)
        assert readout is None
        assert calls[0].kind is CallKind.TRANSPORT

    async def test_nothing_listening_is_transport(self):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        ep = ChatEndpoint(f"http://127.0.0.1:{port}/v1", "m", BreakerConfig(threshold=1))
        async with ep:
            result = await ep.complete({"model": "m"}, timeout=2.0)
            assert result.kind is CallKind.TRANSPORT
            assert result.breaker == "open"


class TestBreaker:
    async def test_opens_fails_fast_and_closes_after_a_good_trial(self):
        clock = FakeClock()
        script = [Status(503), Status(503), Status(503), Verdict(p_yes=0.97)]
        async with FakeOpenAIServer(script) as server, endpoint(server, clock=clock) as ep:
            for _ in range(3):
                _, calls = await judge(ep)
                assert calls[0].status == 503
            assert calls[0].breaker == "open"
            assert len(server.requests) == 3

            readout, calls = await judge(ep)
            assert readout is None
            assert [c.kind for c in calls] == [CallKind.BREAKER_OPEN]
            assert calls[0].duration_ms == 0.0  # refused before any request was timed
            assert len(server.requests) == 3  # nothing reached the server

            clock.now += 30.0
            readout, calls = await judge(ep)
            assert calls[0].ok and calls[0].breaker == "closed"
            assert readout.status is JudgeStatus.OK
            assert len(server.requests) == 4

    async def test_failed_trial_reopens(self):
        clock = FakeClock()
        async with (
            FakeOpenAIServer([Status(502)] * 4) as server,
            endpoint(server, threshold=3, clock=clock) as ep,
        ):
            for _ in range(3):
                await ep.complete({"model": "m"}, timeout=2.0)
            clock.now += 31.0
            trial = await ep.complete({"model": "m"}, timeout=2.0)
            assert trial.status == 502 and trial.breaker == "open"
            assert ep.breaker_state.opened_at == clock.now
            refused = await ep.complete({"model": "m"}, timeout=2.0)
            assert refused.kind is CallKind.BREAKER_OPEN
        assert len(server.requests) == 4

    async def test_timeouts_open_the_breaker(self):
        async with (
            FakeOpenAIServer([Slow(5.0), Slow(5.0)]) as server,
            endpoint(server, threshold=2) as ep,
        ):
            for _ in range(2):
                result = await ep.complete({"model": "m"}, timeout=0.1)
                assert result.kind is CallKind.TIMEOUT
            assert ep.breaker_state.status is BreakerStatus.OPEN

    async def test_4xx_does_not_open(self):
        async with (
            FakeOpenAIServer([Status(400)] * 5) as server,
            endpoint(server, threshold=2) as ep,
        ):
            for _ in range(5):
                await ep.complete({"model": "m"}, timeout=2.0)
            assert ep.breaker_state.status is BreakerStatus.CLOSED
        assert len(server.requests) == 5

    async def test_cancelled_trial_is_released(self):
        clock = FakeClock()
        async with (
            FakeOpenAIServer([Status(503), Slow(5.0), Verdict(0.97)]) as server,
            endpoint(server, threshold=1, clock=clock) as ep,
        ):
            await ep.complete({"model": "m"}, timeout=2.0)
            clock.now += 30.0
            task = asyncio.create_task(ep.complete({"model": "m"}, timeout=10.0))
            await asyncio.sleep(0.2)
            assert ep.breaker_state.status is BreakerStatus.HALF_OPEN
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            result = await ep.complete({"model": "m"}, timeout=2.0)
            assert result.ok and result.breaker == "closed"


class TestSample:
    async def test_n_in_one_request(self):
        script = [Samples(["Paris", "Paris.", "It is Paris"], tokens_per_sample=5)]
        async with FakeOpenAIServer(script) as server, endpoint(server) as ep:
            result = await ep.sample(
                "Capital of France?", ["ctx"], 3, 0.7, 64, timeout=5.0, token_budget=4000
            )
        assert result.samples == ("Paris", "Paris.", "It is Paris")
        assert result.budget_limit is BudgetLimit.NONE
        assert result.complete
        assert result.tokens_used == 20 + 15
        assert len(server.requests) == 1
        sent = server.requests[0]
        assert sent["n"] == 3 and sent["temperature"] == 0.7 and sent["max_tokens"] == 64

    async def test_server_ignoring_n_gets_repeated_calls(self):
        behaviour = Samples(["a", "b", "c", "d"], honour_n=False)
        async with FakeOpenAIServer(default=behaviour) as server, endpoint(server) as ep:
            result = await ep.sample("q", None, 4, 0.7, 32, timeout=5.0, token_budget=4000)
        assert result.samples == ("a", "b", "c", "d")
        assert len(server.requests) == 4
        assert server.requests[0]["n"] == 4
        assert all(r["n"] == 1 for r in server.requests[1:])
        assert result.tokens_used == 4 * (20 + 10)

    async def test_token_budget_stops_sampling(self):
        # Each call costs 20 prompt + 10 completion; max_tokens 10 reserves 20 + 10 per call.
        behaviour = Samples(["a", "b", "c", "d", "e"], honour_n=False)
        async with FakeOpenAIServer(default=behaviour) as server, endpoint(server) as ep:
            result = await ep.sample("q", None, 5, 0.7, 10, timeout=5.0, token_budget=95)
        assert result.budget_limit is BudgetLimit.MAX_TOKENS
        assert not result.complete
        assert result.tokens_used <= 95
        assert 1 <= len(result.samples) < 5
        assert len(server.requests) == len(result.samples)

    async def test_token_budget_shrinks_n(self):
        script = [Samples(["x"] * 10, tokens_per_sample=100, prompt_tokens=5)]
        async with FakeOpenAIServer(script) as server, endpoint(server) as ep:
            result = await ep.sample("q", None, 10, 0.7, 100, timeout=5.0, token_budget=450)
        # The prompt estimate leaves room for 3 or 4 samples of 100 tokens, not 10; they
        # use all 100 each, so nothing is left for a second request.
        assert server.requests[0]["n"] < 10
        assert len(result.samples) == server.requests[0]["n"]
        assert len(server.requests) == 1
        assert result.tokens_used <= 450
        assert result.budget_limit is BudgetLimit.MAX_TOKENS

    async def test_budget_too_small_for_one_sample(self):
        async with FakeOpenAIServer() as server, endpoint(server) as ep:
            result = await ep.sample("q", None, 3, 0.7, 256, timeout=5.0, token_budget=100)
        assert result.samples == ()
        assert result.budget_limit is BudgetLimit.MAX_TOKENS
        assert server.requests == []

    async def test_timeout_stops_sampling(self):
        script = [Samples(["a"], honour_n=False), Slow(5.0)]
        async with FakeOpenAIServer(script) as server, endpoint(server) as ep:
            budgets = spy_timeouts(ep)
            result = await ep.sample("q", None, 3, 0.7, 16, timeout=0.4, token_budget=4000)
        # Each call gets what is left of the one 0.4 s budget.
        assert len(budgets) == 2
        assert 0 < budgets[1] < budgets[0] <= 0.4
        assert result.samples == ("a",)
        assert result.budget_limit is BudgetLimit.TIMEOUT
        assert result.calls[-1].kind is CallKind.TIMEOUT

    async def test_endpoint_failure_is_reported_not_raised(self):
        async with FakeOpenAIServer([Status(503)]) as server, endpoint(server) as ep:
            result = await ep.sample("q", None, 3, 0.7, 16, timeout=2.0, token_budget=4000)
        assert result.samples == ()
        assert result.failure is CallKind.HTTP_ERROR
        assert result.budget_limit is BudgetLimit.NONE
        assert not result.complete

    async def test_think_blocks_are_stripped_and_empty_content_kept(self):
        script = [Samples(["<think>hmm</think> Paris", ""])]
        async with FakeOpenAIServer(script) as server, endpoint(server) as ep:
            result = await ep.sample("q", None, 2, 0.7, 16, timeout=2.0, token_budget=4000)
        assert result.samples == ("Paris", "")

    async def test_missing_usage_assumes_the_worst(self):
        script = [Samples(["a", "b"], usage=False)]
        async with FakeOpenAIServer(script) as server, endpoint(server) as ep:
            result = await ep.sample("q", None, 2, 0.7, 16, timeout=2.0, token_budget=4000)
        assert result.tokens_used == 2 * 16


class TestEndpointLimits:
    """Issue 35: an endpoint's own limits are obeyed, not counted as its failure."""

    @pytest.mark.parametrize("status", [429, 503])
    async def test_retry_after_is_waited_out_and_never_opens_the_breaker(self, status):
        limited = [RateLimited("0.3", status)] * 3
        async with (
            FakeOpenAIServer([*limited, Verdict(p_yes=0.97)]) as server,
            endpoint(server, threshold=1) as ep,
        ):
            started = time.monotonic()
            readout, calls = await ep.judge("q?", ["ctx"], "a", JUDGE, timeout=2.0, patience=5.0)
            waited = time.monotonic() - started
            assert ep.breaker_state.status is BreakerStatus.CLOSED
        assert readout is not None and readout.status is JudgeStatus.OK
        assert [c.kind for c in calls] == [CallKind.OK]
        assert calls[0].rate_limited == 3 and calls[0].to_dict()["rate_limited"] == 3
        assert len(server.requests) == 4 and ep.rate_limited == 3
        assert waited >= 0.9  # three waits of 0.3 s, as told

    async def test_a_wait_past_the_patience_answers_rate_limited_at_once(self):
        async with (
            FakeOpenAIServer([RateLimited("30")]) as server,
            endpoint(server, threshold=1) as ep,
        ):
            started = time.monotonic()
            readout, calls = await ep.judge("q?", ["ctx"], "a", JUDGE, timeout=2.0, patience=3.0)
            assert time.monotonic() - started < 1.5
            assert ep.breaker_state.status is BreakerStatus.CLOSED
        assert readout is None
        assert calls[-1].kind is CallKind.RATE_LIMITED and calls[-1].retry_after == 30.0
        assert failure_kind(calls[-1]) == "rate_limited"

    async def test_a_503_without_retry_after_still_counts_as_failing(self):
        async with (
            FakeOpenAIServer([Status(503)]) as server,
            endpoint(server, threshold=1) as ep,
        ):
            result = await ep.complete({"model": "m"}, timeout=2.0, patience=10.0)
            assert result.kind is CallKind.HTTP_ERROR
            assert ep.breaker_state.status is BreakerStatus.OPEN

    async def test_slots_bound_the_calls_open_at_once(self):
        slots = asyncio.Semaphore(3)
        async with FakeOpenAIServer(default=Slow(0.2)) as server:
            eps = [endpoint(server, slots=slots) for _ in range(2)]  # two routes, one server
            results = await asyncio.gather(
                *(
                    eps[i % 2].complete({"model": "m"}, timeout=1.0, patience=10.0)
                    for i in range(12)
                )
            )
            for ep in eps:
                await ep.close()
        assert all(r.kind is CallKind.OK for r in results)
        assert server.most_open == 3  # 12 calls, never more than 3 open, none timed out

    def test_retry_after_header_forms(self):
        assert retry_after_header({"Retry-After": "2"}) == 2.0
        assert retry_after_header({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0
        assert retry_after_header({"Retry-After": "soon"}) is None
        assert retry_after_header({"Retry-After": "100000"}) is None  # not taken at its word
        assert retry_after_header({}) is None


class TestEndpoint:
    @pytest.mark.parametrize("url", ["http://x/v2", "ftp://x/v1", "", None])
    def test_base_url_validated(self, url):
        with pytest.raises(PolicyError):
            ChatEndpoint(url, "m")  # type: ignore[arg-type]

    async def test_one_shared_session(self):
        async with FakeOpenAIServer([Verdict(0.97), Verdict(0.97)]) as server:
            ep = endpoint(server)
            await judge(ep)
            session = ep._session
            await judge(ep)
            assert ep._session is session
            await ep.close()
            assert ep._session is None

    async def test_zero_timeout_never_calls(self):
        async with FakeOpenAIServer([Verdict(0.97)]) as server, endpoint(server) as ep:
            result = await ep.complete({"model": "m"}, timeout=0)
        assert result.kind is CallKind.TIMEOUT
        assert server.requests == []

    def test_threaded_server_from_sync_code(self):
        with serve_in_thread([Verdict(p_yes=0.97)]) as server:

            async def go():
                async with endpoint(server) as ep:
                    return await judge(ep)

            readout, _ = asyncio.run(go())
        assert readout.status is JudgeStatus.OK
        assert len(server.requests) == 1
