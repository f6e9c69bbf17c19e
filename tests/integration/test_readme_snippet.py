"""The README's Python example runs as written and prints what the README says it prints."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")

pytestmark = pytest.mark.integration  # loads the real encoder


def _library_section() -> str:
    return README[README.index("## As a Python library") :].split("\n## ", 1)[0]


def _run(code: str) -> subprocess.CompletedProcess:
    """The README's code as a user pastes it: a fresh interpreter, offline."""
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
    )


def test_the_readme_python_example_prints_what_the_readme_promises():
    section = _library_section()
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    promised = re.findall(r"prints `([^`]+)` and `([^`]+)`", section)[0]
    out = _run(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == list(promised)


def test_the_seed_worked_example_prints_both_constructions_as_the_readme_says():
    """Issue 22: the seed's example under its documented cuts and under the default."""
    section = _library_section()
    block = r"```python\n((?:(?!```).)*)```\n\nprints\n\n```text\n((?:(?!```).)*)```"
    code, printed = re.findall(block, section, re.S)[0]
    assert "accept_threshold_sgi=1.20, reject_threshold_sgi=0.95" in code
    assert "GroundingSwitch()" in code
    out = _run(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == printed.splitlines()
