"""`bench judge`'s judge: an OpenAI-compatible server on a real socket that answers from
the labels of the data it was given, right a stated share of the time.

It speaks the seed's first-token protocol (`pipeline.judge.question.read_verdict`): a one-token
reply whose first position carries "Yes" and "No" among its top logprobs, P(yes) 0.97 for
a yes and 0.03 for a no. It finds the candidate by the question and response in the
request's fenced data block (the judge never sees an id) and is wrong on purpose on the
candidates whose id hashes below `1 - accuracy` (so a run is reproducible, and two
accuracies err on nested sets: the rule of tests/fakes/scripted_judge.py, which the
test suite uses; this one ships with the package because the bench runs it). Each request
is noted with its arrival time (`time.monotonic`) and its prompt tokens, estimated as the
judge stage estimates them (`pipeline.encoding.tokens.estimate_request_tokens`), which the reply's
`usage` reports back. A request for no labelled candidate gets a 500.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from pipeline.encoding.tokens import estimate_request_tokens
from pipeline.judge.question import unfence_data

YES, NO = 0.97, 0.03


def judge_is_right(candidate_id: str, accuracy: float) -> bool:
    """Whether the judge answers this candidate correctly: a fixed hash of the id."""
    digest = hashlib.sha256(candidate_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64 < accuracy


def labelled_answer(
    answers: Mapping[tuple[str, str], tuple[str, bool]], body: Mapping[str, Any]
) -> tuple[str, bool] | None:
    """(candidate id, grounded) of the answer a judge request asks about, found by the
    question and response in its fenced data block; None for an unknown one."""
    for message in body.get("messages", []):
        try:
            data = unfence_data(str(message.get("content", "")))
        except ValueError:
            continue
        if isinstance(data, dict):
            return answers.get((str(data.get("question")), str(data.get("response"))))
    return None


@dataclass(frozen=True, slots=True)
class Call:
    at: float
    prompt_tokens: int
    candidate_id: str


@dataclass
class ScriptedJudge:
    """`answers` maps (question, response) to (candidate id, grounded)."""

    answers: Mapping[tuple[str, str], tuple[str, bool]]
    accuracy: float
    calls: list[Call] = field(default_factory=list)
    port: int = 0

    async def start(self) -> ScriptedJudge:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        await self._runner.cleanup()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def says_yes(self, candidate_id: str, grounded: bool) -> bool:
        return grounded if judge_is_right(candidate_id, self.accuracy) else not grounded

    def _lookup(self, body: Mapping[str, Any]) -> tuple[str, bool] | None:
        return labelled_answer(self.answers, body)

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        found = self._lookup(body)
        if found is None:
            return web.json_response({"error": {"message": "no labelled candidate"}}, status=500)
        cid, grounded = found
        tokens = estimate_request_tokens(body)
        self.calls.append(Call(time.monotonic(), tokens, cid))
        p_yes = YES if self.says_yes(cid, grounded) else NO
        return web.json_response(first_token_reply(body, p_yes, tokens))


def first_token_reply(body: Mapping[str, Any], p_yes: float, prompt_tokens: int) -> dict:
    """A one-token chat completion in the seed's first-token protocol: "Yes" and "No"
    among the first position's top logprobs, P(yes) = `p_yes`."""
    token = "Yes" if p_yes > 0.5 else "No"
    top = [
        {"token": t, "logprob": math.log(p), "bytes": list(t.encode())}
        for t, p in sorted((("Yes", p_yes), ("No", 1.0 - p_yes)), key=lambda tp: -tp[1])
    ]
    first = {
        "token": token,
        "logprob": math.log(max(p_yes, 1.0 - p_yes)),
        "bytes": list(token.encode()),
        "top_logprobs": top,
    }
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model", "bench-judge"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": token},
                "logprobs": {"content": [first], "refusal": None},
                "finish_reason": "length",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": 1,
            "total_tokens": prompt_tokens + 1,
        },
    }
