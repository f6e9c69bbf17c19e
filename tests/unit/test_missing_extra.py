"""A missing optional dependency is one line naming the extra, not a traceback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from workers.cli import main
from workers.eval import evaluation
from workers.eval.report import REPORT_NEEDS, write_report

DATA = Path(__file__).resolve().parents[1] / "fixtures" / "labelled.jsonl"


@pytest.fixture
def no_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now fails


def test_eval_report_names_the_extra_and_runs_nothing(
    no_matplotlib: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def must_not_run(*args: object, **kwargs: object) -> dict:
        raise AssertionError("the evaluation ran although the report cannot be written")

    monkeypatch.setattr(evaluation, "evaluate", must_not_run)
    result = CliRunner().invoke(main, ["eval", str(DATA), "--report", str(tmp_path / "r")])
    assert result.exit_code != 0
    assert result.output.strip() == f"Error: {REPORT_NEEDS}"
    assert "pip install 'groundstream[eval]'" in REPORT_NEEDS
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_write_report_says_the_same(no_matplotlib: None, tmp_path: Path) -> None:
    with pytest.raises(ModuleNotFoundError, match=r"groundstream\[eval\]") as info:
        write_report({}, [], {}, tmp_path)
    assert info.value.name == "matplotlib"


def test_with_matplotlib_the_report_is_written(tmp_path: Path) -> None:
    # The guard must not refuse an install that has the extra.
    written = write_report({"n": 0}, [], {}, tmp_path)
    assert (tmp_path / "roc.png") in written
