"""`groundstream eval`: the embedded ladder over labelled data, with metrics and plots."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pipeline.domain import task_of
from pipeline.fit.claims_data import rephrase_as_assistant
from pipeline.policy import Policy
from workers.eval.datasets import load_labelled
from workers.eval.report import summarize, write_report
from workers.runtime.settings import Settings
from workers.runtime.verify import run_lines, write_records


def evaluate(
    data: Path,
    report_dir: Path | None,
    settings: Settings,
    policy: Policy,
    *,
    limit: int | None = None,
    skip: int = 0,
    progress: bool = False,
    phrasing: str = "given",
) -> dict[str, Any]:
    """Run the ladder over labelled `data` and summarise it. With `phrasing="assistant"`
    every answer, right or hallucinated, is first written the way an assistant writes it
    (`rephrase_as_assistant`), so a gate that decides on form rather than content shows."""
    items = load_labelled(data, limit=limit, skip=skip)
    if phrasing == "assistant":
        for item in items:
            item.candidate["response"] = rephrase_as_assistant(item.candidate["response"], item.id)
    labels = {i.id: i.grounded for i in items}
    lengths = {i.id: len(i.candidate["response"]) for i in items}
    started = time.perf_counter()
    result = run_lines(
        [i.candidate for i in items], settings, policy, progress, label=f"eval {data.name}"
    )
    elapsed = time.perf_counter() - started
    tasks = {i.id: task for i in items if (task := task_of(i.candidate.get("metadata")))}
    metrics = summarize(result.records, labels, lengths, elapsed, tasks)
    metrics["data"] = data.name
    metrics["policy_version"] = policy.version
    metrics["phrasing"] = phrasing
    if report_dir is not None:
        write_report(metrics, result.records, labels, report_dir)
        with (report_dir / "records.jsonl").open("wb") as out:
            write_records(result.records, out)
    return metrics
