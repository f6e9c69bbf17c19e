"""The CLI as a newcomer meets it, on the real broker: an unknown topic is one line, bad
candidate lines are named and kept off the topic, outcomes read as one line per
candidate, the kill switch says its state, and a worker says when it is ready."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

from pipeline.trail.records import make_record, record_hash
from topics.codec import dumps, loads

from .conftest import consume_all
from .harness import REPO_ROOT, cli, groundstream, worker_env


def candidate(cid: str, **override: object) -> bytes:
    base = {
        "id": cid,
        "session_id": f"s-{cid}",
        "question": "Which river feeds the Lake Arden reservoir?",
        "context": "The reservoir is fed by the Calder River.",
        "response": "It is fed by the Calder River.",
    }
    return dumps({k: v for k, v in {**base, **override}.items() if v is not None})


def test_consume_of_an_unknown_topic_is_one_line_and_exit_2(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    env = worker_env(kafka_bootstrap, topic_prefix, tmp_path / "data")
    cli(env, "topics", "create")
    done = groundstream(env, "consume", "no-such-topic", "--timeout", "2", timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith(f"groundstream: no topic 'no-such-topic' on {kafka_bootstrap}")
    assert "known topics: candidates, scored," in line and "control" in line


def test_produce_leaves_out_what_would_be_dead_lettered(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    env = worker_env(kafka_bootstrap, topic_prefix, tmp_path / "data")
    cli(env, "topics", "create")
    path = tmp_path / "mixed.jsonl"
    rows = [
        candidate("good-1"),
        candidate("no-response", response=None),
        candidate("ctx-31", context=31),
        candidate("huge", response="x" * (2 * 1024 * 1024)),
        candidate("good-2", context=["a chunk", "another"]),
    ]
    path.write_bytes(b"\n".join(rows) + b"\n")
    done = groundstream(env, "produce", str(path))
    assert done.returncode == 1, done.stderr
    assert f"{path}:2: would be dead-lettered: missing field: response" in done.stderr
    assert f"{path}:3: would be dead-lettered: wrong type: context must be a string or a list" in (
        done.stderr
    )
    assert f"{path}:4: would be dead-lettered: oversize:" in done.stderr
    assert f"produced 2 messages to {topic_prefix}candidates" in done.stderr
    sent = asyncio.run(consume_all(kafka_bootstrap, f"{topic_prefix}candidates", timeout=5))
    assert sorted(loads(r.value)["id"] for r in sent) == ["good-1", "good-2"]

    assert groundstream(env, "produce", "--no-check", str(path)).returncode == 0
    sent = asyncio.run(consume_all(kafka_bootstrap, f"{topic_prefix}candidates", timeout=5))
    assert len(sent) == 2 + len(rows)


def _record(cid: str, stage: str, action: str, topic: str | None = None) -> dict:
    return make_record(
        candidate_id=cid,
        session_id=f"s-{cid}",
        turn=1,
        stage=stage,
        action=action,
        write_to_state=topic == "state",
        reason="test",
        policy_version="test",
        decided_at=1.0,
        mode="enforce",
        route="default",
        prev_hash="",
        topic=topic,
    )


def test_outcomes_reads_decisions_as_one_line_per_candidate(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    env = worker_env(kafka_bootstrap, topic_prefix, tmp_path / "data")
    cli(env, "topics", "create")
    records = [
        _record("a", "geometry", "scored"),
        _record("b", "geometry", "scored"),
        _record("a", "switch", "accept"),
        _record("a", "rules", "accept"),
        _record("a", "outcome", "accept", "state"),
        _record("b", "switch", "escalate"),
    ]
    path = tmp_path / "decisions.jsonl"
    # One session for all: one partition, so the records keep their order.
    path.write_bytes(b"\n".join(dumps({**r, "session_id": "s"}) for r in records) + b"\n")
    cli(env, "produce", "--topic", "decisions", str(path))
    done = cli(env, "outcomes", "--timeout", "3")
    assert done.stdout.splitlines() == [
        "a [s] geometry:scored → switch:accept → rules:accept ⇒ state",
        "b [s] geometry:scored → switch:escalate ⇒ (no outcome yet)",
    ]
    assert "1 outcome(s), 1 still in the ladder" in done.stderr


def test_kill_switch_status_follows_the_control_topic(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    env = worker_env(kafka_bootstrap, topic_prefix, tmp_path / "data")
    cli(env, "topics", "create")
    status = ("control", "kill-switch", "status")
    assert cli(env, *status).stdout == "kill switch off (never set)\n"
    cli(env, "control", "kill-switch", "on", "--by", "ops")
    assert cli(env, *status).stdout.startswith("kill switch ON (by ops at 20")
    cli(env, "control", "kill-switch", "off", "--by", "alice")
    assert cli(env, *status).stdout.startswith("kill switch off (by alice at 20")


def test_a_worker_says_it_is_ready_and_wait_ready_waits_for_it(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    env = worker_env(
        kafka_bootstrap, topic_prefix, tmp_path / "data", GROUNDSTREAM_LOG_LEVEL="warning"
    )
    cli(env, "topics", "create")
    log = tmp_path / "rules.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "workers.cli", "worker", "rules"],
            env=env,
            cwd=REPO_ROOT,
            stdout=out,
            stderr=out,
        )
        try:
            waited = groundstream(
                env, "wait-ready", "--stage", "rules", "--timeout", "150", timeout=180
            )
            assert waited.returncode == 0, waited.stderr + log.read_text(errors="replace")
            text = log.read_text(errors="replace")
            expected = (
                f"groundstream: stage rules ready (group {topic_prefix}groundstream-rules, "
                "partitions 0,1)"
            )
            assert text.count(expected) == 1, text
            assert " INFO " not in text, "aiokafka's info chatter stays out at warning"
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(60)
    gone = groundstream(env, "wait-ready", "--stage", "rules", "--timeout", "0")
    assert gone.returncode == 1 and "not ready after 0s: rules" in gone.stderr


def test_audit_verify_never_calls_unchained_decisions_intact(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    """Issue 22: with no recorder running, `audit verify` said "chains 0, entries 0 …
    intact", and a forged outcome appended to `decisions` went unnamed."""
    env = worker_env(kafka_bootstrap, topic_prefix, tmp_path / "data")
    cli(env, "topics", "create")
    (tmp_path / "c.jsonl").write_bytes(candidate("forged-1", session_id="s") + b"\n")
    cli(env, "produce", str(tmp_path / "c.jsonl"))
    forged = {**_record("forged-1", "outcome", "accept", "state"), "session_id": "s"}
    forged["hash"] = record_hash(forged)  # a careful forger: the record is self-consistent
    (tmp_path / "d.jsonl").write_bytes(dumps(forged) + b"\n")
    cli(env, "produce", "--topic", "decisions", str(tmp_path / "d.jsonl"))

    done = groundstream(env, "audit", "verify", "--grace", "0", "--json")
    assert done.returncode == 1, done.stderr
    report = loads(done.stdout)
    assert not report["intact"] and report["entries"] == 0
    found = {(p["kind"], p["what"].split("[")[0].split()[0]): p for p in report["problems"]}
    assert "audit record" in found["unrecorded", "the"]["detail"]  # the audit log is empty
    assert "(forged-1)" in found["unrecorded", "decisions"]["detail"]  # and what it holds
    assert ("candidate without outcome", "forged-1") in found
    assert "NOT intact" in done.stderr

    # The recorder chains what is on `decisions`; then the same log verifies.
    log = (tmp_path / "recorder.log").open("wb")
    recorder = subprocess.Popen(
        [sys.executable, "-m", "workers.cli", "audit", "record"],
        env=env, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        topic = f"{topic_prefix}audit"
        for _ in range(120):
            found = consume_all(kafka_bootstrap, topic, timeout=1, isolation_level="read_committed")
            if asyncio.run(found):
                break
        else:
            raise AssertionError((tmp_path / "recorder.log").read_text())
    finally:
        recorder.send_signal(signal.SIGTERM)
        recorder.wait(60)
        log.close()
    done = groundstream(env, "audit", "verify", "--grace", "0", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert loads(done.stdout)["entries"] == 1


def test_topics_create_also_makes_a_source_topic_attach_then_reads(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    """Issue 22: attach refuses a missing source topic (rightly); the README's way to make
    one for a try is `topics create --also NAME`."""
    env = worker_env(kafka_bootstrap, topic_prefix, tmp_path / "data")
    source = f"{topic_prefix}chat.completions"
    refused = groundstream(env, "attach", "--source", source, "--preset", "openai-chat")
    assert refused.returncode != 0 and source in refused.stderr
    done = cli(env, "topics", "create", "--also", source)
    assert f"created  {source}" in done.stdout
    ran = groundstream(
        env, "attach", "--source", source, "--preset", "openai-chat", "--until-idle", "2"
    )
    assert ran.returncode == 0, ran.stderr
    assert "attached: candidates=0 pass_through=0" in ran.stderr
