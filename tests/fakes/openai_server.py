"""A real, scripted OpenAI-compatible chat-completions server for tests.

It listens on 127.0.0.1 (ephemeral port by default) and answers
``POST /v1/chat/completions`` from a script: a list of behaviours consumed one per
request, then `default` (a 500 "script exhausted" when there is none). Every request
body it receives is recorded in `.requests`, so tests can assert on what was sent.

    async with FakeOpenAIServer([RejectThinkingSwitch(400), Verdict(p_yes=0.97)]) as server:
        endpoint = ChatEndpoint(server.base_url, "judge-model", BreakerConfig())
        ...
        assert "chat_template_kwargs" in server.requests[0]

Behaviours: `Verdict`, `RawLogprobs`, `NoLogprobs`, `RejectThinkingSwitch`, `Status`,
`Slow`, `Garbage`, `Drop`, `Samples`, and `ByCase` (one of them per ``[case ID]``).
`serve_in_thread` runs one in a background thread for synchronous tests;
``python -m tests.fakes.openai_server --port P --script JSON`` runs one as its own
process (the script is a JSON list such as
``[{"kind": "verdict", "p_yes": 0.97}, {"kind": "status", "status": 503}]``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import re
import signal
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from aiohttp import web

THINKING_SWITCH_FIELDS = ("reasoning_effort", "chat_template_kwargs")
FILLER_TOKENS = ("Maybe", "The", "I", "It", "Based", "Unclear", "Not", "Sure", "A", "In")


def _logprob(p: float) -> float:
    return math.log(p) if p > 0 else -9999.0


def _completion(body: dict[str, Any], choices: list[dict[str, Any]], usage: dict[str, int]):
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model", "fake-model"),
        "choices": choices,
        "usage": usage,
    }


def _choice(index: int, content: str, logprobs: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "index": index,
        "message": {"role": "assistant", "content": content},
        "logprobs": logprobs,
        "finish_reason": "length",
    }


class Behaviour:
    """One scripted answer. `respond` builds the HTTP response for one request body."""

    consume_on: ClassVar[str] = "always"

    async def respond(self, server: FakeOpenAIServer, body: dict[str, Any]) -> web.StreamResponse:
        raise NotImplementedError


@dataclass
class RawLogprobs(Behaviour):
    """A one-token reply whose first position has exactly these (token, logprob) pairs."""

    pairs: Sequence[tuple[str, float]]
    content: str | None = None

    async def respond(self, server: FakeOpenAIServer, body: dict[str, Any]) -> web.StreamResponse:
        top = [{"token": t, "logprob": lp, "bytes": list(t.encode())} for t, lp in self.pairs]
        chosen = self.content
        if chosen is None:
            chosen = max(self.pairs, key=lambda p: p[1])[0] if self.pairs else ""
        first = {
            "token": chosen,
            "logprob": dict(self.pairs).get(chosen, -0.01),
            "bytes": list(chosen.encode()),
            "top_logprobs": top,
        }
        logprobs = {"content": [first], "refusal": None}
        usage = {"prompt_tokens": 50, "completion_tokens": 1, "total_tokens": 51}
        return web.json_response(_completion(body, [_choice(0, chosen, logprobs)], usage))


@dataclass
class Verdict(Behaviour):
    """A judge verdict: `p_yes` on ``yes_token`` and `p_no` (default 1 - p_yes) on
    ``no_token`` among the first token's top logprobs, padded with filler tokens up to
    the request's ``top_logprobs``."""

    p_yes: float
    p_no: float | None = None
    yes_token: str = "Yes"
    no_token: str = "No"

    async def respond(self, server: FakeOpenAIServer, body: dict[str, Any]) -> web.StreamResponse:
        p_no = max(0.0, 1.0 - self.p_yes) if self.p_no is None else self.p_no
        want = body.get("top_logprobs") or 5
        want = max(2, int(want)) if isinstance(want, int) else 5
        rest = max(0.0, 1.0 - self.p_yes - p_no)
        fillers = FILLER_TOKENS[: max(0, want - 2)]
        share = rest / len(fillers) if fillers and rest > 0 else 1e-6
        pairs = [(self.yes_token, _logprob(self.p_yes)), (self.no_token, _logprob(p_no))]
        pairs += [(t, _logprob(share)) for t in fillers]
        pairs.sort(key=lambda p: -p[1])
        return await RawLogprobs(pairs).respond(server, body)


@dataclass
class NoLogprobs(Behaviour):
    """A normal reply that carries no logprobs at all (``"logprobs": null``)."""

    content: str = "yes"

    async def respond(self, server: FakeOpenAIServer, body: dict[str, Any]) -> web.StreamResponse:
        usage = {"prompt_tokens": 50, "completion_tokens": 1, "total_tokens": 51}
        return web.json_response(_completion(body, [_choice(0, self.content, None)], usage))


@dataclass
class Status(Behaviour):
    """An HTTP error with an OpenAI-style error object."""

    status: int
    message: str = "scripted error"

    async def respond(self, server: FakeOpenAIServer, body: dict[str, Any]) -> web.StreamResponse:
        error = {"error": {"message": self.message, "type": "fake_error", "code": self.status}}
        return web.json_response(error, status=self.status)


@dataclass
class RateLimited(Behaviour):
    """A rate limit: `status` (429, or 503) with ``Retry-After: retry_after``."""

    retry_after: str = "1"
    status: int = 429

    async def respond(self, server: FakeOpenAIServer, body: dict[str, Any]) -> web.StreamResponse:
        error = {"error": {"message": "rate limit reached", "type": "rate_limit", "code": 429}}
        headers = {"Retry-After": self.retry_after}
        return web.json_response(error, status=self.status, headers=headers)


@dataclass
class RejectThinkingSwitch(Behaviour):
    """Answers `status` while the body carries the thinking switch; the first request
    without it consumes this behaviour and is answered by `then`."""

    status: int = 400
    then: Behaviour = field(default_factory=lambda: Verdict(p_yes=0.97))
    consume_on: ClassVar[str] = "no_switch"

    async def respond(self, server: FakeOpenAIServer, body: dict[str, Any]) -> web.StreamResponse:
        if any(name in body for name in THINKING_SWITCH_FIELDS):
            return await Status(
                self.status, "unsupported field: chat_template_kwargs / reasoning_effort"
            ).respond(server, body)
        return await self.then.respond(server, body)


@dataclass
class ReasoningModel(Behaviour):
    """As OpenAI's reasoning models answer: `max_tokens` refused with a 400 naming
    `max_completion_tokens`, logprobs refused, else a one-word reply (`content`)."""

    content: str = "yes"

    async def respond(self, server: FakeOpenAIServer, body: dict[str, Any]) -> web.StreamResponse:
        if "max_tokens" in body:
            return await Status(
                400,
                "Unsupported parameter: 'max_tokens' is not supported with this model. "
                "Use 'max_completion_tokens' instead.",
            ).respond(server, body)
        if body.get("logprobs"):
            return await Status(
                400, "Unsupported parameter: 'logprobs' is not supported with this model."
            ).respond(server, body)
        return await NoLogprobs(self.content).respond(server, body)


@dataclass
class Slow(Behaviour):
    """Waits `seconds` (cut short when the server stops), then answers with `then`."""

    seconds: float
    then: Behaviour = field(default_factory=lambda: Verdict(p_yes=0.97))

    async def respond(self, server: FakeOpenAIServer, body: dict[str, Any]) -> web.StreamResponse:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(server.stopping.wait(), self.seconds)
        return await self.then.respond(server, body)


@dataclass
class Garbage(Behaviour):
    """A body that is not JSON."""

    status: int = 200
    text: str = "<html>upstream proxy says hello</html>{not json"

    async def respond(self, server: FakeOpenAIServer, body: dict[str, Any]) -> web.StreamResponse:
        return web.Response(status=self.status, text=self.text, content_type="text/html")


@dataclass
class Drop(Behaviour):
    """Closes the connection without answering (a transport error for the client)."""

    async def respond(self, server: FakeOpenAIServer, body: dict[str, Any]) -> web.StreamResponse:
        raise _DropConnection


class _DropConnection(Exception):
    pass


@dataclass
class Samples(Behaviour):
    """Sampled answers: `contents` are handed out in order (cycling) across requests.

    With `honour_n` the reply has ``n`` choices, otherwise one. Usage reports
    `prompt_tokens` once and `tokens_per_sample` per choice (omitted with `usage=False`).
    """

    contents: Sequence[str]
    honour_n: bool = True
    tokens_per_sample: int = 10
    prompt_tokens: int = 20
    usage: bool = True
    _cursor: int = field(default=0, init=False, repr=False)

    async def respond(self, server: FakeOpenAIServer, body: dict[str, Any]) -> web.StreamResponse:
        n = body.get("n", 1)
        n = n if isinstance(n, int) and n >= 1 else 1
        k = n if self.honour_n else 1
        choices = []
        for i in range(k):
            text = self.contents[(self._cursor + i) % len(self.contents)] if self.contents else ""
            choices.append(_choice(i, text, None))
        self._cursor += k
        usage: dict[str, int] = {}
        if self.usage:
            completion = self.tokens_per_sample * k
            usage = {
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": completion,
                "total_tokens": self.prompt_tokens + completion,
            }
        payload = _completion(body, choices, usage)
        if not self.usage:
            del payload["usage"]
        return web.json_response(payload)


CASE_MARKER = re.compile(r"\[case ([A-Za-z0-9_-]+)\]")


@dataclass
class ByCase(Behaviour):
    """Answers each request with the behaviour scripted for the ``[case ID]`` marker in its
    messages (a 500 when none is). As the server's `default` it is never consumed, so the
    replies do not depend on the order in which concurrent calls arrive."""

    cases: dict[str, Behaviour]

    async def respond(self, server: FakeOpenAIServer, body: dict[str, Any]) -> web.StreamResponse:
        found = CASE_MARKER.search(json.dumps(body.get("messages", []), ensure_ascii=False))
        name = found.group(1) if found else ""
        behaviour = self.cases.get(name, Status(500, f"no scripted case {name!r}"))
        return await behaviour.respond(server, body)


_KINDS: dict[str, type[Behaviour]] = {
    "verdict": Verdict,
    "raw_logprobs": RawLogprobs,
    "no_logprobs": NoLogprobs,
    "status": Status,
    "reject_thinking_switch": RejectThinkingSwitch,
    "slow": Slow,
    "garbage": Garbage,
    "drop": Drop,
    "samples": Samples,
}


def behaviour_from_spec(spec: dict[str, Any]) -> Behaviour:
    """A behaviour from ``{"kind": ..., **fields}``; `then` may be a nested spec."""
    spec = dict(spec)
    kind = _KINDS[spec.pop("kind")]
    if isinstance(spec.get("then"), dict):
        spec["then"] = behaviour_from_spec(spec["then"])
    return kind(**spec)


class FakeOpenAIServer:
    """The scripted server; use as ``async with FakeOpenAIServer(script) as server``."""

    def __init__(
        self,
        script: Sequence[Behaviour] = (),
        *,
        default: Behaviour | None = None,
        port: int = 0,
    ) -> None:
        self.script: list[Behaviour] = list(script)
        self.default = default
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.port = port
        self.stopping = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.open = 0
        self.most_open = 0
        """Requests being answered now, and the most at once: a client's concurrency."""

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def push(self, *behaviours: Behaviour) -> None:
        """Append behaviours to the script."""
        self.script.extend(behaviours)

    async def start(self) -> FakeOpenAIServer:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        self.stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeOpenAIServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _next(self, body: dict[str, Any]) -> Behaviour | None:
        if not self.script:
            return self.default
        head = self.script[0]
        switch = any(name in body for name in THINKING_SWITCH_FIELDS)
        if head.consume_on != "no_switch" or not switch:
            self.script.pop(0)
        return head

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            body = {"_raw": raw.decode("utf-8", "replace")}
        if not isinstance(body, dict):
            body = {"_raw": body}
        self.requests.append(body)
        self.paths.append(request.path)
        behaviour = self._next(body)
        if behaviour is None:
            return await Status(500, "fake server script exhausted").respond(self, body)
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        try:
            return await behaviour.respond(self, body)
        except _DropConnection:
            if request.transport is not None:
                request.transport.abort()
            raise asyncio.CancelledError from None
        finally:
            self.open -= 1

    async def _models(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"object": "list", "data": [{"id": "fake-model"}]})


@contextlib.contextmanager
def serve_in_thread(
    script: Sequence[Behaviour] = (), *, default: Behaviour | None = None
) -> Iterator[FakeOpenAIServer]:
    """Run a FakeOpenAIServer on its own event loop in a daemon thread."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder: dict[str, FakeOpenAIServer] = {}

    def run() -> None:
        asyncio.set_event_loop(loop)

        async def boot() -> None:
            holder["server"] = await FakeOpenAIServer(script, default=default).start()

        loop.run_until_complete(boot())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=run, name="fake-openai-server", daemon=True)
    thread.start()
    if not started.wait(10):
        raise RuntimeError("fake OpenAI server did not start")
    server = holder["server"]
    try:
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


async def _serve_forever(port: int, script: list[Behaviour], default: Behaviour | None) -> None:
    server = await FakeOpenAIServer(script, default=default, port=port).start()
    print(server.base_url, flush=True)
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, done.set)
    await done.wait()
    await server.stop()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--script", default="[]", help="JSON list of behaviour specs")
    parser.add_argument("--default", default=None, help="JSON behaviour spec once exhausted")
    args = parser.parse_args(argv)
    script = [behaviour_from_spec(s) for s in json.loads(args.script)]
    default = behaviour_from_spec(json.loads(args.default)) if args.default else None
    asyncio.run(_serve_forever(args.port, script, default))


__all__ = [
    "Behaviour",
    "Drop",
    "FakeOpenAIServer",
    "Garbage",
    "NoLogprobs",
    "RawLogprobs",
    "RejectThinkingSwitch",
    "Samples",
    "Slow",
    "Status",
    "Verdict",
    "behaviour_from_spec",
    "serve_in_thread",
]

if __name__ == "__main__":
    main()
