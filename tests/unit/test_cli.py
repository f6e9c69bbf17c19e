"""The CLI as a newcomer meets it: produce's check, outcome lines, readiness, clear errors.

No broker here: the Kafka calls are replaced by fakes at the CLI's seam (the functions
it imports from `kafka_tools`); tests/integration/test_cli_kafka.py runs the real thing.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from pipeline.trail.records import make_record
from topics.codec import dumps, loads
from workers.cli import main
from workers.interfaces import ControlState
from workers.runtime import kafka_tools, runner
from workers.runtime.isolation import ProcessingStopped
from workers.runtime.kafka_tools import UnknownTopic, check_candidates, numbered_lines
from workers.runtime.outcomes import Trails
from workers.runtime.ready import (
    announce_ready,
    clear_ready,
    not_ready,
    read_ready,
    ready_file,
    wait_ready,
)
from workers.runtime.settings import Settings

GOOD = {"id": "c-1", "session_id": "s-1", "question": "q?", "context": "ctx", "response": "a."}


def line(**changes: Any) -> bytes:
    data = {**GOOD, **changes}
    return dumps({k: v for k, v in data.items() if v is not None})


def run(*args: str, env: dict[str, str] | None = None) -> Any:
    """`groundstream ARGS` with no GROUNDSTREAM_ setting from the caller's environment."""
    clean: dict[str, str | None] = {k: None for k in os.environ if k.startswith("GROUNDSTREAM_")}
    return CliRunner().invoke(
        main, list(args), env={**clean, **(env or {})}, catch_exceptions=False
    )


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Replace the Kafka send; record what produce would have sent."""
    seen: dict[str, Any] = {}

    async def fake(settings: Settings, path: Path, topic: str, *, leave_out: Collection[int] = ()):
        seen.update(topic=topic, leave_out=set(leave_out))
        return len([n for n, _ in numbered_lines(path) if n not in leave_out])

    monkeypatch.setattr(kafka_tools, "produce_file", fake)
    return seen


def dead_reason(raw: bytes, max_bytes: int = 1024 * 1024) -> str | None:
    return check_candidates([(1, raw)], max_bytes).get(1)


class TestCheckCandidates:
    def test_a_good_candidate_passes_with_a_string_or_a_list_context(self) -> None:
        assert dead_reason(line()) is None
        assert dead_reason(line(context=["a", "b"])) is None

    def test_a_missing_response_is_named(self) -> None:
        assert dead_reason(line(response=None)) == "missing field: response"

    def test_a_numeric_context_says_a_string_is_allowed_too(self) -> None:
        reason = dead_reason(line(context=31))
        assert reason == "wrong type: context must be a string or a list of strings, not int"

    def test_the_stage_size_limit_applies(self) -> None:
        raw = line(response="x" * 200)
        assert dead_reason(raw, max_bytes=len(raw)) is None
        assert dead_reason(raw, max_bytes=len(raw) - 1) == (
            f"oversize: {len(raw)} bytes > limit {len(raw) - 1}"
        )

    def test_line_numbers_count_blank_lines(self, tmp_path: Path) -> None:
        path = tmp_path / "c.jsonl"
        path.write_bytes(line() + b"\n\n" + b"{oops\n")
        bad = check_candidates(numbered_lines(path), 1024)
        assert list(bad) == [3] and bad[3].startswith("not JSON")


class TestProduce:
    def write(self, tmp_path: Path) -> Path:
        path = tmp_path / "mixed.jsonl"
        rows = [line(), line(id="c-2", response=None), b"", line(id="c-3", context=31), line()]
        path.write_bytes(b"\n".join(rows) + b"\n")
        return path

    def test_bad_lines_are_named_left_out_and_exit_1(
        self, tmp_path: Path, sent: dict[str, Any]
    ) -> None:
        path = self.write(tmp_path)
        result = run("produce", str(path))
        assert result.exit_code == 1
        assert sent["leave_out"] == {2, 4}
        assert f"{path}:2: would be dead-lettered: missing field: response" in result.stderr
        assert f"{path}:4: would be dead-lettered: wrong type: context must be a string" in (
            result.stderr
        )
        assert "produced 2 messages" in result.stderr
        assert "left out 2 line(s)" in result.stderr

    def test_no_check_sends_every_line(self, tmp_path: Path, sent: dict[str, Any]) -> None:
        result = run("produce", "--no-check", str(self.write(tmp_path)))
        assert result.exit_code == 0
        assert sent["leave_out"] == set()
        assert "produced 4 messages" in result.stderr

    def test_other_topics_are_not_checked_as_candidates(
        self, tmp_path: Path, sent: dict[str, Any]
    ) -> None:
        result = run("produce", "--topic", "decisions", str(self.write(tmp_path)))
        assert result.exit_code == 0 and sent["leave_out"] == set()

    def test_a_clean_file_exits_0(self, tmp_path: Path, sent: dict[str, Any]) -> None:
        path = tmp_path / "ok.jsonl"
        path.write_bytes(line() + b"\n")
        result = run("produce", str(path))
        assert result.exit_code == 0 and "would be dead-lettered" not in result.stderr


def record(cid: str, stage: str, action: str, topic: str | None = None) -> dict[str, Any]:
    return make_record(
        candidate_id=cid,
        session_id="s-" + cid,
        turn=1,
        stage=stage,
        action=action,
        write_to_state=topic == "state",
        reason="r",
        policy_version="p",
        decided_at=0.0,
        mode="enforce",
        route="default",
        prev_hash="",
        topic=topic,
    )


class TestTrails:
    def test_one_line_per_candidate_when_its_outcome_arrives(self) -> None:
        trails = Trails()
        lines = [
            trails.add(r)
            for r in (
                record("a", "geometry", "accept"),
                record("b", "geometry", "escalate"),
                record("a", "switch", "accept"),
                record("a", "outcome", "accept", "state"),
            )
        ]
        assert lines == [None, None, None, "a [s-a] geometry:accept → switch:accept ⇒ state"]
        assert trails.done == 1
        assert trails.pending() == ["b [s-b] geometry:escalate ⇒ (no outcome yet)"]

    def test_a_dead_letter_ends_its_trail_with_the_reason(self) -> None:
        dead = {**record("c/0/3", "geometry", "deadletter", "deadletter"), "reason": "not JSON"}
        assert Trails().add(dead) == "c/0/3 [s-c/0/3] geometry:deadletter ⇒ deadletter (not JSON)"

    def test_a_second_attempt_ends_as_superseded_not_pending(self) -> None:
        trails = Trails()
        for r in (record("a", "geometry", "accept"), record("a", "outcome", "accept", "state")):
            trails.add(r)
        trails.add(record("a", "geometry", "reject"))
        again = {**record("a", "superseded", "reject"), "evidence": {"first_topic": "state"}}
        assert trails.add(again) == "a [s-a] geometry:reject ⇒ superseded (ended in state)"
        assert (trails.done, trails.superseded, trails.pending()) == (1, 1, [])

    def test_records_that_are_not_decisions_are_skipped(self) -> None:
        trails = Trails()
        assert trails.add([1, 2]) is None and trails.add({"stage": "x"}) is None
        assert trails.pending() == [] and trails.done == 0


class TestOutcomesCommand:
    def test_prints_lines_then_pending_and_a_count(self, monkeypatch: pytest.MonkeyPatch) -> None:
        async def fake(settings: Settings, idle: float | None, out: Any) -> Trails:
            assert idle == 3.0
            trails = Trails()
            for r in (record("a", "geometry", "reject"), record("a", "outcome", "reject", "x")):
                if (text := trails.add(r)) is not None:
                    out.write(text + "\n")
            trails.add(record("b", "geometry", "accept"))
            return trails

        monkeypatch.setattr(kafka_tools, "print_outcomes", fake)
        result = run("outcomes", "--timeout", "3")
        assert result.stdout.splitlines() == [
            "a [s-a] geometry:reject ⇒ x",
            "b [s-b] geometry:accept ⇒ (no outcome yet)",
        ]
        assert "1 outcome(s), 1 still in the ladder" in result.stderr

    def test_follow_means_no_idle_timeout(self, monkeypatch: pytest.MonkeyPatch) -> None:
        seen = []

        async def fake(settings: Settings, idle: float | None, out: Any) -> Trails:
            seen.append(idle)
            return Trails()

        monkeypatch.setattr(kafka_tools, "print_outcomes", fake)
        run("outcomes", "--follow")
        assert seen == [None]


class TestUnknownTopic:
    def test_the_message_names_the_topic_and_the_ladder_topics_that_exist(self) -> None:
        settings = Settings(topic_prefix="t.")
        exc = UnknownTopic(settings, "nope", {"t.candidates", "t.decisions", "other"})
        assert str(exc) == (
            "no topic 'nope' on 127.0.0.1:9092 (prefix 't.'); known topics: candidates, decisions"
        )
        assert "groundstream topics create" in str(UnknownTopic(settings, "nope", set()))

    def test_consume_prints_one_line_and_exits_2(self, monkeypatch: pytest.MonkeyPatch) -> None:
        async def fake(settings: Settings, topic: str, *args: Any) -> int:
            raise UnknownTopic(settings, topic, {"decisions"})

        monkeypatch.setattr(kafka_tools, "consume_topic", fake)
        result = run("consume", "no-such-topic", "--timeout", "2")
        assert result.exit_code == 2
        assert result.stderr.splitlines() == [
            "groundstream: no topic 'no-such-topic' on 127.0.0.1:9092; known topics: decisions"
        ]


class TestKillSwitchStatus:
    def status(self, monkeypatch: pytest.MonkeyPatch, state: ControlState | None) -> Any:
        async def fake(settings: Settings) -> ControlState | None:
            return state

        monkeypatch.setattr(kafka_tools, "kill_switch_status", fake)
        return run("control", "kill-switch", "status")

    def test_on_says_by_whom_and_when(self, monkeypatch: pytest.MonkeyPatch) -> None:
        result = self.status(monkeypatch, ControlState(True, "ops", 1764460800.0))
        assert result.stdout == "kill switch ON (by ops at 2025-11-30T00:00:00.000+00:00)\n"

    def test_never_set_is_off(self, monkeypatch: pytest.MonkeyPatch) -> None:
        assert self.status(monkeypatch, None).stdout == "kill switch off (never set)\n"

    def test_on_and_off_still_need_by(self) -> None:
        result = CliRunner().invoke(main, ["control", "kill-switch", "on"])
        assert result.exit_code == 2 and "needs --by" in result.output


def dead_pid() -> int:
    """The id of a process that has exited."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


class TestReadiness:
    def settings(self, tmp_path: Path) -> Settings:
        return Settings(data_dir=str(tmp_path), topic_prefix="t.")

    def test_announce_prints_the_line_and_leaves_a_file(self, tmp_path: Path) -> None:
        settings, err = self.settings(tmp_path), io.StringIO()
        said = announce_ready(settings, "rules", "t.groundstream-rules", [2, 0], err=err)
        assert (
            err.getvalue()
            == "groundstream: stage rules ready (group t.groundstream-rules, partitions 0,2)\n"
        )
        assert read_ready(settings, "rules") == said
        assert not_ready(settings, ["rules", "switch"]) == ["switch"]

    def test_a_file_from_a_dead_process_is_not_ready(self, tmp_path: Path) -> None:
        settings = self.settings(tmp_path)
        announce_ready(settings, "rules", "g", [], err=io.StringIO())
        path = ready_file(settings, "rules")
        path.write_bytes(dumps({**loads(path.read_bytes()), "pid": dead_pid()}))
        assert read_ready(settings, "rules") is None

    def test_worker_all_waits_for_its_own_children(self, tmp_path: Path) -> None:
        settings = self.settings(tmp_path)
        ready = announce_ready(settings, "rules", "g", [0], err=io.StringIO())
        assert not_ready(settings, ["rules"], {"rules": ready.pid}) == []
        assert not_ready(settings, ["rules"], {"rules": ready.pid + 1}) == ["rules"]

    def test_a_stopping_worker_clears_only_its_own_file(self, tmp_path: Path) -> None:
        settings = self.settings(tmp_path)
        ready = announce_ready(settings, "rules", "g", [0], err=io.StringIO())
        clear_ready(settings, "rules", pid=ready.pid + 1)
        assert read_ready(settings, "rules") == ready
        clear_ready(settings, "rules", pid=ready.pid)
        assert read_ready(settings, "rules") is None

    def test_wait_returns_once_every_stage_is_ready(self, tmp_path: Path) -> None:
        settings, now = self.settings(tmp_path), [0.0]

        def sleep(s: float) -> None:
            now[0] += s
            if now[0] >= 1.0:
                announce_ready(settings, "rules", "g", [0], err=io.StringIO())

        waiting = wait_ready(settings, ["rules"], 10.0, clock=lambda: now[0], sleep=sleep)
        assert waiting == [] and 1.0 <= now[0] < 2.0

    def test_wait_gives_up_naming_the_stages_not_ready(self, tmp_path: Path) -> None:
        settings, now = self.settings(tmp_path), [0.0]

        def sleep(s: float) -> None:
            now[0] += s

        assert wait_ready(settings, ["rules", "judge"], 3.0, clock=lambda: now[0], sleep=sleep) == [
            "rules",
            "judge",
        ]
        assert now[0] >= 3.0

    def test_wait_ready_command_exits_1_naming_them(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        asked: list[str] = []  # the broker check, faked here (tests/unit has no broker)
        monkeypatch.setattr(
            runner, "require_topics", lambda s, stage=None: asked.append(s.topic_prefix)
        )
        env = {"GROUNDSTREAM_DATA_DIR": str(tmp_path), "GROUNDSTREAM_TOPIC_PREFIX": "t."}
        result = run("wait-ready", "--timeout", "0", "--stage", "rules", env=env)
        assert result.exit_code == 1 and "not ready after 0s: rules" in result.stderr
        assert asked == []
        announce_ready(self.settings(tmp_path), "rules", "g", [0], err=io.StringIO())
        assert run("wait-ready", "--timeout", "0", "--stage", "rules", env=env).exit_code == 0
        assert asked == ["t."]  # ready means the broker answered too

    def test_wait_ready_rejects_an_unknown_stage(self) -> None:
        result = CliRunner().invoke(main, ["wait-ready", "--stage", "nope"])
        assert result.exit_code == 2 and "nope" in result.output


class TestCalibrateTask:
    def test_task_without_route_is_refused_before_anything_is_read(self, tmp_path) -> None:
        data = tmp_path / "d.jsonl"
        data.write_text("{}\n")
        result = CliRunner().invoke(
            main, ["calibrate", str(data), "--task", "QA", "--out", str(tmp_path / "p.toml")]
        )
        assert result.exit_code == 2
        assert "--task needs --route" in result.output
        assert not (tmp_path / "p.toml").exists()

    @pytest.mark.parametrize("bound", ["1.5", "-0.1"])
    def test_a_long_form_bound_outside_a_share_names_the_option(self, tmp_path, bound) -> None:
        data = tmp_path / "d.jsonl"
        data.write_text("{}\n")
        out = tmp_path / "p.toml"
        result = CliRunner().invoke(
            main, ["calibrate", str(data), "--max-accept-error-long", bound, "--out", str(out)]
        )
        assert result.exit_code == 2
        assert "--max-accept-error-long" in result.output and "[0, 1)" in result.output
        assert not out.exists()

    def test_the_long_form_bound_is_refused_with_reviewers_verdicts(self, tmp_path) -> None:
        result = CliRunner().invoke(
            main,
            [
                "calibrate",
                "--from-decisions",
                "--max-accept-error-long",
                "0.1",
                "--out",
                str(tmp_path / "p.toml"),
            ],
        )
        assert result.exit_code == 2
        assert "--max-accept-error-long applies to fits on DATA" in result.output


class TestCheckInput:
    """`groundstream check`'s input: options or one JSON line, never both; each missing
    piece named in one line (the scoring itself is tests/integration/test_first_hour.py)."""

    def test_options_and_a_json_line_read_the_same(self) -> None:
        from workers.cli.inprocess import _check_input

        by_options = _check_input(None, "q?", ("c1", "c2"), "a.")
        line = dumps({"question": "q?", "context": ["c1", "c2"], "response": "a."}).decode()
        assert by_options == _check_input(line, None, (), None) == ("q?", ["c1", "c2"], "a.")
        assert _check_input('{"question": "q?", "context": "c", "response": "a."}', None, (), None)[
            1
        ] == ["c"]
        assert _check_input(None, "q?", (), "a.")[1] is None  # no context: DGI

    def test_a_missing_piece_is_one_line(self) -> None:
        result = run("check", '{"question": "q?"}')
        assert result.exit_code == 1
        assert result.stderr.strip() == "Error: response is missing or empty"
        result = run("check", "-q", "q?", "-r", "a.", '{"question": "q?"}')
        assert result.exit_code == 2 and "not both" in result.stderr


class TestOnProcessingError:
    """GROUNDSTREAM_ON_PROCESSING_ERROR at the command line: refused at start-up when bad,
    and a worker stopped by it ends with one line, not a traceback."""

    def test_a_bad_choice_is_refused_before_the_worker_starts(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(runner, "require_topics", lambda s, stage=None: pytest.fail("started"))
        result = run("worker", "switch", env={"GROUNDSTREAM_ON_PROCESSING_ERROR": "retry"})
        assert result.exit_code == 2
        assert result.stderr.strip().splitlines() == [
            "Error: invalid setting GROUNDSTREAM_ON_PROCESSING_ERROR='retry': "
            "expected deadletter or stop"
        ]

    def test_a_stopped_worker_exits_1_with_one_line(self, monkeypatch: pytest.MonkeyPatch) -> None:
        chosen = []

        def stopped(stage: str, settings: Settings) -> None:
            chosen.append(settings.on_processing_error)
            raise ProcessingStopped(f"stage {stage} stopped on p.scored/0/42 (KeyError: 'k')")

        monkeypatch.setattr(runner, "require_topics", lambda s, stage=None: None)
        monkeypatch.setattr(runner, "run_stage", stopped)
        result = run("worker", "switch", env={"GROUNDSTREAM_ON_PROCESSING_ERROR": "stop"})
        assert chosen == ["stop"]
        assert result.exit_code == 1
        assert result.stderr.strip().splitlines() == [
            "groundstream: stage switch stopped on p.scored/0/42 (KeyError: 'k')"
        ]
