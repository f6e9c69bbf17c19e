"""What a newcomer tries first at a terminal, on a fresh clone (issue 22, item 7):
`groundstream check` on one answer, and `groundstream eval` on the labelled file shipped
under examples/. Real encoder, no broker."""

from __future__ import annotations

import json
import subprocess
import sys

from .harness import REPO_ROOT

QUESTION = "What is the capital of Australia?"
CONTEXT = "Canberra is the capital city of Australia. Sydney is its largest city."
ANSWER = "The capital of Australia is Canberra."


def groundstream(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workers.cli", *args],
        cwd=REPO_ROOT, input=stdin, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_check_prints_the_render_the_decision_and_p_grounded_from_options_or_a_line():
    by_options = groundstream("check", "-q", QUESTION, "-c", CONTEXT, "-r", ANSWER)
    line = json.dumps({"question": QUESTION, "context": [CONTEXT], "response": ANSWER})
    by_line = groundstream("check", "-", stdin=line)
    for done in (by_options, by_line):
        assert done.returncode == 0, done.stderr
        render, switch, probability = done.stdout.splitlines()
        # The README's library example: the same answer, the same verdict.
        assert render.startswith("[OK] GROUNDING=0.977 Supported by the document")
        assert switch == (
            "switch: accept (write_to_state=True): grounded: P(grounded) 0.977 >= accept 0.7972"
        )
        assert probability.startswith("P(grounded) 0.977 (SGI ")


def test_eval_runs_on_the_labelled_example_file():
    done = groundstream("eval", "examples/labelled.jsonl")
    assert done.returncode == 0, done.stderr
    assert "n=20 (grounded 10, ungrounded 10)" in done.stdout
    assert "grounded answers reaching state   100.0%" in done.stdout
    assert "ungrounded share of state           0.0%" in done.stdout
