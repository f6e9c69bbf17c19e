"""The hostile inputs issue 23 names, produced into a running ladder with a broker restart
in the middle (issue 23, item 6).

Invalid UTF-8, truncated JSON, NaN, numbers out of range, deep nesting, a wrong type in
every field, `"schema_version": true` (accepted as if it were 1 until this issue), 500 KB
answers, control characters, and ids reused for other content, mixed with ordinary good
candidates. Half is produced, the ladder's own broker is stopped and started again, then
the other half. Asserted: every good candidate id has exactly one outcome, and not in
`deadletter`; every bad message has a dead-letter outcome (under its id where a reader can
find one); no worker restarted or died; no traceback through this repository's code in any
worker's log. The hypothesis-written corpus (test_fuzz_stages.py) covers every stage's
input; this one keeps the cases a person named.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.faults.chaos import Ladder, OwnBroker, read_topic, wait_for_outcomes
from tests.fixtures.fuzz import TEMPLATE, is_good, readable_id
from tests.integration.conftest import produce
from tests.integration.harness import REPO_ROOT
from topics.codec import dumps, loads
from topics.names import Topic

pytestmark = pytest.mark.timeout(900)

GOOD = 200
WRONG_TYPES = {
    "id": 5,
    "session_id": ["s"],
    "question": {"q": 1},
    "context": 7,
    "response": False,
    "turn": "3",
    "initiator": 1,
    "samples": "one",
    "deadline": [1],
    "route": 1,
    "metadata": [],
    "schema_version": True,
}


@dataclass(frozen=True)
class Case:
    name: str
    value: bytes
    key: bytes = b"nf-session"


def body(cid: str, **changes: object) -> dict:
    return {**TEMPLATE, "id": cid, "session_id": f"nf-s-{cid}", **changes}


def named_cases() -> list[Case]:
    good = dumps(body("nf-truncated"))
    cases = [
        Case("invalid utf-8", dumps(body("nf-utf8")).replace(b"ferry leaves", b"ferry \xff\xfe")),
        Case("truncated json", good[: len(good) // 2]),
        Case("nan", dumps(body("nf-nan", turn=1)).replace(b'"turn":1', b'"turn":NaN')),
        Case("infinity", dumps(body("nf-inf", turn=1)).replace(b'"turn":1', b'"turn":1e400')),
        Case(
            "huge int",
            dumps(body("nf-bigint", turn=1)).replace(b'"turn":1', b'"turn":' + b"9" * 30),
        ),
        Case("deep nesting", dumps(body("nf-deep", metadata=_nested(200)))),
        Case("control chars in id", dumps(body("nf-\x00ctl\x07"))),
        Case(
            "500 KB answer", dumps(body("nf-500kb", response="The ferry leaves at 9 am. " * 20_000))
        ),
        Case(
            "control chars in text",
            dumps(body("nf-ctl-text", response="The ferry\x00 leaves\x1b at 9 am.")),
        ),
        Case("duplicate id, first", dumps(body("nf-dup"))),
        Case(
            "duplicate id, other content",
            dumps(body("nf-dup", response="The ferry leaves at noon.")),
        ),
    ]
    for field, value in WRONG_TYPES.items():
        cases.append(
            Case(f"wrong type: {field}", dumps(body(f"nf-type-{field}", **{field: value})))
        )
    cases += [Case("good", dumps(body(f"nf-good-{i}"))) for i in range(GOOD)]
    return cases


def _nested(depth: int) -> dict:
    out: dict = {}
    for _ in range(depth):
        out = {"a": out}
    return out


TRACEBACK = re.compile(r"Traceback \(most recent call last\):\n((?:[ \t].*\n?)+)")
OURS = re.compile(rf'File "{re.escape(str(REPO_ROOT))}/(workers|pipeline|topics)/')


def our_tracebacks(log: str) -> list[str]:
    """Tracebacks with a frame of this repository's code (aiokafka's own background
    tasks may log theirs while the broker is away; those are the client's business)."""
    return [m.group(0) for m in TRACEBACK.finditer(log) if OURS.search(m.group(1))]


def test_named_hostile_inputs_through_a_broker_restart(
    own_broker: OwnBroker, topic_prefix: str, tmp_path: Path
) -> None:
    cases = named_cases()
    good = {c.name: c for c in cases if is_good(Topic.CANDIDATES, c.value)}
    bad = [c for c in cases if not is_good(Topic.CANDIDATES, c.value)]
    good_ids = {loads(c.value)["id"] for c in cases if is_good(Topic.CANDIDATES, c.value)}
    # The cases the issue names as malformed are; the 500 KB answer and control
    # characters in text are valid input (they must get an ordinary outcome).
    assert {"500 KB answer", "control chars in text", "duplicate id, first"} <= good.keys()
    assert {c.name for c in bad} >= {"invalid utf-8", "truncated json", "nan", "infinity"}
    assert "wrong type: schema_version" in {c.name for c in bad}

    bootstrap, topic = own_broker.bootstrap, Topic.CANDIDATES.full(topic_prefix)
    ladder = Ladder(bootstrap, topic_prefix, tmp_path)
    ladder.create_topics()
    ladder.start()
    try:
        half = len(cases) // 2
        asyncio.run(produce(bootstrap, topic, [(c.key, c.value) for c in cases[:half]]))
        own_broker.stop()
        time.sleep(5)
        own_broker.start()
        asyncio.run(produce(bootstrap, topic, [(c.key, c.value) for c in cases[half:]]))
        named = sorted(
            good_ids | {cid for c in bad if (cid := readable_id(Topic.CANDIDATES, c.value))}
        )
        asyncio.run(wait_for_outcomes(bootstrap, topic_prefix, named, timeout=300))
        alive = ladder.alive()
        ready = {name: w.ready_count() for name, w in ladder.workers.items()}
        logs = {name: w.log_path.read_text(errors="replace") for name, w in ladder.workers.items()}
    finally:
        ladder.stop()

    outcomes: dict[str, list[str]] = {}
    for r in asyncio.run(read_topic(bootstrap, Topic.DECISIONS.full(topic_prefix))):
        record = loads(r.value)
        if record["stage"] == "outcome":
            outcomes.setdefault(record["candidate_id"], []).append(record["topic"])
    dead = [t for ts in outcomes.values() for t in ts if t == Topic.DEADLETTER.value]
    print(
        f"\n{len(bad)} bad, {len(good_ids)} good ids; outcomes {sum(map(len, outcomes.values()))}"
    )
    assert all(alive.values()), alive
    assert set(ready.values()) == {1}, ready  # no worker restarted
    for cid in good_ids:
        assert len(outcomes.get(cid, [])) == 1, (cid, outcomes.get(cid))
        assert outcomes[cid] != [Topic.DEADLETTER.value], cid
    for c in bad:
        cid = readable_id(Topic.CANDIDATES, c.value)
        if cid is not None:
            assert outcomes.get(cid) == [Topic.DEADLETTER.value], (c.name, outcomes.get(cid))
    assert len(dead) == len(bad)
    traced = {name: our_tracebacks(log) for name, log in logs.items()}
    assert not any(traced.values()), {k: v[:1] for k, v in traced.items() if v}
