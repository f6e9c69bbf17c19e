"""The documentation site builds with `mkdocs build --strict`: a broken link, a missing
page or an unknown anchor in docs/ fails here, with mkdocs' own warning lines, rather than
on the published site. A second test breaks a link in a copy of the docs to show the check
bites."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def strict_build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict` of `root`'s mkdocs.yml into `site`, with the venv's python."""
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # Material's end-of-life banner
    )


def warnings(result: subprocess.CompletedProcess[str]) -> str:
    lines = (result.stdout + result.stderr).splitlines()
    return "\n".join(line for line in lines if "WARNING" in line or "Aborted" in line)


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    result = strict_build(ROOT, tmp_path / "site")
    assert result.returncode == 0, "mkdocs build --strict failed:\n" + warnings(result)


def _copy_with_link(tmp_path: Path, link: str) -> Path:
    """A copy of the site's sources whose settings page ends with `link`."""
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", copy / "docs")
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    (copy / "tools").mkdir()
    shutil.copy(ROOT / "tools" / "mkdocs_hooks.py", copy / "tools" / "mkdocs_hooks.py")
    page = copy / "docs" / "reference" / "settings.md"
    page.write_text(page.read_text(encoding="utf-8") + f"\n{link}\n")
    return copy


def test_a_broken_link_fails_the_strict_build(tmp_path: Path) -> None:
    result = strict_build(_copy_with_link(tmp_path, "[gone](no-such-page.md)"), tmp_path / "site")
    assert result.returncode != 0
    assert "no-such-page.md" in warnings(result)


def test_a_link_to_an_excluded_file_fails_the_strict_build(tmp_path: Path) -> None:
    """docs/bench.jsonl is in the repository but not on the site (`exclude_docs`): a link to
    it is dead on the published site, and MkDocs alone reports it only at INFO."""
    assert (ROOT / "docs" / "bench.jsonl").is_file()
    result = strict_build(_copy_with_link(tmp_path, "[lines](../bench.jsonl)"), tmp_path / "site")
    assert result.returncode != 0
    assert "bench.jsonl" in warnings(result) and "excluded" in warnings(result)
