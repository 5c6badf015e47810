"""``benchmarks/profile_sqlite_syscalls.py``: the calls it counts are the writes' own, told apart
by the file they go to — a durable commit's one ``fdatasync`` and SQLite's six ``-shm`` locks,
each WAL frame's two ``pwrite64``, our queue's two locks a turn — counted between its markers
only (a real process under ``strace``); ``profile_sqlite_writers`` counts a ``patch_state``'s
calls by phase through the same tracer (``benchmarks.strace``)."""

from __future__ import annotations

import shutil

import pytest
from benchmarks.profile_sqlite_syscalls import trace

pytestmark = pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")


def test_the_least_durable_commit_is_counted_as_its_calls() -> None:
    calls = trace("one row", "store put", 40, None, warm=5)
    assert calls["fdatasync wal"] == 40
    assert calls["frames"] == 40  # one page a commit, each frame two calls
    assert calls["pwrite64 wal"] == 80
    assert calls["fcntl shm"] == 6 * 40
    assert calls["fcntl queue"] == 0
    assert calls["db pages"] == 0  # (no checkpoint in 40 pages)


def test_our_write_is_counted_with_its_queue_turn() -> None:
    calls = trace("stateflow", "store put", 30, None, warm=210)  # (every item written once)
    assert calls["fdatasync wal"] == 30
    assert calls["fcntl queue"] == 2 * 30  # the ticket's byte taken again and let go
    assert calls["frames"] >= 3 * 30  # (transition, document, member and change pages)


def test_the_writers_profile_counts_each_phase_of_a_patch() -> None:
    from benchmarks.callgrind import REPO
    from benchmarks.profile_sqlite_writers import syscalls

    found = syscalls(REPO / "src", "alone", 1, 20, 5)
    inside = found["inside"]
    assert inside["pwrite64"] >= 20  # (the turn writes the WAL: a frame or more a commit)
    assert inside["fcntl"] >= 20  # (SQLite's locks on its -shm, taken in the turn)
    assert found["after"]["fcntl"] >= 20  # the queue's ticket let go, after the turn
    assert "getpgid" not in inside  # (the markers are left out)
