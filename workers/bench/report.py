"""A bench's result: its figure against its goal, the rates behind it, and peak memory.

The last line printed is the whole result in one line (what docs/benchmarks.md quotes);
`--json` appends the same as one JSON object per run, which `bench plot` draws.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from topics.codec import dumps
from workers.bench.procs import MIB

GEOMETRY_MEMORY_GOAL = 1024 * MIB
ONNX_GEOMETRY_MEMORY_GOAL = 400 * MIB
CLAIMS_MEMORY_GOAL = 1024 * MIB
OTHER_MEMORY_GOAL = 250 * MIB


def memory_goal(process: str) -> int:
    """The geometry worker may hold the encoder: 400 MiB on ONNX Runtime (`[onnx]` in its
    name), 1 GiB on torch (torch alone is ~700 MiB resident); the geometry scoring with
    claim support (`bench claims`) 1 GiB; every other process 250 MiB."""
    if not process.split("[")[0].startswith("geometry"):
        return OTHER_MEMORY_GOAL
    if "claims" in process:
        return CLAIMS_MEMORY_GOAL
    return ONNX_GEOMETRY_MEMORY_GOAL if "[onnx" in process else GEOMETRY_MEMORY_GOAL


def _number(v: float) -> str:
    """Rates with one decimal, ratios and small figures with three significant digits."""
    return f"{v:,.1f}" if abs(v) >= 10 else f"{v:.3g}"


@dataclass
class Result:
    bench: str
    figure: float
    goal: float | None  # None: no goal, the figure is for the record
    unit: str  # "x" for ratios, "ms" for latency
    lower_is_better: bool = False
    rates: dict[str, float] = field(default_factory=dict)
    notes: dict[str, object] = field(default_factory=dict)
    peaks: dict[str, int] = field(default_factory=dict)
    also: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Further figures the run is held to: name → (figure, goal), each to be >= its goal."""
    at: float = field(default_factory=time.time)

    @property
    def meets(self) -> bool | None:
        if self.goal is None:
            return None
        main = self.figure <= self.goal if self.lower_is_better else self.figure >= self.goal
        return main and all(figure >= goal for figure, goal in self.also.values())

    def memory(self) -> str:
        parts = []
        for name, peak in sorted(self.peaks.items()):
            over = "" if peak <= memory_goal(name) else " OVER"
            parts.append(f"{name} {peak / MIB:.0f}{over}")
        return "peak RSS MiB: " + (", ".join(parts) if parts else "(no worker)")

    def line(self) -> str:
        """The last line: figure, goal and verdict, the rates, the memory."""
        if self.goal is None:
            verdict = ""
        else:
            sign = "<=" if self.lower_is_better else ">="
            held = [f"{sign} {self.goal:g}{self.unit}"]
            held += [f"{k} {v:.2f} >= {g:g}" for k, (v, g) in self.also.items()]
            verdict = f" (goal {', and '.join(held)}: {'met' if self.meets else 'NOT met'})"
        rates = "; ".join(f"{k} {_number(v)}" for k, v in self.rates.items())
        return (
            f"bench {self.bench}: {self.figure:.2f}{self.unit}{verdict}; {rates}; {self.memory()}"
        )

    def save(self, path: Path | None) -> None:
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {**asdict(self), "meets": self.meets, "load1": os.getloadavg()[0]}
        with path.open("ab") as f:
            f.write(dumps(record) + b"\n")
