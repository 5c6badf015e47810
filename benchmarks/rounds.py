"""The method every benchmark shares: two sides measured in alternating rounds, ratios per round.

A shared machine drifts (other work, fsync times, CPU frequency) on a scale of seconds. Measuring
one side fully and then the other folds that drift into the ratio; alternating them round by
round, and comparing each round's pair, keeps both sides in the same phase. Each round also
swaps which side goes first, so neither always runs warm after the other. The report gives the
median of each side, the median ratio and the spread of the per-round ratios.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Pair:
    """Per-round measurements of two sides (same unit; lower is better unless ``higher_better``)."""

    ours: list[float]
    base: list[float]
    higher_better: bool = False

    @property
    def ratios(self) -> list[float]:
        """ours / base per round: a time ratio (lower is better) or a rate ratio (higher is better).
        A round whose base measured 0 has none (a quantity under its clock's resolution — CPU
        time is read in 10 ms ticks — over a short round) and is left out."""
        return [o / b for o, b in zip(self.ours, self.base, strict=True) if b]

    @property
    def ratio(self) -> float:
        """The median ratio; NaN when no round had a measurable base."""
        rs = self.ratios
        return statistics.median(rs) if rs else math.nan

    def spread(self) -> str:
        rs = self.ratios
        if not rs:
            return "none measurable: make the rounds longer"
        left = len(self.ours) - len(rs)
        return f"{min(rs):.2f}–{max(rs):.2f}×" + (
            f", {left} round(s) without a measurable base" if left else ""
        )

    def meets(self, target: float) -> bool:
        """Whether the median ratio meets the target (≤ for times, ≥ for rates)."""
        return self.ratio >= target if self.higher_better else self.ratio <= target


def alternate(
    ours: Callable[[int], float], base: Callable[[int], float], rounds: int, *, higher_better: bool = False
) -> Pair:
    """Run ``ours(r)`` and ``base(r)`` for r in range(rounds), alternating which goes first."""
    ours_values: list[float] = []
    base_values: list[float] = []
    for r in range(rounds):
        if r % 2 == 0:
            ours_values.append(ours(r))
            base_values.append(base(r))
        else:
            base_values.append(base(r))
            ours_values.append(ours(r))
    return Pair(ours_values, base_values, higher_better)


def per_call_ms(fn: Callable[[], object], calls: int) -> float:
    """Milliseconds per call of ``fn`` over ``calls`` calls (one round of one side)."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1000


def report(label: str, pair: Pair, unit: str, target: str | None = None) -> None:
    """One line: both sides' medians, the median ratio and the spread of the rounds' ratios."""
    ours, base = statistics.median(pair.ours), statistics.median(pair.base)
    suffix = f"   (target {target})" if target else ""
    print(
        f"{label:<58} {ours:>10.3f} {unit} vs {base:>10.3f} {unit}   ratio {pair.ratio:5.2f}× "
        f"(rounds {pair.spread()}, n={len(pair.ours)}){suffix}",
        flush=True,
    )
