"""`groundstream eval`: the embedded ladder over labelled data, with metrics and plots."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from pipeline.policy import Policy
from workers.datasets import load_labelled
from workers.embedded import run_embedded
from workers.ladder import build_ladder
from workers.report import summarize, write_report
from workers.settings import Settings
from workers.verify import make_context, write_records


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
    stages = build_ladder(settings)
    ctx = make_context(settings, policy)
    candidates = [i.candidate for i in items]
    started = time.perf_counter()
    if progress:
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            task = bar.add_task(f"eval {data.name}", total=len(items))

            def on_batch(stage: str, n: int) -> None:
                if stage == "geometry":
                    bar.advance(task, n)

            result = asyncio.run(
                run_embedded(
                    candidates, stages, ctx, batch_size=settings.batch_size, on_batch=on_batch
                )
            )
    else:
        result = asyncio.run(run_embedded(candidates, stages, ctx, batch_size=settings.batch_size))
    elapsed = time.perf_counter() - started
    metrics = summarize(result.records, labels, lengths, elapsed)
    metrics["data"] = data.name
    metrics["policy_version"] = policy.version
    if report_dir is not None:
        write_report(metrics, result.records, labels, report_dir)
        with (report_dir / "records.jsonl").open("wb") as out:
            write_records(result.records, out)
    return metrics
