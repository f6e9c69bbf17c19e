"""`groundstream bench claims` runs both sides end to end with the real encoder and claim head.

A smoke test of the command's plumbing (two fresh processes, the shipped policy, its last
line); its speed is measured by the bench itself, never asserted here.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from workers.bench import claims
from workers.cli import main

pytestmark = pytest.mark.integration


def test_both_sides_score_and_report_rate_and_memory() -> None:
    result = claims.run(claims.Options(n=6, warmup=2))
    assert result.bench == "claims" and result.goal == pytest.approx(1 / 3)
    assert set(result.rates) == {"without claims/s", "with claims/s"}
    assert all(rate > 0 for rate in result.rates.values())
    assert result.figure == pytest.approx(
        result.rates["with claims/s"] / result.rates["without claims/s"]
    )
    assert set(result.peaks) == {"geometry scoring", "geometry scoring + claims"}
    assert all(peak > 50 * 2**20 for peak in result.peaks.values())  # a model was loaded


def test_the_command_prints_its_result_last(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # the command sets them: undo after
        monkeypatch.setenv(name, "1")
    out = CliRunner().invoke(main, ["bench", "claims", "--n", "4", "--threads", "1"])
    assert out.exit_code == 0, out.output
    assert out.output.strip().splitlines()[-1].startswith("bench claims: ")
