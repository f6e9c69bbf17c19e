"""The broker itself fails mid-run: first stopped and started again, then killed with
SIGKILL and started again. Every candidate still ends in exactly one terminal topic with
exactly one outcome record, and none is lost; no worker gives up.

Runs its own broker (deploy/kafka/local.sh on free ports and a run directory of its own):
the shared broker other tests and people use is never stopped.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.faults.chaos import (
    Ladder,
    OwnBroker,
    audit,
    candidates,
    outcomes_so_far,
    produce_paced,
    wait_for_outcomes,
)

pytestmark = pytest.mark.timeout(600)

N = 4000
PRODUCE_SECONDS = 8.0
DOWN_SECONDS = 3.0


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
