"""``purge`` racing writers of the same state, on both backends.

A purge takes the rows of the state's documents in the order every writer locks them, before
it deletes anything: a writer holding one of them finishes first, one that comes after waits
for the purge and then finds the document gone. So neither ends the other to break a lock
cycle, and no member counter is left counting rows the purge deleted.
"""

from __future__ import annotations

import threading
from typing import Any

from stateflow.store import DocKey, SqlStore, Write, open_store
from stateflow.store.check import check_store


def _counts(store: SqlStore) -> tuple[dict[tuple[str, str, str], int], dict[tuple[str, str, str], int]]:
    with store._read_tx() as tx:
        return store.recount(tx)


def test_writers_racing_purges_end_no_write_and_keep_the_counters(backend: str) -> None:
    stores = [open_store(backend, auto_migrate=True) for _ in range(4)]
    purger = stores[-1]
    stop = threading.Event()
    failures: list[BaseException] = []
    written: list[int] = []
    purged: list[int] = []

    def write(n: int, store: SqlStore) -> None:
        try:
            for i in range(50):
                # several documents a write, some new after every purge, taken in either order
                keys = [DocKey("notes", f'["agent","x","k","n{(i + n + j) % 5}"]') for j in (0, 2)]
                if i % 2:
                    keys.reverse()

                def compute(
                    docs: dict[DocKey, Any], keys: list[DocKey] = keys, i: int = i
                ) -> tuple[list[Write], None]:
                    return [
                        Write.between(k, docs[k].body, {"i": i, "n": n, f"m{i % 3}": [i], "kept": {"a": n}})
                        for k in keys
                    ], None

                store.update(keys, compute, optimistic=i % 3 != 0)
                store.commit(
                    [Write.between(DocKey("notes", f'["agent","x","k","w{n}-{i}"]'), None, {"w": i})]
                )
                written.append(1)
        except BaseException as exc:  # (reported below)
            failures.append(exc)

    def purge() -> None:
        try:
            while not stop.is_set():
                purger.purge("notes")
                purged.append(1)
        except BaseException as exc:
            failures.append(exc)

    writers = [threading.Thread(target=write, args=(n, stores[n])) for n in range(3)]
    purging = threading.Thread(target=purge)
    try:
        purging.start()
        for t in writers:
            t.start()
        for t in writers:
            t.join()
        stop.set()
        purging.join()
        assert failures == []
        assert len(written) == 150 and purged
        stored, counted = _counts(purger)
        assert stored == counted
        report = check_store(purger)
        assert report.problems == []
        purger.purge("notes")
        assert _counts(purger) == ({}, {})
    finally:
        stop.set()
        for store in stores:
            store.close()
