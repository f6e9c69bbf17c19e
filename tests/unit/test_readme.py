"""The documentation is part of the interface: the settings reference names every setting,
the README is a front page that links the documentation's pages, and the docs' relative
links resolve."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from workers.runtime.settings import PREFIX, Settings

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SETTINGS_REFERENCE = DOCS / "reference" / "settings.md"
"""Generated from the code (`python -m tools.docs_reference --write`) and committed."""


def test_every_setting_is_in_the_settings_reference():
    text = SETTINGS_REFERENCE.read_text("utf-8")
    named = set(re.findall(rf"{PREFIX}[A-Z0-9_]+", text))
    named |= {PREFIX + short for short in re.findall(r"`_([A-Z0-9_]+)`", text)}  # `_SUFFIX`
    expected = {PREFIX + f.name.upper() for f in dataclasses.fields(Settings)}
    missing = expected - named
    assert not missing, f"settings missing from docs/reference/settings.md: {sorted(missing)}"


def test_the_front_page_stays_short_and_links_every_page():
    """The README is a front page (under 250 lines); the rest is in docs/."""
    front = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(front.splitlines()) < 250
    for page in (
        "index",
        "getting-started/tutorial",
        "concepts",
        "how-to/calibrate",
        "how-to/connect-cluster",
        "quality",
        "benchmarks",
        "explanation/delivery",
        "explanation/security",
        "changelog",
    ):
        assert f"(docs/{page}.md)" in front, page
        assert (DOCS / f"{page}.md").exists(), page


def test_relative_links_in_the_docs_resolve():
    """Every relative link of the README and of every page under docs/ names a file that
    exists, the generated pages of docs/reference/ among them."""
    for page in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]:
        for target in re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):
                continue
            path = (page.parent / target).resolve()
            assert path.exists(), f"{page.relative_to(ROOT)}: {target}"


def test_the_lab_pages_say_what_they_are():
    """The development logs are marked as such on their first line."""
    for page in sorted((DOCS / "lab").glob("*.md")):
        first = page.read_text(encoding="utf-8").splitlines()[0]
        assert first.startswith("Development logs:"), page.name
