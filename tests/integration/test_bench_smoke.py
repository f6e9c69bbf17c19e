"""Every bench the docs list runs, at its smallest size, on the test broker, and prints its
figure (the line `groundstream bench NAME` ends with).

A smoke test of each bench's plumbing (its workers, its topics, its result line), not of
its speed: the figures are measured by the benches themselves, never asserted here. Each
bench is run through its `run(Options)` with the fewest candidates, warm-up rounds and
rounds it accepts (the command line sets only the main size); `bench switch` and `bench
plot` also run as the commands a user types, printing the last line. The benches with tests
of their own (`claims`, `judge`, `judge-throughput`, `scale`) are held to those
(tests/integration/test_bench_*.py). Synthetic data only: the suite runs on a fresh clone
without RAGTruth beside it.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from workers.bench import cache, fairness, geometry, ladder, latency, switch
from workers.bench.report import Result
from workers.bench.tls import side_by_side

from .harness import REPO_ROOT

pytestmark = pytest.mark.timeout(900)

SMOKE: dict[str, Callable[[str], Result]] = {
    "switch": lambda at: switch.run(switch.Options(at, n=20)),
    "cache": lambda at: cache.run(cache.Options(at, n=10, warmup=2, rounds=1)),
    "geometry": lambda at: geometry.run(geometry.Options(at, n=4, warmup=2, rounds=1)),
    "latency": lambda at: latency.run(latency.Options(at, rate=2.0, seconds=1.0, data="synthetic")),
    "ladder": lambda at: ladder.run(ladder.Options(at, n=4, data="synthetic", warmup=2)),
    "fairness": lambda at: fairness.run(fairness.Options(at, n=2, rate=20.0, rounds=1)),
}
TLS_RATE: dict[str, Callable[[Result], float]] = {
    "switch": lambda r: r.rates["switch/s"],
    "latency": lambda r: 1000 / r.rates["p50 ms"],  # as `bench latency --tls` reads it
}
OWN_TESTS = {
    "claims": "test_bench_claims.py",
    "judge": "test_bench_judge.py",
    "judge-throughput": "test_bench_judge_throughput.py",
    "scale": "test_bench_scale.py",
}
LISTED = re.compile(r"`(?:groundstream )?bench ([a-z][a-z-]*)([^`]*)`")


def listed() -> set[str]:
    """Every bench command the docs and the README name: `NAME`, or `NAME --tls`."""
    pages = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]
    found = set()
    for page in pages:
        if "lab" in page.relative_to(REPO_ROOT).parts:
            continue  # the development logs record runs; they list nothing to run
        for name, rest in LISTED.findall(page.read_text(encoding="utf-8")):
            found.add(f"{name} --tls" if "--tls" in rest.split() else name)
    return found


def test_every_bench_the_docs_list_is_run_here_or_in_its_own_test() -> None:
    names = listed()
    assert {"latency", "switch --tls", "plot"} <= names  # the reader finds them
    smoked = set(SMOKE) | {f"{name} --tls" for name in TLS_RATE} | {"plot"}
    assert names - smoked - set(OWN_TESTS) == set()
    for name, test in OWN_TESTS.items():
        text = (Path(__file__).parent / test).read_text()
        # it imports the bench, or runs it as the command a user types
        assert f"bench import {name.replace('-', '_')}" in text or f'"bench", "{name}"' in text


@pytest.mark.parametrize("name", sorted(SMOKE))
def test_the_bench_runs_and_prints_its_figure(name: str, kafka_bootstrap: str) -> None:
    result = SMOKE[name](kafka_bootstrap)
    assert result.bench == name
    assert math.isfinite(result.figure) and result.figure > 0
    assert result.line().startswith(f"bench {name}: {result.figure:.2f}{result.unit}")
    if name == "latency":
        # The accept path under the shipped policy, from synthetic candidates built to reach
        # state: every one sent arrived there.
        assert result.notes["data"] == "synthetic grounded 7"
        assert result.notes["candidates"] == result.notes["asked"] == 2
        assert 0 < result.rates["p50 ms"] <= result.rates["max ms"]


@pytest.mark.parametrize("name", sorted(TLS_RATE))
def test_the_bench_runs_over_tls_beside_plaintext(name: str, kafka_bootstrap: str) -> None:
    result = side_by_side(name, kafka_bootstrap, SMOKE[name], TLS_RATE[name], rounds=1)
    assert result.bench == f"{name}-tls" and result.notes["rounds"] == 1
    assert math.isfinite(result.figure) and result.figure > 0
    assert result.line().startswith(f"bench {name}-tls: {result.figure:.2f}x")


def test_the_switch_command_prints_its_line_last_and_plot_draws_it(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    lines = tmp_path / "bench.jsonl"
    done = groundstream(
        "bench", "switch", "--bootstrap", kafka_bootstrap, "--n", "20", "--json", str(lines)
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1].startswith("bench switch: ")
    png = tmp_path / "bench.png"
    drawn = groundstream("bench", "plot", str(lines), "--out", str(png))
    assert drawn.returncode == 0, drawn.stderr
    assert png.read_bytes().startswith(b"\x89PNG")


def groundstream(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workers.cli", *args],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
