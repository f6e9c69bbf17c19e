"""The judge and the sampler against a real OpenAI-compatible server (issue 43 item 4):
llama.cpp's, serving SmolLM2-135M-Instruct (`tests/integration/llama_server.py`).

They assert the protocol and the fail-closed behaviour, never the model's quality (it is
near chance as a judge). Kept short: one-token verdicts, three votes, few calls; the
fakes stay for what a real server cannot be made to do (hostile replies, rate limits).
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.judge.question import JudgeConfig, JudgeStatus, JudgeVerdict, decide_judge
from pipeline.judge.votes import NO, OTHER, YES
from pipeline.policy.document import parse_policy
from tests.fixtures.fakes import HashEncoder
from tests.integration import llama_server as server
from topics.codec import loads
from topics.names import Topic
from topics.schema import Envelope, candidate_from_dict
from workers.clients.discovery import resolve_model
from workers.clients.llm import LEARNED_READOUTS, CallKind, ChatEndpoint
from workers.interfaces import EndpointConfig, StageContext
from workers.stages.consistency import ConsistencyStage

llama_server = server.llama_server  # the session's server (fixture)
Proxy = server.Proxy
ROOT = Path(__file__).resolve().parents[2]
QUESTION = "What is the capital of France?"
CONTEXT = ["Paris is the capital of France."]
ANSWER = "Paris."
CALL_S = 60.0  # a loaded two-core machine; each call here is a token or a few


@pytest.fixture(autouse=True)
def _forget() -> None:
    LEARNED_READOUTS.clear()


def model(url: str) -> str:
    """The served model, found as a judge URL without a model finds it (item 2)."""
    return resolve_model("judge", url, "")


async def test_the_judge_on_logprobs(llama_server: str) -> None:
    config = JudgeConfig(readout="logprobs", timeout_seconds=CALL_S)
    async with ChatEndpoint(llama_server, model(llama_server)) as judge:
        readout, calls = await judge.judge(QUESTION, CONTEXT, ANSWER, config)
    assert calls[-1].kind is CallKind.OK, calls[-1].error
    assert calls[-1].tokens is not None and not calls[-1].tokens.estimated  # its own usage
    assert readout is not None and readout.readout == "logprobs"
    assert readout.status is not JudgeStatus.NO_LOGPROBS and readout.top_tokens
    decision = decide_judge(readout, config)
    if readout.status is not JudgeStatus.OK:  # weak mass or no yes/no: never a yes
        assert decision.verdict is JudgeVerdict.UNSURE


async def test_the_judge_on_votes_where_logprobs_are_refused(llama_server: str) -> None:
    config = JudgeConfig(votes=3, timeout_seconds=CALL_S)  # readout = auto
    async with (
        Proxy(llama_server, refuse_logprobs=True) as proxy,
        ChatEndpoint(proxy.base_url, model(llama_server)) as judge,
    ):
        readout, calls = await judge.judge(QUESTION, CONTEXT, ANSWER, config)
        assert proxy.refused == 1 and calls[0].status == 400
        assert [c.kind for c in calls[1:]] == [CallKind.OK] * 3
        assert readout is not None and readout.readout == "votes"
        assert len(readout.votes) == 3 and set(readout.votes) <= {YES, NO, OTHER}
        decision = decide_judge(readout, config)
        if OTHER in readout.votes or len(set(readout.votes)) > 1:
            assert decision.verdict is JudgeVerdict.UNSURE  # no clear verdict
        # auto remembered: the next verdict goes straight to votes, none refused
        _, again = await judge.judge(QUESTION, CONTEXT, ANSWER, config)
        assert proxy.refused == 1 and len(again) == 3
    assert all("logprobs" not in body for body in proxy.requests[1:])


def test_judge_probe_prints_its_verdict_line(llama_server: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GROUNDSTREAM_")}
    done = subprocess.run(
        [sys.executable, "-m", "workers.cli", "judge", "probe", "--url", llama_server],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    lines = done.stdout.strip().splitlines()
    assert "Traceback" not in done.stderr, done.stderr
    assert any(line.startswith("reachable: yes") for line in lines), done.stdout
    assert "logprobs: offered" in lines, done.stdout
    last = lines[-1]
    assert re.fullmatch(r"usable \((logprobs|votes)\)|not usable: .+", last), last
    assert done.returncode == (0 if last.startswith("usable") else 1)


async def test_the_consistency_stage_draws_real_samples(llama_server: str) -> None:
    policy = parse_policy(
        {
            "policy": {"version": "real-llm-1"},
            "consistency": {"n_samples": 2, "max_tokens": 8, "token_budget": 4096},
        }
    )
    ctx = StageContext(policy=policy, services={"encoder": HashEncoder()})
    c = candidate_from_dict(
        {"id": "c1", "session_id": "s1", "question": QUESTION, "response": ANSWER}
    )
    async with Proxy(llama_server) as proxy:
        stage = ConsistencyStage(EndpointConfig(proxy.base_url, model(llama_server), CALL_S))
        emits = await stage.decide_one(Envelope(candidate=c, route="default", mode="active"), ctx)
        await stage.close()
    record = next(loads(e.value) for e in emits if e.topic is Topic.DECISIONS)
    assert proxy.requests and proxy.requests[0]["max_tokens"] == 8
    drawn = record["evidence"]
    assert record["stage"] == "consistency", record
    assert "samples" in str(drawn), record
    assert all(call["kind"] == "ok" for call in drawn.get("calls", [])), drawn


async def test_a_queued_call_times_out_and_the_in_flight_limit_holds(llama_server: str) -> None:
    """llama.cpp answers one completion at a time: calls queue at the server. With one
    call slot the client never has two open; a verdict that waits behind long samples
    past its time limit is a timeout, and the judge's answer is unsure."""
    name = model(llama_server)
    config = JudgeConfig(readout="logprobs", timeout_seconds=CALL_S)
    async with Proxy(llama_server) as proxy:
        async with ChatEndpoint(proxy.base_url, name, slots=asyncio.Semaphore(1)) as one:
            got = await asyncio.gather(
                *(one.judge(QUESTION, CONTEXT, ANSWER, config) for _ in range(3))
            )
        assert proxy.most_open == 1 and all(calls[-1].ok for _, calls in got)
        async with (
            ChatEndpoint(proxy.base_url, name) as sampler,
            ChatEndpoint(proxy.base_url, name) as judge,
        ):
            busy = [
                asyncio.create_task(
                    sampler.sample(QUESTION, None, 1, 1.0, 48, timeout=CALL_S, token_budget=4096)
                )
                for _ in range(2)
            ]
            await asyncio.sleep(0.2)  # both sent: the judge's call queues behind them
            short = JudgeConfig(readout="logprobs", timeout_seconds=0.3)
            readout, calls = await judge.judge(QUESTION, CONTEXT, ANSWER, short)
            await asyncio.gather(*busy)
        assert readout is None and calls[-1].kind is CallKind.TIMEOUT
        assert proxy.most_open >= 2  # the server really had them queued at once
    from pipeline.judge.question import verdict_for_failure

    assert verdict_for_failure("timeout")[0] is JudgeVerdict.UNSURE
