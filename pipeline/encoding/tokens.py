"""Token counts of a model call: what the endpoint's reply says it spent, else an estimate
that says it is one.

Why it exists
    The judge and the sampler are the ladder's costly readers, and their budgets (calls and
    tokens, per route and tenant) are counted in tokens. An OpenAI-compatible server
    reports ``usage.prompt_tokens`` and ``usage.completion_tokens`` in its reply; many local
    servers do, some do not, and a call that timed out has no reply at all. The count here
    prefers the server's word and otherwise estimates, marking the count ``estimated`` so a
    dashboard or an auditor never mistakes a guess for a measurement.

The estimate
    Four characters a token (`CHARS_PER_TOKEN`), over the request's messages as JSON: the
    usual rule of thumb for English with BPE vocabularies. It overcounts whitespace-heavy
    text (pretty-printed JSON) and undercounts scripts a vocabulary splits finely; it is an
    order of magnitude for budgets, not a tokenizer.

Failure posture
    Pure; no tokenizer, no I/O. Malformed ``usage`` fields (negative, non-integer, bools) are
    ignored and the estimate is used instead; a call that never reached the server counts
    nothing (the caller passes no count at all).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "CHARS_PER_TOKEN",
    "TokenUsage",
    "call_tokens",
    "estimate_request_tokens",
    "estimate_tokens",
]

CHARS_PER_TOKEN = 4
"""Characters per token for estimates (English prose with a BPE vocabulary)."""


def estimate_tokens(text: str) -> int:
    """An estimate of `text`'s tokens: ``ceil(len / CHARS_PER_TOKEN)``; 0 for ``""``."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def estimate_request_tokens(body: Mapping[str, object]) -> int:
    """An estimate of a chat request's prompt tokens: its messages as JSON (at least 1)."""
    text = json.dumps(body.get("messages", []), ensure_ascii=False)
    return max(1, estimate_tokens(text))


@dataclass(frozen=True, slots=True)
class TokenUsage:
    """Tokens one call spent. ``estimated``: at least one of the two counts is an estimate
    (the reply carried no usable ``usage``, or there was no reply)."""

    prompt: int
    completion: int
    estimated: bool = False

    @property
    def total(self) -> int:
        return self.prompt + self.completion

    def to_dict(self) -> dict[str, object]:
        return {
            "prompt_tokens": self.prompt,
            "completion_tokens": self.completion,
            "estimated": self.estimated,
        }


def call_tokens(request: Mapping[str, object], reply: object) -> TokenUsage:
    """The tokens of one call that reached the server: `request` is the body sent, `reply`
    the decoded reply (None when none was read: a timeout, a transport error).

    Prompt: ``usage.prompt_tokens``, else `estimate_request_tokens`. Completion:
    ``usage.completion_tokens`` (or total − prompt), else, with a reply, the most the
    request allowed (``max_tokens`` × ``n``) and, without one, 0.
    """
    usage = reply.get("usage") if isinstance(reply, Mapping) else None
    usage = usage if isinstance(usage, Mapping) else {}
    prompt, completion = _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))
    total = _count(usage.get("total_tokens"))
    if completion is None and total is not None and prompt is not None and total >= prompt:
        completion = total - prompt
    estimated = prompt is None or completion is None
    if prompt is None:
        prompt = estimate_request_tokens(request)
    if completion is None:
        completion = _most_allowed(request) if isinstance(reply, Mapping) else 0
    return TokenUsage(prompt, completion, estimated)


def _most_allowed(request: Mapping[str, object]) -> int:
    limit, n = _count(request.get("max_tokens")), _count(request.get("n"))
    return (limit or 0) * (n or 1)


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
