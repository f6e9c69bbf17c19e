"""`groundstream bench scale` at its smallest, on the real broker: geometry worker processes
on one, two and three replicas (the second and third joining under traffic), then a kill
-9, a SIGTERM that leaves the group and one that does not. Its rates are measured by the
bench itself, never asserted here; that a leaving replica's partitions move before a
staying one's is (the staying one's wait out the 10 s session timeout)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from workers.cli import main

pytestmark = pytest.mark.integration

RATES = ("1 replica/s", "2 replicas/s", "3 replicas/s")
JOINS = ("join 2 round s", "join 3 round s", "usual round s")
FAILOVERS = ("kill -9 s", "kill -9 visible s", "SIGTERM leaving s", "SIGTERM staying s")


def test_the_report_prints_the_cores_rates_and_failover_times(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    saved = tmp_path / "bench.jsonl"
    smallest = ["--n", "6", "--warmup", "2", "--json", str(saved)]
    out = CliRunner().invoke(main, ["bench", "scale", "--bootstrap", kafka_bootstrap, *smallest])
    assert out.exit_code == 0, out.output
    lines = out.output.strip().splitlines()
    assert lines[0].split()[1] == "cores,"  # "2 cores, load 1.3": first, before any figure
    for k in (1, 2, 3):
        assert any(line.startswith(f"{k} replica(s): ") for line in lines), out.output
    for k in (2, 3):
        assert any(line.startswith(f"replica {k} joining: ") for line in lines), out.output
    for start in ("kill -9: decided again ", "SIGTERM, leaving: ", "SIGTERM, staying: "):
        assert any(line.startswith(start) for line in lines), out.output
    last = lines[-1]
    assert last.startswith("bench scale: ") and "goal <= 15s" in last
    assert all(f"{name} " in last for name in ("cores", *RATES, *JOINS, *FAILOVERS)), last
    (record,) = [json.loads(line) for line in saved.read_text().splitlines()]
    rates = record["rates"]
    assert all(rates[name] > 0 for name in (*RATES, *JOINS))
    assert record["figure"] == rates["kill -9 s"] > 0
    # Leaving hands the partitions on at once; staying holds them for the session timeout.
    assert rates["SIGTERM leaving s"] < rates["SIGTERM staying s"]
    assert rates["SIGTERM staying s"] > 5
