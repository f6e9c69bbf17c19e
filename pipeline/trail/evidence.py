"""Caps on the evidence a decision record carries.

A record copies what a stage saw: rule hits, interpretations, top tokens. Uncapped, one
answer decides the size of its record — a 100 KB answer full of numbers gave the rules
stage one hit per number and a 6.8 MB record, past what the broker takes, so the
candidate's outputs could not be written at all. Evidence is therefore cut to at most
`MAX_ITEMS` elements per list and `MAX_CHARS` characters per string, and if it is still
over `MAX_BYTES` the largest top-level entries are dropped whole. Whatever was cut is
named under `truncated`, so an auditor knows the record is a summary. Records under the
caps are left exactly as they were (and hash the same).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

MAX_ITEMS = 50
"""Elements kept of any list in the evidence (rule hits, samples, tokens)."""
MAX_CHARS = 2000
"""Characters kept of any string in the evidence."""
MAX_BYTES = 64 * 1024
"""The evidence's JSON size after the cuts above, at most."""
TRUNCATED = "truncated"


def _size(value: Any) -> int:
    return len(orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY))


def _cut(value: Any, path: str, cuts: list[str]) -> Any:
    if isinstance(value, Mapping):
        return {k: _cut(v, f"{path}.{k}" if path else str(k), cuts) for k, v in value.items()}
    if isinstance(value, list | tuple):
        if len(value) > MAX_ITEMS:
            cuts.append(f"{path}: {MAX_ITEMS} of {len(value)} items")
        return [_cut(v, f"{path}[{i}]", cuts) for i, v in enumerate(value[:MAX_ITEMS])]
    if isinstance(value, str) and len(value) > MAX_CHARS:
        cuts.append(f"{path}: {MAX_CHARS} of {len(value)} characters")
        return value[:MAX_CHARS]
    return value


def cap_evidence(evidence: Mapping[str, Any]) -> dict[str, Any]:
    """`evidence` within the caps, with a `truncated` note listing every cut."""
    cuts: list[str] = []
    capped: dict[str, Any] = _cut(evidence, "", cuts)
    if not cuts and _size(capped) <= MAX_BYTES:
        return dict(evidence)  # untouched: same values, same types, same hash
    while _size(capped) > MAX_BYTES and capped:
        largest = max(capped, key=lambda k: _size(capped[k]))
        cuts.append(f"{largest}: dropped ({_size(capped[largest])} bytes)")
        del capped[largest]
    if cuts:
        capped[TRUNCATED] = cuts[:MAX_ITEMS]
    return capped
