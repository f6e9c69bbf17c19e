"""Checks shared by every policy section: known keys only, typed values, finite numbers.

Each failure is a `PolicyError` naming the field (`section.key`), the value and what was
expected, so a bad policy stops a worker at start-up with a message that says what to fix.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import fields
from typing import Any, TypeVar

from pipeline.errors import PolicyError

T = TypeVar("T")


def refuse_unknown(prefix: str, data: Mapping[str, object], known: Iterable[str]) -> None:
    """Every key of `data` must be one of `known`."""
    allowed = sorted(known)
    for key in data:
        if key not in allowed:
            raise PolicyError(f"{prefix}.{key}", data[key], f"one of {', '.join(allowed)}")


def config_from_table(cls: type[T], prefix: str, data: object) -> T:
    """A frozen config dataclass from a policy table: a table, known keys only; the class's
    own `__post_init__` checks each value."""
    if not isinstance(data, Mapping):
        raise PolicyError(prefix, data, "a table of settings")
    refuse_unknown(prefix, data, (f.name for f in fields(cls) if f.init))  # type: ignore[arg-type]
    return cls(**data)


def typed(data: Mapping[str, object], prefix: str, key: str, kind: type, default: Any) -> Any:
    """`data[key]` (or the default) as an instance of `kind`; a bool is no int here."""
    value = data.get(key, default)
    if (kind is int and isinstance(value, bool)) or not isinstance(value, kind):
        raise PolicyError(f"{prefix}.{key}", value, f"a {kind.__name__}")
    return value


def finite(value: object, field: str, expected: str = "a finite number") -> float:
    """`value` as a float; bools, non-numbers, NaN and infinities are refused."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise PolicyError(field, value, expected)
    return float(value)


def real(data: Mapping[str, object], prefix: str, key: str, default: float) -> float:
    """A number that may be infinite (an accept cut of `inf` accepts nothing); the caller
    checks the range."""
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PolicyError(f"{prefix}.{key}", value, "a number")
    return float(value)


def number(
    data: Mapping[str, object], prefix: str, key: str, default: float | None
) -> float | None:
    """An optional finite number: absent means `default` (which may be None)."""
    value = data.get(key, default)
    return None if value is None else finite(value, f"{prefix}.{key}", "a number")
