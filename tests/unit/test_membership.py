"""A stopped worker leaves its group as a static member: the LeaveGroup it sends, how an
answer is read, and when the runner sends it (after a signalled stop, never after being
fenced). tests/integration/test_leave_group_kafka.py sends it to the real broker."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError

from workers.runtime import runner
from workers.runtime.loop import Fenced
from workers.runtime.membership import (
    LeaveGroup,
    LeaveGroupRequest_v3,
    LeaveRefused,
    check_left,
)
from workers.runtime.settings import Settings


def test_the_request_names_the_member_by_instance_id_at_version_3() -> None:
    request = LeaveGroup("groundstream-geometry", ["groundstream-geometry.pod-2"]).prepare(
        {LeaveGroupRequest_v3.API_KEY: (0, 5)}
    )
    assert isinstance(request, LeaveGroupRequest_v3)
    assert request.to_object() == {
        "group_id": "groundstream-geometry",
        "members": [{"member_id": "", "group_instance_id": "groundstream-geometry.pod-2"}],
    }


def test_a_broker_without_version_3_is_refused_not_sent_an_older_leave() -> None:
    """Versions 0-2 carry no instance id: sent, they would leave nothing."""
    with pytest.raises(NotImplementedError, match="LeaveGroup"):
        LeaveGroup("g", ["i"]).prepare({LeaveGroupRequest_v3.API_KEY: (0, 2)})


def _answer(group: int = 0, member: int = 0) -> SimpleNamespace:
    return SimpleNamespace(error_code=group, members=[("m-1", "i", member)])


def test_an_answer_is_clean_only_when_the_group_and_every_member_are() -> None:
    check_left(_answer())
    with pytest.raises(LeaveRefused, match="UnknownMemberIdError"):
        check_left(_answer(member=25))
    with pytest.raises(LeaveRefused, match="GroupAuthorizationFailedError"):
        check_left(_answer(group=30))


class _Loop:
    """What run_stage needs of a StageLoop: its run (which SIGTERMs its own process, as an
    operator would, unless it raises), names, metrics."""

    def __init__(self, raises: BaseException | None = None) -> None:
        self.raises = raises
        self.metrics = None
        self.stage = SimpleNamespace(name="geometry")
        self.group_id = "groundstream-geometry"
        self.member_id = "groundstream-geometry.pod-1"

    async def run(self) -> None:
        if self.raises is not None:
            raise self.raises
        os.kill(os.getpid(), signal.SIGTERM)  # the runner's handler cancels this run
        await asyncio.sleep(30)
        raise AssertionError("SIGTERM did not stop the run")


@pytest.fixture
def left(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    calls: list[tuple[str, str]] = []

    async def leave_group(_conn: object, group: str, instance: str) -> None:
        calls.append((group, instance))

    monkeypatch.setattr(runner, "leave_group", leave_group)
    monkeypatch.setattr(runner, "configure", lambda *a: None)
    monkeypatch.setattr(runner, "serve_metrics", lambda *a: False)
    monkeypatch.setattr(runner, "clear_ready", lambda *a, **k: None)
    return calls


def _run(monkeypatch: pytest.MonkeyPatch, loop: _Loop, env: dict[str, str]) -> None:
    monkeypatch.setattr(runner, "build_loop", lambda name, settings: loop)
    runner.run_stage("geometry", Settings.from_env(env))


def test_a_signalled_stop_leaves_the_group_as_its_instance(
    monkeypatch: pytest.MonkeyPatch, left: list[tuple[str, str]]
) -> None:
    _run(monkeypatch, _Loop(), {})
    assert left == [("groundstream-geometry", "groundstream-geometry.pod-1")]


def test_the_setting_keeps_the_membership_for_a_quick_restart(
    monkeypatch: pytest.MonkeyPatch, left: list[tuple[str, str]]
) -> None:
    _run(monkeypatch, _Loop(), {"GROUNDSTREAM_LEAVE_GROUP_ON_STOP": "false"})
    assert left == []


def test_a_fenced_worker_never_leaves_for_its_successor(
    monkeypatch: pytest.MonkeyPatch, left: list[tuple[str, str]]
) -> None:
    """The instance id now belongs to the newer worker: leaving would throw it out."""
    with pytest.raises(SystemExit) as stopped:
        _run(monkeypatch, _Loop(Fenced("fenced")), {})
    assert stopped.value.code == 3
    assert left == []


def test_a_failed_leave_is_logged_not_raised(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, left: Any
) -> None:
    async def unreachable(*_a: object) -> None:
        raise KafkaConnectionError("no broker")

    monkeypatch.setattr(runner, "leave_group", unreachable)
    # Captured at the runner's own logger: earlier tests in the session may have changed
    # how its records propagate to the root (a CLI run's logging set-up), not what it logs.
    monkeypatch.setattr(runner.log, "disabled", False)
    caplog.set_level(logging.WARNING, logger=runner.log.name)
    runner.log.addHandler(caplog.handler)
    try:
        _run(monkeypatch, _Loop(), {})
    finally:
        runner.log.removeHandler(caplog.handler)
    assert "after the session timeout" in caplog.text
