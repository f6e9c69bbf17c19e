"""The broker itself fails mid-run: first stopped and started again, then killed with
SIGKILL and started again. Every candidate still ends in exactly one terminal topic with
exactly one outcome record, and none is lost; no worker gives up.

Runs its own broker (deploy/kafka/local.sh on free ports and a run directory of its own):
the shared broker other tests and people use is never stopped.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.chaos import (
    Ladder,
    audit,
    candidates,
    outcomes_so_far,
    produce_paced,
    wait_for_outcomes,
)
from tests.integration.harness import local_sh

pytestmark = pytest.mark.timeout(600)

N = 4000
PRODUCE_SECONDS = 8.0
DOWN_SECONDS = 3.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class OwnBroker:
    """A single-node broker of this test's own, through local.sh."""

    def __init__(self, run_dir: Path) -> None:
        self.port = _free_port()
        self.env = {
            "KAFKA_PORT": str(self.port),
            "KAFKA_CONTROLLER_PORT": str(_free_port()),
            "GROUNDSTREAM_KAFKA_DIR": str(run_dir),
        }
        self.run_dir = run_dir
        self.bootstrap = f"127.0.0.1:{self.port}"

    def _sh(self, command: str) -> None:
        done = local_sh(command, env=self.env, timeout=300)
        assert done.returncode == 0, f"local.sh {command}:\n{done.stdout}\n{done.stderr}"

    def start(self) -> None:
        self._sh("start")

    def stop(self) -> None:
        self._sh("stop")

    def kill(self) -> None:
        pid = int((self.run_dir / "kafka.pid").read_text().strip())
        os.kill(pid, signal.SIGKILL)
        for _ in range(100):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[OwnBroker]:
    broker = OwnBroker(tmp_path / "kafka")
    broker.start()
    try:
        yield broker
    finally:
        local_sh("stop", env=broker.env, timeout=120)


def test_broker_stopped_and_killed_mid_run_loses_and_duplicates_nothing(
    own_broker: OwnBroker, topic_prefix: str, tmp_path: Path
) -> None:
    bootstrap = own_broker.bootstrap
    ladder = Ladder(bootstrap, topic_prefix, tmp_path)
    ladder.create_topics()
    items = candidates(N)
    ids = [cid for cid, _, _ in items]
    ladder.start()
    try:
        # The producer's own broker outage is not what is tested: candidates are sent
        # before the broker fails, and the ladder is still working through them.
        produce_paced(bootstrap, f"{topic_prefix}candidates", items, PRODUCE_SECONDS).join()
        at_stop = asyncio.run(outcomes_so_far(bootstrap, topic_prefix))
        own_broker.stop()
        time.sleep(DOWN_SECONDS)
        own_broker.start()
        time.sleep(DOWN_SECONDS)
        at_kill = asyncio.run(outcomes_so_far(bootstrap, topic_prefix))
        own_broker.kill()
        time.sleep(DOWN_SECONDS)
        own_broker.start()
        done = asyncio.run(wait_for_outcomes(bootstrap, topic_prefix, ids, timeout=300))
        alive = ladder.alive()
    finally:
        ladder.stop()
    figures = asyncio.run(audit(bootstrap, topic_prefix, ids))
    print(f"\nbroker stopped at {at_stop} and killed at {at_kill} outcomes: {figures.render()}")
    # Both failures must come mid-run, with candidates still on the ladder.
    assert at_kill < N, (at_stop, at_kill)
    assert all(alive.values()), f"a worker gave up: {alive}"
    assert done == N
    figures.assert_exactly_once()
