"""Kill -9 every stage's worker, several times each, at random moments of a 5,000-candidate
run, restarting each at once: every candidate still ends in exactly one terminal topic
with exactly one outcome record, and none is lost."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.faults.chaos import Ladder, audit, candidates, chaos, produce_paced, wait_for_outcomes
from workers.runtime.ladder import STAGE_NAMES

pytestmark = pytest.mark.timeout(600)

N = 5000
KILL_ROUNDS = 3  # each stage's worker is killed this many times
PRODUCE_SECONDS = 90.0
SEED = 9


def test_sigkill_of_every_stage_mid_run_loses_and_duplicates_nothing(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    ladder = Ladder(kafka_bootstrap, topic_prefix, tmp_path)
    ladder.create_topics()
    items = candidates(N)
    ids = [cid for cid, _, _ in items]
    ladder.start()
    try:
        producer = produce_paced(
            kafka_bootstrap, f"{topic_prefix}candidates", items, PRODUCE_SECONDS
        )
        killer = chaos(ladder, KILL_ROUNDS, gap=(0.5, 4.0), seed=SEED)
        killer.join()
        producer.join()
        done = asyncio.run(wait_for_outcomes(kafka_bootstrap, topic_prefix, ids, timeout=240))
        assert all(ladder.alive().values()), ladder.alive()
    finally:
        ladder.stop()
    figures = asyncio.run(audit(kafka_bootstrap, topic_prefix, ids))
    print(f"\nworker kills {dict(ladder.kills)}: {figures.render()}")
    assert all(ladder.kills[name] == KILL_ROUNDS for name in STAGE_NAMES)
    assert done == N
    figures.assert_exactly_once()
