"""Instructions per page of the store-wide audit (``transitions``, 50 a page), counted by
callgrind, on this tree and optionally another (``--baseline-src``), each on a store it filled.

Two stores: ``one document`` — 1,500 commits of one document, every fifth also writing two
others in the same transition (a page lists ~70 changes of 3 documents); ``new documents`` —
1,500 commits each creating a document (a page lists 50 changes of 50 documents, as
``bench_ab``'s records). Each store is filled by its own tree in a plain process
(``synchronous=off``), then a process under ``valgrind --tool=callgrind`` reads ``--pages``
pages from points spread through the history after ``--warm`` pages, counting only inside the
loop that reads them (``--toggle-collect`` on its own iterator). Instructions do not move with
the machine's load.

    python3 -m benchmarks.profile_audit_page [--baseline-src DIR] [--pages 60] [--warm 20]
        [--cases "one document" ...]
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import callgrind

MODULE = "benchmarks.profile_audit_page"
CASES = ("one document", "new documents")
COMMITS = 1_500


def _fill(case: str, location: str) -> None:
    from stateflow.store import DocKey, Write, open_store

    store = open_store(location, auto_migrate=True)
    keys = [DocKey("notes", f'["agent","x","k","d{n}"]') for n in range(3)]
    bodies: dict[DocKey, dict[str, object] | None] = dict.fromkeys(keys)
    for i in range(COMMITS):
        if case == "new documents":
            key = DocKey("notes", f'["agent","x","k","r{i:06d}"]')
            store.commit([Write.between(key, None, {"status": "open", "n": i, "title": f"thread {i:06d}"})])
            continue
        writes = []
        for key in keys if i % 5 == 0 else keys[:1]:
            new = {"status": "open", "n": i, "title": f"thread {key.subject}"}
            writes.append(Write.between(key, bodies[key], new))
            bodies[key] = new
        store.commit(writes, {"i": i})
    store.close()


def _work(location: str, pages: int, warm: int) -> None:
    from stateflow.store import open_store

    store = open_store(location)
    span = COMMITS - 50
    for n in range(warm):
        store.transitions(after_seq=n * 131 % span, limit=50)
    # counted: only while ``starmap`` makes the calls (its C iterator is the toggle)
    page = store.transitions
    for _ in itertools.starmap(
        lambda after: page(after_seq=after, limit=50), ((n * 97 % span,) for n in range(pages))
    ):
        pass
    store.close()


def _count(src: Path, case: str, pages: int, warm: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{callgrind.REPO}", "PYTHONHASHSEED": "0"}
        location = f"sqlite:///{tmp}/audit.db?synchronous=off"
        subprocess.run([sys.executable, "-m", MODULE, "--fill", case, location], env=env, check=True)
        return callgrind.count(MODULE, ["--work", location, str(pages), str(warm)], src=src) / pages


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--fill":
        _fill(sys.argv[2], sys.argv[3])
        return
    if len(sys.argv) == 5 and sys.argv[1] == "--work":
        _work(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--pages", type=int, default=60)
    parser.add_argument("--warm", type=int, default=20)
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    parser.add_argument("--baseline-src", type=Path, default=None, help="another tree's src/, counted beside")
    parser.add_argument("--jobs", type=int, default=2, help="counts run at once")
    args = parser.parse_args()
    callgrind.print_against_baseline(
        f"== instructions per page of 50 transitions ({args.pages} counted after {args.warm} warm)",
        args.cases,
        lambda src, case: _count(src, case, args.pages, args.warm),
        baseline_src=args.baseline_src,
        jobs=args.jobs,
        width=16,
    )


if __name__ == "__main__":
    main()
