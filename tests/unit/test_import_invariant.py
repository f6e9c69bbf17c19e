"""Importing the core stays light: no model, no torch, no Kafka client (checked in a fresh
interpreter, since this test process may already have loaded them)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "sentence_transformers", "transformers", "faust", "aiokafka")
KAFKA = ("faust", "aiokafka")


def fresh_run(statement: str) -> tuple[list[str], list[str]]:
    """The lines `statement` prints in a fresh interpreter, and every module name in
    `sys.modules` after it ran."""
    code = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))\n"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    *printed, loaded = done.stdout.strip().splitlines()
    return printed, json.loads(loaded)


def modules_after(statement: str) -> list[str]:
    """Every module name in `sys.modules` after `statement` runs in a fresh interpreter."""
    return fresh_run(statement)[1]


def loaded_after(statement: str, watch: tuple[str, ...]) -> list[str]:
    """The modules of `watch` (or their submodules) present after `statement` runs."""
    return sorted({m.split(".")[0] for m in modules_after(statement)} & set(watch))


@pytest.mark.parametrize(
    "statement",
    [
        "import pipeline",
        "from pipeline import GroundingSwitch, check, compute_sgi, load_policy",
        "from pipeline import score_candidate, default_policy; default_policy()",
        "import pipeline.scores.geometric, pipeline.rungs.grounding_switch, pipeline.scores.check",
        "import pipeline.trail.records",
        "import pipeline.policy.document, pipeline.policy.routing, pipeline.policy.sessions",
    ],
)
def test_core_loads_no_model_and_no_kafka(statement):
    assert loaded_after(statement, HEAVY) == []


@pytest.mark.parametrize("statement", ["import pipeline", "import pipeline.policy.defaults"])
def test_core_loads_no_fitting_code(statement):
    # pipeline.fit (calibration, metrics, model fitting) is offline work, never the core's.
    assert [m for m in modules_after(statement) if m.startswith("pipeline.fit")] == []


def test_the_fitting_probe_sees_the_fitting_package():
    assert "pipeline.fit.metrics" in modules_after("import pipeline.fit")


@pytest.mark.parametrize("statement", ["import topics.schema", "import topics.codec, topics.names"])
def test_topic_schemas_load_no_kafka_client(statement):
    assert loaded_after(statement, KAFKA) == []


def test_the_check_itself_can_see_a_heavy_import():
    # Guard against a vacuous pass: the probe does report a module that was imported.
    assert loaded_after("import json", ("json",)) == ["json"]
