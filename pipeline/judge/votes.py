"""The judge's second readout: votes, for endpoints that give no logprobs.

Anthropic's API, OpenAI's reasoning models and many gateways return no logprobs, or
refuse the parameter. For them the judge asks the same question `votes` times, sampled,
for a one-word verdict each, and reads P(yes) as the share of yes among all the votes:
a vote that is neither yes nor no counts against a clear verdict (it stays in the
denominator). The route's bars apply as to logprobs, read from both ends:

    P(yes) lies between yes/N (every other vote a no) and 1 - no/N (every other a yes);
    a clear yes needs yes/N >= accept_bar, a clear no needs 1 - no/N <= reject_bar.

So with the default 5 votes and bars 0.9/0.1, five yes is a yes, five no is a no, and
anything else goes to a person (`pipeline.judge.decide_judge`).

This module builds the request and reads the votes; it does no I/O
(`workers.clients.llm.ChatEndpoint.judge` asks).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from pipeline.judge.question import (
    JudgeReadout,
    JudgeStatus,
    normalise_token,
)

READOUTS = ("auto", "logprobs", "votes")
"""`[judge] readout`: auto (logprobs, votes where an endpoint gives none), or one of them."""

DEFAULT_VOTES = 5
MAX_VOTES = 25

VOTE_TEMPERATURE = 1.0
"""Votes are drawn at temperature 1: the model's own distribution, so the share of yes
estimates the P(yes) its first-token logprobs would have shown (a lower temperature
sharpens every vote towards the top token, and five votes at 0.2 say little more than
one). It is also the only temperature OpenAI's reasoning models accept."""

VOTE_MAX_TOKENS = 4
"""Room for one word and its punctuation ("Yes.", " no"); the first word is read."""

YES, NO, OTHER = "yes", "no", "other"

_THINK_BLOCK = re.compile(r"^\s*<think>.*?</think>\s*", re.DOTALL)


def build_vote_request(
    model: str,
    messages: Sequence[Mapping[str, object]],
    *,
    thinking_off: bool = True,
) -> dict[str, object]:
    """An OpenAI chat-completions body for one sampled one-word verdict (no logprobs)."""
    body: dict[str, object] = {
        "model": model,
        "messages": [dict(m) for m in messages],
        "max_tokens": VOTE_MAX_TOKENS,
        "temperature": VOTE_TEMPERATURE,
    }
    if thinking_off:
        body["reasoning_effort"] = "none"
        body["chat_template_kwargs"] = {"enable_thinking": False}
    return body


def read_vote(body: object) -> str:
    """yes, no or other from a decoded reply's first word (anything malformed: other)."""
    if not isinstance(body, Mapping):
        return OTHER
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        return OTHER
    message = choices[0].get("message")
    content = message.get("content") if isinstance(message, Mapping) else None
    if not isinstance(content, str):
        return OTHER
    words = _THINK_BLOCK.sub("", content, count=1).split()
    word = normalise_token(words[0]) if words else ""
    return word if word in (YES, NO) else OTHER


def readout_from_votes(votes: Sequence[str], model: str | None = None) -> JudgeReadout:
    """The readout of `votes` (each yes, no or other): score = yes/N, p_no = no/N.

    No votes at all (every call failed) is no readout the bars could act on; votes that
    hold neither yes nor no are `no_verdict_tokens`."""
    counted = tuple(v if v in (YES, NO) else OTHER for v in votes)
    n = len(counted)
    if n == 0:
        return JudgeReadout(
            JudgeStatus.MALFORMED, model=model, detail="no vote came back", readout="votes"
        )
    yes, no = counted.count(YES), counted.count(NO)
    detail = f"votes: {yes} yes, {no} no, {n - yes - no} other of {n}"
    status = JudgeStatus.OK if yes + no else JudgeStatus.NO_VERDICT_TOKENS
    return JudgeReadout(
        status,
        yes / n if yes + no else None,
        yes / n,
        no / n,
        model=model,
        detail=detail,
        readout="votes",
        votes=counted,
    )


def refuses_logprobs(status: int | None, error: str) -> bool:
    """Whether an HTTP answer says the endpoint will not give logprobs (400/422 naming them)."""
    return status in (400, 422) and "logprob" in error.casefold()
