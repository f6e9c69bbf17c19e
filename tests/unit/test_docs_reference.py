"""The generated reference (docs/reference/) names exactly what the code has: a command,
option, setting, policy key, topic, record field or metric added, renamed or removed
without regenerating the pages fails here, naming the items and the command that fixes
it, and so does an item whose meaning is empty."""

from __future__ import annotations

from dataclasses import field, fields, make_dataclass
from pathlib import Path

import pytest

from tools import docs_reference as ref
from workers.runtime import settings

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference"


def committed(file: str) -> str | None:
    path = REFERENCE / file
    return path.read_text(encoding="utf-8") if path.is_file() else None


def test_the_committed_reference_matches_the_code() -> None:
    problems = ref.drift([make() for make in ref.PAGES], committed)
    assert not problems, "\n".join(problems) + f"\nregenerate with: {ref.COMMAND}"


def test_every_page_says_it_is_generated_and_how() -> None:
    for make in ref.PAGES:
        text = committed(make().file) or ""
        assert text.startswith("<!-- Generated from the code by") and ref.COMMAND in text


def test_a_new_setting_is_reported_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    base = [(f.name, f.type, f) for f in fields(settings.Settings)]
    grown = make_dataclass("Settings", [*base, ("new_knob", int, field(default=1))])
    monkeypatch.setattr(settings, "Settings", grown)
    problems = ref.drift([ref.settings_page()], committed)
    missing = "docs/reference/settings.md lacks Worker and command settings: GROUNDSTREAM_NEW_KNOB"
    assert missing in problems
    # It has no docstring in the code either, so its meaning is empty too.
    assert any("GROUNDSTREAM_NEW_KNOB has no meaning" in p for p in problems)


def test_an_item_the_code_lost_is_reported() -> None:
    page = ref.metrics_page()
    extra = committed(page.file) + "| `groundstream_gone_total` | counter | `stage` | Gone |\n"
    assert ref.drift([page], lambda _: extra) == [
        "docs/reference/metrics.md names Metrics: groundstream_gone_total, which the code "
        "does not have"
    ]


def test_a_changed_meaning_is_reported_stale() -> None:
    page = ref.topics_page()
    text = committed(page.file).replace("the ladder's input", "the ladder's front door")
    assert ref.drift([page], lambda _: text) == [
        "docs/reference/topics.md is out of date (an item's text changed)"
    ]


def test_a_metric_without_a_literal_name_cannot_be_documented() -> None:
    with pytest.raises(ValueError, match="literal"):
        ref.metric_calls('Counter(name, "help", ["stage"])')
