"""The image's build context: what deploy/Dockerfile copies, .dockerignore lets through.

The allow-list in .dockerignore and the Dockerfile's COPY lines are kept by hand; a package
added to one and not the other builds an image without it (or fails the build late).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _allowed() -> set[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    assert "*" in lines, ".dockerignore is an allow-list: it starts by ignoring everything"
    return {line[1:].rstrip("/") for line in lines if line.startswith("!")}


def _copied() -> set[str]:
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    sources = re.findall(r"^COPY (?!--from)(\S+) ", dockerfile, flags=re.M)
    return {s.rstrip("*") for s in sources}


def test_every_copied_path_is_in_the_build_context() -> None:
    assert _copied() <= _allowed()


def test_every_installed_package_is_copied() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = project["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {p.rstrip("*") for p in patterns}
    assert packages <= _copied()
    assert packages <= _allowed()
