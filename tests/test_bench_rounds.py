"""The benchmarks' shared method: a round whose baseline is under its clock's resolution has no
ratio, instead of stopping the whole run with a division by zero."""

from __future__ import annotations

import math
from collections.abc import Callable

from benchmarks.rounds import Pair, alternate


def test_rounds_alternate_and_give_per_round_ratios() -> None:
    order: list[str] = []

    def side(name: str, value: float) -> Callable[[int], float]:
        def run(_round: int) -> float:
            order.append(name)
            return value

        return run

    pair = alternate(side("ours", 2.0), side("base", 1.0), 4)
    assert order == ["ours", "base", "base", "ours", "ours", "base", "base", "ours"]
    assert pair.ratios == [2.0] * 4 and pair.ratio == 2.0 and pair.spread() == "2.00–2.00×"


def test_a_round_whose_base_measured_zero_is_left_out() -> None:
    pair = Pair([1.0, 3.0, 2.0], [0.0, 1.0, 2.0])  # (a CPU time of 0 ticks in a short round)
    assert pair.ratios == [3.0, 1.0] and pair.ratio == 2.0
    assert pair.spread() == "1.00–3.00×, 1 round(s) without a measurable base"
    none = Pair([1.0], [0.0])
    assert math.isnan(none.ratio) and not none.meets(1.0) and "none measurable" in none.spread()
