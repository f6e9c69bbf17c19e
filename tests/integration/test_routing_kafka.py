"""Routing controls (seed 003) on a real broker, through the real workers and CLI.

One set of stage workers (geometry, switch, rules, judge — each its own process) runs
for the whole module under `tests/fixtures/routing/routes.toml`, whose routes cover the
modes, deadlines, the breaker and the session latch. That policy makes the switch
deterministic: a candidate with a context accepts, one without escalates. The judge
talks to the scripted fake OpenAI server of `tests/fakes`, whose request log proves when
the breaker keeps calls off the network. Judge scenarios feed envelopes straight into the
judge topic, so the consistency stage is not needed (escalations from the switch simply
wait on its topic).

Shown here: each mode's served outcome; `active` refusing to start without its approval
string; expired deadlines never accepted; a breaker opening, failing fast and closing
after a good trial; the kill switch taking effect on running workers; the turn latch
(released by the next user turn, kept by `latch_escalation`, always released in shadow);
and a switch worker keeping its session state across a crash and a graceful restart.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.openai_server import FakeOpenAIServer, Slow, Status, Verdict, serve_in_thread
from topics.codec import dumps, loads
from topics.names import Topic
from topics.schema import Candidate, Envelope

from .conftest import consume_all, produce
from .harness import FIXTURES, REPO_ROOT, Workers, cli, values, worker_env

ROUTING = FIXTURES / "routing"
POLICY = ROUTING / "routes.toml"
POLICY_VERSION = "routing-test-1"
TEXTS = json.loads((ROUTING / "candidates.json").read_text())
APPROVAL_FIELD = "routes.canary.active_approval"
BREAKER_COOLDOWN = 10.0  # routes.breaker.breaker_cooldown_seconds
STAGES = ("geometry", "switch", "rules", "judge", "terminal")
KILL_SWITCH_WAIT = 5.0  # seconds from the control message to the workers holding accepts


# ------------------------------------------------------------------ the ladder --


@dataclass
class Ladder:
    """The module's running workers, their topics and the fake judge."""

    bootstrap: str
    prefix: str
    env: dict[str, str]
    judge: FakeOpenAIServer
    workers: dict[str, Workers] = field(default_factory=dict)

    def topic(self, topic: Topic) -> str:
        return topic.full(self.prefix)

    # -- input ------------------------------------------------------------------

    def send(self, *candidates: dict[str, Any]) -> None:
        """Produce candidates (key = session id), in order."""
        items = [(c["session_id"].encode(), dumps(c)) for c in candidates]
        asyncio.run(produce(self.bootstrap, self.topic(Topic.CANDIDATES), items))

    def send_to_judge(self, *envelopes: Envelope) -> None:
        """Feed the judge stage directly, as the consistency stage would."""
        items = [(e.candidate.session_id.encode(), e.encode()) for e in envelopes]
        asyncio.run(produce(self.bootstrap, self.topic(Topic.JUDGE), items))

    # -- output -----------------------------------------------------------------

    def read(self, topic: Topic | str) -> list[dict]:
        name = self.topic(topic) if isinstance(topic, Topic) else topic
        return values(asyncio.run(consume_all(self.bootstrap, name, timeout=10)))

    def wait(
        self, wanted: Iterable[tuple[str, str]], timeout: float = 90.0
    ) -> dict[tuple[str, str], dict]:
        """The last decision record of each wanted (candidate id, stage), waiting for all."""
        wanted = set(wanted)
        deadline = time.monotonic() + timeout
        while True:
            found = {(r["candidate_id"], r["stage"]): r for r in self.read(Topic.DECISIONS)}
            missing = wanted - found.keys()
            if not missing:
                return {k: found[k] for k in wanted}
            if time.monotonic() > deadline:
                tails = "\n\n".join(f"--- {n}\n{w.tail(25)}" for n, w in self.workers.items())
                raise AssertionError(f"no decision record for {sorted(missing)}\n{tails}")
            time.sleep(0.5)

    def records_of(self, candidate_id: str) -> list[dict]:
        return [r for r in self.read(Topic.DECISIONS) if r["candidate_id"] == candidate_id]

    def ids_on(self, topic: Topic) -> list[str]:
        return [v["candidate"]["id"] for v in self.read(topic)]


def _start_all(workers: Iterable[Workers]) -> None:
    """Start workers concurrently (each start blocks until its app is ready)."""
    workers = list(workers)
    with ThreadPoolExecutor(len(workers)) as pool:
        futures = [pool.submit(w.start, 240.0) for w in workers]
        errors = [f.exception() for f in futures]
    failed = [e for e in errors if e is not None]
    if failed:
        for w in workers:
            w.stop()
        raise failed[0]


@pytest.fixture(scope="module")
def ladder(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ladder]:
    tmp = tmp_path_factory.mktemp("routing")
    prefix = f"t-{uuid.uuid4().hex[:8]}."
    with serve_in_thread() as judge:
        env = worker_env(
            kafka_bootstrap,
            prefix,
            tmp / "data",
            GROUNDSTREAM_POLICY=str(POLICY),
            GROUNDSTREAM_DEFAULT_ROUTE="evaluate",
            GROUNDSTREAM_JUDGE_URL=judge.base_url,
            GROUNDSTREAM_JUDGE_MODEL="fake-judge",
        )
        cli(env, "topics", "create")
        ns = Ladder(kafka_bootstrap, prefix, env, judge)
        ns.workers = {s: Workers(env, s, tmp / f"{s}.log") for s in STAGES}
        _start_all(ns.workers.values())
        try:
            yield ns
        finally:
            for w in ns.workers.values():
                w.stop()


# ------------------------------------------------------------------ candidates --

_SEQ = iter(range(1, 10_000))


def candidate(
    kind: str = "grounded",
    *,
    route: str | None = None,
    session: str | None = None,
    turn: int = 1,
    initiator: str = "user",
    deadline: float | str | None = None,
    tag: str = "c",
) -> dict[str, Any]:
    """A candidate from the fixture texts: `grounded` accepts at the switch, `no_context`
    escalates there (it cannot be scored under the routing policy)."""
    n = next(_SEQ)
    out: dict[str, Any] = {
        "schema_version": 1,
        "id": f"{tag}-{n}-{uuid.uuid4().hex[:6]}",
        "session_id": session or f"s-{tag}-{n}-{uuid.uuid4().hex[:6]}",
        "turn": turn,
        "initiator": initiator,
        **TEXTS[kind],
    }
    if route is not None:
        out["route"] = route
    if deadline is not None:
        out["deadline"] = deadline
    return out


def judge_envelope(route: str, *, deadline: float | None = None, tag: str = "j") -> Envelope:
    """A grounded candidate as the consistency stage hands it to the judge."""
    c = candidate(route=route, tag=tag)
    cand = Candidate(
        id=c["id"],
        session_id=c["session_id"],
        question=c["question"],
        response=c["response"],
        turn=c["turn"],
        initiator=c["initiator"],
        context=tuple(c["context"]),
        route=route,
    )
    return Envelope(
        candidate=cand,
        route=route,
        mode="evaluate",
        deadline=deadline,
        policy_version=POLICY_VERSION,
    )


def epoch(record: dict) -> float:
    return datetime.fromisoformat(record["decided_at"]).timestamp()


# ------------------------------------------------------------- active approval --


@pytest.mark.parametrize(
    ("policy", "stage", "how"),
    [
        ("active_unapproved.toml", "switch", "env"),
        ("active_wrong_approval.toml", "geometry", "option"),
        ("active_unapproved.toml", "judge", "option"),
    ],
)
def test_active_mode_refuses_to_start_without_the_approval_string(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path, policy: str, stage: str, how: str
) -> None:
    path = str(ROUTING / policy)
    extra = {"GROUNDSTREAM_POLICY": path} if how == "env" else {}
    env = worker_env(kafka_bootstrap, topic_prefix, tmp_path / "data", **extra)
    args = ["worker", stage, *(["--policy", path] if how == "option" else [])]
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "workers.cli", *args],
        env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert APPROVAL_FIELD in output, output
    assert "prospective-validation-and-canary-approved" in output, output
    assert time.monotonic() - started < 60, "refused at start-up, not after joining the group"
    assert "Ready" not in output


# ----------------------------------------------------------------------- modes --


def test_each_mode_serves_its_outcome(ladder: Ladder) -> None:
    off = candidate(route="off", tag="off")
    off_nc = candidate("no_context", route="off", tag="off-nc")  # would escalate if verified
    unknown = candidate(route="no-such-route", tag="unknown")  # fails closed to `off`
    shadow = candidate(route="shadow", tag="shadow")
    evaluate = candidate(route="evaluate", tag="evaluate")
    active = candidate(route="active", tag="active")
    default = candidate(tag="default")  # no route: GROUNDSTREAM_DEFAULT_ROUTE (evaluate)
    every = [off, off_nc, unknown, shadow, evaluate, active, default]
    ladder.send(*every)
    got = ladder.wait([(c["id"], "outcome") for c in every] + [(shadow["id"], "rules")])
    state = ladder.ids_on(Topic.STATE)
    fallback = ladder.ids_on(Topic.FALLBACK)

    # off: no scoring at all; straight to the caller's fallback, never to state.
    for c, route in ((off, "off"), (off_nc, "off"), (unknown, "no-such-route")):
        trail = ladder.records_of(c["id"])
        assert [r["stage"] for r in trail] == ["geometry", "outcome"], trail
        geometry = trail[0]
        assert geometry["action"] == "skip"
        assert geometry["score"] is None and geometry["method"] is None
        assert geometry["mode"] == "off" and geometry["route"] == route
        outcome = got[(c["id"], "outcome")]
        assert outcome["topic"] == Topic.FALLBACK.value
        assert outcome["write_to_state"] is False
        assert c["id"] in fallback and c["id"] not in state
        assert c["id"] not in ladder.ids_on(Topic.SCORED)

    # shadow: every stage decides and records, but the safe path is served.
    rules = got[(shadow["id"], "rules")]
    assert rules["mode"] == "shadow"
    assert (rules["decided_action"], rules["served_action"]) == ("accept", "fallback")
    assert rules["write_to_state"] is False
    outcome = got[(shadow["id"], "outcome")]
    assert outcome["topic"] == Topic.FALLBACK.value
    assert (outcome["decided_action"], outcome["served_action"]) == ("accept", "fallback")
    assert outcome["write_to_state"] is False
    stages = [r["stage"] for r in ladder.records_of(shadow["id"])]
    assert stages == ["geometry", "switch", "rules", "outcome"]
    switch = next(r for r in ladder.records_of(shadow["id"]) if r["stage"] == "switch")
    assert switch["action"] == "accept" and switch["method"] == "sgi"
    assert shadow["id"] in fallback and shadow["id"] not in state

    # evaluate, active (with the approval) and the default route serve the decision.
    for c, mode in ((evaluate, "evaluate"), (active, "active"), (default, "evaluate")):
        outcome = got[(c["id"], "outcome")]
        assert outcome["mode"] == mode
        assert outcome["topic"] == Topic.STATE.value
        assert (outcome["decided_action"], outcome["served_action"]) == ("accept", "accept")
        assert outcome["write_to_state"] is True
        assert c["id"] in state and c["id"] not in fallback
    assert got[(default["id"], "outcome")]["route"] == "evaluate"


# -------------------------------------------------------------------- deadlines --


def test_an_expired_deadline_is_never_accepted(ladder: Ladder) -> None:
    past = candidate(route="evaluate", deadline=time.time() - 60, tag="past")
    past_iso = candidate(route="active", deadline="2001-01-01T00:00:00+00:00", tag="past-iso")
    # deadline_seconds = 0.001, counted from the candidate's entry into the ladder (its
    # message's broker timestamp): over before geometry sees it, and so on every redelivery.
    tight = candidate(route="tight", tag="tight")
    ladder.send(past, past_iso, tight)
    got = ladder.wait(
        [(c["id"], s) for c in (past, past_iso, tight) for s in ("geometry", "outcome")]
    )
    review = ladder.ids_on(Topic.REVIEW)
    state = ladder.ids_on(Topic.STATE)
    for c in (past, past_iso, tight):
        geometry = got[(c["id"], "geometry")]
        assert (geometry["action"], geometry["reason"], geometry["gate"]) == (
            "escalate",
            "deadline",
            "deadline",
        )
        assert geometry["score"] is None, "an expired candidate is not even scored"
    for c in (past, past_iso, tight):
        outcome = got[(c["id"], "outcome")]
        assert outcome["topic"] == Topic.REVIEW.value, outcome
        assert outcome["reason"].endswith(": deadline"), outcome
        assert outcome["gate"] == "deadline"
        assert outcome["write_to_state"] is False
        assert c["id"] in review and c["id"] not in state
    # A slow judge: the call is cut at the candidate's deadline and the candidate goes to
    # review with reason deadline, long before the judge would have said yes.
    ladder.judge.script.clear()
    ladder.judge.push(Slow(8.0, then=Verdict(p_yes=0.99)))
    before = len(ladder.judge.requests)
    env = judge_envelope("slow_judge", deadline=time.time() + 2.5, tag="slow")
    sent = time.time()
    ladder.send_to_judge(env)
    cid = env.candidate.id
    got = ladder.wait([(cid, "judge"), (cid, "outcome")], timeout=60)
    assert len(ladder.judge.requests) == before + 1, "the judge was asked"
    judge = got[(cid, "judge")]
    assert (judge["action"], judge["reason"], judge["gate"]) == ("escalate", "deadline", "deadline")
    assert epoch(judge) - sent < 7.0, "the judge stage did not wait for the slow answer"
    outcome = got[(cid, "outcome")]
    assert outcome["topic"] == Topic.REVIEW.value and outcome["write_to_state"] is False
    assert cid in ladder.ids_on(Topic.REVIEW) and cid not in ladder.ids_on(Topic.STATE)


# ---------------------------------------------------------------------- breaker --


def test_breaker_opens_fails_fast_and_closes_after_a_good_trial(ladder: Ladder) -> None:
    judge = ladder.judge
    judge.script.clear()
    judge.push(Status(503, "overloaded"), Status(503, "overloaded"))
    before = len(judge.requests)

    def judged(env: Envelope) -> tuple[dict, dict]:
        ladder.send_to_judge(env)
        cid = env.candidate.id
        got = ladder.wait([(cid, "judge"), (cid, "outcome")], timeout=60)
        return got[(cid, "judge")], got[(cid, "outcome")]

    # Two 503s in a row: the first leaves the breaker closed, the second opens it.
    first, out1 = judged(judge_envelope("breaker", tag="brk1"))
    assert first["breaker"] == {"judge": "closed"}, first
    assert first["evidence"]["calls"][0]["status"] == 503
    second, out2 = judged(judge_envelope("breaker", tag="brk2"))
    assert second["breaker"] == {"judge": "open"}, second
    opened = epoch(second)
    for rec, out in ((first, out1), (second, out2)):
        assert rec["action"] == "escalate" and rec["gate"] == "judge_unsure"
        assert out["topic"] == Topic.REVIEW.value and out["write_to_state"] is False
    assert len(judge.requests) == before + 2

    # While open, candidates fail fast to review and nothing reaches the server.
    judge.push(Verdict(p_yes=0.99))  # would accept, if a call got through
    fast = [judge_envelope("breaker", tag="brk-open") for _ in range(3)]
    ladder.send_to_judge(*fast)
    got = ladder.wait([(e.candidate.id, s) for e in fast for s in ("judge", "outcome")], timeout=60)
    for e in fast:
        rec = got[(e.candidate.id, "judge")]
        assert rec["breaker"] == {"judge": "open"}, rec
        assert [c["kind"] for c in rec["evidence"]["calls"]] == ["breaker_open"]
        assert "circuit breaker is open" in rec["reason"]
        assert epoch(rec) - opened < BREAKER_COOLDOWN, "decided inside the cooldown"
        out = got[(e.candidate.id, "outcome")]
        assert out["topic"] == Topic.REVIEW.value and out["write_to_state"] is False
    assert len(judge.requests) == before + 2, "an open breaker sent a request to the judge"

    # After the cooldown one trial goes out; the judge says yes: closed, accepted, state.
    time.sleep(max(0.0, opened + BREAKER_COOLDOWN + 1.0 - time.time()))
    trial = judge_envelope("breaker", tag="brk-trial")
    rec, out = judged(trial)
    assert len(judge.requests) == before + 3
    assert rec["breaker"] == {"judge": "closed"}, rec
    assert rec["action"] == "accept", rec
    rules = ladder.wait([(trial.candidate.id, "rules")])[(trial.candidate.id, "rules")]
    assert rules["action"] == "accept"
    assert out["topic"] == Topic.STATE.value and out["write_to_state"] is True
    assert trial.candidate.id in ladder.ids_on(Topic.STATE)


# ------------------------------------------------------------------ kill switch --


def test_kill_switch_stops_acceptance_on_running_workers(ladder: Ladder) -> None:
    before = candidate(route="evaluate", tag="ks-before")
    ladder.send(before)
    got = ladder.wait([(before["id"], "outcome")])
    assert got[(before["id"], "outcome")]["topic"] == Topic.STATE.value

    # Probe every half second until the control message is KILL_SWITCH_WAIT old: the first
    # probe the rules stage holds bounds how long the switch took to reach the workers.
    try:
        cli(ladder.env, "control", "kill-switch", "on", "--by", "ops")
        switched_at = ladder.read(Topic.CONTROL)[-1]["at"]
        probes: list[tuple[float, dict[str, Any]]] = []
        while not probes or probes[-1][0] < switched_at + KILL_SWITCH_WAIT:
            probe = candidate(route="evaluate", tag=f"ks-probe{len(probes)}")
            probes.append((time.time(), probe))
            ladder.send(probe)
            time.sleep(0.5)
        got = ladder.wait(
            [(c["id"], s) for _, c in probes for s in ("geometry", "switch", "rules", "outcome")]
        )
    finally:
        cli(ladder.env, "control", "kill-switch", "off", "--by", "ops")
    released_at = time.monotonic()

    held_flags = [got[(c["id"], "rules")]["kill_switch"] for _, c in probes]
    assert True in held_flags, "no probe was held within KILL_SWITCH_WAIT of the switch"
    first = held_flags.index(True)
    assert all(held_flags[first:]), held_flags  # once applied, it stays applied
    assert probes[first][0] - switched_at <= KILL_SWITCH_WAIT
    held = probes[-1][1]  # sent after every worker had time to see the switch
    rules = got[(held["id"], "rules")]
    assert (rules["action"], rules["gate"], rules["kill_switch"]) == (
        "escalate",
        "kill_switch",
        True,
    )
    outcome = got[(held["id"], "outcome")]
    assert outcome["topic"] == Topic.REVIEW.value
    assert (outcome["gate"], outcome["kill_switch"], outcome["write_to_state"]) == (
        "kill_switch",
        True,
        False,
    )
    # Every worker saw it, not only the one that holds the accept.
    assert got[(held["id"], "geometry")]["kill_switch"] is True
    assert got[(held["id"], "switch")]["kill_switch"] is True
    assert got[(held["id"], "switch")]["action"] == "accept", "otherwise accepted"
    assert held["id"] in ladder.ids_on(Topic.REVIEW)
    assert held["id"] not in ladder.ids_on(Topic.STATE)
    control = ladder.read(Topic.CONTROL)
    assert [(m["on"], m["by"]) for m in control][-2:] == [(True, "ops"), (False, "ops")]

    # `off` restores acceptance.
    time.sleep(max(0.0, KILL_SWITCH_WAIT - (time.monotonic() - released_at)))
    after = candidate(route="evaluate", tag="ks-after")
    ladder.send(after)
    got = ladder.wait([(after["id"], "outcome"), (after["id"], "rules")])
    outcome = got[(after["id"], "outcome")]
    assert outcome["topic"] == Topic.STATE.value and outcome["write_to_state"] is True
    assert outcome["kill_switch"] is False and got[(after["id"], "rules")]["kill_switch"] is False
    assert after["id"] in ladder.ids_on(Topic.STATE)


# --------------------------------------------------------------------- sessions --


def _turns(route: str, tag: str) -> list[dict[str, Any]]:
    """User turn 1 escalates; an agent step of turn 1; user turn 2; an agent step of turn 2
    (the last three would each accept on their own)."""
    session = f"sess-{tag}-{uuid.uuid4().hex[:8]}"
    return [
        candidate(
            "no_context", route=route, session=session, turn=1, initiator="user", tag=f"{tag}-u1"
        ),
        candidate(route=route, session=session, turn=1, initiator="agent", tag=f"{tag}-a1"),
        candidate(route=route, session=session, turn=2, initiator="user", tag=f"{tag}-u2"),
        candidate(route=route, session=session, turn=2, initiator="agent", tag=f"{tag}-a2"),
    ]


def _held(record: dict) -> bool:
    return record["action"] == "escalate" and record["gate"] == "turn_latched"


def test_a_latched_turn_is_released_by_the_next_user_turn_or_kept(ladder: Ladder) -> None:
    plain, sticky, shadow = (
        _turns("latch", "plain"),
        _turns("sticky", "sticky"),
        _turns("shadow_sticky", "shadow"),
    )
    ladder.send(*plain, *sticky, *shadow)
    wanted = [(c["id"], "switch") for c in plain + sticky + shadow]
    wanted += [(c["id"], "outcome") for c in plain[1:] + sticky[1:] + shadow[1:]]
    got = ladder.wait(wanted)
    switch = {c["id"]: got[(c["id"], "switch")] for c in plain + sticky + shadow}
    outcome = {c["id"]: got[(c["id"], "outcome")] for c in plain[1:] + sticky[1:] + shadow[1:]}

    for u1, a1, _, _ in (plain, sticky, shadow):
        # The user turn escalates (it cannot be scored); the agent step of that turn,
        # which would accept on its own, is held.
        assert switch[u1["id"]]["action"] == "escalate" and switch[u1["id"]]["gate"] is None
        assert _held(switch[a1["id"]]), switch[a1["id"]]
        assert switch[a1["id"]]["reason"].startswith("turn_latched")
        assert outcome[a1["id"]]["gate"] == "turn_latched"
        assert outcome[a1["id"]]["write_to_state"] is False

    # Without latch_escalation the next user turn releases the hold.
    _, a1, u2, a2 = plain
    assert outcome[a1["id"]]["topic"] == Topic.REVIEW.value
    for c in (u2, a2):
        assert switch[c["id"]]["action"] == "accept", switch[c["id"]]
        assert outcome[c["id"]]["topic"] == Topic.STATE.value

    # latch_escalation = true keeps it across the user turn.
    _, a1, u2, a2 = sticky
    for c in (a1, u2, a2):
        assert _held(switch[c["id"]]), switch[c["id"]]
        assert outcome[c["id"]]["topic"] == Topic.REVIEW.value
    assert switch[u2["id"]]["turn"] == 2

    # Shadow mode always releases at the next user turn, latch_escalation or not; and
    # it serves the safe path whatever was decided.
    _, a1, u2, a2 = shadow
    assert outcome[a1["id"]]["topic"] == Topic.FALLBACK.value
    for c in (u2, a2):
        assert switch[c["id"]]["action"] == "accept", switch[c["id"]]
        assert outcome[c["id"]]["topic"] == Topic.FALLBACK.value
        assert (outcome[c["id"]]["decided_action"], outcome[c["id"]]["served_action"]) == (
            "accept",
            "fallback",
        )


def test_switch_restart_keeps_session_state(ladder: Ladder) -> None:
    """Latch a session, crash the switch worker, restart it: the turn is still held (the
    state came back from the changelog topic); likewise after a graceful restart."""
    switch = ladder.workers["switch"]
    u1, a1, u2, a2 = _turns("latch", "restart")
    session = u1["session_id"]
    ladder.send(u1)
    rec = ladder.wait([(u1["id"], "switch")])[(u1["id"], "switch")]
    assert rec["action"] == "escalate"
    # The latch is in the changelog before the crash. It is committed in the same
    # transaction as the batch's outputs and input offsets, so once it reads as committed
    # the crash comes after the fact.
    changelog = f"{ladder.prefix}sessions"
    deadline = time.monotonic() + 30
    while True:
        entries = asyncio.run(
            consume_all(ladder.bootstrap, changelog, timeout=5, isolation_level="read_committed")
        )
        latest = [loads(r.value) for r in entries if r.key == session.encode()]
        if latest and latest[-1].get("latched") is True:
            break
        assert time.monotonic() < deadline, (
            f"no latched entry for {session} in {changelog}: {latest}"
        )
        time.sleep(0.5)

    switch.kill()
    switch.start(180.0)
    ladder.send(a1)
    rec = ladder.wait([(a1["id"], "switch")], timeout=120)[(a1["id"], "switch")]
    assert _held(rec), f"hard restart lost the session state: {rec}"

    extra = candidate(route="latch", session=session, turn=1, initiator="agent", tag="restart-a1b")
    switch.stop()
    switch.start(180.0)
    ladder.send(extra)
    rec = ladder.wait([(extra["id"], "switch")], timeout=120)[(extra["id"], "switch")]
    assert _held(rec), f"graceful restart lost the session state: {rec}"

    # The recovered state still releases at the next user turn.
    ladder.send(u2, a2)
    got = ladder.wait([(u2["id"], "outcome"), (a2["id"], "outcome")])
    assert got[(u2["id"], "outcome")]["topic"] == Topic.STATE.value
    assert got[(a2["id"], "outcome")]["topic"] == Topic.STATE.value


def test_an_escalation_decided_by_the_judge_latches_the_turn(ladder: Ladder) -> None:
    """The switch follows the decisions stream: a user step that the judge turns down
    latches its turn, so the next agent step of that turn is held although it would
    accept on its own; the next user turn releases it."""
    judge = ladder.judge
    judge.script.clear()
    judge.push(Verdict(p_yes=0.02))
    user = judge_envelope("latch", tag="late-u1")
    # Words of its own: an earlier test's yes on the same answer and evidence would be
    # answered from the judge's verdict cache, and this test needs the judge's no.
    own = replace(user.candidate, response=user.candidate.response + " That is all.")
    user = replace(user, candidate=own)
    ladder.send_to_judge(user)
    cid = user.candidate.id
    out = ladder.wait([(cid, "outcome")], timeout=60)[(cid, "outcome")]
    assert out["topic"] == Topic.FALLBACK.value and out["decided_action"] == "fallback"
    time.sleep(3)  # the switch's outcome follower polls every batch_within; leave it a margin

    session = user.candidate.session_id
    agent = candidate(route="latch", session=session, turn=1, initiator="agent", tag="late-a1")
    nxt = candidate(route="latch", session=session, turn=2, initiator="user", tag="late-u2")
    ladder.send(agent, nxt)
    got = ladder.wait([(c["id"], s) for c in (agent, nxt) for s in ("switch", "outcome")])
    assert _held(got[(agent["id"], "switch")]), got[(agent["id"], "switch")]
    assert got[(agent["id"], "outcome")]["topic"] == Topic.REVIEW.value
    assert got[(nxt["id"], "switch")]["action"] == "accept"
    assert got[(nxt["id"], "outcome")]["topic"] == Topic.STATE.value
