"""The documentation is part of the interface: the settings table of the configuration
reference (docs/configuration.md, moved there from the README) names every setting."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from workers.runtime.settings import PREFIX, Settings

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")


def _documented_settings() -> set[str]:
    """Variables named in the settings table, `_SUFFIX` shorthands expanded."""
    names: set[str] = set()
    for row in README.splitlines():
        if not row.startswith(f"| `{PREFIX}"):
            continue
        cell = row.split("|")[1]
        for token in re.findall(r"`([A-Z_]+)`", cell):
            names.add(token if token.startswith(PREFIX) else PREFIX + token.lstrip("_"))
    return names


def test_every_setting_is_in_the_readme_table():
    expected = {PREFIX + f.name.upper() for f in dataclasses.fields(Settings)}
    missing = expected - _documented_settings()
    assert not missing, f"settings missing from docs/configuration.md's table: {sorted(missing)}"


def test_the_table_names_no_setting_that_does_not_exist():
    expected = {PREFIX + f.name.upper() for f in dataclasses.fields(Settings)}
    unknown = _documented_settings() - expected
    assert not unknown, (
        f"docs/configuration.md documents settings the code does not read: {sorted(unknown)}"
    )


def test_the_front_page_stays_short_and_links_every_page():
    """Issue 22: the README is a front page (under 250 lines); the rest is in docs/."""
    front = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(front.splitlines()) < 250
    for page in ("operating", "configuration", "quality", "delivery", "security", "performance"):
        assert f"(docs/{page}.md)" in front, page
        assert (ROOT / "docs" / f"{page}.md").exists(), page


def test_relative_links_in_the_docs_resolve():
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):
                continue
            assert (page.parent / target).exists(), f"{page.name}: {target}"
