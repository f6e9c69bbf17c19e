"""The suite runs as a fresh machine's first run (tests/conftest.py): the per-user caches
that libraries and groundstream write start empty in every session."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import FIRST_RUN_HOME, FRESH_DIRS


def test_every_per_user_cache_is_this_sessions_own() -> None:
    for variable, name in FRESH_DIRS.items():
        assert Path(os.environ[variable]) == FIRST_RUN_HOME / name


def test_matplotlib_and_the_onnx_export_start_empty_here_and_in_subprocesses() -> None:
    """What the libraries themselves resolve, in a process the suite starts."""
    code = (
        "import matplotlib; from pipeline.encoding.onnx_encoder import cache_root;"
        "print(matplotlib.get_configdir()); print(matplotlib.get_cachedir()); print(cache_root())"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    ).stdout.split()
    assert [Path(p) for p in out] == [
        FIRST_RUN_HOME / "matplotlib",
        FIRST_RUN_HOME / "matplotlib",
        FIRST_RUN_HOME / "cache" / "groundstream" / "onnx",
    ]
