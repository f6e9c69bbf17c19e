"""`groundstream judge probe` / `sampler probe` against the fake server (issue 43 item 3);
the real server's run is tests/integration/test_real_llm.py."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web

from pipeline.judge.question import unfence_data
from tests.fakes.openai_server import (
    Behaviour,
    FakeOpenAIServer,
    NoLogprobs,
    Samples,
    Status,
    Verdict,
)
from workers.cli.probe import PAIRS, probe_judge, probe_sampler
from workers.clients.llm import LEARNED_READOUTS

SUPPORTED = {answer for _, _, answer, supported in PAIRS if supported}


@dataclass
class Knows(Behaviour):
    """A judge that knows the built-in pairs: logprobs, or a one-word vote without."""

    logprobs: bool = True
    backwards: bool = False

    async def respond(self, server: FakeOpenAIServer, body: dict[str, Any]) -> web.StreamResponse:
        data = unfence_data(body["messages"][-1]["content"])
        yes = (data["response"] in SUPPORTED) != self.backwards
        if self.logprobs:
            return await Verdict(p_yes=0.97 if yes else 0.03).respond(server, body)
        return await NoLogprobs("yes" if yes else "no").respond(server, body)


@pytest.fixture(autouse=True)
def _forget() -> None:
    LEARNED_READOUTS.clear()


def probe(behaviour: Behaviour, script=()) -> tuple[Any, list[dict]]:
    async def run():
        async with FakeOpenAIServer(script, default=behaviour) as server:
            return await probe_judge(server.base_url, "", "", 5.0), server.requests

    return asyncio.run(run())


def test_a_logprobs_judge_is_usable_on_logprobs() -> None:
    report, _ = probe(Knows())
    assert report.verdict == "usable (logprobs)" and report.usable
    text = "\n".join(report.lines)
    assert "model: fake-model (the one it serves)" in text and "logprobs: offered" in text
    assert "12 right, 0 wrong, 0 unsure" in text and "latency: median" in text


def test_a_judge_without_logprobs_is_usable_on_votes() -> None:
    report, requests = probe(Knows(logprobs=False))
    assert report.verdict == "usable (votes)"
    assert "logprobs: not offered" in "\n".join(report.lines)
    assert len(requests) == 1 + 12 * 5


def test_a_refused_parameter_is_votes_too() -> None:
    report, _ = probe(Knows(logprobs=False), [Status(400, "logprobs are not supported")])
    assert report.verdict == "usable (votes)"
    assert any(line.startswith("thinking off: not known") for line in report.lines)


def test_a_judge_that_is_wrong_is_not_usable() -> None:
    report, _ = probe(Knows(backwards=True))
    assert report.verdict == "not usable: 0 right and 12 wrong of 12 built-in pairs"
    assert not report.usable


def test_a_failing_judge_is_not_usable() -> None:
    report, _ = probe(Status(500, "down"))
    assert report.verdict.startswith("not usable: ")


def test_the_sampler_probe() -> None:
    async def run(behaviour: Behaviour):
        async with FakeOpenAIServer(default=behaviour) as server:
            return await probe_sampler(server.base_url, "fake-model", "", 5.0)

    good = asyncio.run(run(Samples(["Paris.", "It is Paris."])))
    assert good.verdict == "usable" and "n: honoured" in good.lines
    bad = asyncio.run(run(Status(500, "down")))
    assert bad.verdict.startswith("not usable: sampling ended http_error")
