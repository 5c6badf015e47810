"""System calls traced by ``strace -f`` for a profiler's worker process (``python -m <module>
--work ...``), shared by the ``profile_sqlite_*`` scripts that count them."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from benchmarks.callgrind import REPO


def traced(module: str, args: Sequence[str], *, src: Path | None = None) -> str:
    """``strace -f -qq``'s output for ``python -m module *args`` with ``PYTHONHASHSEED=0``
    (one line per call, each led by its thread's id). ``src`` goes first on the path (another
    tree's ``src/``); without it the caller's ``PYTHONPATH`` is kept."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    first = str(src) if src is not None else env.get("PYTHONPATH")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (first, str(REPO)) if p)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "strace"
        subprocess.run(
            ["strace", "-f", "-qq", "-o", str(out), sys.executable, "-m", module, *args],
            env=env,
            check=True,
        )
        return out.read_text(errors="replace")
