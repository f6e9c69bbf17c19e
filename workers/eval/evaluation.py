"""`groundstream eval`: the embedded ladder over labelled data, with metrics and plots."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

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
) -> dict[str, Any]:
    items = load_labelled(data, limit=limit, skip=skip)
    labels = {i.id: i.grounded for i in items}
    lengths = {i.id: len(i.candidate["response"]) for i in items}
    started = time.perf_counter()
    result = run_lines(
        [i.candidate for i in items], settings, policy, progress, label=f"eval {data.name}"
    )
    elapsed = time.perf_counter() - started
    metrics = summarize(result.records, labels, lengths, elapsed)
    metrics["data"] = data.name
    metrics["policy_version"] = policy.version
    if report_dir is not None:
        write_report(metrics, result.records, labels, report_dir)
        with (report_dir / "records.jsonl").open("wb") as out:
            write_records(result.records, out)
    return metrics
