"""The README is part of the interface: its settings table names every setting."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from workers.runtime.settings import PREFIX, Settings

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")


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
    assert not missing, f"settings missing from README's configuration table: {sorted(missing)}"


def test_the_table_names_no_setting_that_does_not_exist():
    expected = {PREFIX + f.name.upper() for f in dataclasses.fields(Settings)}
    unknown = _documented_settings() - expected
    assert not unknown, f"README documents settings the code does not read: {sorted(unknown)}"
