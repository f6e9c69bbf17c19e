"""`groundstream eval`: the embedded ladder over labelled data, with metrics and plots."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pipeline.encoding.chunks import context_chunks
from pipeline.fit.claims_data import rephrase_as_assistant
from pipeline.guards.domain import task_of
from pipeline.policy.document import Policy
from pipeline.scores.geometric import Encoder, compute_sgi_batch
from workers.clients.encoder import stage_encoder
from workers.eval.datasets import load_labelled
from workers.eval.report import summarize, write_report
from workers.runtime.settings import Settings
from workers.runtime.verify import make_context, run_lines, write_records


def whole_response_sgi(candidates: list[dict[str, Any]], encoder: Encoder) -> dict[str, float]:
    """The seed's SGI of the whole response against its context (`compute_sgi_batch` on the
    response) for each candidate with a question, a context and a response (by id).

    The geometry stage, `pipeline.compute_sgi` and `calibrate` read another: SGI of the
    answer's core (`pipeline.scores.batch.core_sgi_batch`), the one the policy's cuts are
    fitted on and applied to. The report names that one `core_sgi`, so `auroc_sgi` is the
    whole response's SGI and nothing else."""
    scorable = [
        c
        for c in candidates
        if all(isinstance(c.get(k), str) and c[k].strip() for k in ("question", "response"))
        and c.get("context")
        and all(chunk.strip() for chunk in context_chunks(c["context"]))
    ]
    results = compute_sgi_batch(
        [(c["question"], context_chunks(c["context"]), c["response"]) for c in scorable], encoder
    )
    return {str(c["id"]): r.value for c, r in zip(scorable, results, strict=True)}


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
    ctx = make_context(settings, policy)
    started = time.perf_counter()
    result = run_lines(
        [i.candidate for i in items], settings, policy, progress, f"eval {data.name}", ctx
    )
    elapsed = time.perf_counter() - started
    tasks = {i.id: task for i in items if (task := task_of(i.candidate.get("metadata")))}
    # After the clock: whole-response SGI is a figure of the report, not of the ladder's run.
    sgi = whole_response_sgi([i.candidate for i in items], stage_encoder(ctx))
    metrics = summarize(result.records, labels, lengths, elapsed, tasks, sgi=sgi)
    metrics["data"] = data.name
    metrics["policy_version"] = policy.version
    metrics["phrasing"] = phrasing
    if settings.reader:  # measured whether or not the policy gives it a say
        from pipeline.claims.readers import reader_name
        from pipeline.policy.defaults import claim_reader_at, default_claim_head
        from workers.eval.reader_figures import reader_figures

        metrics["reader"] = reader_figures(
            items,
            stage_encoder(ctx),
            default_claim_head(),
            claim_reader_at(settings.reader),
            reader_name(settings.reader),
        )
    if report_dir is not None:
        write_report(metrics, result.records, labels, report_dir, sgi)
        with (report_dir / "records.jsonl").open("wb") as out:
            write_records(result.records, out)
    return metrics
