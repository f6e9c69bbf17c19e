"""Errors raised by the deterministic core.

GroundstreamError
 ├── PolicyError (ValueError)      a setting or threshold is invalid; names the field
 └── ScoringError (ValueError)     an input cannot be scored (empty text, bad shape)
"""

from __future__ import annotations


class GroundstreamError(Exception):
    """Root of every error the core raises on purpose."""


class PolicyError(GroundstreamError, ValueError):
    """A policy or config value is invalid. The message names the field, value and allowed set."""

    def __init__(self, field: str, value: object, expected: str) -> None:
        self.field = field
        self.value = value
        self.expected = expected
        super().__init__(f"invalid setting {field}={value!r}: expected {expected}")


class ScoringError(GroundstreamError, ValueError):
    """An input cannot be scored (for example empty text); the message says why."""
