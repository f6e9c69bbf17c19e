"""The verification ladder's upper rungs on a real broker, against the project's own fake
OpenAI-compatible server on a real socket (issue 4).

One set of workers serves the whole module: `groundstream worker all` (five stages) with
the judge and the sampler pointed at fake servers, plus a lone `worker judge` on a second
topic prefix with no judge endpoint at all. The fakes pick each reply by the case marker
``[case ID]`` that the test appends to every question, so concurrent calls of one batch
are answered deterministically. Candidates of the consistency and rules rungs enter at
`candidates` and climb the full ladder (the policy's thresholds escalate every candidate
with a context to consistency); candidates of the judge rung are fed to the `judge` topic
as envelopes. Every scenario's records are read back from `decisions` and the terminal
topics once, after all of them have an outcome; human review then works on that state.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from pipeline.judge.question import DATA_BEGIN, DATA_END, THINKING_SWITCH_FIELDS, unfence_data
from tests.fakes.openai_server import (
    Behaviour,
    FakeOpenAIServer,
    Garbage,
    NoLogprobs,
    RawLogprobs,
    RejectThinkingSwitch,
    Samples,
    Slow,
    Status,
    Verdict,
    serve_in_thread,
)
from topics.codec import dumps
from topics.names import TERMINAL, Topic
from topics.schema import Candidate, Envelope, candidate_from_dict

from .conftest import consume_all, produce
from .harness import FIXTURES, REPO_ROOT, Workers, cli, values, worker_env

pytestmark = pytest.mark.timeout(900)

LADDER = FIXTURES / "ladder"
POLICY = LADDER / "policy.toml"
POLICY_VERSION = "ladder-test-1"
JUDGE_MODEL = "fake-judge-1"
SAMPLER_MODEL = "fake-sampler-1"
JUDGE_TIMEOUT_S = 2.0
SLOW_S = 10.0
TOP_LOGPROBS = 8  # [judge] top_logprobs of the policy
N_SAMPLES = 4  # [consistency] n_samples of the policy
STAGES = 6  # geometry, switch, consistency, judge, rules, terminal
OUTCOME_TIMEOUT_S = 180.0

CASE = re.compile(r"\[case ([a-z0-9-]+)\]")

# Failure modes of the judge rung: each must end in review, never in state.
JUDGE_FAILURES = ("jd-no-logprobs", "jd-no-verdict", "jd-garbage", "jd-http-500", "jd-slow")
BREAKER = ("brk-1", "brk-2", "brk-3")
UNAVAILABLE = "jd-unavailable"  # fed to the judge worker that has no endpoint

SAMPLED = (
    "The Old Mill museum is open Wednesday to Sunday from 10 am to 5 pm.",
    "It is open from Wednesday to Sunday, 10 am to 5 pm.",
    "The Old Mill museum opens Wednesday to Sunday, 10 am until 5 pm.",
    "Wednesday to Sunday, 10 am to 5 pm, the Old Mill museum is open.",
)


# ------------------------------------------------------------------ fake replies --


def case_of(body: dict[str, Any]) -> str | None:
    """The case marker in a request's messages (the question carries it)."""
    found = CASE.search(json.dumps(body.get("messages", []), ensure_ascii=False))
    return found.group(1) if found else None


def user_message(body: dict[str, Any]) -> str:
    return next(m["content"] for m in body["messages"] if m["role"] == "user")


def system_message(body: dict[str, Any]) -> str:
    return next(m["content"] for m in body["messages"] if m["role"] == "system")


@dataclass
class ByCase(Behaviour):
    """Answers every request with the behaviour scripted for the case in its question.

    Used as the server's `default`, it is never consumed, so the replies do not depend on
    the order in which a batch's concurrent calls arrive."""

    cases: dict[str, Behaviour]

    async def respond(self, server: FakeOpenAIServer, body: dict[str, Any]) -> web.StreamResponse:
        name = case_of(body)
        behaviour = self.cases.get(name or "", Status(500, f"no scripted case {name!r}"))
        return await behaviour.respond(server, body)


@dataclass
class ReadsTheData(Behaviour):
    """A judge that answers by the real rule: it reads the fenced data block and says yes
    only if every sentence of the response occurs in the context."""

    decided: list[bool] = field(default_factory=list)

    async def respond(self, server: FakeOpenAIServer, body: dict[str, Any]) -> web.StreamResponse:
        data = unfence_data(user_message(body))
        context = " ".join(data.get("context", []))
        claims = [s.strip() for s in re.split(r"(?<=[.!?])\s+", data["response"]) if s.strip()]
        supported = bool(claims) and all(claim in context for claim in claims)
        self.decided.append(supported)
        return await Verdict(p_yes=0.98 if supported else 0.02).respond(server, body)


JUDGE_SCRIPT: dict[str, Behaviour] = {
    "jd-yes": Verdict(p_yes=0.97),
    "jd-no": Verdict(p_yes=0.03),
    "jd-no-strict": Verdict(p_yes=0.03),
    "jd-unsure": Verdict(p_yes=0.5),
    "jd-no-logprobs": NoLogprobs(content="yes"),
    "jd-no-verdict": RawLogprobs(
        [("Maybe", -0.3), ("The", -1.6), ("Perhaps", -2.5), ("It", -3.1), ("Unclear", -3.9)]
    ),
    "jd-garbage": Garbage(),
    "jd-http-500": Status(500, "judge crashed"),
    "jd-slow": Slow(SLOW_S, Verdict(p_yes=0.99)),
    "jd-think": RejectThinkingSwitch(400, Verdict(p_yes=0.97)),
    "jd-inject": ReadsTheData(),
    "jd-real-yes": ReadsTheData(),
    "brk-1": Status(503, "judge overloaded"),
    "brk-2": Status(503, "judge overloaded"),
    "brk-3": Verdict(p_yes=0.99),  # never asked: the breaker is open by then
    "cs-compete": Verdict(p_yes=0.03),
    "smp-fail": Verdict(p_yes=0.97),
}
SAMPLER_SCRIPT: dict[str, Behaviour] = {
    "smp-agree": Samples(SAMPLED),
    "smp-fail": Status(500, "sampler crashed"),
}


# ----------------------------------------------------------------------- harness --


def load_cases(name: str) -> dict[str, Candidate]:
    """Fixture candidates by id, each question marked with its case."""
    cases = {}
    for line in (LADDER / name).read_text().splitlines():
        if line.strip():
            raw = json.loads(line)
            raw["question"] = f"{raw['question']} [case {raw['id']}]"
            cases[raw["id"]] = candidate_from_dict(raw)
    return cases


JUDGE_CASES = load_cases("judge_cases.jsonl")
LADDER_CASES = load_cases("ladder_cases.jsonl")


def envelope(c: Candidate) -> tuple[bytes, bytes]:
    """(key, value) of an envelope entering the judge topic directly."""
    env = Envelope(
        candidate=c, route=c.route or "default", mode="evaluate", policy_version=POLICY_VERSION
    )
    return c.session_id.encode(), env.encode()


def candidate(c: Candidate) -> tuple[bytes, bytes]:
    return c.session_id.encode(), dumps(c.to_dict())


@dataclass
class Snapshot:
    """Decision records and terminal-topic placements of one prefix, as read once."""

    records: list[dict[str, Any]]
    placed: dict[str, list[str]]  # candidate id -> terminal topics holding its envelope

    def trail(self, cid: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r["candidate_id"] == cid]

    def stages(self, cid: str) -> list[str]:
        return [r["stage"] for r in self.trail(cid)]

    def record(self, cid: str, stage: str) -> dict[str, Any]:
        found = [r for r in self.trail(cid) if r["stage"] == stage]
        assert len(found) == 1, f"{cid}: {len(found)} {stage} records: {self.stages(cid)}"
        return found[0]

    def outcomes(self, cid: str) -> list[dict[str, Any]]:
        return [r for r in self.trail(cid) if r["stage"] == "outcome"]

    def outcome(self, cid: str) -> dict[str, Any]:
        found = self.outcomes(cid)
        assert len(found) == 1, f"{cid}: {len(found)} outcomes: {self.stages(cid)}"
        return found[0]


def snapshot(bootstrap: str, prefix: str) -> Snapshot:
    async def read() -> Snapshot:
        records = values(await consume_all(bootstrap, Topic.DECISIONS.full(prefix), timeout=10))
        placed: dict[str, list[str]] = {}
        for topic in TERMINAL:
            for env in values(await consume_all(bootstrap, topic.full(prefix), timeout=10)):
                cid = env["candidate"]["id"] if "candidate" in env else env.get("id", "?")
                placed.setdefault(cid, []).append(topic.value)
        return Snapshot(records, placed)

    return asyncio.run(read())


def wait_for(
    bootstrap: str, prefix: str, done: Callable[[Snapshot], bool], timeout: float
) -> Snapshot:
    deadline = time.monotonic() + timeout
    while True:
        snap = snapshot(bootstrap, prefix)
        if done(snap) or time.monotonic() > deadline:
            return snap
        time.sleep(0.5)


def have_outcomes(ids: set[str], n: int = 1) -> Callable[[Snapshot], bool]:
    """Every id has `n` outcomes, and its envelope sits in each outcome's topic."""

    def settled(snap: Snapshot, cid: str) -> bool:
        topics = [r["topic"] for r in snap.outcomes(cid)]
        return len(topics) >= n and sorted(topics) == sorted(snap.placed.get(cid, []))

    return lambda snap: all(settled(snap, cid) for cid in ids)


def start_together(*workers: Workers) -> None:
    """Start workers in parallel (each start waits for its apps to report ready)."""
    with ThreadPoolExecutor(len(workers)) as pool:
        errors = [f.exception() for f in [pool.submit(w.start) for w in workers]]
    if any(errors):
        for w in workers:
            w.stop()
        raise next(e for e in errors if e is not None)


@dataclass
class Ladder:
    bootstrap: str
    env: dict[str, str]
    judge: FakeOpenAIServer
    sampler: FakeOpenAIServer
    main: Snapshot
    bare: Snapshot
    logs: list[Path]

    def judge_bodies(self, cid: str) -> list[dict[str, Any]]:
        return [b for b in list(self.judge.requests) if case_of(b) == cid]

    def sampler_bodies(self, cid: str) -> list[dict[str, Any]]:
        return [b for b in list(self.sampler.requests) if case_of(b) == cid]

    def refresh(self, done: Callable[[Snapshot], bool] = lambda s: True) -> Snapshot:
        self.main = wait_for(self.bootstrap, self.env["GROUNDSTREAM_TOPIC_PREFIX"], done, 60)
        return self.main

    def groundstream(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`groundstream ARGS` without raising on a non-zero exit."""
        return subprocess.run(
            [sys.executable, "-m", "workers.cli", *args],
            env=self.env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip


@pytest.fixture(scope="module")
def ladder(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ladder]:
    tmp = tmp_path_factory.mktemp("ladder")
    run = uuid.uuid4().hex[:8]
    prefix, bare_prefix = f"t-{run}.", f"t-{run}-bare."
    with contextlib.ExitStack() as stack:
        judge = stack.enter_context(serve_in_thread(default=ByCase(JUDGE_SCRIPT)))
        sampler = stack.enter_context(serve_in_thread(default=ByCase(SAMPLER_SCRIPT)))
        env = worker_env(
            kafka_bootstrap, prefix, tmp / "data",
            GROUNDSTREAM_POLICY=str(POLICY),
            GROUNDSTREAM_JUDGE_URL=judge.base_url,
            GROUNDSTREAM_JUDGE_MODEL=JUDGE_MODEL,
            GROUNDSTREAM_JUDGE_TIMEOUT=str(JUDGE_TIMEOUT_S),
            GROUNDSTREAM_SAMPLER_URL=sampler.base_url,
            GROUNDSTREAM_SAMPLER_MODEL=SAMPLER_MODEL,
        )  # fmt: skip
        bare_env = worker_env(
            kafka_bootstrap, bare_prefix, tmp / "bare", GROUNDSTREAM_POLICY=str(POLICY)
        )
        cli(env, "topics", "create")
        cli(bare_env, "topics", "create")
        logs = [tmp / "workers.log", tmp / "bare-judge.log", tmp / "bare-terminal.log"]
        workers = Workers(env, "all", logs[0], apps=STAGES)
        bare_judge = Workers(bare_env, "judge", logs[1])
        bare_terminal = Workers(bare_env, "terminal", logs[2])  # writes the judge's outcome
        stack.callback(workers.stop)
        stack.callback(bare_judge.stop)
        stack.callback(bare_terminal.stop)
        start_together(workers, bare_judge, bare_terminal)

        first = [c for cid, c in JUDGE_CASES.items() if cid not in ("brk-3", UNAVAILABLE)]

        def send(topic: str, items: list[tuple[bytes, bytes]]) -> None:
            asyncio.run(produce(kafka_bootstrap, topic, items))

        send(Topic.CANDIDATES.full(prefix), [candidate(c) for c in LADDER_CASES.values()])
        send(Topic.JUDGE.full(prefix), [envelope(c) for c in first])
        send(Topic.JUDGE.full(bare_prefix), [envelope(JUDGE_CASES[UNAVAILABLE])])
        expected = {c.id for c in first} | set(LADDER_CASES)
        wait_for(kafka_bootstrap, prefix, have_outcomes(expected), OUTCOME_TIMEOUT_S)
        # Two 503s have opened the fragile route's breaker: the third call must not go out.
        send(Topic.JUDGE.full(prefix), [envelope(JUDGE_CASES["brk-3"])])
        main = wait_for(kafka_bootstrap, prefix, have_outcomes(expected | {"brk-3"}), 60)
        bare = wait_for(kafka_bootstrap, bare_prefix, have_outcomes({UNAVAILABLE}), 60)
        missing = sorted(cid for cid in expected | {"brk-3"} if not main.outcomes(cid))
        assert not missing, f"no outcome for {missing}:\n{workers.tail()}"
        yield Ladder(kafka_bootstrap, env, judge, sampler, main, bare, logs)


def assert_ends_in(snap: Snapshot, cid: str, topic: Topic) -> dict[str, Any]:
    """The candidate has exactly one outcome, naming `topic`, and sits only there."""
    outcome = snap.outcome(cid)
    assert outcome["topic"] == topic.value, (cid, outcome["reason"])
    assert outcome["write_to_state"] is (topic is Topic.STATE)
    assert snap.placed.get(cid) == [topic.value], (cid, snap.placed.get(cid))
    return outcome


# ------------------------------------------------------------------------- judge --


class TestJudgeVerdicts:
    def test_yes_goes_through_rules_to_state(self, ladder: Ladder) -> None:
        snap = ladder.main
        assert snap.stages("jd-yes") == ["judge", "rules", "outcome"]
        judge = snap.record("jd-yes", "judge")
        assert (judge["action"], judge["method"], judge["level"]) == ("accept", "judge", "yes")
        assert judge["score"] == pytest.approx(0.97, abs=1e-6)
        assert judge["write_to_state"] is False, "only the rules stage writes to state"
        rules = snap.record("jd-yes", "rules")
        assert (rules["action"], rules["write_to_state"]) == ("accept", True)
        outcome = assert_ends_in(snap, "jd-yes", Topic.STATE)
        assert outcome["action"] == "accept"

    def test_no_goes_to_the_routes_on_reject_topic(self, ladder: Ladder) -> None:
        snap = ladder.main
        for cid, route, topic in (
            ("jd-no", "default", Topic.FALLBACK),  # on_reject defaults to fallback
            ("jd-no-strict", "strict", Topic.REJECT),  # [routes.strict] on_reject = "reject"
        ):
            assert snap.stages(cid) == ["judge", "outcome"], cid
            judge = snap.record(cid, "judge")
            assert (judge["route"], judge["level"]) == (route, "no")
            assert judge["action"] == topic.value.removeprefix("escalations.")
            assert judge["score"] == pytest.approx(0.03, abs=1e-6)
            assert_ends_in(snap, cid, topic)

    def test_in_between_goes_to_review(self, ladder: Ladder) -> None:
        judge = ladder.main.record("jd-unsure", "judge")
        assert (judge["action"], judge["level"], judge["gate"]) == (
            "escalate",
            "unsure",
            "judge_unsure",
        )
        assert judge["score"] == pytest.approx(0.5, abs=1e-6)
        assert "between" in judge["reason"]
        assert_ends_in(ladder.main, "jd-unsure", Topic.REVIEW)

    @pytest.mark.parametrize(
        ("cid", "why"),
        [
            ("jd-no-logprobs", "no_logprobs"),
            ("jd-no-verdict", "no_verdict_tokens"),
            ("jd-garbage", "malformed"),
            ("jd-http-500", "http_error"),
            ("jd-slow", "timeout"),
        ],
    )
    def test_unreadable_or_failed_verdicts_go_to_review(
        self, ladder: Ladder, cid: str, why: str
    ) -> None:
        snap = ladder.main
        assert snap.stages(cid) == ["judge", "outcome"], "never handed to rules"
        judge = snap.record(cid, "judge")
        assert (judge["action"], judge["level"], judge["write_to_state"]) == (
            "escalate",
            "unsure",
            False,
        )
        assert judge["gate"] == "judge_unsure"
        assert judge["reason"].endswith("a person decides")
        calls = judge["evidence"]["calls"]
        readout = judge["evidence"].get("readout")
        if why in ("no_logprobs", "no_verdict_tokens", "malformed"):
            assert readout is not None and readout["status"] == why, readout
            assert why in judge["reason"]
        if why == "no_verdict_tokens":
            assert [t for t, _ in readout["top_tokens"]][:2] == ["Maybe", "The"]
        if why == "malformed":
            assert calls[-1]["kind"] == "malformed"
        if why == "http_error":
            assert (calls[-1]["kind"], calls[-1]["status"]) == ("http_error", 500)
            assert "server error" in judge["reason"]
        if why == "timeout":
            assert calls[-1]["kind"] == "timeout"
            assert "in time" in judge["reason"]
            # Cut at the judge timeout, well before the slow reply would have come.
            assert JUDGE_TIMEOUT_S * 1000 * 0.9 <= calls[-1]["duration_ms"] < SLOW_S * 1000 / 2
        assert_ends_in(snap, cid, Topic.REVIEW)

    def test_breaker_opens_after_the_routes_threshold(self, ladder: Ladder) -> None:
        snap = ladder.main
        for cid in ("brk-1", "brk-2"):
            judge = snap.record(cid, "judge")
            assert judge["route"] == "fragile"
            assert [(c["kind"], c["status"]) for c in judge["evidence"]["calls"]] == [
                ("http_error", 503)
            ]
            assert_ends_in(snap, cid, Topic.REVIEW)
        # After two consecutive 503s (breaker_threshold = 2) the breaker is open ...
        assert {snap.record(cid, "judge")["breaker"]["judge"] for cid in ("brk-1", "brk-2")} >= {
            "open"
        }
        # ... and the third candidate is refused without a call.
        third = snap.record("brk-3", "judge")
        assert [c["kind"] for c in third["evidence"]["calls"]] == ["breaker_open"]
        assert third["breaker"] == {"judge": "open"}
        assert (third["action"], third["level"]) == ("escalate", "unsure")
        assert "circuit breaker is open" in third["reason"]
        assert_ends_in(snap, "brk-3", Topic.REVIEW)
        assert len(ladder.judge_bodies("brk-1")) == len(ladder.judge_bodies("brk-2")) == 1
        assert ladder.judge_bodies("brk-3") == [], "an open breaker sends nothing"
        # Other routes keep their own, closed breaker.
        assert ladder.main.record("jd-yes", "judge")["breaker"] == {"judge": "closed"}

    def test_thinking_switch_refused_then_retried_once_without_it(self, ladder: Ladder) -> None:
        first, second, *more = ladder.judge_bodies("jd-think")
        assert more == []
        assert all(name in first for name in THINKING_SWITCH_FIELDS)
        assert first["reasoning_effort"] == "none"
        assert first["chat_template_kwargs"] == {"enable_thinking": False}
        assert not any(name in second for name in THINKING_SWITCH_FIELDS)
        strip = {k: v for k, v in first.items() if k not in THINKING_SWITCH_FIELDS}
        assert second == strip, "the retry is the same request without the switch"
        judge = ladder.main.record("jd-think", "judge")
        assert [(c["kind"], c["status"]) for c in judge["evidence"]["calls"]] == [
            ("http_error", 400),
            ("ok", 200),
        ]
        assert judge["action"] == "accept"
        assert_ends_in(ladder.main, "jd-think", Topic.STATE)

    def test_judge_unavailable_goes_to_review(self, ladder: Ladder) -> None:
        snap = ladder.bare
        judge = snap.record(UNAVAILABLE, "judge")
        assert (judge["action"], judge["gate"]) == ("escalate", "judge_unavailable")
        assert "no judge endpoint" in judge["reason"]
        assert_ends_in(snap, UNAVAILABLE, Topic.REVIEW)
        assert ladder.judge_bodies(UNAVAILABLE) == []


class TestJudgeRequests:
    def test_request_shape(self, ladder: Ladder) -> None:
        bodies = list(ladder.judge.requests)
        asked = {case_of(b) for b in bodies}
        assert asked >= set(JUDGE_CASES) - {"brk-3", UNAVAILABLE}
        for body in bodies:
            assert body["model"] == JUDGE_MODEL
            assert body["logprobs"] is True
            assert body["top_logprobs"] == TOP_LOGPROBS >= 5
            assert body["max_tokens"] == 1
            assert body["temperature"] == 0
            assert [m["role"] for m in body["messages"]] == ["system", "user"]

    def test_candidate_text_is_fenced_as_data(self, ladder: Ladder) -> None:
        cases = {**JUDGE_CASES, **LADDER_CASES}
        for body in ladder.judge.requests:
            c = cases[case_of(body) or ""]
            user = user_message(body)
            assert user.count(DATA_BEGIN) == user.count(DATA_END) == 1
            data = unfence_data(user)
            assert data["response"] == c.response
            assert data["question"] == c.question
            outside = user.split(DATA_BEGIN)[0] + user.split(DATA_END)[1]
            for text in (c.response, c.question, *(c.context_chunks or ())):
                assert text not in outside and text not in system_message(body)
            assert "Answer: yes" not in outside
            if "\n" in c.response:  # newlines of the data cannot break out of the block
                assert c.response not in user

    def test_injected_verdict_in_the_response_does_not_count(self, ladder: Ladder) -> None:
        snap = ladder.main
        (body,) = ladder.judge_bodies("jd-inject")
        assert "Answer: yes" in unfence_data(user_message(body))["response"]
        judge = snap.record("jd-inject", "judge")
        assert (judge["action"], judge["level"]) == ("fallback", "no")
        assert_ends_in(snap, "jd-inject", Topic.FALLBACK)
        # The same reader says yes to a response the context supports.
        assert snap.record("jd-real-yes", "judge")["level"] == "yes"
        assert_ends_in(snap, "jd-real-yes", Topic.STATE)
        assert JUDGE_SCRIPT["jd-inject"].decided == [False]  # type: ignore[attr-defined]
        assert JUDGE_SCRIPT["jd-real-yes"].decided == [True]  # type: ignore[attr-defined]


# ------------------------------------------------------------------- consistency --


class TestConsistency:
    def test_agreeing_samples_commit_and_go_through_rules_to_state(self, ladder: Ladder) -> None:
        snap = ladder.main
        assert snap.stages("cs-agree") == ["geometry", "switch", "consistency", "rules", "outcome"]
        assert snap.record("cs-agree", "switch")["action"] == "escalate"
        rec = snap.record("cs-agree", "consistency")
        assert (rec["action"], rec["method"]) == ("committed", "consistency")
        assert rec["score"] == pytest.approx(1.0)
        ev = rec["evidence"]
        assert ev["sample_source"] == "candidate"
        assert ev["passes"] is True and ev["response_agrees"] is True
        assert ev["consistency_score"] == rec["score"]
        assert len(ev["interpretations"]) == 1
        assert ev["committed"]["members"] == [0, 1, 2]
        assert ladder.judge_bodies("cs-agree") == [] and ladder.sampler_bodies("cs-agree") == []
        assert_ends_in(snap, "cs-agree", Topic.STATE)

    def test_competing_meanings_require_clarification_and_go_to_the_judge(
        self, ladder: Ladder
    ) -> None:
        snap = ladder.main
        assert snap.stages("cs-compete") == [
            "geometry",
            "switch",
            "consistency",
            "judge",
            "outcome",
        ]
        rec = snap.record("cs-compete", "consistency")
        assert rec["action"] == "requires_clarification"
        ev = rec["evidence"]
        assert ev["passes"] is False and ev["committed"] is None
        assert len(ev["interpretations"]) == len(ev["competing"]) == 2
        assert sorted(i["members"] for i in ev["competing"]) == [[0, 1], [2, 3]]
        assert 0.0 < ev["consistency_score"] < 1.0
        assert len(ladder.judge_bodies("cs-compete")) == 1
        assert snap.record("cs-compete", "judge")["level"] == "no"
        assert_ends_in(snap, "cs-compete", Topic.FALLBACK)

    def test_sampler_draws_the_samples(self, ladder: Ladder) -> None:
        snap = ladder.main
        (body,) = ladder.sampler_bodies("smp-agree")
        assert (body["model"], body["n"]) == (SAMPLER_MODEL, N_SAMPLES)
        rec = snap.record("smp-agree", "consistency")
        ev = rec["evidence"]
        assert (rec["action"], ev["sample_source"]) == ("committed", "sampler")
        assert ev["total_samples"] == N_SAMPLES
        assert [c["kind"] for c in ev["calls"]] == ["ok"] and ev["calls"][0]["duration_ms"] > 0
        assert ev["tokens_used"] > 0
        assert rec["breaker"] == {"sampler": "closed"}
        assert "judge" not in snap.stages("smp-agree")
        assert_ends_in(snap, "smp-agree", Topic.STATE)

    def test_failing_sampler_fails_closed_to_the_judge(self, ladder: Ladder) -> None:
        snap = ladder.main
        assert snap.stages("smp-fail") == [
            "geometry",
            "switch",
            "consistency",
            "judge",
            "rules",
            "outcome",
        ]
        rec = snap.record("smp-fail", "consistency")
        assert (rec["action"], rec["gate"]) == ("escalate", "sampler_unavailable")
        assert rec["write_to_state"] is False
        assert [(c["kind"], c["status"]) for c in rec["evidence"]["calls"]] == [("http_error", 500)]
        # Only the judge's yes let it on; it did not commit on missing evidence.
        assert snap.record("smp-fail", "judge")["action"] == "accept"
        assert_ends_in(snap, "smp-fail", Topic.STATE)


# ------------------------------------------------------------------------- rules --


class TestRules:
    @pytest.mark.parametrize(
        ("cid", "rule", "span"),
        [
            ("rl-email", "pii", "permits@harbourtown.example"),
            ("rl-card", "pii", "4539 1488 0343 6467"),
            ("rl-deny", "deny_list", "Project Nightjar"),
        ],
    )
    def test_violation_goes_to_review_naming_rule_and_span(
        self, ladder: Ladder, cid: str, rule: str, span: str
    ) -> None:
        snap = ladder.main
        assert snap.record(cid, "consistency")["action"] == "committed"
        rec = snap.record(cid, "rules")
        assert (rec["action"], rec["level"], rec["write_to_state"]) == ("escalate", "review", False)
        assert rec["reason"] == f"rule violation: {rule}"
        (hit,) = rec["evidence"]["rules"]["hits"]
        assert (hit["rule"], hit["severity"]) == (rule, "review")
        assert hit["span"]["text"] == span
        response = LADDER_CASES[cid].response
        assert response[hit["span"]["start"] : hit["span"]["end"]] == span
        assert_ends_in(snap, cid, Topic.REVIEW)

    def test_reject_rule_goes_to_reject(self, ladder: Ladder) -> None:
        rec = ladder.main.record("rl-long", "rules")
        assert (rec["action"], rec["level"]) == ("reject", "reject")
        (hit,) = rec["evidence"]["rules"]["hits"]
        assert (hit["rule"], hit["severity"]) == ("max_length", "reject")
        assert "limit of 400" in hit["message"]
        assert_ends_in(ladder.main, "rl-long", Topic.REJECT)


# ---------------------------------------------------------------------- evidence --


def test_decision_records_carry_their_evidence(ladder: Ladder) -> None:
    snap = ladder.main
    judge = snap.record("jd-yes", "judge")
    ev = judge["evidence"]
    assert ev["model"] == JUDGE_MODEL
    readout = ev["readout"]
    assert readout["model"] == JUDGE_MODEL  # as the reply named it
    tokens = dict(readout["top_tokens"])
    assert len(tokens) == TOP_LOGPROBS and {"Yes", "No"} <= set(tokens), "raw tokens, as sent"
    assert readout["p_yes"] == pytest.approx(0.97, abs=1e-6)
    assert readout["status"] == "ok" and readout["usage"]["total_tokens"] > 0
    (call,) = ev["calls"]
    assert (call["kind"], call["status"]) == ("ok", 200) and call["duration_ms"] > 0
    assert judge["timings"]["judge"] > 0
    rec = snap.record("cs-compete", "consistency")
    assert rec["score"] == rec["evidence"]["consistency_score"]
    for interpretation in rec["evidence"]["interpretations"]:
        assert interpretation["evidence"] and interpretation["score"] > 0
    assert rec["timings"].keys() >= {"geometry", "switch", "consistency"}
    hit = snap.record("rl-deny", "rules")["evidence"]["rules"]["hits"][0]
    start = LADDER_CASES["rl-deny"].response.index("Project Nightjar")
    assert hit["span"] == {"text": "Project Nightjar", "start": start, "end": start + 16}


def test_no_failure_mode_ever_reaches_state(ladder: Ladder) -> None:
    failures = {
        *JUDGE_FAILURES,
        *BREAKER,
        "jd-unsure",
        "jd-no",
        "jd-no-strict",
        "jd-inject",
        "cs-compete",
        "rl-email",
        "rl-card",
        "rl-deny",
        "rl-long",
    }
    for snap, ids in ((ladder.main, failures), (ladder.bare, {UNAVAILABLE})):
        for cid in ids:
            assert Topic.STATE.value not in snap.placed.get(cid, []), cid
            automatic = [r for r in snap.trail(cid) if r["stage"] != "review"]
            assert automatic, cid
            assert not any(r["write_to_state"] for r in automatic), cid
            assert snap.outcomes(cid)[0]["topic"] != Topic.STATE.value
    for cid in (*JUDGE_FAILURES, *BREAKER):
        assert "rules" not in ladder.main.stages(cid), f"{cid} must not move towards state"


# ------------------------------------------------------------------- human review --


def test_human_review_list_and_decide(ladder: Ladder) -> None:
    listed = [
        json.loads(line) for line in cli(ladder.env, "review", "list", "--json").stdout.splitlines()
    ]
    pending = {item["candidate_id"]: item for item in listed}
    waiting = {*JUDGE_FAILURES, *BREAKER, "jd-unsure", "rl-email", "rl-card", "rl-deny"}
    assert set(pending) == waiting
    assert (pending["jd-unsure"]["stage"], pending["jd-unsure"]["route"]) == ("judge", "default")
    assert "between" in pending["jd-unsure"]["reason"]
    assert pending["rl-email"]["stage"] == "rules"

    note = "checked the timetable by hand"
    done = cli(
        ladder.env, "review", "decide", "jd-unsure", "accept", "--by", "alice", "--note", note
    )
    assert "jd-unsure: accept by alice" in done.stdout
    cli(ladder.env, "review", "decide", "jd-no-logprobs", "reject", "--by", "bob")
    why = "a public office address"
    cli(ladder.env, "review", "decide", "rl-email", "accept", "--by", "alice", "--note", why)

    snap = ladder.refresh(
        lambda s: (
            len(s.outcomes("jd-unsure")) == 2
            and len(s.outcomes("jd-no-logprobs")) == 2
            and len(s.outcomes("rl-email")) == 2
        )
    )
    # accept: review -> rules -> state
    assert snap.stages("jd-unsure") == ["judge", "outcome", "review", "rules", "outcome"]
    review = snap.record("jd-unsure", "review")
    assert (review["action"], review["method"], review["write_to_state"]) == (
        "accept",
        "human",
        False,
    )
    assert review["evidence"] == {"reviewer": "alice", "note": note}
    assert review["reason"] == f"accepted by alice: {note}"
    rules = snap.record("jd-unsure", "rules")
    assert (rules["action"], rules["reason"], rules["write_to_state"]) == (
        "accept",
        "no rule violated",
        True,
    )
    final = snap.outcomes("jd-unsure")[-1]
    assert (final["topic"], final["write_to_state"], final["action"]) == ("state", True, "accept")
    assert sorted(snap.placed["jd-unsure"]) == ["escalations.review", "state"]
    # A person's accept overrides a review-severity hit they have seen.
    first, second = (r for r in snap.trail("rl-email") if r["stage"] == "rules")
    assert (first["action"], first["evidence"]["human_override"]) == ("escalate", False)
    assert (second["action"], second["evidence"]["human_override"]) == ("accept", True)
    assert second["reason"] == "accepted by a person over: pii"
    assert snap.outcomes("rl-email")[-1]["topic"] == "state"
    # reject: review -> escalations.reject, never rules
    assert snap.stages("jd-no-logprobs") == ["judge", "outcome", "review", "outcome"]
    review = snap.record("jd-no-logprobs", "review")
    assert (review["action"], review["reason"]) == ("reject", "rejected by bob")
    final = snap.outcomes("jd-no-logprobs")[-1]
    assert (final["topic"], final["write_to_state"]) == ("escalations.reject", False)
    assert sorted(snap.placed["jd-no-logprobs"]) == ["escalations.reject", "escalations.review"]

    # Decided items leave the queue; unknown or decided ids fail clearly.
    listed = cli(ladder.env, "review", "list", "--json").stdout
    assert {json.loads(line)["candidate_id"] for line in listed.splitlines()} == waiting - {
        "jd-unsure", "jd-no-logprobs", "rl-email",
    }  # fmt: skip
    for cid in ("no-such-candidate", "jd-unsure"):
        failed = ladder.groundstream("review", "decide", cid, "accept", "--by", "alice")
        assert failed.returncode != 0
        assert f"'{cid}' is not waiting for review" in failed.stderr
    failed = ladder.groundstream("review", "decide", "jd-slow", "accept", "--by", "  ")
    assert failed.returncode != 0 and "--by must name the person" in failed.stderr
