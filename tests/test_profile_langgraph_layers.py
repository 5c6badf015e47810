"""Every variant of ``benchmarks/profile_langgraph_layers.py`` runs every case's write on a real
SQLite store: a variant answers a layer without its work, and must still take what the layer
above hands it (a saver ``put``'s parent, say), or the counts by layer stop with a traceback."""

from __future__ import annotations

import pytest
from benchmarks.profile_langgraph_instructions import _warmed
from benchmarks.profile_langgraph_layers import CASES, VARIANTS


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("case", CASES)
def test_every_variant_runs_every_case(case: str, variant: str) -> None:
    with _warmed(case, 10) as write, VARIANTS[variant]():
        for i in range(10_000, 10_020):  # (a saver put's parent: the put before it)
            write(i)
