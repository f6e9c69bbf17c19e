"""The votes readout (issue 43): the pure reading of votes, the policy key, and the client
asking for votes where the endpoint gives no logprobs or refuses them."""

from __future__ import annotations

import asyncio

import pytest

from pipeline.errors import PolicyError
from pipeline.judge.question import (
    REASONING_ROOM,
    JudgeConfig,
    JudgeStatus,
    JudgeVerdict,
    decide_judge,
)
from pipeline.judge.verdict_cache import cacheable, readout_from_dict
from pipeline.judge.votes import (
    build_vote_request,
    read_vote,
    readout_from_votes,
    refuses_logprobs,
)
from pipeline.policy.document import parse_policy
from pipeline.policy.routing import RouteConfig
from pipeline.stages import judge
from tests.fakes.openai_server import (
    FakeOpenAIServer,
    NoLogprobs,
    ReasoningModel,
    RejectThinkingSwitch,
    Slow,
    Status,
    Verdict,
)
from tests.unit import test_judge_gate as gate
from tests.unit.test_judge_accuracy_estimate import human, judged
from workers.clients.llm import (
    COMPLETION_TOKENS_ENDPOINTS,
    LEARNED_READOUTS,
    CallKind,
    ChatEndpoint,
)
from workers.eval.reviewed import JudgeAccuracy, judge_accuracy


@pytest.fixture(autouse=True)
def _forget() -> None:
    LEARNED_READOUTS.clear()
    COMPLETION_TOKENS_ENDPOINTS.clear()


def reply(content: object) -> dict:
    return {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}


class TestPure:
    @pytest.mark.parametrize(
        ("content", "vote"),
        [
            ("yes", "yes"),
            (" Yes.", "yes"),
            ("NO", "no"),
            ('"no", because', "no"),
            ("<think>hmm</think> yes", "yes"),
            ("maybe", "other"),
            ("", "other"),
            (None, "other"),
            ("yesterday", "other"),
        ],
    )
    def test_read_vote(self, content, vote):
        assert read_vote(reply(content)) == vote

    def test_malformed_is_other(self):
        for body in (None, [], {"choices": []}, {"choices": ["x"]}, {"choices": [{}]}):
            assert read_vote(body) == "other"

    def test_share_of_yes_over_all_votes(self):
        r = readout_from_votes(["yes", "yes", "yes", "no", "maybe"])
        assert r.status is JudgeStatus.OK and r.readout == "votes"
        assert r.score == pytest.approx(0.6) and r.p_no == pytest.approx(0.2)
        assert r.votes == ("yes", "yes", "yes", "no", "other")
        assert r.to_dict()["votes"] == ["yes", "yes", "yes", "no", "other"]

    @pytest.mark.parametrize(
        ("votes", "verdict"),
        [
            (["yes"] * 5, JudgeVerdict.YES),
            (["no"] * 5, JudgeVerdict.NO),
            (["yes"] * 4 + ["other"], JudgeVerdict.UNSURE),  # another word: no clear yes
            (["no"] * 4 + ["other"], JudgeVerdict.UNSURE),  # nor a clear no
            (["yes"] * 4 + ["no"], JudgeVerdict.UNSURE),
            (["yes"] * 9 + ["no"], JudgeVerdict.YES),  # 0.9 reaches the accept bar
        ],
    )
    def test_bars_apply(self, votes, verdict):
        assert decide_judge(readout_from_votes(votes), JudgeConfig()).verdict is verdict

    def test_no_verdict_at_all(self):
        assert readout_from_votes(["other"] * 5).status is JudgeStatus.NO_VERDICT_TOKENS
        assert readout_from_votes([]).status is JudgeStatus.MALFORMED
        none = decide_judge(readout_from_votes(["other"] * 5))
        assert none.verdict is JudgeVerdict.UNSURE

    def test_cache_keeps_the_verdict_not_the_votes(self):
        readout = readout_from_votes(["no"] * 5)
        assert cacheable(readout, JudgeConfig())
        back = readout_from_dict(readout.to_dict())
        assert back is not None and back.votes == () and back.readout == "votes"
        assert decide_judge(back).verdict is JudgeVerdict.NO

    def test_request_has_no_logprobs(self):
        body = build_vote_request("m", [{"role": "user", "content": "q"}])
        assert "logprobs" not in body and "top_logprobs" not in body
        assert body["temperature"] == 1.0 and body["max_tokens"] >= 1

    def test_refusal(self):
        assert refuses_logprobs(400, "HTTP 400: logprobs not supported")
        assert refuses_logprobs(422, "HTTP 422: Unknown field top_logprobs")
        assert not refuses_logprobs(400, "HTTP 400: unsupported field: reasoning_effort")
        assert not refuses_logprobs(500, "logprobs")


class TestPolicy:
    def test_defaults(self):
        assert JudgeConfig().readout == "auto" and JudgeConfig().votes == 5

    @pytest.mark.parametrize(
        ("table", "key"),
        [
            ({"readout": "sampling"}, "judge.readout"),
            ({"readout": 1}, "judge.readout"),
            ({"votes": 0}, "judge.votes"),
            ({"votes": 26}, "judge.votes"),
            ({"votes": True}, "judge.votes"),
            ({"votes": 2.5}, "judge.votes"),
        ],
    )
    def test_refused_naming_the_key(self, table, key):
        with pytest.raises(PolicyError, match=key.replace(".", r"\.")):
            JudgeConfig.from_mapping(table)


def ep(server, **kwargs) -> ChatEndpoint:
    return ChatEndpoint(server.base_url, "judge-model", **kwargs)


async def ask(endpoint: ChatEndpoint, config: JudgeConfig, timeout: float = 5.0):
    return await endpoint.judge(
        "Capital of France?", ["Paris is."], "Paris", config, timeout=timeout
    )


class TestClient:
    async def test_no_logprobs_then_votes_and_remembered(self):
        async with FakeOpenAIServer(default=NoLogprobs("yes")) as server, ep(server) as e:
            readout, calls = await ask(e, JudgeConfig())
            assert readout.readout == "votes" and readout.votes == ("yes",) * 5
            assert len(calls) == 6 and all(c.ok for c in calls)
            assert decide_judge(readout).verdict is JudgeVerdict.YES
            assert "logprobs" in server.requests[0]
            assert all("logprobs" not in r for r in server.requests[1:])
            # auto remembered: the next verdict asks for votes straight away
            assert e.readout_mode(JudgeConfig()) == "votes"
            readout, calls = await ask(e, JudgeConfig())
            assert len(calls) == 5 and readout.readout == "votes"
            assert e.readout_mode(JudgeConfig(readout="logprobs")) == "logprobs"

    async def test_refused_parameter_then_votes(self):
        script = [Status(400, "logprobs not supported")]
        async with FakeOpenAIServer(script, default=NoLogprobs("no")) as server, ep(server) as e:
            readout, calls = await ask(e, JudgeConfig())
        assert calls[0].kind is CallKind.HTTP_ERROR and len(calls) == 6  # no switch retry
        assert readout.votes == ("no",) * 5
        assert decide_judge(readout).verdict is JudgeVerdict.NO

    async def test_a_reasoning_model_is_asked_for_votes_under_its_token_cap_name(self):
        """OpenAI's reasoning models refuse both `max_tokens` and logprobs: the cap is
        renamed once (remembered per endpoint), logprobs are refused, votes decide."""
        async with FakeOpenAIServer(default=ReasoningModel("yes")) as server, ep(server) as e:
            readout, calls = await ask(e, JudgeConfig())
            assert readout.readout == "votes" and readout.votes == ("yes",) * 5
            assert decide_judge(readout).verdict is JudgeVerdict.YES
            first, second = server.requests[0], server.requests[1]
            assert "max_tokens" in first and "max_completion_tokens" in second
            # Room for the reasoning a reasoning model does before its one word.
            assert second["max_completion_tokens"] == REASONING_ROOM > first["max_tokens"]
            # Learned: no later request names max_tokens, so none is refused for it again.
            assert all("max_tokens" not in r for r in server.requests[1:])
            readout, calls = await ask(e, JudgeConfig())
            assert len(calls) == 5 and all(c.ok for c in calls)

    async def test_logprobs_mode_never_votes(self):
        async with FakeOpenAIServer(default=NoLogprobs("yes")) as server, ep(server) as e:
            readout, calls = await ask(e, JudgeConfig(readout="logprobs"))
        assert readout.status is JudgeStatus.NO_LOGPROBS and len(calls) == 1
        assert decide_judge(readout).verdict is JudgeVerdict.UNSURE

    async def test_logprobs_kept_where_given(self):
        async with FakeOpenAIServer(default=Verdict(p_yes=0.97)) as server, ep(server) as e:
            readout, calls = await ask(e, JudgeConfig())
        assert readout.readout == "logprobs" and len(calls) == 1
        assert e.readout_mode(JudgeConfig()) == "logprobs"

    async def test_votes_mode_with_thinking_switch_refused(self):
        script = [RejectThinkingSwitch(then=NoLogprobs("yes"))]
        async with FakeOpenAIServer(script, default=NoLogprobs("yes")) as server, ep(server) as e:
            readout, calls = await ask(e, JudgeConfig(readout="votes", votes=3))
        assert next(c.kind for c in calls) is CallKind.HTTP_ERROR and len(calls) == 4
        assert all("reasoning_effort" not in r for r in server.requests[1:])
        assert readout.votes == ("yes",) * 3

    async def test_a_failed_vote_is_no_clear_verdict(self):
        script = [NoLogprobs("yes"), NoLogprobs("yes"), Status(500, "boom")]
        async with FakeOpenAIServer(script, default=NoLogprobs("yes")) as server, ep(server) as e:
            readout, _calls = await ask(e, JudgeConfig(readout="votes", votes=3))
        assert readout.votes.count("other") == 1
        assert decide_judge(readout).verdict is JudgeVerdict.UNSURE

    async def test_first_vote_failing_fails_closed(self):
        async with FakeOpenAIServer(default=Status(500, "down")) as server, ep(server) as e:
            readout, calls = await ask(e, JudgeConfig(readout="votes"))
        assert readout is None and len(calls) == 1  # no more calls spent on a dead endpoint

    async def test_votes_respect_the_in_flight_limit(self):
        slow = Slow(0.2, then=NoLogprobs("yes"))
        slots = asyncio.Semaphore(2)
        async with FakeOpenAIServer(default=slow) as server, ep(server, slots=slots) as e:
            readout, _calls = await ask(e, JudgeConfig(readout="votes", votes=7))
        assert readout.votes == ("yes",) * 7 and server.most_open <= 2


def test_judge_accuracy_reads_a_votes_judge() -> None:
    """`calibrate --from-decisions` measures a votes judge as it does a logprobs one: a
    votes verdict's record carries the same `level` (`pipeline.stages.judge.decide`)."""
    route, records = RouteConfig("default"), []
    for cid, votes, person in (
        ("a", ["yes"] * 5, "accept"),
        ("b", ["no"] * 5, "reject"),
        ("c", ["yes"] * 5, "reject"),
        ("d", ["yes"] * 3 + ["no", "other"], "accept"),  # unsure: not counted
    ):
        verdict = judge.decide(readout_from_votes(votes), "", route, JudgeConfig(), None, None)
        evidence = {"readout_kind": "votes", "readout": readout_from_votes(votes).to_dict()}
        records += [judged(cid, verdict.level, evidence=evidence), human(cid, person)]
    assert judge_accuracy(records) == JudgeAccuracy(n=3, agreed=2, yes_rejected=1, no_accepted=0)


class TestStage:
    """Votes through the judge stage: the record names its readout and holds the votes,
    every vote is charged to the route's budgets, and the cache answers without votes."""

    def test_votes_are_charged_recorded_and_cached(self) -> None:
        route = {"judge_calls_per_minute": 100, "judge_tokens_per_day": 100_000}

        async def scenario() -> tuple[dict, dict, int]:
            async with FakeOpenAIServer(default=NoLogprobs("yes")) as server:
                stage, ctx = gate.stage_for(server), gate.context(route)
                first = gate.records(await gate.run(stage, [gate.envelope("c-1")], ctx))
                again = gate.records(await gate.run(stage, [gate.envelope("c-2")], ctx))
                await stage.close()
                return first["c-1"], again["c-2"], len(server.requests)

        first, again, asked = asyncio.run(scenario())
        evidence = first["evidence"]
        assert first["action"] == "accept" and evidence["readout_kind"] == "votes"
        assert evidence["readout"]["votes"] == ["yes"] * 5
        assert len(evidence["calls"]) == 6  # the logprobs ask, then five votes
        assert evidence["budget"]["route"]["calls_left"] == 100 - 6
        spent = evidence["tokens"]["prompt_tokens"] + evidence["tokens"]["completion_tokens"]
        assert evidence["budget"]["route"]["tokens_left"] == 100_000 - spent
        assert again["evidence"]["cache"] == "hit" and asked == 6  # no vote asked again
        assert "votes" not in again["evidence"]["readout"]  # the cache kept the verdict
        assert again["action"] == "accept" and again["evidence"]["readout_kind"] == "votes"

    def test_a_failed_call_still_names_the_readout(self) -> None:
        async def scenario() -> dict:
            async with FakeOpenAIServer(default=Status(500, "down")) as server:
                stage = gate.stage_for(server)
                ctx = gate.StageContext(
                    policy=parse_policy({"judge": {"readout": "votes"}}), clock=gate.Clock()
                )
                got = gate.records(await gate.run(stage, [gate.envelope("c-1")], ctx))
                await stage.close()
                return got["c-1"]

        r = asyncio.run(scenario())
        assert r["evidence"]["readout_kind"] == "votes" and r["level"] == "unsure"
