"""The critical path of SQLite writer processes on one memory scope: every turn of the writer
queue timed — the requests it carried, the time it was held (split by part) and the hand-off
from it to the next turn.

With several writers on one scope, the rate is bounded by the serial part of the work: the
time a turn is held (its reads, the merge of its own patch and of each request it carries,
statements, ``COMMIT`` and its fsync, the answers) and the hand-off between turns (the next
holder woken, and scheduled). Each writer process (``bench_writers``' ``patch_state`` loop)
stamps the entry and exit of the turn's parts on the clock all processes share
(``perf_counter``: ``CLOCK_MONOTONIC``); the stamps are put together by ticket afterwards.
Only this benchmark wraps those functions: nothing is added to the path itself.

Ticket ``t``'s turn starts when its writer's ``acquire`` returns and ends when it lets its
ticket go (``release``); a turn's parts: ``BEGIN`` (begin), its own patch (own), the requests
it carried (carry; of it the files taken, take), ``COMMIT`` and its fsync (commit), the
answers and the unlock (answers). The **hand-off** after a turn is from the moment its
successor may begin — its unlock, or, where it carried requests, its first answer sent (to
the last ticket it carried, whose writer lets its ticket go once woken by it) — to the next
turn's start; **cycle** is from one turn's start to the next's. A
``--folder`` on a tmpfs makes fsync free: the CPU and the hand-offs alone, as on a machine
whose fsync is fast.

    python3 -m benchmarks.profile_writer_turns [--writers 8] [--calls 2400] [--rounds 2]
        [--baseline-src DIR] [--folder DIR]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.bench_writers import shared_view

ROOT = Path(__file__).resolve().parent.parent

Event = tuple[str, float, int]
"""(what, when, a number: the ticket or a count)"""


def _install(events: list[Event]) -> None:
    from stateflow.store import sqlite, writer_queue, writer_requests

    clock = time.perf_counter
    queue = writer_queue.WriterQueue

    def around(owner: Any, name: str, tag: str, arg: Callable[..., int] | None = None) -> None:
        original = getattr(owner, name, None)
        if original is None:
            return

        def stamped(*args: Any, **kwargs: Any) -> Any:
            events.append((tag + "0", clock(), arg(*args) if arg is not None else 0))
            try:
                result = original(*args, **kwargs)
            finally:
                events.append((tag + "1", clock(), 0))
            return result

        setattr(owner, name, stamped)

    acquire = queue.acquire

    def acquired(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = acquire(self, *args, **kwargs)  # (``Answered``: no turn of its own)
        if self._ticket is not None:
            events.append(("turn", clock(), self._ticket))
        return result

    queue.acquire = acquired  # type: ignore[method-assign]
    release = queue.release

    def released(self: Any) -> None:
        ticket = self._ticket
        if ticket is not None:
            events.append(("rel", clock(), ticket))
        release(self)

    queue.release = released  # type: ignore[method-assign]
    around(queue, "answer", "ans", lambda self, ticket, *a: ticket)
    take = writer_requests.take

    def taken(*args: Any) -> Any:
        events.append(("take0", clock(), args[2] - args[1] - 1))  # (tickets drawn behind the turn)
        got = take(*args)
        events.append(("take1", clock(), len(got)))
        return got

    writer_requests.take = taken  # type: ignore[assignment]
    store = sqlite.SqliteStore
    around(store, "_in_turn", "in")
    around(store, "_take_behind", "tb")
    around(sqlite._GroupCommit, "_settle", "set")
    around(sqlite._GroupCommit, "_settled", "sd")


def writer(path: str, calls: int, index: int, start: float, out: int) -> None:
    events: list[Event] = []
    _install(events)
    store, view = shared_view(path, start)
    events.clear()
    ends: list[float] = []
    for i in range(calls):
        view.patch_state({"session": {"tactics": {f"w{index}": f"step {i}"}}})
        ends.append(time.perf_counter())
    store.close()
    os.write(out, (json.dumps({"events": events, "end": ends[-1]}) + "\n").encode())


def run_phase(path: str, writers: int, calls: int) -> dict[str, Any]:
    each = max(1, calls // writers)
    start = time.perf_counter() + 0.3
    pids = []
    outs = [f"{path}.events{i}" for i in range(writers)]
    for i in range(writers):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                out = os.open(outs[i], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                writer(path, each, i, start, out)
            finally:
                os._exit(0)
        pids.append(pid)
    for pid in pids:
        os.waitpid(pid, 0)
    got = []
    for name in outs:
        with open(name) as file:
            got.append(json.loads(file.read()))
        os.unlink(name)
    return {"start": start, "calls": each * writers, "procs": got}


def turns(phase: dict[str, Any]) -> dict[str, Any]:
    """Per turn (a ticket held by a writer that merged): carried, held and its parts, and the
    hand-off to the next turn."""
    held: dict[int, dict[str, float]] = {}
    for proc in phase["procs"]:
        current: dict[str, float] | None = None
        ticket = -1
        for what, when, n in proc["events"]:
            if what == "turn":
                ticket, current = n, {"turn": when, "carried": 0.0}
                continue
            if what == "rel":
                if current is not None and n == ticket:
                    current["rel"] = when
                    held[ticket] = current
                current = None
                continue
            if current is None:
                continue
            if what == "take0":
                current["behind"] = current.get("behind", 0.0) + n
            if what == "take1":  # (a turn may take more than once)
                current["carried"] += float(n)
                current["take"] = current.get("take", 0.0) + when - current.pop("take0")
            elif what not in current:  # (the first of each: ``ans0``, the first answer sent)
                current[what] = when
    rows = []
    for ticket, t in sorted(held.items()):
        if "set0" not in t:
            continue
        own_end = t.get("tb0", t.get("in1", t["set0"]))
        commit_end = t.get("sd0", t["rel"])
        row = {
            "ticket": ticket,
            "carried": t["carried"],
            "behind": t.get("behind", 0.0),
            "held": t["rel"] - t["turn"],
            "begin": t.get("in0", t["turn"]) - t["turn"],
            "own": own_end - t.get("in0", t["turn"]),
            "carry": (t["tb1"] - t["tb0"]) if "tb1" in t else 0.0,
            "take": t.get("take", 0.0),
            "exit": t["set0"] - t.get("tb1", t.get("in1", t["set0"])),
            "commit": commit_end - t["set0"],
            "answers": t["rel"] - commit_end,
        }
        # the critical path: the turn's work, its commit, then the hand-off to the next
        # holder, from the first answer sent (the last ticket carried: it gates the next turn)
        # or the holder's own release
        row["served"] = t.get("ans0", t["rel"])
        row["start"] = t["turn"]
        rows.append(row)
    for row, after in itertools.pairwise(rows):
        row["hand_off"] = after["start"] - row["served"]
        row["cycle"] = after["start"] - row["start"]
    end = max(p["end"] for p in phase["procs"])
    return {"rows": rows, "wall": end - phase["start"], "calls": phase["calls"]}


def summary(result: dict[str, Any]) -> dict[str, float]:
    rows = result["rows"]
    calls = result["calls"]
    wall = result["wall"]
    out: dict[str, float] = {
        "rate": calls / wall,
        "turns": len(rows),
        "calls per turn": calls / max(1, len(rows)),
    }
    for key in (
        "carried",
        "behind",
        "cycle",
        "held",
        "begin",
        "own",
        "carry",
        "take",
        "exit",
        "commit",
        "answers",
        "hand_off",
    ):
        values = [r[key] for r in rows if key in r]
        if not values:
            continue
        out[f"{key} median"] = statistics.median(values)
        out[f"{key} per call"] = sum(values) / calls
    # the hand-off after a turn that carried requests (the next holder's wait on the last one
    # answered) apart from one after a turn of its own patch alone, and its spread
    for name, part in (
        ("after carrying", [r for r in rows if r["carried"] and "hand_off" in r]),
        ("after its own alone", [r for r in rows if not r["carried"] and "hand_off" in r]),
    ):
        values = sorted(r["hand_off"] for r in part)
        if values:
            out[f"hand_off {name}: turns"] = len(values)
            out[f"hand_off {name}: median"] = statistics.median(values)
            out[f"hand_off {name}: p90"] = values[int(len(values) * 0.9)]
            out[f"hand_off {name}: mean"] = sum(values) / len(values)
    out["held share"] = sum(r["held"] for r in rows) / wall
    return out


def side(calls: int, writers: int, folder: str | None) -> None:
    import stateflow.memory  # noqa: F401 - imported once, before the forks
    from stateflow.store import open_store

    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        path = str(Path(tmp) / "writers.db")
        open_store(path).close()
        run_phase(path, writers, 80)  # warm up
        result = turns(run_phase(path, writers, calls))
        one = run_phase(path, 1, calls // 4)
    print(
        json.dumps(
            {
                "many": summary(result),
                "one rate": one["calls"] / (max(p["end"] for p in one["procs"]) - one["start"]),
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--baseline-src", help="the other tree's src directory")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--calls", type=int, default=2400)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument(
        "--folder", help="where the database is made (a tmpfs: fsync free, the CPU and hand-offs alone)"
    )
    parser.add_argument("--side", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        side(args.calls, args.writers, args.folder)
        return
    trees = {"this tree": str(ROOT / "src")}
    if args.baseline_src:
        trees["baseline"] = args.baseline_src
    got: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    for r in range(args.rounds):
        for name in list(trees) if r % 2 == 0 else list(reversed(trees)):
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([trees[name], str(ROOT)])}
            command = [sys.executable, "-m", "benchmarks.profile_writer_turns", "--side"]
            command += ["--calls", str(args.calls), "--writers", str(args.writers)]
            command += ["--folder", args.folder] if args.folder else []
            done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, check=True)
            got[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(f"{args.writers} writers, {args.calls} calls a round; ms (medians over rounds of each figure)")
    keys = list(got[next(iter(trees))][0]["many"])
    print(f"{'':24s}" + "".join(f"{name:>14s}" for name in trees))
    for key in keys:
        cells = []
        for name in trees:
            value = statistics.median(g["many"].get(key, 0.0) for g in got[name])
            scale = (
                1.0
                if key
                in (
                    "rate",
                    "turns",
                    "calls per turn",
                    "carried median",
                    "carried per call",
                    "behind median",
                    "behind per call",
                    "hand_off after carrying: turns",
                    "hand_off after its own alone: turns",
                )
                or "share" in key
                else 1000.0
            )
            cells.append(f"{value * scale:14.3f}")
        print(f"{key:24s}" + "".join(cells))
    cells = [f"{statistics.median(g['one rate'] for g in got[name]):14.1f}" for name in trees]
    print(f"{'1 writer: rate':24s}" + "".join(cells))


if __name__ == "__main__":
    main()
