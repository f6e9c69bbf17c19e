"""`make demo` on a fresh machine says what each set-up step does before it does it, and
installs the clone in editable mode once (issue 22, item 7); `make docs-build` installs the
docs extra only, never the test toolchain (llama.cpp builds from source for 20 minutes).

`make` runs for real against stand-ins: `python3` (first on PATH) makes a fake venv whose
`python` logs its arguments and whose `groundstream` does nothing, so nothing is installed
and no model is loaded.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# The fake venv's python: logs every call; `-c` (the "does groundstream point here?"
# probe) answers with $POINTS_HERE's exit status.
FAKE_PYTHON = """#!/bin/sh
echo "python $*" >> "$CALLS"
if [ "$1" = "-c" ]; then exit "${POINTS_HERE:-1}"; fi
exit 0
"""
FAKE_PYTHON3 = """#!/bin/sh
# python3 -m venv DIR
mkdir -p "$3/bin"
cp "$FAKE_PYTHON" "$3/bin/python"
printf '#!/bin/sh\\necho "groundstream $*" >> "$CALLS"\\n' > "$3/bin/groundstream"
chmod +x "$3/bin/python" "$3/bin/groundstream"
"""


def make_demo(tmp_path: Path, points_here: str, target: str = "demo") -> tuple[str, list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (tmp_path / "python").write_text(FAKE_PYTHON)
    (bin_dir / "python3").write_text(FAKE_PYTHON3)
    (bin_dir / "python3").chmod(0o755)
    calls = tmp_path / "calls.log"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "CALLS": str(calls),
        "FAKE_PYTHON": str(tmp_path / "python"),
        "POINTS_HERE": points_here,
    }
    done = subprocess.run(
        ["make", "--no-print-directory", "-s", target, f"VENV={tmp_path / 'venv'}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout, calls.read_text().splitlines()


def test_each_set_up_step_is_announced_before_it_runs(tmp_path: Path) -> None:
    out, calls = make_demo(tmp_path, points_here="1")
    steps = [line for line in out.splitlines() if line.startswith("[set-up")]
    assert [s.split("]")[0] + "]" for s in steps] == [
        "[set-up 1/3]",
        "[set-up 2/3]",
        "[set-up]",
        "[set-up 3/3]",
    ]
    assert "groundstream verify examples/candidates.jsonl --out out/decisions.jsonl" in calls


def test_the_clone_is_installed_editable_once(tmp_path: Path) -> None:
    # A fresh venv: the install already points `groundstream` at this clone. The demo
    # needs none of the test tools (llama.cpp's build among them).
    _, calls = make_demo(tmp_path, points_here="0")
    editable = [c for c in calls if "pip install" in c and "-e" in c.split()]
    assert editable == ["python -m pip install --quiet -e ."]


def test_the_docs_need_only_the_docs_extra(tmp_path: Path) -> None:
    _, calls = make_demo(tmp_path, points_here="0", target="docs-build")
    installs = [c for c in calls if "pip install" in c]
    assert "python -m pip install --quiet -e .[docs]" in installs
    assert not any("test" in c for c in installs), installs
    assert calls[-1] == "python -m mkdocs build --strict --site-dir site"
