"""The gate as its users meet it, on the real broker (issue 10): an agent loop through the
client, an OpenAI-style chat bus gated with `attach`, an auditor's replay, and the audit
log's verification against each kind of tampering.

One set of workers serves the module: `groundstream worker all` with the judge pointed at
a fake server that answers by the ``[case …]`` marker in the question (yes → state, no →
the route's fallback), under the ladder fixture's policy (every candidate with a context
climbs to the judge); `worker all` runs the audit recorder too, keyed.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pipeline.trail.audit import Head, chain_entry, digest, head_of
from pipeline.trail.records import record_hash
from tests.fakes.openai_server import ByCase, FakeOpenAIServer, Verdict, serve_in_thread
from topics.codec import dumps, loads
from topics.names import Topic
from workers.clients.agent import AgentClient, CandidateConflict

from .conftest import consume_all, create_topics, produce
from .harness import FIXTURES, REPO_ROOT, Workers, cli, groundstream, values, worker_env

pytestmark = pytest.mark.timeout(900)

POLICY = FIXTURES / "ladder" / "policy.toml"
KEY = "integration-audit-key"
STAGES = 5
CONTEXT = "The Old Mill museum is open Wednesday to Sunday from 10 am to 5 pm."
QUESTION = "When is the Old Mill museum open?"
ANSWER = "The Old Mill museum is open Wednesday to Sunday, 10 am to 5 pm."


def candidate(cid: str, case: str, session: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": cid,
        "session_id": session or f"s-{cid}",
        "question": f"{QUESTION} [case {case}]",
        "context": CONTEXT,
        "response": ANSWER,
        **extra,
    }


@dataclass
class Gate:
    bootstrap: str
    prefix: str
    env: dict[str, str]
    judge: FakeOpenAIServer
    tmp: Path

    def topic(self, topic: Topic) -> str:
        return topic.full(self.prefix)

    def read(self, topic: Topic | str, timeout: float = 10) -> list[dict]:
        name = self.topic(topic) if isinstance(topic, Topic) else topic
        return values(asyncio.run(consume_all(self.bootstrap, name, timeout=timeout)))

    def outcomes(self) -> dict[str, dict]:
        found: dict[str, dict] = {}
        for record in self.read(Topic.DECISIONS):
            if record.get("stage") == "outcome":
                found.setdefault(record["candidate_id"], record)
        return found

    def wait_outcomes(self, ids: set[str], timeout: float = 180) -> dict[str, dict]:
        deadline = time.monotonic() + timeout
        while True:
            found = self.outcomes()
            if ids <= set(found) or time.monotonic() > deadline:
                missing = ids - set(found)
                tail = (self.tmp / "workers.log").read_text(errors="replace")[-4000:]
                assert not missing, f"no outcome for {sorted(missing)}:\n{tail}"
                return found
            time.sleep(1)

    def client(self) -> AgentClient:
        return AgentClient(self.bootstrap, self.prefix)


@pytest.fixture(scope="module")
def gate(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gate]:
    tmp = tmp_path_factory.mktemp("users")
    prefix = f"t-{uuid.uuid4().hex[:8]}."
    script = ByCase({"yes": Verdict(p_yes=0.97), "no": Verdict(p_yes=0.03)})
    with contextlib.ExitStack() as stack:
        judge = stack.enter_context(serve_in_thread(default=script))
        env = worker_env(
            kafka_bootstrap, prefix, tmp / "data",
            GROUNDSTREAM_POLICY=str(POLICY),
            GROUNDSTREAM_JUDGE_URL=judge.base_url,
            GROUNDSTREAM_JUDGE_MODEL="fake-judge",
            GROUNDSTREAM_AUDIT_KEY=KEY,
        )  # fmt: skip
        cli(env, "topics", "create")
        workers = Workers(env, "all", tmp / "workers.log", apps=STAGES)
        stack.callback(workers.stop)
        workers.start()
        yield Gate(kafka_bootstrap, prefix, env, judge, tmp)


# ------------------------------------------------------------------ the client --


class TestAgentClient:
    def test_an_agent_loop_keeps_only_accepted_answers(self, gate: Gate) -> None:
        async def loop() -> tuple[list[str], list[str]]:
            history, shown = [], []
            async with gate.client() as client:
                for cid, case in (("loop-1", "yes"), ("loop-2", "no"), ("loop-3", "yes")):
                    c = candidate(cid, case, session="agent-loop", turn=int(cid[-1]))
                    outcome = await client.submit(c, timeout=120)
                    if outcome.accepted:
                        history.append(c["response"])
                        shown.append(f"{cid}:accept")
                    else:
                        shown.append(f"{cid}:{outcome.action}:{outcome.topic}")
                accepted = [c["id"] async for c in client.accepted("agent-loop")]
            return history, shown + accepted

        history, shown = asyncio.run(loop())
        assert history == [ANSWER, ANSWER]
        assert shown == [
            "loop-1:accept",
            "loop-2:fallback:escalations.fallback",
            "loop-3:accept",
            "loop-1",
            "loop-3",
        ]

    def test_a_resubmitted_id_returns_its_first_outcome(self, gate: Gate) -> None:
        async def twice() -> tuple[Any, Any]:
            async with gate.client() as client:
                first = await client.submit(candidate("again-1", "yes"), timeout=120)
            async with gate.client() as fresh:  # a restarted agent: nothing in memory
                again = await fresh.submit(candidate("again-1", "yes"), timeout=120)
                with pytest.raises(CandidateConflict, match="other content"):
                    await fresh.submit({**candidate("again-1", "yes"), "response": "No."})
            return first, again

        first, again = asyncio.run(twice())
        assert first.accepted and not first.resubmitted
        assert again.resubmitted and again.record == first.record
        sent = [c for c in gate.read(Topic.CANDIDATES) if c.get("id") == "again-1"]
        assert len(sent) == 1, "a resubmission is not sent again"

    def test_the_example_agent_loop_runs(self, gate: Gate) -> None:
        # Its canned questions carry no case marker: the fake judge fails them, so every
        # draft is escalated and the agent falls back, keeping its history clean.
        env = {
            **gate.env,
            "GROUNDSTREAM_BOOTSTRAP_SERVERS": gate.bootstrap,
            "GROUNDSTREAM_TOPIC_PREFIX": gate.prefix,
        }
        run = subprocess.run(
            [sys.executable, str(REPO_ROOT / "examples" / "agent_loop.py")],
            env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        assert "(gate: escalate" in run.stdout
        assert "agent: I could not verify an answer" in run.stdout
        assert "history holds 0 accepted answer(s)" in run.stdout


# ------------------------------------------------------------------ attach --


def chat_pair(n: int, case: str) -> dict[str, Any]:
    return {
        "metadata": {"session_id": f"chat-{n}"},
        "request": {
            "model": "agent-model",
            "messages": [
                {"role": "system", "content": "Answer from the tool results."},
                {"role": "user", "content": f"{QUESTION} [case {case}]"},
                {"role": "tool", "tool_call_id": "t1", "content": CONTEXT},
            ],
        },
        "response": {
            "id": f"chatcmpl-{n}",
            "choices": [{"message": {"role": "assistant", "content": ANSWER}}],
        },
    }


class TestAttach:
    def test_a_chat_bus_is_gated_and_the_rest_passes_through(self, gate: Gate) -> None:
        source = f"{gate.prefix}agents.chat"
        others = [
            (b"chat-9", dumps({"role": "user", "content": "hello"})),
            (b"chat-9", dumps({"role": "system", "content": "be brief"})),
            (b"chat-9", dumps({**chat_pair(9, "yes"), "response": {"choices": [
                {"message": {"role": "assistant", "content": None, "tool_calls": [{}]}}]}})),
        ]  # fmt: skip
        pairs = [(f"chat-{n}".encode(), dumps(chat_pair(n, case))) for n, case in
                 ((1, "yes"), (2, "no"))]  # fmt: skip
        asyncio.run(create_topics(gate.bootstrap, [source], partitions=2))
        asyncio.run(produce(gate.bootstrap, source, [*pairs, *others, (b"x", b"{not json")]))
        run = groundstream(
            gate.env, "attach", "--source", source, "--preset", "openai-chat", "--until-idle", "5"
        )
        assert run.returncode == 0, run.stderr
        assert "candidates=2" in run.stderr and "pass_through=3" in run.stderr
        assert "deadletter=1" in run.stderr

        outcomes = gate.wait_outcomes({"chatcmpl-1", "chatcmpl-2"})
        assert outcomes["chatcmpl-1"]["topic"] == "state"
        assert outcomes["chatcmpl-2"]["topic"] == "escalations.fallback"
        passed = asyncio.run(consume_all(gate.bootstrap, f"{source}.passthrough", timeout=10))
        assert [(m.key, m.value) for m in passed] == others, "copied untouched, in order"
        dead = [m for m in asyncio.run(consume_all(gate.bootstrap, gate.topic(Topic.DEADLETTER)))
                if m.value == b"{not json"]  # fmt: skip
        assert len(dead) == 1 and dict(dead[0].headers)["gs-reason"].startswith(b"not JSON")

        # Attaching the same offsets again (a fresh group) adds no candidate.
        before = len(gate.read(Topic.CANDIDATES))
        env = gate.env
        again = groundstream(
            env, "attach", "--source", source, "--preset", "openai-chat",
            "--until-idle", "5", "--group", f"{gate.prefix}attach-again",
        )  # fmt: skip
        assert again.returncode == 0, again.stderr
        assert "candidates=0" in again.stderr and "deadletter=0" in again.stderr
        assert "duplicate=3" in again.stderr
        assert len(gate.read(Topic.CANDIDATES)) == before


# ------------------------------------------------------------------ replay --


def stricter_policy(tmp: Path) -> Path:
    text = POLICY.read_text().replace("[judge]\n", "[judge]\naccept_bar = 0.99\n")
    path = tmp / "stricter.toml"
    path.write_text(text.replace('version = "ladder-test-1"', 'version = "stricter"'))
    return path


@pytest.fixture(scope="module")
def recorded(gate: Gate) -> dict[str, dict]:
    """Three candidates decided on Kafka: two yes, one no."""
    items = [candidate(f"rp-{n}", case) for n, case in enumerate(("yes", "no", "yes"))]
    asyncio.run(
        produce(
            gate.bootstrap,
            gate.topic(Topic.CANDIDATES),
            [(c["session_id"].encode(), dumps(c)) for c in items],
        )
    )
    return gate.wait_outcomes({c["id"] for c in items})


class TestReplay:
    def replay(self, gate: Gate, *args: str) -> list[dict]:
        out = gate.tmp / f"replay-{uuid.uuid4().hex[:6]}.jsonl"
        run = groundstream(gate.env, "replay", "--from", "0", "--out", str(out), *args)
        assert run.returncode == 0, run.stderr
        return [loads(line) for line in out.read_bytes().splitlines()]

    def test_the_recorded_policy_reproduces_every_decision(self, gate: Gate, recorded) -> None:
        asked = len(gate.judge.requests)
        lines = self.replay(gate)
        assert {line["candidate_id"] for line in lines} >= {"rp-0", "rp-1", "rp-2"}
        changed = [line for line in lines if line["changed"] or line["stages_changed"]]
        assert changed == []
        assert len(gate.judge.requests) == asked, "the judge's answers come from the record"

    def test_a_stricter_policy_reports_what_changes(self, gate: Gate, recorded) -> None:
        lines = self.replay(gate, "--policy", str(stricter_policy(gate.tmp)))
        by_id = {line["candidate_id"]: line for line in lines}
        assert by_id["rp-0"]["changed"] and by_id["rp-2"]["changed"]
        assert (by_id["rp-0"]["recorded"], by_id["rp-0"]["replayed"]) == ("accept", "escalate")
        assert by_id["rp-0"]["stages_changed"][0] == "judge"
        assert not by_id["rp-1"]["changed"]  # a clear no stays a no

    def test_an_encoder_change_is_refused(self, gate: Gate, recorded) -> None:
        policy = gate.tmp / "other-encoder.toml"
        policy.write_text(POLICY.read_text() + f'\n[encoder]\nmodel = "{gate.tmp}"\n')
        run = groundstream(gate.env, "replay", "--from", "0", "--policy", str(policy))
        assert run.returncode != 0 and "--allow-encoder-change" in run.stderr


# ------------------------------------------------------------------ audit --


@dataclass
class Verified:
    """`groundstream audit verify --json`: its exit status and its report."""

    returncode: int
    report: dict
    stderr: str

    def found(self, kind: str) -> list[str]:
        """What each problem of `kind` names, then its detail."""
        return [f"{p['what']}: {p['detail']}" for p in self.report["problems"] if p["kind"] == kind]


def audit_verify(gate: Gate, env: dict[str, str] | None = None, *args: str) -> Verified:
    run = groundstream(env or gate.env, "audit", "verify", "--grace", "0", "--json", *args)
    report = loads(run.stdout) if run.stdout.strip() else {}
    return Verified(run.returncode, report, run.stderr)


@pytest.fixture(scope="module")
def log(gate: Gate) -> list[dict]:
    """The audit entries once every decision so far is chained, by the recorder `worker
    all` runs (issue 22: a second recorder started here would share its transactional id
    and fence it)."""
    items = [candidate(f"au-{n}", case, session="audited")
             for n, case in enumerate(("yes", "no", "yes"))]  # fmt: skip
    asyncio.run(produce(gate.bootstrap, gate.topic(Topic.CANDIDATES),
                        [(b"audited", dumps(c)) for c in items]))  # fmt: skip
    gate.wait_outcomes({c["id"] for c in items})
    decisions = len(gate.read(Topic.DECISIONS))
    deadline = time.monotonic() + 60
    while len(entries := gate.read(Topic.AUDIT)) < decisions:
        assert time.monotonic() < deadline, "the recorder did not catch up"
        time.sleep(1)
    return entries


class TestAudit:
    def test_an_intact_log_verifies(self, gate: Gate, log) -> None:
        run = audit_verify(gate)
        assert run.returncode == 0, run.stderr
        assert run.report["intact"] and run.report["entries"] == len(log)
        session = audit_verify(gate, None, "--session", "audited")
        assert session.returncode == 0, session.stderr
        assert session.report["chains"] == 1 and session.report["candidates"] == 3

    def test_without_the_key_a_keyed_log_is_not_called_intact(self, gate: Gate, log) -> None:
        env = {k: v for k, v in gate.env.items() if k != "GROUNDSTREAM_AUDIT_KEY"}
        run = audit_verify(gate, env)
        assert run.returncode == 1
        assert any("GROUNDSTREAM_AUDIT_KEY" in f for f in run.found("unverifiable"))

    def test_the_public_projection_is_in_step_and_carries_no_text(self, gate: Gate, log) -> None:
        public = gate.read(Topic.DECISIONS_PUBLIC)
        assert len(public) == len(log)
        assert [p["candidate_id"] for p in public if p["session_id"] == "audited"] == [
            e["record"]["candidate_id"] for e in log if e["chain"] == "audited"
        ]
        text = dumps(public).decode()
        assert QUESTION not in text and ANSWER not in text and CONTEXT not in text
        assert "reason" not in public[0] and "hash" not in public[0]

    # Each tampering is done to a copy of the session's log, candidates and chain head on
    # topics of their own.

    def tampered(self, gate: Gate, entries: list[dict]) -> Verified:
        """`audit verify` on a log holding `entries`, the session's candidates and head."""
        prefix = f"{gate.prefix}tamper-{uuid.uuid4().hex[:6]}."
        env = {**gate.env, "GROUNDSTREAM_TOPIC_PREFIX": prefix}
        cli(env, "topics", "create")
        audited = [c for c in gate.read(Topic.CANDIDATES) if c.get("session_id") == "audited"]
        heads = asyncio.run(consume_all(gate.bootstrap, gate.topic(Topic.AUDIT_HEADS)))
        copies = {
            Topic.CANDIDATES: [(b"audited", dumps(c)) for c in audited],
            Topic.AUDIT: [(e["chain"].encode(), dumps(e)) for e in entries],
            Topic.AUDIT_HEADS: [(m.key, m.value) for m in heads if m.key == b"audited"],
        }
        for topic, items in copies.items():
            asyncio.run(produce(gate.bootstrap, topic.full(prefix), items))
        return audit_verify(gate, env, "--session", "audited")

    @staticmethod
    def session(log: list[dict]) -> list[dict]:
        return [e for e in log if e["chain"] == "audited"]

    def test_the_copy_itself_verifies(self, gate: Gate, log) -> None:
        run = self.tampered(gate, self.session(log))
        assert run.returncode == 0, run.report

    def test_a_deleted_candidate_is_named(self, gate: Gate, log) -> None:
        entries = [e for e in self.session(log) if e["record"]["candidate_id"] != "au-1"]
        run = self.tampered(gate, entries)
        assert run.returncode == 1
        assert run.found("removed"), run.report  # the gaps, named by their neighbours
        (missing,) = run.found("candidate without outcome")
        assert missing.startswith("au-1 ")

    def test_a_cut_tail_is_named(self, gate: Gate, log) -> None:
        entries = self.session(log)[:-1]  # the last record: an outcome
        run = self.tampered(gate, entries)
        assert run.returncode == 1
        (cut,) = run.found("trail without outcome")
        assert cut.startswith(f"{self.session(log)[-1]['record']['candidate_id']}: ")
        (tail,) = run.found("removed")
        assert "the tail was cut" in tail

    def test_a_reorder_is_named(self, gate: Gate, log) -> None:
        entries = self.session(log)
        entries[1], entries[2] = entries[2], entries[1]
        run = self.tampered(gate, entries)
        assert run.returncode == 1
        (moved,) = run.found("reordered")
        assert moved.startswith("chain audited #2 ")

    def test_an_insert_is_named(self, gate: Gate, log) -> None:
        entries = self.session(log)
        forged = {**entries[3], "record": {**entries[3]["record"], "action": "accept"}}
        entries.insert(4, forged)
        run = self.tampered(gate, entries)
        assert run.returncode == 1
        (extra,) = run.found("inserted")
        assert extra.startswith(f"chain audited #{forged['seq']} ")

    def test_an_edit_is_named(self, gate: Gate, log) -> None:
        entries = self.session(log)
        entries[2] = {**entries[2], "record": {**entries[2]["record"], "action": "accept"}}
        run = self.tampered(gate, entries)
        assert run.returncode == 1
        assert run.found("altered")[0].startswith("chain audited #3 ")

    def test_an_edit_with_every_hash_recomputed_is_caught_by_the_key(self, gate: Gate, log) -> None:
        entries = [dict(e) for e in self.session(log)]
        record = {**entries[2]["record"], "action": "accept"}
        record["hash"] = record_hash(record)
        entries[2]["record"] = record
        for i in range(2, len(entries)):
            entries[i]["prev"] = entries[i - 1]["hash"]
            entries[i]["hash"] = digest(entries[i], b"not the key")
        run = self.tampered(gate, entries)
        assert run.returncode == 1
        assert run.found("altered")[0].startswith("chain audited #3 ")

    def test_unkeyed_chains_catch_plain_edits_too(self, gate: Gate, log) -> None:
        head, entries = Head(), []
        for e in self.session(log):
            entry = chain_entry(e["record"], "audited", head, None, partition=0, offset=e["seq"])
            head = head_of(entry)
            entries.append(entry)
        env_without = {k: v for k, v in gate.env.items() if k != "GROUNDSTREAM_AUDIT_KEY"}
        gate_without = Gate(gate.bootstrap, gate.prefix, env_without, gate.judge, gate.tmp)
        assert self.tampered(gate_without, entries).returncode == 0
        entries[2] = {**entries[2], "record": {**entries[2]["record"], "reason": "edited"}}
        run = self.tampered(gate_without, entries)
        assert run.returncode == 1
        assert run.found("altered")[0].startswith("chain audited #3 ")
