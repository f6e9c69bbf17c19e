"""Measurements side by side on a noisy machine: alternated in rounds (A B, B A, A B,
…) over parts of the same input, so a drift in the machine's speed (a neighbour, a warm
or throttled core) falls on both sides alike instead of on whichever ran second."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def parts(rows: Sequence[T], rounds: int, unit: int = 1) -> list[list[T]]:
    """`rows` cut into `rounds` consecutive parts of near-equal size, every cut at a
    multiple of `unit` (e.g. the candidates sharing one context stay together)."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    groups = -(-len(rows) // unit)
    if groups < rounds:
        raise ValueError(f"{len(rows)} rows in groups of {unit} cannot make {rounds} rounds")
    cuts = [min(len(rows), (groups * r // rounds) * unit) for r in range(rounds + 1)]
    return [list(rows[a:b]) for a, b in itertools.pairwise(cuts)]


def alternate(rounds: int, *sides: Callable[[int], float]) -> tuple[list[float], ...]:
    """Each side's `side(r)` for each round r, in the given order in even rounds and in the
    reverse order in odd ones (A B C, C B A, …): each side's results (seconds, say) in
    round order."""
    out: list[list[float]] = [[] for _ in sides]
    for r in range(rounds):
        order = range(len(sides)) if r % 2 == 0 else reversed(range(len(sides)))
        for k in order:
            out[k].append(sides[k](r))
    return tuple(out)
