"""`groundstream train claims` end to end on a tiny made-up claim set: the CPU recipe
trains, checkpoints, resumes, exports an int8 ONNX reader that loads without torch, and
records what it read."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

_PAIRS = [
    ("The red car is parked outside the bakery.", "A car is parked.", "entailment"),
    ("The red car is parked outside the bakery.", "The car is blue.", "contradiction"),
    ("Maria won the race in 1998.", "Maria won a race.", "entailment"),
    ("Maria won the race in 1998.", "Maria won the race in 2004.", "contradiction"),
    ("The museum opens at nine.", "The museum opens in the morning.", "entailment"),
    ("The museum opens at nine.", "The museum is closed on Mondays.", "neutral"),
]


def _claim_dir(root: Path) -> Path:
    lines = []
    for copy in range(4):
        split = "test" if copy == 3 else "dev"
        for premise, hypothesis, label in _PAIRS:
            lines.append(
                {
                    "premise": f"{premise} (story {copy})",
                    "hypothesis": hypothesis,
                    "label": label,
                    "split": split,
                }
            )
    root.mkdir()
    with gzip.open(root / "esnli_devtest.jsonl.gz", "wt") as handle:
        handle.writelines(json.dumps(line) + "\n" for line in lines)
    return root


def _train(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workers.cli", "train", "claims", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


@pytest.mark.timeout(900)
def test_train_claims_trains_checkpoints_resumes_and_ships_an_int8_reader(tmp_path: Path) -> None:
    claims = _claim_dir(tmp_path / "claims")
    out = tmp_path / "reader"
    common = ["--claims", str(claims), "--set", "esnli", "--pretrain-share", "1"]
    first = _train(*common, "--out", str(out), "--minutes", "0.05", "--eval-per-set", "10")
    assert first.returncode == 0, first.stderr[-2000:]
    meta = json.loads((out / "reader.json").read_text())
    digest = hashlib.sha256((claims / "esnli_devtest.jsonl.gz").read_bytes()).hexdigest()
    assert meta["data_sha256"] == {"esnli_devtest.jsonl.gz": digest}
    assert meta["steps"]["pretrain"] > 0
    assert meta["config"]["seed"] == 0
    assert "esnli" in meta["figures"]["shared_held_out"]
    size = (out / "reader.onnx").stat().st_size
    assert 0 < size <= 50 * 2**20  # int8: a quarter of the fp32 encoder's 90 MB
    assert (out / "checkpoint.pt").is_file()

    # A resumed run starts where the checkpoint left off: the phase is done, so no step is
    # taken again, and it says so.
    again = _train(*common, "--out", str(out), "--minutes", "0.05", "--resume")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resumed at phase 2" in again.stdout
    assert json.loads((out / "reader.json").read_text())["steps"] == meta["steps"]

    # Serving: ONNX Runtime and tokenizers only.
    probe = (
        "import sys; from pipeline.claims.reader import ClaimReader;"
        f"r = ClaimReader({str(out)!r});"
        "p = r.probability([('A car is parked.', 'The red car is parked.'), ('x', '')]);"
        "assert p.shape == (2,) and ((p > 0) & (p < 1)).all(), p;"
        "assert 'torch' not in sys.modules; print('ok')"
    )
    served = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert served.stdout.strip() == "ok", served.stderr[-2000:]


def test_train_claims_names_a_bad_setting_in_one_line(tmp_path: Path) -> None:
    bad = _train("--out", str(tmp_path / "o"), "--pretrain-share", "1.5")
    assert bad.returncode == 2
    assert "--pretrain-share must be in [0, 1]" in bad.stderr
    assert "Traceback" not in bad.stderr
