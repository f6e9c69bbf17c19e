"""Bad input on the real broker: every malformed message lands in the dead-letter topic
unchanged with its reason, nothing is lost, and the worker keeps processing."""

from __future__ import annotations

import asyncio
from pathlib import Path

from topics.codec import dumps, loads
from topics.names import MAX_MESSAGE_BYTES

from .conftest import consume_all, produce
from .harness import Workers, cli, worker_env


def _candidate(cid: str, **override: object) -> dict:
    base = {
        "id": cid,
        "session_id": f"s-{cid}",
        "question": "Which river feeds the Lake Arden reservoir?",
        "context": "The reservoir is fed by the Calder River, which rises on Mount Fell.",
        "response": "It is fed by the Calder River.",
    }
    return {**base, **override}


BAD: dict[str, bytes] = {
    "not JSON": b"this is not json {",
    "invalid UTF-8": b'{"id": "x\xff\xfe", "session_id": "s"}',
    "missing field: response": dumps(
        {k: v for k, v in _candidate("m1").items() if k != "response"}
    ),
    "wrong type: turn": dumps(_candidate("w1", turn="three")),
    "wrong type: context": dumps(_candidate("w2", context=["ok", 7])),
    "empty field: question": dumps(_candidate("e1", question="   ")),
    "wrong type: candidate must be a JSON object": b"[1, 2, 3]",
    "oversize": dumps(_candidate("big", response="x" * (2 * 1024 * 1024))),
}


def test_malformed_messages_are_dead_lettered_and_the_worker_goes_on(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    env = worker_env(kafka_bootstrap, topic_prefix, tmp_path / "data")
    cli(env, "topics", "create")
    before, after = _candidate("good-before"), _candidate("good-after")
    items = [(b"k-before", dumps(before))]
    items += [(f"k-{i}".encode(), raw) for i, raw in enumerate(BAD.values())]
    items += [(b"k-after", dumps(after))]
    # Dead letters are outcomes: the terminal writer delivers them.
    terminal = Workers(env, "terminal", tmp_path / "terminal.log")
    with terminal, Workers(env, "geometry", tmp_path / "geometry.log"):
        asyncio.run(
            produce(
                kafka_bootstrap,
                f"{topic_prefix}candidates",
                items,
                max_request_size=MAX_MESSAGE_BYTES,
            )
        )
        dead = asyncio.run(
            consume_all(
                kafka_bootstrap,
                f"{topic_prefix}deadletter",
                expect=len(BAD),
                timeout=90,
                max_partition_fetch_bytes=MAX_MESSAGE_BYTES,
                isolation_level="read_committed",
            )
        )
        scored = asyncio.run(
            consume_all(kafka_bootstrap, f"{topic_prefix}scored", expect=2, timeout=60)
        )

    assert len(dead) == len(BAD), "every malformed message is dead-lettered, none twice"
    by_value = {rec.value: dict(rec.headers) for rec in dead}
    for expected_reason, raw in BAD.items():
        assert raw in by_value, f"raw bytes of the {expected_reason!r} message are kept unchanged"
        headers = by_value[raw]
        reason = headers["gs-reason"].decode()
        assert reason.startswith(expected_reason), (expected_reason, reason)
        assert headers["gs-stage"] == b"geometry"
        assert headers["gs-source-topic"].decode() == f"{topic_prefix}candidates"
    # Named by the candidate's id where the message has one.
    assert by_value[BAD["wrong type: turn"]]["gs-candidate-id"] == b"w1"
    # The worker went on: the candidates before and after the bad ones were both scored.
    assert sorted(loads(r.value)["candidate"]["id"] for r in scored) == [
        "good-after",
        "good-before",
    ]
