"""The import graph, read from the source with `ast` (imports inside functions too): no
cycle between any two modules of `pipeline/`, `topics/` and `workers/`; no `workers`/
`topics` from the core and no core module reaching the offline fitting package
`pipeline.fit`; and the folders layered, each importing only those below it:

    pipeline ← topics ← workers.interfaces ← workers.clients ← workers.stages
             ← workers.runtime ← workers.{eval, bench, web} ← workers.cli

(the stage interfaces depend on nothing in `workers/`; a client never reaches up to a
stage, a stage never to the runtime that runs it; eval, bench and the dashboard are
peers that never import each other).

Inside `pipeline/` the rooms are ordered the same way, each importing only those below it:

    errors, files, failures ← encoding ← bounds ← claims ← guards ← scores ← trail
        ← rungs ← judge ← policy ← {stages, fit} ← pipeline (the public face)

(the modules at the top of `pipeline/` are the floor every room may read; the stages and
the offline fit are peers that never import each other; `pipeline/__init__.py` re-exports
from the rooms and nothing imports it back). The top holds only packages and the floor's
few modules, no folder more than a dozen modules, and no module name twice.

The fit's statistics are scikit-learn's and SciPy's; the decision path never needs them: no
module of `pipeline/` outside `pipeline/fit` imports them, and a decision made from a
policy's numbers in a fresh interpreter leaves neither in `sys.modules`."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

from tests.unit.test_import_invariant import fresh_run

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pipeline"
FIT = "pipeline.fit"
STATISTICS = ("sklearn", "scipy")
"""The fit's libraries, which the decision path never loads."""
TREE = ("pipeline", "topics", "workers")
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"pipeline"}),
    frozenset({"topics"}),
    frozenset({"workers.interfaces"}),
    frozenset({"workers.clients"}),
    frozenset({"workers.stages"}),
    frozenset({"workers.runtime"}),
    frozenset({"workers.eval", "workers.bench", "workers.web"}),
    frozenset({"workers.cli"}),
)


FLOOR = frozenset({"pipeline.errors", "pipeline.files", "pipeline.failures"})
"""The modules at the top of `pipeline/`: they belong to no concept, every room reads them."""
ROOMS: tuple[frozenset[str], ...] = (
    FLOOR,
    frozenset({"pipeline.encoding"}),
    frozenset({"pipeline.bounds"}),
    frozenset({"pipeline.claims"}),
    frozenset({"pipeline.guards"}),
    frozenset({"pipeline.scores"}),
    frozenset({"pipeline.trail"}),
    frozenset({"pipeline.rungs"}),
    frozenset({"pipeline.judge"}),
    frozenset({"pipeline.policy"}),
    frozenset({"pipeline.stages", "pipeline.fit"}),
    frozenset({"pipeline"}),
)
"""`pipeline/`'s rooms from the bottom up; a room imports only the rooms below it."""
MOST_MODULES = 12


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(packages: tuple[str, ...] = ("pipeline",)) -> dict[str, Path]:
    return {module_name(p): p for pkg in packages for p in sorted((ROOT / pkg).rglob("*.py"))}


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


def graph(packages: tuple[str, ...] = ("pipeline",)) -> dict[str, set[str]]:
    found = modules(packages)
    known = set(found)
    return {
        name: imports_of(name, path.read_text(encoding="utf-8"), known)
        for name, path in found.items()
    }


def folder(module: str) -> str:
    """A module's folder: `pipeline` and `topics` whole, and each package or module directly
    under `workers/` (`workers.stages`, `workers.interfaces`, `workers.cli`)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "workers" else parts[0]


def layer(name: str) -> int:
    return next(i for i, members in enumerate(LAYERS) if name in members)


def room(module: str) -> str:
    """A core module's room: its package directly under `pipeline/`, or itself for a floor
    module; `pipeline` (the package's `__init__`, the public face) is a room of its own."""
    parts = module.split(".")
    if len(parts) == 1 or module in FLOOR:
        return module
    return ".".join(parts[:2])


def room_rank(name: str) -> int:
    return next(i for i, members in enumerate(ROOMS) if name in members)


def upward_room_edges(edges: Mapping[str, set[str]]) -> set[tuple[str, str]]:
    """Imports between rooms of `pipeline/` that do not go strictly down (peers included)."""
    out = set()
    for name, targets in edges.items():
        for target in targets:
            if target.split(".")[0] != "pipeline":
                continue
            a, b = room(name), room(target)
            floor = a in FLOOR and b in FLOOR  # the floor's modules read each other
            if a != b and not floor and room_rank(a) <= room_rank(b):
                out.add((name, target))
    return out


def upward_edges(edges: Mapping[str, set[str]]) -> set[tuple[str, str]]:
    """Imports between folders that do not go strictly down the layers (peers included)."""
    out = set()
    for name, targets in edges.items():
        for target in targets:
            a, b = folder(name), folder(target)
            inside = a != b and "workers" not in (a, b) and b.split(".")[0] in TREE
            if inside and layer(a) <= layer(b):
                out.add((name, target))
    return out


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


DECISION = """
import pipeline
from pipeline.rungs.grounding_switch import GroundingSwitch
from pipeline.scores.results import GroundingScore, SGIResult

policy = pipeline.default_policy()
model = policy.grounding_for("qa")
p = model.probability({name: 0.5 for name in model.features})
decision = GroundingSwitch().decide(GroundingScore(p, SGIResult(1.2, 0.5, 0.6, 0, 1), {}))
print(decision.action.value)
"""
"""A decision from the shipped policy's numbers: its qa route's P(grounded) of a feature row,
then the shipped switch's action on it."""


def loaded_after(code: str) -> tuple[set[str], str]:
    """The top-level packages in `sys.modules` after `code` runs in a fresh interpreter, and
    what it printed."""
    printed, modules = fresh_run(code)
    return {name.split(".")[0] for name in modules}, "\n".join(printed)


class TestTheDecisionPath:
    def test_no_core_module_imports_the_fits_libraries(self) -> None:
        offenders = {
            (name, target)
            for name, targets in graph().items()
            if not is_fit(name)
            for target in targets
            if target.split(".")[0] in STATISTICS
        }
        assert offenders == set()

    def test_a_decision_loads_neither_scikit_learn_nor_scipy(self) -> None:
        loaded, printed = loaded_after(DECISION)
        assert printed in {"accept", "escalate", "fallback"}  # a decision was made
        assert loaded & set(STATISTICS) == set()

    def test_the_probe_sees_the_fits_libraries(self) -> None:
        # Not vacuous: the fitting package does load scikit-learn, and the probe says so.
        loaded, _ = loaded_after("import pipeline.fit.metrics")
        assert "sklearn" in loaded
        source = "from sklearn.metrics import roc_auc_score\n"
        assert imports_of("pipeline.x", source, {"pipeline.x"}) == {"sklearn.metrics"}


class TestTheRooms:
    def test_every_room_imports_only_the_rooms_below_it(self) -> None:
        assert upward_room_edges(graph()) == set()

    def test_every_room_has_a_place_in_the_order(self) -> None:
        rooms = {room(name) for name in modules()}
        assert rooms == set().union(*ROOMS)

    def test_the_top_holds_only_rooms_and_the_floor(self) -> None:
        top = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
        assert {f"pipeline.{stem}" for stem in top} == FLOOR
        for member in set().union(*ROOMS) - FLOOR - {"pipeline"}:
            assert (ROOT / member.replace(".", "/") / "__init__.py").is_file(), member

    def test_every_room_says_what_it_holds(self) -> None:
        for init in PACKAGE.glob("*/__init__.py"):
            doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
            assert doc and len(doc) > 100, init.parent.name

    def test_no_folder_holds_more_than_a_dozen_modules(self) -> None:
        for folder_ in [PACKAGE, *(p.parent for p in PACKAGE.glob("*/__init__.py"))]:
            count = len([p for p in folder_.glob("*.py") if p.name != "__init__.py"])
            assert count <= MOST_MODULES, (folder_.name, count)

    def test_no_module_name_twice(self) -> None:
        stems = [p.stem for p in PACKAGE.rglob("*.py") if p.name != "__init__.py"]
        assert sorted(stems) == sorted(set(stems))


class TestTheWholeTree:
    def test_has_no_import_cycle_between_modules(self) -> None:
        assert cycles(graph(TREE)) == []

    def test_every_folder_imports_only_the_layers_below_it(self) -> None:
        assert upward_edges(graph(TREE)) == set()

    def test_every_folder_has_a_layer(self) -> None:
        folders = {folder(name) for name in modules(TREE)} - {"workers"}
        assert folders == set().union(*LAYERS)


class TestTheProbe:
    """The checks above would be vacuous if the reader missed imports; these show it sees
    what they look for."""

    def test_reads_the_real_edges(self) -> None:
        edges = graph()
        assert "pipeline.scores.check" in edges["pipeline.rungs.grounding_switch"]
        assert "pipeline.policy.defaults" in edges["pipeline.fit.calibrate"]  # `from a import b`
        assert "pipeline.fit.metrics" in edges["pipeline.fit.grounding_model"]

    def test_sees_an_import_inside_a_function(self) -> None:
        source = "def f():\n    from pipeline.fit.metrics import auroc\n    return auroc\n"
        known = {"pipeline.x", "pipeline.fit.metrics"}
        assert imports_of("pipeline.x", source, known) == {"pipeline.fit.metrics"}

    def test_resolves_relative_imports(self) -> None:
        known = {"pipeline.fit.grounding_model", "pipeline.fit.metrics"}
        found = imports_of("pipeline.fit.grounding_model", "from .metrics import auroc\n", known)
        assert found == {"pipeline.fit.metrics"}

    def test_finds_a_cycle_closed_through_a_third_module(self) -> None:
        edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
        assert cycles(edges) == [["a", "b", "c"]]

    def test_flags_an_import_up_the_layers_and_between_peers(self) -> None:
        edges = {
            "workers.clients.encoder": {"workers.stages.kit", "workers.interfaces"},
            "workers.web.app": {"workers.bench.report", "workers.runtime.settings"},
            "workers.runtime.loop": {"workers.stages.kit"},
        }
        assert upward_edges(edges) == {
            ("workers.clients.encoder", "workers.stages.kit"),
            ("workers.web.app", "workers.bench.report"),
        }

    def test_flags_an_import_up_the_rooms_and_between_peer_rooms(self) -> None:
        edges = {
            "pipeline.claims.readers": {"pipeline.scores.grounding", "pipeline.errors"},
            "pipeline.judge.budget": {"pipeline.stages.verdict", "pipeline.trail.verdict"},
            "pipeline.fit.calibrate": {"pipeline.stages.geometry", "pipeline.policy.defaults"},
            "pipeline.errors": {"pipeline.failures"},
        }
        assert upward_room_edges(edges) == {
            ("pipeline.claims.readers", "pipeline.scores.grounding"),
            ("pipeline.judge.budget", "pipeline.stages.verdict"),
            ("pipeline.fit.calibrate", "pipeline.stages.geometry"),
        }

    def test_finds_no_cycle_in_a_layered_graph(self) -> None:
        assert cycles({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []
