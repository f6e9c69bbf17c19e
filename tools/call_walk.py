"""Walk the calls of one geometry batch and one switch envelope, and count where they go.

    PYTHONPATH=. python tools/call_walk.py        (from a checkout's root)

Records every call into the project's own code (pipeline/, topics/, workers/) with
`sys.setprofile`; the stage's I/O (the encoder call) is neither followed nor counted.

  stops      runs of consecutive calls in one file (calls in A, A, B, A: 3 stops)
  files      distinct files
  crossings  consecutive stops in different packages (workers / topics / pipeline)
  climbs     crossings up the layers (pipeline → topics or workers, topics → workers)

"decision" counts the same over the rule alone: every call outside the shell's decode,
record and send helpers and reads of the message's own properties (SHELL), and outside
the adapter's entry points (ENTRY, in workers/stages/). Issue 24 measured the tree before
`pipeline/stages/` with this script too (it falls back to that tree's imports).
"""

from __future__ import annotations

import asyncio
import itertools
import sys
from collections.abc import Callable
from pathlib import Path

from pipeline.policy.document import load_policy
from topics.names import Topic
from topics.schema import parse_envelope
from workers.stages.geometry import GeometryStage
from workers.stages.switch import SwitchStage

try:
    from workers.interfaces import Inbound, StageContext
except ImportError:  # the tree before issue 24
    from workers.stages.kit import Inbound, StageContext  # type: ignore[attr-defined,no-redef]

ROOT = Path.cwd().resolve()
LAYER = {"pipeline": 0, "topics": 1, "workers": 2}
IO = {"_score_by_route", "stage_encoder"}
SHELL = {
    *("open_envelopes", "parse_candidate", "parse_envelope", "_header", "geometry_result"),
    *("conclude", "deadletter", "key_of", "record_emit", "conclusion_emit", "signed"),
    *("make_record", "content_hash", "encode", "after", "to_dict", "from_dict", "dumps"),
    *("_trace_id", "_trace_headers", "_carry", "_plain", "evidence_only", "<listcomp>"),
    *("route_for", "clock", "context_chunks", "chunk_sources", "model_id"),
}
ENTRY = {"process", "decide_one", "decide", "_switch", "observe"}

Call = tuple[str, str, bool]
"""(file, function, inside the shell)."""


def trace(run: Callable[[], object]) -> list[Call]:
    calls: list[Call] = []
    io_depth = shell_depth = 0

    def profile(frame, event, _arg) -> None:
        nonlocal io_depth, shell_depth
        name, path = frame.f_code.co_name, Path(frame.f_code.co_filename)
        ours = path.is_relative_to(ROOT) and path.parts[len(ROOT.parts)] in LAYER
        if event == "call":
            if io_depth:
                io_depth += 1
            elif ours and name in IO:
                io_depth = 1
            elif ours:
                calls.append((str(path.relative_to(ROOT)), name, shell_depth > 0))
                shell_depth += name in SHELL
        elif event == "return":
            if io_depth:
                io_depth -= 1
            elif ours and name in SHELL and shell_depth:
                shell_depth -= 1

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return calls


def counts(calls: list[Call]) -> dict[str, int]:
    stops = [file for file, _ in itertools.groupby(c[0] for c in calls)]
    packages = [s.split("/")[0] for s in stops]
    pairs = list(itertools.pairwise(packages))
    return {
        "calls": len(calls),
        "stops": len(stops),
        "files": len(set(stops)),
        "crossings": sum(a != b for a, b in pairs),
        "climbs": sum(LAYER[b] > LAYER[a] for a, b in pairs),
    }


def report(label: str, calls: list[Call]) -> None:
    rule = [
        c
        for c in calls
        if not c[2]
        and c[1] not in SHELL
        and not (c[0].startswith("workers/stages/") and c[1] in ENTRY)
    ]
    print(f"{label}: whole walk {counts(calls)}")
    print(f"{label}: decision {counts(rule)}")
    print(f"{label}: decision files {sorted({c[0] for c in rule})}")


def main() -> None:
    ctx = StageContext(policy=load_policy(None), clock=lambda: 1_700_000_000.0)
    line = Path("examples/candidates.jsonl").read_bytes().splitlines()[0]
    batch = [Inbound(b"s", line, "candidates", 0, 0)]
    geometry = GeometryStage()
    asyncio.run(geometry.process(batch, ctx))  # warm: loads the encoder
    out: list = []
    report("geometry batch", trace(lambda: out.extend(asyncio.run(geometry.process(batch, ctx)))))
    env = parse_envelope(next(e.value for e in out if e.topic is Topic.SCORED))
    switch = SwitchStage()
    switch.decide(env, ctx)
    report("switch envelope", trace(lambda: switch.decide(env, ctx)))


if __name__ == "__main__":
    main()
