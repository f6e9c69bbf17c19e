"""The core's import graph, read from the source with `ast` (imports inside functions too):
no cycle inside `pipeline/`, no `workers`/`topics` from it, and no core module reaching
the offline fitting package `pipeline.fit`."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pipeline"
FIT = "pipeline.fit"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str, source: str, known: set[str]) -> set[str]:
    """Every module `name` imports, at any depth of its body. `from a import b` counts as
    a.b when that is a module of `known`, else as a; relative imports are resolved."""
    is_package = name in known and (PACKAGE.parent / name.replace(".", "/")).is_dir()
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else base)
    return found


def graph() -> dict[str, set[str]]:
    known = set(modules())
    return {
        name: imports_of(name, path.read_text(encoding="utf-8"), known)
        for name, path in modules().items()
    }


def cycles(edges: Mapping[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member, or a self-import (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, set()) & set(edges):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in edges.get(v, set()):
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def is_fit(module: str) -> bool:
    return module == FIT or module.startswith(FIT + ".")


class TestThePipelinePackage:
    def test_has_no_import_cycle(self) -> None:
        assert cycles(graph()) == []

    def test_never_imports_workers_or_topics(self) -> None:
        offenders = {
            (name, target)
            for name, targets in graph().items()
            for target in targets
            if target.split(".")[0] in ("workers", "topics")
        }
        assert offenders == set()

    def test_core_never_imports_the_fitting_package(self) -> None:
        offenders = {
            (name, target)
            for name, targets in graph().items()
            if not is_fit(name)
            for target in targets
            if is_fit(target)
        }
        assert offenders == set()


class TestTheProbe:
    """The checks above would be vacuous if the reader missed imports; these show it sees
    what they look for."""

    def test_reads_the_real_edges(self) -> None:
        edges = graph()
        assert "pipeline.check" in edges["pipeline.switch"]
        assert "pipeline.defaults" in edges["pipeline.fit.calibrate"]  # `from pipeline import`
        assert "pipeline.fit.metrics" in edges["pipeline.fit.grounding"]

    def test_sees_an_import_inside_a_function(self) -> None:
        source = "def f():\n    from pipeline.fit.metrics import auroc\n    return auroc\n"
        known = {"pipeline.x", "pipeline.fit.metrics"}
        assert imports_of("pipeline.x", source, known) == {"pipeline.fit.metrics"}

    def test_resolves_relative_imports(self) -> None:
        known = {"pipeline.fit.grounding", "pipeline.fit.metrics"}
        found = imports_of("pipeline.fit.grounding", "from .metrics import auroc\n", known)
        assert found == {"pipeline.fit.metrics"}

    def test_finds_a_cycle_closed_through_a_third_module(self) -> None:
        edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
        assert cycles(edges) == [["a", "b", "c"]]

    def test_finds_no_cycle_in_a_layered_graph(self) -> None:
        assert cycles({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []
