"""The one JSON codec for every message: orjson, bytes in and out."""

from __future__ import annotations

from typing import Any

import orjson

_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def dumps(value: Any) -> bytes:
    """Compact JSON bytes; numpy scalars and arrays are converted, not rejected."""
    return orjson.dumps(value, option=_OPTIONS)


def canonical(value: Any) -> bytes:
    """Deterministic JSON (sorted keys) for hashing."""
    return orjson.dumps(value, option=_OPTIONS | orjson.OPT_SORT_KEYS)


def loads(data: bytes | str) -> Any:
    """Parse JSON; raises orjson.JSONDecodeError (a ValueError) on bad JSON or bad UTF-8."""
    return orjson.loads(data)
