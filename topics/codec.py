"""The one JSON codec for every message: orjson, bytes in and out.

Limits are enforced at parse time, so nothing that parses can fail to encode later:
`loads` refuses nesting deeper than `MAX_DEPTH` (orjson itself parses up to 1,024 levels
but encodes only up to 254, so metadata nested ~300 deep used to pass the parser and
then fail at send time) and, when given `max_bytes`, input longer than that.
"""

from __future__ import annotations

from typing import Any

import orjson

from pipeline.errors import GroundstreamError

_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS

MAX_DEPTH = 64
"""Deepest nesting of arrays and objects any message may have (records nest < 10)."""


class DecodeLimitError(GroundstreamError, orjson.JSONDecodeError):
    """Input over a parse-time limit (nesting depth or size); a ValueError, and an
    `orjson.JSONDecodeError`, so every caller that handles bad JSON handles it too."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        ValueError.__init__(self, reason)

    def __str__(self) -> str:
        return self.reason


def dumps(value: Any) -> bytes:
    """Compact JSON bytes; numpy scalars and arrays are converted, not rejected."""
    return orjson.dumps(value, option=_OPTIONS)


def canonical(value: Any) -> bytes:
    """Deterministic JSON (sorted keys) for hashing."""
    return orjson.dumps(value, option=_OPTIONS | orjson.OPT_SORT_KEYS)


def loads(data: bytes | str, *, max_bytes: int | None = None, max_depth: int = MAX_DEPTH) -> Any:
    """Parse JSON; raises a ValueError (`orjson.JSONDecodeError`) on bad JSON, bad UTF-8,
    numbers out of range, nesting deeper than `max_depth`, or more than `max_bytes`."""
    if max_bytes is not None and len(data) > max_bytes:
        raise DecodeLimitError(f"oversize: {len(data)} bytes > limit {max_bytes}")
    value = orjson.loads(data)
    if nesting_depth(value, max_depth) > max_depth:
        raise DecodeLimitError(f"nesting deeper than {max_depth} levels")
    return value


def nesting_depth(value: Any, stop_after: int = MAX_DEPTH) -> int:
    """Levels of arrays/objects in `value` (a scalar is 0); stops counting once past
    `stop_after`, so the walk is bounded. Iterative, one level at a time: no recursion
    limit to hit, and list comprehensions instead of a tuple per node (a third of the
    time per envelope, which every stage parses)."""
    level = [value] if type(value) in _CONTAINERS else []
    depth = 0
    while level:
        depth += 1
        if depth > stop_after:
            return depth
        below: list[Any] = []
        for item in level:
            children = item.values() if type(item) is dict else item
            below += [c for c in children if type(c) in _CONTAINERS]
        level = below
    return depth


_CONTAINERS = (dict, list)
