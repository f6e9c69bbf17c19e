"""Async I/O shell for OpenAI-compatible chat endpoints (judge and sampling).

`ChatEndpoint` owns one aiohttp session and one circuit breaker per endpoint. Every
call runs under an overall ``asyncio.timeout``; the breaker is asked first (an open
breaker answers ``breaker_open`` at once, without touching the network) and is told the
outcome afterwards. Request building and reply reading are the pure functions of
`pipeline.judge.question` and `pipeline.rungs.self_consistency`; this module only moves bytes.

Failure posture: endpoint failures never raise. Every call returns a `CallResult` whose
`kind` says what happened (ok, http_error, timeout, transport, breaker_open, malformed);
the stages turn anything but a scored reply into a fail-closed outcome. Only
cancellation propagates (after releasing a half-open breaker trial). A server is not
trusted: a reply body is read up to `max_reply_bytes` (more is malformed), parsed by the
project codec (depth limit, no NaN, no out-of-range numbers), and any exception from the
transport or from reading the reply is an outcome, never an escape.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from email.utils import parsedate_to_datetime
from enum import StrEnum
from typing import Any

import aiohttp

from pipeline.encoding.tokens import TokenUsage, call_tokens, estimate_request_tokens
from pipeline.errors import GroundstreamError, PolicyError
from pipeline.judge.question import (
    JudgeConfig,
    JudgeReadout,
    JudgeStatus,
    build_judge_messages,
    build_judge_request,
    has_thinking_switch,
    read_verdict,
    refuses_max_tokens,
    strip_thinking_switch,
    with_completion_tokens,
)
from pipeline.judge.votes import (
    OTHER,
    build_vote_request,
    read_vote,
    readout_from_votes,
    refuses_logprobs,
)
from pipeline.policy.breaker import (
    CLOSED,
    BreakerConfig,
    BreakerState,
    abandon_trial,
    allow,
    is_breaker_failure,
    on_failure,
    on_success,
)
from pipeline.rungs.self_consistency import BudgetLimit, build_sample_request
from topics.codec import loads

log = logging.getLogger("groundstream.llm")

MAX_REPLY_BYTES = 4 * 1024 * 1024
"""Largest reply body read from an endpoint; a chat completion is a few KB."""

RATE_LIMIT_STATUSES = frozenset({429, 503})
"""Statuses whose Retry-After is obeyed: the endpoint is alive and says when to come back."""
MAX_RETRY_AFTER_S = 300.0
"""Longest Retry-After taken at its word; longer (or unreadable) is not waited for."""

THINKING_SWITCH_REJECTED = frozenset({400, 422})
"""Statuses that mean 'this server rejects the thinking switch': retry once without it."""

_THINK_BLOCK = re.compile(r"^\s*<think>.*?</think>\s*", re.DOTALL)

LEARNED_READOUTS: dict[tuple[str, str], str] = {}
"""What `[judge] readout = "auto"` learned per endpoint (base URL, model), in this process:
"votes" once it gave no logprobs or refused the parameter."""

COMPLETION_TOKENS_ENDPOINTS: set[tuple[str, str]] = set()
"""Endpoints (base URL, model) that refused `max_tokens` for `max_completion_tokens`, in
this process: every later call names its token cap the new way at once."""


class CallKind(StrEnum):
    """How one HTTP call ended."""

    OK = "ok"
    HTTP_ERROR = "http_error"
    TIMEOUT = "timeout"
    TRANSPORT = "transport"
    BREAKER_OPEN = "breaker_open"
    MALFORMED = "malformed"
    RATE_LIMITED = "rate_limited"
    """429 or 503 with Retry-After, and the wait it asked for outlasts the call's patience."""


@dataclass(frozen=True, slots=True)
class CallResult:
    """One call's outcome; `breaker` is the breaker status after the call.

    tokens: what the call spent (`pipeline.encoding.tokens.call_tokens`: the reply's ``usage``, else
    an estimate marked as one); None when the request never left (an open breaker, no
    time left), which spends nothing.
    """

    kind: CallKind
    status: int | None
    body: dict[str, Any] | None
    duration_ms: float
    breaker: str
    error: str = ""
    tokens: TokenUsage | None = None
    retry_after: float | None = None
    """Seconds a 429/503 answer asked the caller to wait (None: no such answer)."""
    rate_limited: int = 0
    """Rate-limit answers waited out before this one (`ChatEndpoint.complete`)."""

    @property
    def ok(self) -> bool:
        return self.kind is CallKind.OK

    @property
    def prompt_tokens(self) -> int:
        """Prompt tokens this call spent (0 when it was never sent)."""
        return 0 if self.tokens is None else self.tokens.prompt

    def to_dict(self) -> dict[str, object]:
        """For logs and decision records: everything but the reply body."""
        return {
            "kind": self.kind.value,
            "status": self.status,
            "duration_ms": round(self.duration_ms, 3),
            "breaker": self.breaker,
            "error": self.error,
            "tokens": None if self.tokens is None else self.tokens.to_dict(),
            **({} if self.retry_after is None else {"retry_after_s": self.retry_after}),
            **({"rate_limited": self.rate_limited} if self.rate_limited else {}),
        }


def prompt_tokens(calls: Sequence[CallResult]) -> int:
    """Prompt tokens a verdict's calls spent together (a retry's prompt counts again):
    what a token budget charges for one judged answer."""
    return sum(call.prompt_tokens for call in calls)


def spent_tokens(calls: Sequence[CallResult]) -> TokenUsage:
    """The calls' tokens summed; estimated when any count was."""
    counted = [call.tokens for call in calls if call.tokens is not None]
    return TokenUsage(
        sum(t.prompt for t in counted),
        sum(t.completion for t in counted),
        any(t.estimated for t in counted),
    )


def failure_kind(result: CallResult) -> str:
    """The `pipeline.judge.question.verdict_for_failure` kind for a failed call."""
    if result.kind is CallKind.HTTP_ERROR and result.status is not None and result.status >= 500:
        return "http_5xx"
    return result.kind.value


@dataclass(frozen=True, slots=True)
class SampleResult:
    """Sampled answers for one question.

    budget_limit: which limit stopped sampling before `requested` samples (or none).
    failure:      the kind of the endpoint failure that stopped sampling, if one did;
                  fewer samples than requested with a failure means the sampler was
                  unavailable, which the caller should treat as such (fail closed).
    """

    samples: tuple[str, ...]
    tokens_used: int
    budget_limit: BudgetLimit
    calls: tuple[CallResult, ...]
    requested: int = 0
    failure: CallKind | None = None

    @property
    def complete(self) -> bool:
        return (
            len(self.samples) >= self.requested
            and self.budget_limit is BudgetLimit.NONE
            and self.failure is None
        )


def estimate_prompt_tokens(body: Mapping[str, Any]) -> int:
    """A rough upper estimate of a request's prompt tokens (4 characters a token)."""
    return estimate_request_tokens(body)


class ChatEndpoint:
    """One OpenAI-compatible endpoint: a shared session, a breaker, and typed calls."""

    def __init__(
        self,
        base_url: str,
        model: str,
        breaker: BreakerConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
        *,
        api_key: str | None = None,
        send_thinking_switch: bool = True,
        max_reply_bytes: int = MAX_REPLY_BYTES,
        slots: asyncio.Semaphore | None = None,
    ) -> None:
        """`slots`: the calls this endpoint may have open at once, shared by every
        endpoint of a worker that reaches the same server (`*_max_in_flight`)."""
        if not isinstance(base_url, str) or not base_url.rstrip("/").endswith("/v1"):
            raise PolicyError("llm.base_url", base_url, "an http(s) URL ending in /v1")
        if not base_url.startswith(("http://", "https://")):
            raise PolicyError("llm.base_url", base_url, "an http(s) URL ending in /v1")
        if not isinstance(model, str) or not model.strip():
            raise PolicyError("llm.model", model, "a non-empty model id")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.breaker_config = breaker if breaker is not None else BreakerConfig()
        self._clock = clock
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._send_thinking_switch = send_thinking_switch
        self._max_reply_bytes = max_reply_bytes
        self._state: BreakerState = CLOSED
        self._session: aiohttp.ClientSession | None = None
        self._slots = slots
        self.rate_limited = 0
        """Answers that said 'come back after Retry-After' (waited out or not)."""

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    @property
    def breaker_state(self) -> BreakerState:
        return self._state

    def __repr__(self) -> str:
        return (
            f"ChatEndpoint({self.base_url!r}, {self.model!r}, breaker={self._state.status.value})"
        )

    async def __aenter__(self) -> ChatEndpoint:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the shared session (a later call opens a new one)."""
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    def _session_for_call(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=None), headers=self._headers
            )
        return self._session

    def _result(
        self,
        kind: CallKind,
        status: int | None,
        body: dict[str, Any] | None,
        started: float | None,
        error: str = "",
        tokens: TokenUsage | None = None,
    ) -> CallResult:
        duration = 0.0 if started is None else (time.perf_counter() - started) * 1000.0
        return CallResult(kind, status, body, duration, self._state.status.value, error, tokens)

    async def complete(
        self, body: Mapping[str, Any], *, timeout: float, patience: float | None = None
    ) -> CallResult:
        """POST `body` to ``{base_url}/chat/completions`` within `timeout` seconds.

        `patience` (seconds, at least `timeout`; the candidate's time left): how long the
        call may wait for a free slot and for rate limits. A 429 or 503 with Retry-After
        is the endpoint's own limit, not its failure: the wait it asks for is taken and
        the call sent again, while the patience lasts, and it never counts towards the
        breaker. A wait past the patience answers `rate_limited` at once."""
        if not isinstance(timeout, int | float) or not timeout > 0 or math.isnan(timeout):
            return self._result(CallKind.TIMEOUT, None, None, None, "no time left for the call")
        loop = asyncio.get_running_loop()
        until = loop.time() + max(timeout, patience or 0.0)
        waits = 0
        endpoint = (self.base_url, self.model)
        if endpoint in COMPLETION_TOKENS_ENDPOINTS:
            body = with_completion_tokens(body)
        while True:
            try:
                async with asyncio.timeout_at(until):
                    slot = await self._slot()
            except TimeoutError:
                return self._result(CallKind.TIMEOUT, None, None, None, "no free call slot in time")
            try:
                result = await self._attempt(body, min(timeout, until - loop.time()))
            finally:
                if slot is not None:
                    slot.release()
            if result.kind is CallKind.HTTP_ERROR and refuses_max_tokens(
                result.status, result.error, body
            ):
                # Learned once per endpoint; the retry is the same call under the new name.
                COMPLETION_TOKENS_ENDPOINTS.add(endpoint)
                log.warning("%s (%s) refuses max_tokens: sending max_completion_tokens", *endpoint)
                body = with_completion_tokens(body)
                continue
            pause = retry_after(result)
            if pause is None:
                return replace(result, rate_limited=waits) if waits else result
            self.rate_limited += 1
            if loop.time() + pause >= until:
                error = f"rate limited: Retry-After {pause:g}s outlasts the call's patience"
                return replace(result, kind=CallKind.RATE_LIMITED, error=error, rate_limited=waits)
            waits += 1
            await asyncio.sleep(pause)

    async def _slot(self) -> asyncio.Semaphore | None:
        if self._slots is None:
            return None
        await self._slots.acquire()
        return self._slots

    async def _attempt(self, body: Mapping[str, Any], timeout: float) -> CallResult:
        """One POST; the breaker asked before and told after (a rate limit never counts)."""
        if not timeout > 0:
            return self._result(CallKind.TIMEOUT, None, None, None, "no time left for the call")
        allowed, self._state = allow(self._state, self.breaker_config, self._clock())
        if not allowed:
            return self._result(CallKind.BREAKER_OPEN, None, None, None, "circuit breaker open")
        started = time.perf_counter()
        status: int | None = None
        headers: Mapping[str, str] = {}
        try:
            async with asyncio.timeout(timeout):
                session = self._session_for_call()
                async with session.post(self.url, json=dict(body)) as response:
                    status = response.status
                    headers = response.headers
                    raw = await _read_capped(response, self._max_reply_bytes)
        except TimeoutError:
            kind, parsed, error = CallKind.TIMEOUT, None, f"no answer within {timeout:.3f}s"
        except ReplyTooLarge as exc:
            kind, parsed, error = CallKind.MALFORMED, None, str(exc)
        except asyncio.CancelledError:
            self._state = abandon_trial(self._state)
            raise
        except Exception as exc:  # a hostile server may make aiohttp raise anything
            kind, parsed, error = CallKind.TRANSPORT, None, f"{type(exc).__name__}: {exc}"[:300]
        else:
            kind, parsed, error = _classify(status, raw)
        limited = status in RATE_LIMIT_STATUSES and retry_after_header(headers) is not None
        if is_breaker_failure(status, kind.value) and not limited:
            self._state = on_failure(self._state, self.breaker_config, self._clock())
        else:
            self._state = on_success(self._state)
        tokens = call_tokens(body, parsed if kind is CallKind.OK else None)
        result = self._result(kind, status, parsed, started, error, tokens)
        return replace(result, retry_after=retry_after_header(headers) if limited else None)

    async def judge(
        self,
        question: str,
        context: Sequence[str] | str | None,
        response: str,
        config: JudgeConfig | None = None,
        *,
        timeout: float | None = None,
        patience: float | None = None,
    ) -> tuple[JudgeReadout | None, list[CallResult]]:
        """One scored verdict. Thinking is switched off; a 400/422 answer to the switch is
        retried once without it within the same time budget. The readout is None when no
        reply could be read (see the calls for why). `patience`: seconds the verdict may
        wait for a call slot and for the endpoint's rate limits (`complete`)."""
        config = config if config is not None else JudgeConfig()
        budget = config.timeout_seconds if timeout is None else min(timeout, config.timeout_seconds)
        loop = asyncio.get_running_loop()
        until = loop.time() + max(budget, patience or 0.0)
        messages = build_judge_messages(question, context, response)
        body = build_judge_request(
            self.model,
            messages,
            top_logprobs=config.top_logprobs,
            thinking_off=self._send_thinking_switch,
        )
        if self.readout_mode(config) == "votes":
            return await self._votes(messages, config.votes, budget, until)
        calls = [await self.complete(body, timeout=budget, patience=patience)]
        first = calls[0]
        if (
            first.kind is CallKind.HTTP_ERROR
            and first.status in THINKING_SWITCH_REJECTED
            and has_thinking_switch(body)
            and not refuses_logprobs(first.status, first.error)
        ):
            retry = strip_thinking_switch(body)
            left = until - loop.time()
            calls.append(await self.complete(retry, timeout=min(budget, left), patience=left))
        final = calls[-1]
        if config.readout == "auto" and _gives_no_logprobs(final):
            # Learned once per endpoint: from now on it is asked for votes straight away.
            LEARNED_READOUTS[(self.base_url, self.model)] = "votes"
            log.warning("judge %s (%s) gives no logprobs: reading votes", self.base_url, self.model)
            readout, votes = await self._votes(messages, config.votes, budget, until)
            return readout, calls + votes
        if final.kind is CallKind.OK:
            return _read_verdict_safely(final.body), calls
        if final.kind is CallKind.MALFORMED:
            return JudgeReadout(JudgeStatus.MALFORMED, detail=final.error), calls
        return None, calls

    def readout_mode(self, config: JudgeConfig) -> str:
        """The readout the next verdict asks for: votes where the policy says so or where
        `auto` learned this endpoint gives no logprobs, else logprobs."""
        if config.readout == "votes":
            return "votes"
        learned = LEARNED_READOUTS.get((self.base_url, self.model))
        return "votes" if config.readout == "auto" and learned == "votes" else "logprobs"

    async def _votes(
        self, messages: list[dict[str, str]], n: int, budget: float, until: float
    ) -> tuple[JudgeReadout | None, list[CallResult]]:
        """`n` one-word verdicts (`pipeline.judge.votes`), each a call of its own through
        `complete` (call slots, Retry-After, the breaker). The first goes alone, to learn
        whether the thinking switch is refused; the rest go at once. A vote whose call
        failed counts as `other` (no clear verdict); none came back at all: no readout."""
        loop = asyncio.get_running_loop()
        body = build_vote_request(self.model, messages, thinking_off=self._send_thinking_switch)

        async def vote(request: Mapping[str, Any]) -> CallResult:
            left = until - loop.time()
            return await self.complete(request, timeout=min(budget, left), patience=left)

        calls = [await vote(body)]
        if (
            calls[0].kind is CallKind.HTTP_ERROR
            and calls[0].status in THINKING_SWITCH_REJECTED
            and has_thinking_switch(body)
        ):
            body = strip_thinking_switch(body)
            calls.append(await vote(body))
        if calls[-1].kind is not CallKind.OK:
            return None, calls  # the first vote failed: fail closed without spending more
        calls += await asyncio.gather(*(vote(body) for _ in range(n - 1)))
        answered = calls[-n:]
        ballots = [read_vote(c.body) if c.kind is CallKind.OK else OTHER for c in answered]
        return readout_from_votes(ballots, self.model), calls

    async def sample(
        self,
        question: str,
        context: Sequence[str] | str | None,
        n: int,
        temperature: float,
        max_tokens: int,
        *,
        timeout: float,
        token_budget: int,
        patience: float | None = None,
    ) -> SampleResult:
        """Up to `n` sampled answers within `timeout` seconds and `token_budget` tokens.

        Asks for all `n` in one request; a server that ignores ``n`` (fewer choices come
        back) is asked again one sample per call. Before each call the worst case (prompt
        plus ``k * max_tokens``) must fit the token budget, else sampling stops with
        `max_tokens`; running out of time stops it with `timeout`. `patience` (at least
        `timeout`): the time sampling may take when it waits for slots and rate limits.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, float(timeout), patience or 0.0)
        samples: list[str] = []
        calls: list[CallResult] = []
        used = 0
        limit = BudgetLimit.NONE
        failure: CallKind | None = None
        honours_n: bool | None = None
        prompt_estimate: int | None = None
        while len(samples) < n:
            remaining = deadline - loop.time()
            if remaining <= 0:
                limit = BudgetLimit.TIMEOUT
                break
            want = n - len(samples) if honours_n is not False else 1
            probe = build_sample_request(
                self.model,
                question,
                context,
                n=want,
                temperature=temperature,
                max_tokens=max_tokens,
            )
            if prompt_estimate is None:
                prompt_estimate = estimate_prompt_tokens(probe)
            affordable = (token_budget - used - prompt_estimate) // max_tokens
            if affordable < 1:
                limit = BudgetLimit.MAX_TOKENS
                break
            k = min(want, affordable)
            body = probe if k == want else {**probe, "n": k}
            result = await self.complete(
                body, timeout=min(remaining, float(timeout)), patience=remaining
            )
            calls.append(result)
            if result.kind is CallKind.TIMEOUT:
                limit = BudgetLimit.TIMEOUT
                break
            if result.kind is not CallKind.OK:
                failure = result.kind
                break
            read = _read_samples_safely(result.body, max_tokens)
            if read is None:
                failure = CallKind.MALFORMED
                break
            texts, cost, prompt_tokens = read
            used += cost
            if prompt_tokens is not None:
                prompt_estimate = prompt_tokens
            samples.extend(texts[: n - len(samples)])
            if k > 1 and honours_n is None:
                honours_n = len(texts) >= k
        return SampleResult(tuple(samples), used, limit, tuple(calls), n, failure)


def retry_after_header(headers: Mapping[str, str]) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date), None when absent,
    unreadable, or over MAX_RETRY_AFTER_S."""
    value = headers.get("Retry-After") if headers else None
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
    if math.isnan(seconds) or seconds > MAX_RETRY_AFTER_S:
        return None
    return max(0.0, seconds)


def retry_after(result: CallResult) -> float | None:
    """The wait a rate-limited answer asked for; None for any other outcome."""
    if result.kind is CallKind.HTTP_ERROR and result.status in RATE_LIMIT_STATUSES:
        return result.retry_after
    return None


class ReplyTooLarge(GroundstreamError):
    """A reply body over the endpoint's `max_reply_bytes`."""


async def _read_capped(response: aiohttp.ClientResponse, cap: int) -> bytes:
    """The body, read in chunks and refused as soon as it passes `cap` bytes (a declared
    Content-Length over the cap is refused before reading anything)."""
    if response.content_length is not None and response.content_length > cap:
        raise ReplyTooLarge(f"reply of {response.content_length} bytes > limit {cap}")
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > cap:
            raise ReplyTooLarge(f"reply over {cap} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _gives_no_logprobs(final: CallResult) -> bool:
    """A reply without logprobs, or a 400/422 refusing the parameter."""
    if final.kind is CallKind.HTTP_ERROR:
        return refuses_logprobs(final.status, final.error)
    if final.kind is not CallKind.OK:
        return False
    return _read_verdict_safely(final.body).status is JudgeStatus.NO_LOGPROBS


def _read_verdict_safely(body: dict[str, Any] | None) -> JudgeReadout:
    """`read_verdict`, with anything it raises on a hostile body read as malformed."""
    try:
        return read_verdict(body)
    except Exception as exc:
        log.warning("judge reply unreadable: %s", type(exc).__name__)
        return JudgeReadout(JudgeStatus.MALFORMED, detail=f"unreadable reply: {type(exc).__name__}")


def _read_samples_safely(body: object, max_tokens: int) -> tuple[list[str], int, int | None] | None:
    """`_read_samples`, with anything it raises on a hostile body read as no samples."""
    try:
        return _read_samples(body, max_tokens)
    except Exception as exc:
        log.warning("sampler reply unreadable: %s", type(exc).__name__)
        return None


def _classify(status: int | None, raw: bytes) -> tuple[CallKind, dict[str, Any] | None, str]:
    try:
        decoded = loads(raw)
    except ValueError:
        decoded = None
    parsed = decoded if isinstance(decoded, dict) else None
    if status is not None and 200 <= status < 300:
        if parsed is None:
            return CallKind.MALFORMED, None, f"HTTP {status} with a body that is not a JSON object"
        return CallKind.OK, parsed, ""
    message = ""
    if parsed is not None:
        err = parsed.get("error")
        message = str(err.get("message", "")) if isinstance(err, dict) else str(err or "")
    else:
        message = raw[:200].decode("utf-8", "replace")
    return CallKind.HTTP_ERROR, parsed, f"HTTP {status}: {message}"[:300]


def _read_samples(body: object, max_tokens: int) -> tuple[list[str], int, int | None] | None:
    """(texts, tokens spent, prompt tokens) from a completion; None if it has no choices."""
    if not isinstance(body, dict):
        return None
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        return None
    ordered = sorted(
        (c for c in choices if isinstance(c, dict)),
        key=lambda c: c.get("index", 0) if isinstance(c.get("index"), int) else 0,
    )
    if not ordered:
        return None
    texts = []
    for choice in ordered:
        message = choice.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        text = content if isinstance(content, str) else ""
        texts.append(_THINK_BLOCK.sub("", text, count=1))
    usage = body.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    prompt = _int(usage.get("prompt_tokens"))
    completion = _int(usage.get("completion_tokens"))
    total = _int(usage.get("total_tokens"))
    if total is not None:
        cost = total
    elif completion is not None:
        cost = completion + (prompt or 0)
    else:
        cost = len(texts) * max_tokens + (prompt or 0)  # unknown: assume the worst
    return texts, cost, prompt


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
