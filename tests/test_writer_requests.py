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

from stateflow.doc.canonical import encode
from stateflow.doc.select import MISSING
from stateflow.memory import Identity, MemoryView
from stateflow.store import DocKey, open_store, writer_requests
from stateflow.store.writer_requests import SCOPE

SETUP = """
import os, signal, sys, time
from pathlib import Path
from stateflow.memory import Identity, MemoryView
from stateflow.store import open_store
location = sys.argv[1]
wait = float(os.environ.get("STATEFLOW_TEST_WAIT", "30"))
store = open_store(location, wait_seconds=wait)
view = MemoryView(store, Identity.of("t", "/t", "shared"))
key = view.keys["session"]
"""

WRITER = SETUP + textwrap.dedent(
    """
    index, calls = int(sys.argv[2]), int(sys.argv[3])
    if sys.argv[4:] == ["contended"]:  # its first call as a writer that just lost to another's
        store._contended[key] = time.monotonic() + 5
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
    elif name.startswith("same"):  # re-sends the stored value: changes nothing
        receipt = view.patch_state({"session": {"tactics": {"w0": "seed"}}})
        print(name, "seed", receipt.seq, flush=True)
    elif name.startswith("unknown"):  # its outcome may be decided after its wait ran out
        from stateflow.errors import StateflowError
        try:
            receipt = view.patch_state({"session": {"tactics": {name: "x"}}})
            print(name, "x", receipt.seq, flush=True)
        except StateflowError as exc:
            print(name, exc.code, None, flush=True)
    elif name.startswith("huge"):  # grows the file by many pages
        receipt = view.patch_state({"session": {"tactics": {name: "x" * 200_000}}})
        print(name, "x", receipt.seq, flush=True)
    elif name.startswith("big"):  # its own commits: none where the holder's answer came
        receipt = view.patch_state({"session": {"tactics": {name: "x"}}})
        print(name, f"commits{store._group.commits}", receipt.seq, flush=True)
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
        deadline = time.monotonic() + 300  # (the requesters' start-ups, one after the other)
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
        elif mode == "full":  # no page more for the file: a request's growth ends the transaction
            pages = self._group._conn.execute("PRAGMA page_count").fetchone()[0]
            self._group._conn.execute(f"PRAGMA max_page_count = {pages}")
            take_behind(self, tx)
        elif mode != "skip":  # (skip: takes none of them)
            take_behind(self, tx)
        if mode == "stall":  # its requests taken, its commit only once told
            while not Path(location + "-commit").exists():
                time.sleep(0.01)
        if mode == "before-commit":
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == "during-commit":  # killed by the kernel at a WAL write inside its COMMIT
            import resource
            conn, wal = self._group._conn, location + "-wal"

            def traced(sql):
                if sql == "COMMIT":  # (called as the statement starts: none of its frames written)
                    print("committing", flush=True)
                    # a write past this size kills the process (SIGXFSZ, which Python ignores:
                    # its default back) within its first frames, long before its last
                    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
                    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
                    limit = os.stat(wal).st_size + 5_000
                    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

            conn.set_trace_callback(traced)

    def dying(self, *args):  # after the commit, before any answer is sent
        os.kill(os.getpid(), signal.SIGKILL)

    def locking(self, *args):  # after the commit: no answer, SQLite's lock held a while longer
        import sqlite3
        import threading
        if getattr(self, "locked", None) is None:
            self.locked = sqlite3.connect(location, isolation_level=None, check_same_thread=False)
            self.locked.execute("BEGIN IMMEDIATE")
            threading.Timer(4.5, self.locked.execute, ("ROLLBACK",)).start()

    backend.SqliteStore._take_behind = holding
    if mode == "after-commit":
        WriterQueue.answer = dying
    if mode == "locked-after-commit":
        WriterQueue.answer = locking
    value = "h" * 400_000 if mode == "during-commit" else "h"  # (a long commit: many WAL frames)
    try:
        receipt = view.patch_state({"session": {"tactics": {"holder": value}}})
    except Exception as exc:
        print("holder", f"{type(exc).__name__}:{exc}".replace(" ", "_"), None, flush=True)
    else:
        print("holder", "h", receipt.seq, flush=True)
    """
)


def scope_key(location: str, seed: str = "seed") -> DocKey:
    with open_store(location, auto_migrate=True) as store:
        view = MemoryView(store, Identity.of("t", "/t", "shared"))
        view.patch_state({"session": {"tactics": {"w0": seed}}})  # the document exists
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


WAIT = 300.0
"""A writer's wait for its turn or its answer where the test is not about that wait running out:
requesters are started one at a time, each waiting meanwhile, and seven Python start-ups one
after the other outlasted a 30 s wait on a loaded machine."""


def start(script: str, *args: str, wait: float = WAIT) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "STATEFLOW_TEST_WAIT": str(wait)},
    )


def acknowledged(proc: subprocess.Popen[str], timeout: float = 300) -> list[tuple[str, str, int | None]]:
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
    holder = None
    if "://" not in backend:
        # a turn held until each writer's first patch is published behind it, so that some are
        # answered by an earlier turn's commit however the machine schedules them; then they race
        holder = start(HOLDER, backend, "none", "6")
        assert holder.stdout is not None and holder.stdout.readline().startswith("turn")
    procs = [start(WRITER, backend, str(i), "30", *(["contended"] if holder else [])) for i in range(6)]
    if holder is not None:
        assert holder.stdout is not None and holder.stdout.readline().startswith("queued")
        Path(f"{backend}-go").touch()
        procs.append(holder)
    acked = [entry for proc in procs for entry in acknowledged(proc)]
    assert len(acked) == 180 + (holder is not None)
    counts, seqs = written(backend, key)
    for name, value, seq in acked:
        # present once, in the very transition its call was answered with
        assert counts[(name, value)] == 1, (name, value)
        assert seqs[(name, value)] == seq
    assert sum(counts.values()) == len(acked)  # nothing written twice, nor anything else
    if holder is not None:
        assert claims(backend) >= 6  # writers were answered by an earlier turn's commit


def holder_and_requesters(
    tmp_path: Path, mode: str, names: list[str], wait: float = WAIT, seed: str = "seed"
) -> tuple[str, DocKey, subprocess.Popen[str], list[subprocess.Popen[str]]]:
    db = str(tmp_path / "store.db")
    key = scope_key(db, seed)
    holder = start(HOLDER, db, mode, str(len(names)))
    assert holder.stdout is not None
    line = holder.stdout.readline()
    assert line.startswith("turn"), holder.stderr.read() if holder.stderr else line
    requesters = []
    for name in names:  # one at a time: their tickets in this order, right behind the holder's
        requesters.append(start(REQUESTER, db, name, wait=wait))
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
    assert holder.returncode == -signal.SIGXFSZ  # killed at a write of its commit, however loaded
    assert holder.stdout is not None and holder.stdout.read().splitlines() == ["committing"]
    acked = [entry for proc in requesters for entry in acknowledged(proc)]
    assert sorted(name for name, _, _ in acked) == names  # each written: by the holder, or itself
    counts, seqs = written(db, key)
    for name, value, seq in acked:  # once, in the transition its call was answered with
        assert counts[(name, value)] == 1
        assert seqs[(name, value)] == seq
    # the commit died before its last frame: none of it (the holder's write, the 7 claims)
    assert counts[("holder", "h" * 400_000)] == 0 and claims(db) == 0
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


@pytest.mark.parametrize("mode", ["none", "after-commit"])
def test_a_request_that_changes_nothing_gets_its_no_change_receipt_however_it_is_answered(
    tmp_path: Path, mode: str
) -> None:
    names = ["same", "r2"]
    db, key, holder, requesters = holder_and_requesters(tmp_path, mode, names)
    Path(f"{db}-go").touch()
    holder.wait(60)
    acked = {name: (value, seq) for proc in requesters for name, value, seq in acknowledged(proc)}
    assert acked["same"] == ("seed", None)  # applied, nothing changed: no transition
    counts, seqs = written(db, key)
    assert counts[("r2", "x")] == 1 and seqs[("r2", "x")] == acked["r2"][1]
    assert counts[("w0", "seed")] == 0  # (the seed wrote the document whole)
    assert claims(db) == 1  # r2's; none for a request that changes nothing


def test_a_request_taken_by_a_turn_that_outlasts_its_wait_is_not_reported_unwritten(tmp_path: Path) -> None:
    names = ["unknown"]
    db, key, holder, requesters = holder_and_requesters(tmp_path, "stall", names, wait=3)
    Path(f"{db}-go").touch()
    [(_, code, _)] = acknowledged(requesters[0])  # its wait ran out while the holder held on
    Path(f"{db}-commit").touch()
    assert [entry[:2] for entry in acknowledged(holder)] == [("holder", "h")]
    counts, _ = written(db, key)
    assert counts[("unknown", "x")] == 1  # the holder committed it after all
    assert code == "write-outcome-unknown"  # not store-busy's "nothing was written": no blind retry


def test_large_answers_of_one_turn_all_reach_their_writers(tmp_path: Path) -> None:
    names = [f"big{k}" for k in range(1, 8)]
    db, key, holder, requesters = holder_and_requesters(tmp_path, "none", names, seed="s" * 60_000)
    Path(f"{db}-go").touch()
    assert [entry[0] for entry in acknowledged(holder)] == ["holder"]
    acked = [entry for proc in requesters for entry in acknowledged(proc)]
    # each answered (too large to send whole: "committed", its basis read back), none left to
    # find its request committed in a turn of its own
    assert sorted(value for _, value, _ in acked) == ["commits0"] * 7
    counts, seqs = written(db, key)
    for name, _, seq in acked:
        assert counts[(name, "x")] == 1 and seqs[(name, "x")] == seq
    assert claims(db) == 7


def test_a_request_whose_failure_ends_the_transaction_raises_its_own_error_to_the_turn(
    tmp_path: Path,
) -> None:
    names = ["huge"]
    db, _, holder, requesters = holder_and_requesters(tmp_path, "full", names)
    Path(f"{db}-go").touch()
    (name, error, _), *_ = acknowledged(holder)
    assert (name, error) == ("holder", "StoreUnavailable:SQLite_error:_database_or_disk_is_full")
    acked = [entry for proc in requesters for entry in acknowledged(proc)]
    assert [entry[0] for entry in acked] == ["huge"]  # written in its own turn


HOLDS_TURN = """
import sys, time
from pathlib import Path
from stateflow.store.writer_queue import WriterQueue
queue = WriterQueue(Path(sys.argv[1]))
queue.acquire(30)
print("held", flush=True)
while not Path(sys.argv[1] + "-go").exists():
    time.sleep(0.01)
queue.release()
"""


def slot(db: Path, ticket: int) -> tuple[int, bytes]:
    """The slot of ``ticket`` in the writer queue's file: the ticket waiting, its inbox's name."""
    with open(f"{db}-writer", "rb") as file:
        file.seek(4096 + (ticket % 256) * 16)
        raw = file.read(16)
    return int.from_bytes(raw[:8], "little"), b"\0stateflow-writer-inbox-" + raw[8:].hex().encode()


def waiting_on(db: Path, ticket: int) -> bytes:
    """The inbox ``ticket``'s writer waits on, once its slot names it."""
    deadline = time.monotonic() + 30
    while (found := slot(db, ticket))[0] != ticket:
        assert time.monotonic() < deadline, "the writer never waited"
        time.sleep(0.01)
    return found[1]


def test_a_writer_takes_only_an_answer_that_names_its_own_request(tmp_path: Path) -> None:
    import socket
    import threading

    from stateflow.store.writer_queue import WriterQueue

    db = tmp_path / "store.db"
    holder = start(HOLDS_TURN, str(db))
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"

    def stray() -> None:  # an answer for another writer to the inbox ticket 1 waits on, then the turn
        name = waiting_on(db, 1)
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
            sender.sendto(b"0" * 32 + b"c", name)
        time.sleep(0.3)
        Path(f"{db}-go").touch()

    thread = threading.Thread(target=stray)
    thread.start()
    queue = WriterQueue(db)
    try:
        queue.acquire(30)  # a writer that published nothing: no answer is its, only the turn
        assert queue.held
    finally:
        queue.close()
        thread.join()
    holder.communicate(timeout=30)
    assert holder.returncode == 0


HOLDS_TURNS = """
import sys, time
from pathlib import Path
from stateflow.store.writer_queue import WriterQueue
queue = WriterQueue(Path(sys.argv[1]))
for k in range(int(sys.argv[2])):
    queue.acquire(30)
    print("held", flush=True)
    while not Path(f"{sys.argv[1]}-go{k}").exists():
        time.sleep(0.01)
    queue.release()
    while not Path(f"{sys.argv[1]}-again{k}").exists():
        time.sleep(0.01)
"""


def test_a_waiting_writer_binds_its_inbox_once_and_a_forked_child_binds_its_own(tmp_path: Path) -> None:
    import socket
    import threading

    from stateflow.store.writer_queue import WriterQueue

    db = tmp_path / "store.db"
    holder = start(HOLDS_TURNS, str(db), "3")
    assert holder.stdout is not None
    queue = WriterQueue(db)
    names: list[bytes] = []

    def wait(k: int, ticket: int, waiter: WriterQueue) -> None:  # the holder's turn k, then ours
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"

        def go() -> None:
            names.append(waiting_on(db, ticket))
            Path(f"{db}-go{k}").touch()

        thread = threading.Thread(target=go)
        thread.start()
        waiter.acquire(30)
        thread.join()
        assert waiter.held and slot(db, ticket)[0] == 0  # its turn: the slot cleared
        waiter.release()
        Path(f"{db}-again{k}").touch()

    try:
        wait(0, 1, queue)
        wait(1, 3, queue)
        assert names[0] == names[1]  # one inbox for both waits
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
            sender.sendto(b"", names[0])  # still bound between waits
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child: its own inbox, not its parent's
            try:
                wait(2, 5, queue)
                os._exit(0 if names[2] != names[0] else 1)
            except BaseException:
                os._exit(2)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
            sender.sendto(b"", names[0])  # the parent's inbox: still bound after the child's wait
    finally:
        queue.close()
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender, pytest.raises(ConnectionRefusedError):
        sender.sendto(b"", names[0])  # gone with the queue's close
    holder.communicate(timeout=30)
    assert holder.returncode == 0


ANSWERED = """
import sys
from pathlib import Path
from stateflow.store import DocKey
from stateflow.store.writer_queue import Answered, WriterQueue
from stateflow.store.writer_requests import Request, SpareFiles
db = Path(sys.argv[1])
queue = WriterQueue(db)
key = DocKey("memory", "s")
request = Request.new(SpareFiles(db), [key], {key: b'{"tactics":{"w":"x"}}'}, ["tactics"], [], {})
print(request.id, flush=True)
try:
    queue.acquire(30, request=request)
    print("turn", flush=True)
except Answered as answered:
    left = []  # what else its inbox holds once the answer is read
    try:
        while True:
            left.append(queue._inbox.recv(100))
    except BlockingIOError:
        pass
    print("answered", answered.answer.decode(), len(left), flush=True)
queue.close()
"""


def test_a_turn_sends_no_wake_up_to_the_writer_behind_it_that_it_answered(tmp_path: Path) -> None:
    from stateflow.store.writer_queue import WriterQueue

    db = tmp_path / "store.db"
    holder = WriterQueue(db)
    holder.acquire(30)  # ticket 0
    try:
        requester = start(ANSWERED, str(db))
        assert requester.stdout is not None
        request = requester.stdout.readline().strip()
        waiting_on(db, 1)
        deadline = time.monotonic() + 30
        while not Path(f"{db}-requests/r1").exists():  # (published after its slot is written)
            assert time.monotonic() < deadline
            time.sleep(0.01)
        requester.send_signal(signal.SIGSTOP)  # asleep: whatever is sent waits in its inbox
        holder.answer(1, request, b"c", None)
        holder.release()  # the next ticket, answered: its answer woke it, nothing more is sent
        requester.send_signal(signal.SIGCONT)
    finally:
        holder.close()
    out, err = requester.communicate(timeout=30)
    assert out.splitlines() == ["answered c 0"], (out, err, requester.returncode)


def test_another_threads_write_is_remembered_at_once_while_a_turn_merges(tmp_path: Path) -> None:
    import threading

    from stateflow.store.plan import Fresh

    db = str(tmp_path / "store.db")
    key = scope_key(db)
    seen: list[bool] = []
    with open_store(db) as store:
        view = MemoryView(store, Identity.of("t", "/t", "shared"))
        store._contended[key] = time.monotonic() + 3600
        other = Fresh()

        def traced(sql: str) -> None:  # in the turn's merge: another thread's write is done
            if not seen and "_remember" in vars(store):
                thread = threading.Thread(target=store._remember, args=(other,))
                thread.start()
                thread.join()
                pending = store._group.pending  # type: ignore[attr-defined]
                seen.append(pending is not None and any(f is other for f in pending.written))

        store._writer().set_trace_callback(traced)  # type: ignore[attr-defined]
        receipt = view.patch_state({"session": {"tactics": {"t": "x"}}})
        store._writer().set_trace_callback(None)  # type: ignore[attr-defined]
        assert receipt.seq is not None
        assert seen == [False]  # not deferred to (nor dropped with) the turn's commit
        assert store._group.pending is None  # type: ignore[attr-defined]


def test_a_request_committed_by_a_turn_when_its_own_turn_finds_sqlite_locked_is_answered_once(
    tmp_path: Path,
) -> None:
    names = ["unknown"]
    db, key, holder, requesters = holder_and_requesters(tmp_path, "locked-after-commit", names, wait=3)
    Path(f"{db}-go").touch()
    assert [entry[:2] for entry in acknowledged(holder)] == [("holder", "h")]
    [(name, value, seq)] = acknowledged(requesters[0])
    # its turn came with SQLite's lock held elsewhere past its wait: not "nothing was written"
    # (it was); the lock waited for again, its claim found
    assert (name, value) == ("unknown", "x")
    counts, seqs = written(db, key)
    assert counts[("unknown", "x")] == 1 and seqs[("unknown", "x")] == seq


def test_a_writers_request_files_are_reused_not_created_for_each_request(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    folder = Path(f"{db}-requests")
    spares = writer_requests.SpareFiles(db)
    key = DocKey("memory", "s")
    deadline = time.monotonic() + 60

    def request(value: str) -> writer_requests.Request:
        patch = encode({"tactics": {"w": value}})
        return writer_requests.Request.new(spares, [key], {key: patch}, ["tactics"], [], {})

    def taken(after: int) -> writer_requests.Taken:
        [entry] = writer_requests.take(db, after, after + 2)
        return entry

    first = request("x" * 5_000)
    assert first.publish(1, deadline)
    inode = os.stat(folder / "r1").st_ino
    assert taken(0).patches == {key: {"tactics": {"w": "x" * 5_000}}}
    assert not first.withdraw()  # taken: its writer cannot take it back
    first.forget()  # answered: its file is this writer's spare
    assert [p.name for p in folder.iterdir()] == [f"p1-{first.id}"]
    second = request("short")  # written into the spare, cut to its own length
    assert second.publish(2, deadline)
    assert os.stat(folder / "r2").st_ino == inode
    assert taken(1).patches == {key: {"tactics": {"w": "short"}}}
    second.forget()
    third = request("withdrawn")
    assert third.publish(3, deadline)
    assert third.withdraw()  # untaken: back to a spare, as a take would rename it
    assert os.stat(folder / f"p3-{third.id}").st_ino == inode
    writer_requests.sweep(db, 10)  # a spare swept as a leftover by a later turn: a new file then
    assert not list(folder.iterdir())
    fourth = request("after the sweep")
    assert fourth.publish(11, deadline)
    assert taken(10).patches == {key: {"tactics": {"w": "after the sweep"}}}
    fourth.forget()
    spares.drop()  # the store closing, or its process exiting
    assert not list(folder.iterdir())
