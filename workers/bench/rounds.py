"""Two measurements side by side on a noisy machine: alternated in rounds (A B, B A, A B,
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


def alternate(
    rounds: int, a: Callable[[int], float], b: Callable[[int], float]
) -> tuple[list[float], list[float]]:
    """`a(r)` and `b(r)` for each round r, A first in even rounds and B first in odd ones:
    their results (seconds, say) in round order."""
    xs: list[float] = []
    ys: list[float] = []
    for r in range(rounds):
        if r % 2 == 0:
            xs.append(a(r))
            ys.append(b(r))
        else:
            ys.append(b(r))
            xs.append(a(r))
    return xs, ys
