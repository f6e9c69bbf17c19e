"""The README's code map matches the tree: every package (a folder of Python files, and
`deploy/`) has one row, and every module of the source packages is named once, in its
package's row. A module added, moved or deleted without the map fails here."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ("pipeline", "topics", "workers", "tools")
"""Packages whose modules are each named; tests/ packages are named as folders only."""


def code_map(readme: str) -> dict[str, list[str]]:
    """Package path → the modules its row names, from the table under `## Code map`."""
    section = readme.split("## Code map", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        package = cells[0].strip("`").rstrip("/")
        assert package not in rows, f"{package}/ has two rows"
        rows[package] = re.findall(r"`([^`]+)`", cells[2])
    return rows


def packages() -> dict[str, list[str]]:
    """Every folder of Python files under the source and test trees → its modules."""
    out: dict[str, list[str]] = {}
    for top in (*SOURCE, "tests"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            package = str(path.parent.relative_to(ROOT))
            out.setdefault(package, [])
            if path.name != "__init__.py":
                out[package].append(path.stem)
    return out


def test_every_package_has_one_row_and_every_row_a_package() -> None:
    rows = code_map((ROOT / "README.md").read_text(encoding="utf-8"))
    tree = set(packages()) - {"tests"}  # a folder of test folders, each with its row
    assert set(rows) - {"deploy"} == tree
    assert (ROOT / "deploy").is_dir()


def test_every_module_of_a_source_package_is_named_once_in_its_row() -> None:
    rows = code_map((ROOT / "README.md").read_text(encoding="utf-8"))
    for package, modules in packages().items():
        if package.split("/")[0] not in SOURCE:
            continue
        named = rows.get(package, [])
        assert sorted(named) == sorted(set(named)), f"{package}/ names a module twice"
        assert sorted(named) == sorted(modules), package


def test_the_reader_sees_what_it_checks() -> None:
    readme = (
        "## Code map\n\n| package | what | modules |\n|---|---|---|\n| `a/b/` | x | `m` `n` |\n"
    )
    assert code_map(readme) == {"a/b": ["m", "n"]}
