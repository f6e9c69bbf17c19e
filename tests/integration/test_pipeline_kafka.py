"""The ladder on a real broker: every candidate ends in exactly one terminal topic, the
decisions stream holds one record per candidate and stage, and the Kafka decisions equal
`groundstream verify`'s on the same input."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

from pipeline.trail.records import comparable, verify_chain
from topics.codec import loads
from topics.names import TERMINAL, Topic

from .conftest import consume_all
from .harness import FIXTURES, Workers, cli, values, worker_env

CANDIDATES = FIXTURES / "candidates.jsonl"
STAGES = 6  # geometry, switch, consistency, judge, rules, terminal


def _rounded(value: object) -> object:
    """Floats to 6 places: the encoder's batch padding differs between runs in the last bits."""
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def _ids(path: Path) -> list[str]:
    return [loads(line)["id"] for line in path.read_bytes().splitlines() if line.strip()]


async def _decisions_until_outcomes(
    bootstrap: str, topic: str, ids: set[str], timeout: float
) -> list[dict]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        records = values(await consume_all(bootstrap, topic, timeout=5))
        done = {r["candidate_id"] for r in records if r["stage"] == "outcome"}
        if ids <= done or loop.time() > deadline:
            return records
        await asyncio.sleep(1)


def test_ladder_on_kafka_matches_embedded(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    env = worker_env(kafka_bootstrap, topic_prefix, tmp_path / "data")
    cli(env, "topics", "create")
    ids = _ids(CANDIDATES)
    with Workers(env, "all", tmp_path / "workers.log", apps=STAGES):
        cli(env, "produce", str(CANDIDATES))
        records = asyncio.run(
            _decisions_until_outcomes(kafka_bootstrap, f"{topic_prefix}decisions", set(ids), 120)
        )
        terminal = {
            t: values(asyncio.run(consume_all(kafka_bootstrap, t.full(topic_prefix), timeout=5)))
            for t in TERMINAL
        }

    outcomes = [r for r in records if r["stage"] == "outcome"]
    assert sorted(r["candidate_id"] for r in outcomes) == sorted(ids), "one outcome per candidate"
    # Each candidate sits in exactly the terminal topic its outcome names, and only there.
    placed = Counter(
        (env_["candidate"]["id"], t.value) for t, msgs in terminal.items() for env_ in msgs
    )
    assert sum(placed.values()) == len(ids)
    for outcome in outcomes:
        assert placed[(outcome["candidate_id"], outcome["topic"])] == 1
        assert outcome["write_to_state"] == (outcome["topic"] == Topic.STATE.value)
    # One record per candidate and stage it passed; the chain of each candidate is intact.
    per_stage = Counter((r["candidate_id"], r["stage"]) for r in records)
    assert max(per_stage.values()) == 1
    assert all(per_stage[(cid, "geometry")] == 1 for cid in ids)
    by_candidate: dict[str, list[dict]] = {}
    for r in records:
        by_candidate.setdefault(r["candidate_id"], []).append(r)
    for trail in by_candidate.values():
        trail.sort(
            key=lambda r: ["geometry", "switch", "consistency", "judge", "rules", "outcome"].index(
                r["stage"]
            )
        )
        assert verify_chain(trail) == []

    # The embedded runner decides identically on the same input.
    out = tmp_path / "verify.jsonl"
    cli(env, "verify", str(CANDIDATES), "--out", str(out))
    embedded = [loads(line) for line in out.read_bytes().splitlines()]
    key = lambda r: (r["candidate_id"], r["stage"])  # noqa: E731
    assert sorted(map(key, embedded)) == sorted(map(key, records))
    kafka_view = {key(r): _rounded(comparable(r)) for r in records}
    embedded_view = {key(r): _rounded(comparable(r)) for r in embedded}
    assert kafka_view == embedded_view
