"""A broker restart under load sends nothing to review (issue 23, item 5).

While the broker is away no worker can read the control topic, so the kill switch's state
is unknown. It used to be held ON and decided under: in the seconds after the broker came
back, most of what the policy accepts went to `escalations.review` as "kill switch on".
Now a batch waits, uncommitted, until the state is known again. Every candidate here is
one the ladder's test policy accepts (consistency commits, the rules pass), so every one
must reach `state`, and no decision may name the kill switch.

Runs its own broker (see test_broker_faults.py): the shared one is never stopped.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.faults.chaos import (
    TEMPLATES,
    Ladder,
    OwnBroker,
    audit,
    outcomes_so_far,
    produce_paced,
    read_topic,
    wait_for_outcomes,
)
from topics.codec import dumps, loads
from topics.names import Topic

pytestmark = pytest.mark.timeout(600)

N = 1500
PRODUCE_SECONDS = 6.0
DOWN_SECONDS = 10.0
ACCEPTED = TEMPLATES[0]  # "cs-agree": consistency commits, the rules pass → state


def accepted_candidates(n: int) -> list[tuple[str, bytes, bytes]]:
    out = []
    for i in range(n):
        cid, session = f"k-{i:05d}", f"ks-{i % 100:03d}"
        body = {k: v for k, v in ACCEPTED.items() if k not in ("id", "session_id")}
        body.update(id=cid, session_id=session, turn=i // 100 + 1, initiator="user")
        out.append((cid, session.encode(), dumps(body)))
    return out


def test_a_broker_restart_sends_nothing_the_policy_accepts_to_review(
    own_broker: OwnBroker, topic_prefix: str, tmp_path: Path
) -> None:
    bootstrap = own_broker.bootstrap
    ladder = Ladder(bootstrap, topic_prefix, tmp_path)
    ladder.create_topics()
    items = accepted_candidates(N)
    ids = [cid for cid, _, _ in items]
    ladder.start()
    try:
        produce_paced(bootstrap, f"{topic_prefix}candidates", items, PRODUCE_SECONDS).join()
        at_stop = asyncio.run(outcomes_so_far(bootstrap, topic_prefix))
        own_broker.stop()
        time.sleep(DOWN_SECONDS)
        own_broker.start()
        done = asyncio.run(wait_for_outcomes(bootstrap, topic_prefix, ids, timeout=300))
        alive = ladder.alive()
    finally:
        ladder.stop()
    figures = asyncio.run(audit(bootstrap, topic_prefix, ids))
    records = asyncio.run(read_topic(bootstrap, Topic.DECISIONS.full(topic_prefix)))
    gated = [d for d in (loads(r.value) for r in records) if d.get("gate") == "kill_switch"]
    print(f"\nstopped at {at_stop} outcomes: {figures.render()}; kill switch gated {len(gated)}")
    assert at_stop < N, "the restart must come with candidates still on the ladder"
    assert all(alive.values()), f"a worker gave up: {alive}"
    assert done == N
    figures.assert_exactly_once()
    assert gated == [], gated[:3]
    assert figures.by_topic == {"state": N}
