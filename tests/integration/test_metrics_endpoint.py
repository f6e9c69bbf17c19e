"""`/metrics` of real worker processes, scraped over HTTP after candidates flowed through
the broker: decisions by stage and action, the consumer lag per partition, and the
geometry stage's batch, score and cache series; the audit recorder's emits and lag on the
port after the last stage's."""

from __future__ import annotations

import asyncio
import socket
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from topics.codec import dumps
from workers.runtime.ladder import STAGE_NAMES
from workers.runtime.settings import Settings

from .conftest import consume_all, decision_record, send_decisions
from .harness import Workers, cli, values, worker_env

N = 6
QUESTION = "Which river feeds the Lake Arden reservoir?"
CONTEXT = "The reservoir is fed by the Calder River, which rises on Mount Fell."


def _free_base(stages: int) -> int:
    """A base port with `stages` consecutive free ports on loopback."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + stages > 65535:
            continue
        try:
            for port in range(base, base + stages):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise AssertionError("no free port range")


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def series(samples: dict, name: str, **labels: str) -> dict[tuple, float]:
    return {
        key: v
        for key, v in samples.items()
        if key[0] == name and set(labels.items()) <= set(key[1])
    }


def until(check, timeout: float = 30.0):
    """The first truthy result of `check()`, polled; AssertionError at the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            assert result, "condition not met in time"
            return result
        time.sleep(0.5)


def test_workers_serve_decisions_lag_and_scores(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    base = _free_base(2)  # geometry on base + 0, switch on base + 1
    env = worker_env(
        kafka_bootstrap, topic_prefix, tmp_path / "data", GROUNDSTREAM_METRICS_PORT=str(base)
    )
    cli(env, "topics", "create")
    lines = [
        dumps(
            {
                "id": f"m-{i}",
                "session_id": f"s-{i}",
                "question": QUESTION,
                "context": CONTEXT,
                "response": "It is fed by the Calder River.",
            }
        ).decode()
        for i in range(N)
    ]
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    first.write_text("\n".join(lines[: N // 2]) + "\n")
    second.write_text("\n".join(lines[N // 2 :]) + "\n")
    with (
        Workers(env, "geometry", tmp_path / "geometry.log"),
        Workers(env, "switch", tmp_path / "switch.log"),
    ):
        # Two rounds, so the second meets the first's embeddings in the encoder cache.
        cli(env, "produce", str(first))
        asyncio.run(consume_all(kafka_bootstrap, f"{topic_prefix}decisions", expect=N, timeout=120))
        cli(env, "produce", str(second))
        records = asyncio.run(
            consume_all(kafka_bootstrap, f"{topic_prefix}decisions", expect=2 * N, timeout=120)
        )
        stages = [r["stage"] for r in values(records)]
        assert stages.count("geometry") == N and stages.count("switch") == N

        geometry = until(lambda: _settled(scrape(base), "geometry"))
        switch = until(lambda: _settled(scrape(base + 1), "switch"))

    scored = series(geometry, "groundstream_decisions_total", stage="geometry", action="scored")
    assert list(scored.values()) == [N]
    # Every switch decision is counted under its action, and only real actions appear.
    by_action = series(switch, "groundstream_decisions_total", stage="switch")
    assert sum(by_action.values()) == N
    actions = {dict(key[1])["action"] for key in by_action}
    assert actions <= {"accept", "escalate", "reject", "fallback", "regenerate"}, actions
    # One lag series per source partition (GROUNDSTREAM_PARTITIONS=2), caught up.
    lag = series(geometry, "groundstream_consumer_lag", topic=f"{topic_prefix}candidates")
    assert {dict(k[1])["partition"] for k in lag} == {"0", "1"}
    assert set(lag.values()) == {0}
    assert series(switch, "groundstream_consumer_lag", topic=f"{topic_prefix}scored")
    # Batches, scores and the encoder cache: the same question and context repeat.
    sizes = series(geometry, "groundstream_batch_size_sum", stage="geometry")
    assert list(sizes.values()) == [N]
    (scores,) = series(geometry, "groundstream_score_count", stage="geometry").values()
    assert scores == N
    (lookups,) = series(geometry, "groundstream_encoder_cache_lookups_total").values()
    (hits,) = series(geometry, "groundstream_encoder_cache_hits_total").values()
    assert lookups > hits >= 2  # the second round's question and context, at least
    assert series(geometry, "groundstream_kill_switch") == {
        ("groundstream_kill_switch", (("stage", "geometry"),)): 0
    }


def _settled(samples: dict, stage: str) -> dict | None:
    """The scrape once every candidate is counted and the lag refresh has caught up."""
    decided = sum(series(samples, "groundstream_decisions_total", stage=stage).values())
    lag = series(samples, "groundstream_consumer_lag", stage=stage)
    return samples if decided == N and lag and not any(lag.values()) else None


def test_the_audit_recorder_serves_its_emits_and_lag_after_the_stages_ports(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    recorder_port = len(STAGE_NAMES)  # geometry +0 … terminal +5, then the recorder
    base = _free_base(recorder_port + 1)
    env = worker_env(
        kafka_bootstrap, topic_prefix, tmp_path / "data", GROUNDSTREAM_METRICS_PORT=str(base)
    )
    cli(env, "topics", "create")
    settings = Settings(bootstrap_servers=kafka_bootstrap, topic_prefix=topic_prefix)
    records = [decision_record(f"r-{i}", "switch", "accept") for i in range(N)]
    recorder = Workers(env, "recorder", tmp_path / "recorder.log", command=("audit", "record"))
    with recorder:
        asyncio.run(send_decisions(kafka_bootstrap, settings, *records))

        def settled() -> dict | None:
            samples = scrape(base + recorder_port)
            emits = series(samples, "groundstream_emits_total", stage="recorder")
            lag = series(samples, "groundstream_consumer_lag", stage="recorder")
            done = sum(emits.values()) == 2 * N and lag and not any(lag.values())
            return samples if done else None

        samples = until(settled)
    # One audit entry and one public projection per record, each counted by topic.
    by_topic = {
        dict(key[1])["topic"]: value
        for key, value in series(samples, "groundstream_emits_total", stage="recorder").items()
    }
    assert by_topic == {"audit": N, "decisions.public": N}
    lag = series(samples, "groundstream_consumer_lag", topic=f"{topic_prefix}decisions")
    assert {dict(k[1])["partition"] for k in lag} == {"0", "1"}
    sizes = series(samples, "groundstream_batch_size_sum", stage="recorder")
    assert list(sizes.values()) == [N]
