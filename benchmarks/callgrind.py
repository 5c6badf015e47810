"""Instructions counted by callgrind for a profiler's worker process (``python -m <module>
--work ...``), shared by the ``profile_*_instructions``-style scripts."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STARMAP = "starmap_next"
"""the function the workers run their counted loop through (``itertools.starmap``): counting
only inside it leaves out start-up, filling and warm-up"""
_COLLECTED = re.compile(r"Collected : (\d+)")


def count(
    module: str,
    args: Sequence[str],
    *,
    src: Path | None = None,
    toggle: str | None = STARMAP,
    out: Path | None = None,
) -> int:
    """callgrind's instruction count for ``python -m module *args`` with ``PYTHONHASHSEED=0``,
    only inside ``toggle``'s calls when given (else the whole process). ``src`` goes first on
    the path (another tree's ``src/``); without it the caller's ``PYTHONPATH`` is kept. ``out``
    keeps callgrind's output file there (for ``annotate_inclusive``); without it, it is dropped."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    first = str(src) if src is not None else env.get("PYTHONPATH")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (first, str(REPO)) if p)
    collect = [f"--toggle-collect={toggle}"] if toggle else []
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                *collect,
                f"--callgrind-out-file={out or Path(tmp) / 'out'}",
                sys.executable,
                "-m",
                module,
                *args,
            ],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
    found = _COLLECTED.search(done.stderr)
    if found is None:
        raise RuntimeError(f"callgrind printed no count:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def annotate_inclusive(out: Path) -> str:
    """``callgrind_annotate``'s text of a kept output file, counts inclusive of callees."""
    return subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(out)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def print_against_baseline(
    title: str,
    cases: Sequence[str],
    count_case: Callable[[Path, str], float],
    *,
    baseline_src: Path | None,
    jobs: int,
    width: int,
) -> None:
    """Print ``title``, then each case's count in this tree (``count_case(src, case)``) and,
    with ``baseline_src``, in that tree beside it with their ratio; ``jobs`` counts at once."""
    trees = {"this tree": REPO / "src"}
    if baseline_src is not None:
        trees["baseline"] = baseline_src.resolve()
    runs = [(tree, case) for case in cases for tree in trees]
    with ThreadPoolExecutor(jobs) as pool:
        counts = dict(zip(runs, pool.map(lambda run: count_case(trees[run[0]], run[1]), runs), strict=True))
    print(title)
    for case in cases:
        ours = counts[("this tree", case)]
        line = f"  {case:{width}s} {ours:>12,.0f}"
        if baseline_src is not None:
            base = counts[("baseline", case)]
            line += f"   baseline {base:>12,.0f}   {ours / base:.3f}×"
        print(line)
