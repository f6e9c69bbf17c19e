"""The inputs a fitted model has seen: the fit's domain, and the test of a new input against it.

A logistic model extrapolates with full confidence: an answer twice as long as any it was
fitted on, or a source far larger, gets a probability as sure as any other. On data it
never saw the grounding model was confidently wrong (half of what it wrote to `state` on
an unseen news domain was hallucinated). So every fitted model carries the range of each
input it was fitted on, and a candidate outside them is not auto-accepted on that model's
word: its score is flagged with a reason that names the input, its value and the range,
and a flagged score escalates (`pipeline.rungs.grounding_switch`). Pure data and arithmetic.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pipeline.bounds.thresholds import SCORE_EPSILON
from pipeline.errors import PolicyError

RESPONSE_WORDS = "response_words"
CONTEXT_WINDOWS = "context_windows"
HAS_CONTEXT = "has_context"
SHAPE_INPUTS: tuple[str, ...] = (RESPONSE_WORDS, CONTEXT_WINDOWS, HAS_CONTEXT)
"""Inputs beyond the model's features: the answer's length in words, the source's size in
encoder windows, and whether a context was given (1) or not (0). Length is not a feature
(it is a confound in the public data), but the range it was fitted over still bounds what
the model has seen."""

_REPORTED = 3
"""At most this many out-of-range inputs are named in one reason."""


def shape_inputs(response: str, context_windows: int, has_context: bool) -> dict[str, float]:
    """The `SHAPE_INPUTS` of one candidate."""
    return {
        RESPONSE_WORDS: float(len(response.split())),
        CONTEXT_WINDOWS: float(context_windows),
        HAS_CONTEXT: float(has_context),
    }


def task_of(metadata: object) -> str | None:
    """The task kind a candidate's metadata names (`task`; RAGTruth: QA, Summary, Data2txt)."""
    task = metadata.get("task") if isinstance(metadata, Mapping) else None
    return task if isinstance(task, str) and task else None


def _slack(bound: float) -> float:
    """How far past a fitted bound an input may lie and still count as inside: the fitted
    extremes are themselves scores of training answers, and float noise between encoder
    backends (`SCORE_EPSILON`) must not push a training answer out of its own range."""
    return SCORE_EPSILON * max(1.0, abs(bound))


def _number(value: float) -> str:
    return f"{value:.4g}"


@dataclass(frozen=True, slots=True)
class Domain:
    """Per-input (min, max) over the fitted examples, and the task kinds among them.

    `tasks` are the kinds named by the examples (`metadata.task`); `untasked` says whether
    examples without a kind were in the fit too. A candidate naming a kind outside `tasks`
    is out of range; one naming none is out of range only when every fitted example had one.
    """

    ranges: Mapping[str, tuple[float, float]]
    tasks: tuple[str, ...] = ()
    untasked: bool = True
    n: int = 0

    def __post_init__(self) -> None:
        for name, bounds in self.ranges.items():
            lo, hi = bounds
            if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
                raise PolicyError(f"domain.ranges.{name}", list(bounds), "[min, max], finite")

    @classmethod
    def fitted(
        cls, inputs: Sequence[Mapping[str, float]], tasks: Iterable[str | None] = ()
    ) -> Domain:
        """The domain of the given input rows (every key of the first row is ranged)."""
        if not inputs:
            raise PolicyError("domain", "no inputs", "at least one fitted example")
        ranges = {
            name: (float(min(r[name] for r in inputs)), float(max(r[name] for r in inputs)))
            for name in inputs[0]
        }
        kinds = list(tasks)
        named = sorted({t for t in kinds if t})
        untasked = not named or len(kinds) < len(inputs) or not all(kinds)
        return cls(ranges, tuple(named), untasked=untasked, n=len(inputs))

    def outside(self, inputs: Mapping[str, float], task: str | None = None) -> str:
        """Why these inputs lie outside the domain ("" when they do not): each offending
        input named with its value and the fitted range."""
        problems = [
            f"{name} {_number(inputs[name])} not in [{_number(lo)}, {_number(hi)}]"
            for name, (lo, hi) in self.ranges.items()
            if name in inputs and not lo - _slack(lo) <= inputs[name] <= hi + _slack(hi)
        ]
        if task and self.tasks and task not in self.tasks:
            problems.append(f"task {task!r} not among the fitted kinds {', '.join(self.tasks)}")
        elif not task and not self.untasked:
            problems.append(f"no task kind given; fitted on {', '.join(self.tasks)} only")
        if not problems:
            return ""
        more = len(problems) - _REPORTED
        tail = f" (and {more} more)" if more > 0 else ""
        return "outside the fitted range: " + "; ".join(problems[:_REPORTED]) + tail

    def to_dict(self) -> dict[str, object]:
        return {
            "n": self.n,
            "tasks": list(self.tasks),
            "untasked": self.untasked,
            "ranges": {name: [lo, hi] for name, (lo, hi) in self.ranges.items()},
        }

    @classmethod
    def from_mapping(cls, data: Mapping[str, object], where: str) -> Domain:
        """A policy's `domain` table (`where` names it in errors)."""
        known = {"n", "tasks", "untasked", "ranges"}
        for key in data:
            if key not in known:
                raise PolicyError(f"{where}.{key}", data[key], f"one of {', '.join(sorted(known))}")
        ranges, tasks = data.get("ranges", {}), data.get("tasks", [])
        untasked, n = data.get("untasked", True), data.get("n", 0)
        if not isinstance(ranges, Mapping):
            raise PolicyError(f"{where}.ranges", ranges, "a table of [min, max] pairs")
        parsed: dict[str, tuple[float, float]] = {}
        for name, bounds in ranges.items():
            if not (
                isinstance(bounds, list)
                and len(bounds) == 2
                and all(isinstance(b, int | float) and not isinstance(b, bool) for b in bounds)
                and all(math.isfinite(b) for b in bounds)
                and bounds[0] <= bounds[1]
            ):
                raise PolicyError(f"{where}.ranges.{name}", bounds, "[min, max], finite")
            parsed[str(name)] = (float(bounds[0]), float(bounds[1]))
        if not isinstance(tasks, list) or not all(isinstance(t, str) for t in tasks):
            raise PolicyError(f"{where}.tasks", tasks, "a list of task kinds")
        if not isinstance(untasked, bool):
            raise PolicyError(f"{where}.untasked", untasked, "true or false")
        if isinstance(n, bool) or not isinstance(n, int):
            raise PolicyError(f"{where}.n", n, "a count")
        return cls(parsed, tuple(tasks), untasked, n)
