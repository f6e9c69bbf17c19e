"""`groundstream verify`: the embedded ladder over a JSONL file, records out as JSON lines."""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

from pipeline.policy.document import Policy
from topics.codec import dumps
from workers.interfaces import StageContext
from workers.runtime.embedded import EmbeddedResult, run_embedded
from workers.runtime.isolation import always
from workers.runtime.ladder import build_ladder
from workers.runtime.settings import Settings


def read_lines(path: Path) -> list[bytes]:
    """Non-blank lines as raw bytes: a bad line is dead-lettered by the ladder, not here."""
    return [line for line in path.read_bytes().splitlines() if line.strip()]


def make_context(settings: Settings, policy: Policy) -> StageContext:
    return StageContext(
        policy=policy,
        default_route=settings.default_route,
        max_candidate_bytes=settings.max_candidate_bytes,
        caps=settings.work_caps(),
        encoder_backend=settings.encoder_backend,
        encoder_cache_rows=settings.encoder_cache_rows,
    )


def run_lines(
    lines: Sequence[bytes | dict],
    settings: Settings,
    policy: Policy,
    progress: bool,
    label: str = "geometry",
    ctx: StageContext | None = None,
) -> EmbeddedResult:
    """The embedded ladder over raw candidate lines (or dicts), with a progress bar if asked.
    `ctx` (default: a new one) lets the caller reuse what the run loaded, e.g. its encoder."""
    stages = build_ladder(settings)
    ctx = ctx or make_context(settings, policy)

    async def run(on_batch: Callable[[str, int], None] | None = None) -> EmbeddedResult:
        try:
            return await run_embedded(
                lines,
                stages,
                ctx,
                batch_size=settings.batch_size,
                on_batch=on_batch,
                on_error=always(settings.on_processing_error),
            )
        finally:  # the judge's and sampler's HTTP sessions, on the loop that opened them
            for stage in stages:
                await stage.close()

    if not progress:
        return asyncio.run(run())
    from rich.progress import Progress

    with Progress(transient=True) as bar:
        task = bar.add_task(label, total=len(lines))

        def on_batch(stage: str, n: int) -> None:
            if stage == "geometry":
                bar.advance(task, n)

        return asyncio.run(run(on_batch))


def write_records(records: list[dict], out: IO[bytes]) -> None:
    for record in records:
        out.write(dumps(record) + b"\n")


def verify_file(
    path: Path, out_file: Path | None, settings: Settings, policy: Policy
) -> Counter[str]:
    result = run_lines(read_lines(path), settings, policy, progress=sys.stderr.isatty())
    if out_file is None:
        write_records(result.records, sys.stdout.buffer)
        sys.stdout.flush()
    else:
        out_file.parent.mkdir(parents=True, exist_ok=True)
        with out_file.open("wb") as out:
            write_records(result.records, out)
    return Counter(r["topic"] for r in result.records if "topic" in r)
