"""Memory patches of several SQLite writer processes merged by the writer whose turn comes first
(``store/writer_requests.py``): every acknowledged patch is committed exactly once, with the
transition it was answered with, whoever wrote it and whatever process died on the way."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

from stateflow.doc.select import MISSING
from stateflow.memory import Identity, MemoryView
from stateflow.store import DocKey, open_store
from stateflow.store.writer_requests import SCOPE

SETUP = """
import os, signal, sys, time
from pathlib import Path
from stateflow.memory import Identity, MemoryView
from stateflow.store import open_store
location = sys.argv[1]
store = open_store(location)
view = MemoryView(store, Identity.of("t", "/t", "shared"))
key = view.keys["session"]
"""

WRITER = SETUP + textwrap.dedent(
    """
    index, calls = int(sys.argv[2]), int(sys.argv[3])
    for i in range(calls):
        receipt = view.patch_state({"session": {"tactics": {f"w{index}": f"s{i}"}}})
        print(f"w{index}", f"s{i}", receipt.seq, flush=True)
    store.close()
    """
)

REQUESTER = SETUP + textwrap.dedent(
    """
    name = sys.argv[2]
    if name.startswith("other"):  # a scope of its own: documents the turn has not written
        view = MemoryView(store, Identity.of("t", "/t", "other"))
        key = view.keys["session"]
    store._contended[key] = time.monotonic() + 3600  # as a writer that just lost to another
    if name.startswith("deleting"):  # not the common case: the holder cannot merge it
        done = store.patch_on_server([key], {key: b'{"tactics":{"w0":null}}'}, ["tactics"], [], {})
        print(name, "unmerged" if done is None else "merged", None, flush=True)
    else:
        receipt = view.patch_state({"session": {"tactics": {name: "x"}}})
        print(name, "x", receipt.seq, flush=True)
    """
)

HOLDER = SETUP + textwrap.dedent(
    """
    from stateflow.store import sqlite as backend
    from stateflow.store.writer_queue import WriterQueue
    mode, wanted = sys.argv[2], int(sys.argv[3])
    store._contended[key] = time.monotonic() + 3600
    folder = Path(location + "-requests")
    take_behind = backend.SqliteStore._take_behind

    def holding(self, tx):
        ticket = self._group.queue.behind()[0]
        print("turn", ticket, flush=True)
        deadline = time.monotonic() + 60
        while not all((folder / f"r{ticket + k}").exists() for k in range(1, wanted + 1)):
            assert time.monotonic() < deadline, "the requests never came"
            time.sleep(0.01)
        print("queued", flush=True)
        while not Path(location + "-go").exists():
            assert time.monotonic() < deadline, "never told to go on"
            time.sleep(0.01)
        if mode == "reads":  # the statements that read documents while the requests are written
            statements = []
            self._group._conn.set_trace_callback(statements.append)
            take_behind(self, tx)
            self._group._conn.set_trace_callback(None)
            reads = [s for s in statements if "FROM documents" in s or "FROM members" in s]
            print("reads", len(reads), "None", flush=True)
        elif mode != "skip":  # (skip: takes none of them)
            take_behind(self, tx)
        if mode == "before-commit":
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == "during-commit":  # killed once the commit's first WAL frames are written
            import threading
            conn, wal = self._group._conn, location + "-wal"

            def watch(size):
                while os.stat(wal).st_size <= size:
                    pass
                os.kill(os.getpid(), signal.SIGKILL)

            def traced(sql):
                if sql == "COMMIT":
                    print("committing", flush=True)
                    threading.Thread(target=watch, args=(os.stat(wal).st_size,), daemon=True).start()

            conn.set_trace_callback(traced)

    def dying(self, ticket, payload):  # after the commit, before any answer is sent
        os.kill(os.getpid(), signal.SIGKILL)

    backend.SqliteStore._take_behind = holding
    if mode == "after-commit":
        WriterQueue.answer = dying
    value = "h" * 400_000 if mode == "during-commit" else "h"  # (a long commit: many WAL frames)
    receipt = view.patch_state({"session": {"tactics": {"holder": value}}})
    print("holder", "h", receipt.seq, flush=True)
    """
)


def scope_key(location: str) -> DocKey:
    with open_store(location, auto_migrate=True) as store:
        view = MemoryView(store, Identity.of("t", "/t", "shared"))
        view.patch_state({"session": {"tactics": {"w0": "seed"}}})  # the document exists
        return view.keys["session"]


def written(location: str, key: DocKey) -> tuple[Counter[tuple[str, str]], dict[tuple[str, str], int]]:
    """How many transitions set each ``tactics`` key to each value, and the seq of the last."""
    counts: Counter[tuple[str, str]] = Counter()
    seqs: dict[tuple[str, str], int] = {}
    with open_store(location) as store:
        for change in store.history([key], limit=100_000):
            for edit in change.edits:
                if len(edit.path) == 2 and edit.path[0] == "tactics" and edit.value is not MISSING:
                    pair = (str(edit.path[1]), str(edit.value))
                    counts[pair] += 1
                    seqs.setdefault(pair, change.seq)
    return counts, seqs


def claims(db: str) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT count(*) FROM applied_ops WHERE scope = ?", (SCOPE,)).fetchone()[0])


def start(script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ,
    )


def acknowledged(proc: subprocess.Popen[str], timeout: float = 120) -> list[tuple[str, str, int | None]]:
    out, err = proc.communicate(timeout=timeout)
    acked = []
    for line in out.splitlines():
        if line == "committing":
            continue
        name, value, seq = line.split()
        acked.append((name, value, None if seq == "None" else int(seq)))
    assert proc.returncode in (0, -signal.SIGKILL), err
    return acked


def test_writer_processes_on_one_scope_commit_every_patch_exactly_once(backend: str) -> None:
    key = scope_key(backend)
    procs = [start(WRITER, backend, str(i), "30") for i in range(6)]
    acked = [entry for proc in procs for entry in acknowledged(proc)]
    assert len(acked) == 180
    counts, seqs = written(backend, key)
    for name, value, seq in acked:
        # present once, in the very transition its call was answered with
        assert counts[(name, value)] == 1, (name, value)
        assert seqs[(name, value)] == seq
    assert sum(counts.values()) == 180  # nothing written twice, nor anything else
    if "://" not in backend:
        assert claims(backend) > 0  # writers were answered by an earlier turn's commit


def holder_and_requesters(
    tmp_path: Path, mode: str, names: list[str]
) -> tuple[str, DocKey, subprocess.Popen[str], list[subprocess.Popen[str]]]:
    db = str(tmp_path / "store.db")
    key = scope_key(db)
    holder = start(HOLDER, db, mode, str(len(names)))
    assert holder.stdout is not None
    line = holder.stdout.readline()
    assert line.startswith("turn"), holder.stderr.read() if holder.stderr else line
    requesters = []
    for name in names:  # one at a time: their tickets in this order, right behind the holder's
        requesters.append(start(REQUESTER, db, name))
        ticket = int(line.split()[1]) + len(requesters)
        deadline = time.monotonic() + 60
        while not Path(f"{db}-requests/r{ticket}").exists():
            assert time.monotonic() < deadline and requesters[-1].poll() is None
            time.sleep(0.01)
    assert holder.stdout.readline().startswith("queued")
    return db, key, holder, requesters


@pytest.mark.parametrize("mode", ["before-commit", "after-commit"])
def test_a_turn_holder_killed_around_its_commit_loses_no_acknowledged_patch(
    tmp_path: Path, mode: str
) -> None:
    names = ["r1", "r2", "r3"]
    db, key, holder, requesters = holder_and_requesters(tmp_path, mode, names)
    Path(f"{db}-go").touch()
    holder.wait(60)
    assert holder.returncode == -signal.SIGKILL
    acked = [entry for proc in requesters for entry in acknowledged(proc)]
    assert sorted(name for name, _, _ in acked) == names
    counts, seqs = written(db, key)
    for name, value, seq in acked:
        assert counts[(name, value)] == 1
        assert seqs[(name, value)] == seq
    if mode == "before-commit":  # rolled back with the holder: each requester wrote its own
        assert counts[("holder", "h")] == 0
        assert claims(db) == 0
    else:  # committed by the holder: each requester found its claim and read its basis back
        assert counts[("holder", "h")] == 1
        assert claims(db) == 3
    assert not list(Path(f"{db}-requests").iterdir())


def test_a_requester_killed_while_queued_leaves_the_others_exactly_once(tmp_path: Path) -> None:
    names = ["r1", "r2", "r3"]
    db, key, holder, requesters = holder_and_requesters(tmp_path, "none", names)
    requesters[0].send_signal(signal.SIGKILL)
    requesters[0].wait(10)
    Path(f"{db}-go").touch()
    assert [entry[0] for entry in acknowledged(holder)] == ["holder"]
    acked = [entry for proc in requesters[1:] for entry in acknowledged(proc)]
    assert sorted(name for name, _, _ in acked) == names[1:]
    counts, seqs = written(db, key)
    for name, value, seq in acked:
        assert counts[(name, value)] == 1
        assert seqs[(name, value)] == seq
    assert counts[("r1", "x")] <= 1  # never acknowledged: written once by the holder, or not at all


def test_a_request_the_holder_cannot_merge_stays_with_its_writer(tmp_path: Path) -> None:
    names = ["r1", "deleting", "r3"]
    db, key, holder, requesters = holder_and_requesters(tmp_path, "none", names)
    Path(f"{db}-go").touch()
    assert [entry[0] for entry in acknowledged(holder)] == ["holder"]
    outcomes = {name: (value, seq) for proc in requesters for name, value, seq in acknowledged(proc)}
    assert outcomes["deleting"] == ("unmerged", None)  # nothing written: its caller's update decides
    counts, seqs = written(db, key)
    for name in ("r1", "r3"):
        assert counts[(name, "x")] == 1
        assert seqs[(name, "x")] == outcomes[name][1]
    assert claims(db) == 2  # both answered by the holder's commit, around the one it rolled back
    with open_store(db) as store:
        body = store.get(key).body
        assert body is not None and body["tactics"]["w0"] == "seed"


def test_a_turn_merges_the_requests_it_takes_on_the_documents_as_held_without_reading_them(
    tmp_path: Path,
) -> None:
    names = ["r1", "r2", "r3"]
    db, key, holder, requesters = holder_and_requesters(tmp_path, "reads", names)
    Path(f"{db}-go").touch()
    own = acknowledged(holder)
    assert [entry[:2] for entry in own] == [("reads", "0"), ("holder", "h")]  # read once: its own
    acked = [entry for proc in requesters for entry in acknowledged(proc)]
    assert sorted(name for name, _, _ in acked) == names
    counts, seqs = written(db, key)
    for name, value, seq in acked:  # each its own transition, right after the one before
        assert counts[(name, value)] == 1
        assert seqs[(name, value)] == seq
    first = own[1][2]
    assert first is not None
    assert sorted(seq for _, _, seq in acked if seq is not None) == [first + k for k in (1, 2, 3)]
    assert claims(db) == 3
    with open_store(db) as store:
        body = store.get(key).body
        assert body is not None and body["tactics"] == {
            "w0": "seed",
            "holder": "h",
            "r1": "x",
            "r2": "x",
            "r3": "x",
        }


def test_a_request_left_by_a_writer_killed_after_publishing_is_swept_by_a_later_turn(
    tmp_path: Path,
) -> None:
    names = ["r1", "r2"]
    db, key, holder, requesters = holder_and_requesters(tmp_path, "skip", names)
    requesters[0].send_signal(signal.SIGKILL)  # published, then killed; no turn takes it
    requesters[0].wait(10)
    Path(f"{db}-go").touch()
    assert [entry[0] for entry in acknowledged(holder)] == ["holder"]
    assert [entry[0] for entry in acknowledged(requesters[1])] == ["r2"]  # its own turn
    assert not list(Path(f"{db}-requests").iterdir())  # r1's file too, swept by r2's turn
    counts, _ = written(db, key)
    assert counts[("r1", "x")] == 0 and counts[("r2", "x")] == 1


def test_a_turn_holder_killed_during_its_commit_loses_no_acknowledged_patch(tmp_path: Path) -> None:
    names = ["r1", "r2", "r3", "r4", "r5", "r6", "r7"]
    db, key, holder, requesters = holder_and_requesters(tmp_path, "during-commit", names)
    Path(f"{db}-go").touch()
    holder.wait(60)
    assert holder.returncode == -signal.SIGKILL
    assert holder.stdout is not None and holder.stdout.read().splitlines() == ["committing"]
    acked = [entry for proc in requesters for entry in acknowledged(proc)]
    assert sorted(name for name, _, _ in acked) == names  # each written: by the holder, or itself
    counts, seqs = written(db, key)
    for name, value, seq in acked:  # once, in the transition its call was answered with
        assert counts[(name, value)] == 1
        assert seqs[(name, value)] == seq
    holders = counts[("holder", "h" * 400_000)]
    assert holders <= 1 and claims(db) == 7 * holders  # the holder's commit whole, or none of it
    assert not list(Path(f"{db}-requests").iterdir())


def test_a_request_on_documents_the_turn_has_not_written_reads_them_and_the_next_goes_on(
    tmp_path: Path,
) -> None:
    names = ["r1", "other", "r3"]
    db, key, holder, requesters = holder_and_requesters(tmp_path, "reads", names)
    Path(f"{db}-go").touch()
    own = acknowledged(holder)
    assert own[0][0] == "reads" and int(own[0][1]) > 0  # the other scope's documents: read
    acked = {name: seq for proc in requesters for name, _, seq in acknowledged(proc)}
    first = own[1][2]
    assert first is not None and [acked[n] for n in names] == [first + 1, first + 2, first + 3]
    assert claims(db) == 3
    with open_store(db) as store:
        other = MemoryView(store, Identity.of("t", "/t", "other")).keys["session"]
        body = store.get(key).body
        assert body is not None and body["tactics"] == {"w0": "seed", "holder": "h", "r1": "x", "r3": "x"}
        body = store.get(other).body
        assert body is not None and body["tactics"] == {"other": "x"}
    counts, seqs = written(db, key)
    assert seqs[("r3", "x")] == acked["r3"] and counts[("r3", "x")] == 1
