"""`groundstream determinism`'s comparison: a flip away from every cut fails the check, a
flip within ε of a cut is named, and score moves are measured within and across backends."""

from __future__ import annotations

from workers.eval.determinism import Run, compare_runs

ACCEPT = (("geometry", "scored"), ("switch", "accept"))
ESCALATE = (("geometry", "scored"), ("switch", "escalate"))


def run(backend: str, size: int, actions: dict, scores: dict, near: dict | None = None) -> Run:
    return Run(backend, size, actions, scores, near or {}, margin=0.01)


def test_identical_runs_report_no_difference():
    a = run("torch", 1, {"c1": ACCEPT}, {"c1": 0.9})
    report = compare_runs([a, run("torch", 64, {"c1": ACCEPT}, {"c1": 0.9})])
    assert not report.differing and not report.failures
    assert report.spread(same_backend=True) == 0.0
    assert "same decision at every stage in every run: 1 of 1" in report.lines()[1]


def test_a_flip_away_from_any_cut_is_a_failure_naming_the_run():
    a = run("torch", 1, {"c1": ACCEPT, "c2": ACCEPT}, {"c1": 0.9, "c2": 0.95})
    b = run("onnx", 7, {"c1": ESCALATE, "c2": ACCEPT}, {"c1": 0.9, "c2": 0.95})
    report = compare_runs([a, b])
    assert report.failures == ["c1"]
    assert report.differing["c1"] == ("onnx@7",)
    assert any(line.startswith("  DIFFERS c1: onnx@7") for line in report.lines())


def test_a_flip_at_a_cut_is_named_not_failed():
    a = run("torch", 1, {"c1": ACCEPT}, {"c1": 0.8}, {"c1": ("grounding_accept",)})
    b = run("onnx", 1, {"c1": ESCALATE}, {"c1": 0.79999}, {"c1": ("grounding_accept",)})
    report = compare_runs([a, b])
    assert report.near_cut == {"c1"} and not report.failures
    assert report.spread(same_backend=False) > 0.0
    assert report.spread(same_backend=True) == 0.0
