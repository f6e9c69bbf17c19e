"""Benches alternate their two sides in rounds so a drifting machine weighs on both."""

from __future__ import annotations

import itertools

import pytest

from workers.bench.rounds import alternate, parts


def test_parts_cover_every_row_once_in_order_and_near_equal() -> None:
    rows = list(range(1003))
    cut = parts(rows, 4)
    assert [r for part in cut for r in part] == rows
    assert max(map(len, cut)) - min(map(len, cut)) <= 1


def test_parts_cut_only_between_groups() -> None:
    rows = [i // 5 for i in range(300)]  # 60 groups of five
    cut = parts(rows, 4, unit=5)
    assert [len(p) for p in cut] == [75, 75, 75, 75]
    assert all(len(set(p) & set(q)) == 0 for p, q in itertools.pairwise(cut))
    with pytest.raises(ValueError, match="cannot make 4 rounds"):
        parts(list(range(15)), 4, unit=5)
    with pytest.raises(ValueError, match="at least 1"):
        parts(rows, 0)


def recorder(order: list[str]):
    """A side factory: each side appends its name and round to `order` and returns the round."""

    def side(name: str):
        def run(r: int) -> float:
            order.append(f"{name}{r}")
            return float(r)

        return run

    return side


def test_alternate_swaps_which_side_runs_first_each_round() -> None:
    order: list[str] = []
    side = recorder(order)
    a, b = alternate(4, side("a"), side("b"))
    assert order == ["a0", "b0", "b1", "a1", "a2", "b2", "b3", "a3"]
    assert a == b == [0.0, 1.0, 2.0, 3.0]


def test_alternate_reverses_three_sides_every_other_round() -> None:
    order: list[str] = []
    side = recorder(order)
    a, b, c = alternate(2, side("a"), side("b"), side("c"))
    assert order == ["a0", "b0", "c0", "c1", "b1", "a1"]
    assert a == b == c == [0.0, 1.0]
