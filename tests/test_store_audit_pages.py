"""The store-wide audit (``transitions``) page by page, on both backends: every page lists each
of its transitions' changes that are still kept, in seq order then by document, however the
page cuts the history — over transitions of many documents (more than one statement reads
them on SQLite), with some documents' older changes pruned and another state purged.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from stateflow.errors import CorruptData
from stateflow.store import DocKey, SqlStore, Write
from stateflow.store.history import _SPANS_MAX


def _listed(store: SqlStore, page: int) -> list[tuple[int, str, str, int, int]]:
    """(seq, state, subject, revision, value written) of every change, read ``page`` at a time."""
    out: list[tuple[int, str, str, int, int]] = []
    after = 0
    while True:
        got = store.transitions(after_seq=after, limit=page)
        if not got:
            return out
        for t in got:
            assert [(c.key.state, c.key.subject) for c in t.changes] == sorted(
                (c.key.state, c.key.subject) for c in t.changes
            )
            for c in t.changes:
                assert c.seq == t.seq and c.at == t.at and c.origin == t.origin == {"i": t.origin["i"]}
                [edit] = c.edits
                assert c.paths == [list(edit.path)]
                value = edit.value["n"] if edit.path == () else edit.value  # (a new document: whole)
                out.append((c.seq, c.key.state, c.key.subject, c.revision, value))
        after = got[-1].seq


def test_audit_pages_list_every_kept_change_of_many_documents(store: SqlStore) -> None:
    rng = random.Random(11)
    keys = [DocKey(state, f"s{n:03d}") for state in ("notes", "other", "gone") for n in range(6)]
    revisions = dict.fromkeys(keys, 0)
    written: list[tuple[int, str, str, int, int]] = []

    def commit(picked: list[DocKey], i: int) -> int:
        result = store.commit([Write.between(k, store.get(k).value, {"n": i}) for k in picked], {"i": i})
        assert result.seq is not None
        for k in picked:
            revisions[k] += 1
            written.append((result.seq, k.state, k.subject, revisions[k], i))
        return result.seq

    # one transition over more documents than one statement reads, in no particular order
    wide = [DocKey("wide", f"w{n:04d}") for n in rng.sample(range(_SPANS_MAX + 40), _SPANS_MAX + 40)]
    revisions.update(dict.fromkeys(wide, 0))
    for i in range(90):
        if i == 29:  # seen first in a page, the last of them is not read with its neighbours
            commit([max(wide)], i)
        elif i == 30:
            commit(wide, i)
        else:
            commit(rng.sample(keys, rng.choice([1, 1, 2, 3, 5])), i)
    cut_seq = written[len(written) // 2][0]
    [cut_at] = [t.at for t in store.transitions(after_seq=cut_seq - 1, limit=1)]
    assert store.prune_history("notes", cut_at) > 0
    assert store.purge("gone") == 6
    kept = {
        (c.seq, c.key.state, c.key.subject) for k in keys + wide for c in store.history([k], limit=10_000)
    }
    want = sorted(w for w in written if w[:3] in kept)
    assert any(w[1] == "notes" for w in want) and not any(w[1] == "gone" for w in want)
    assert len(want) < len(written)
    for page in (1, 7, 50, 1000):
        assert _listed(store, page) == want


def test_corrupt_keys_in_a_transition_are_reported(tmp_path: Path) -> None:
    from stateflow.store import open_store

    store = open_store(f"{tmp_path}/store.db", auto_migrate=True)
    try:
        seq = store.commit([Write.between(DocKey("notes", "a"), None, {"n": 1})]).seq
        with store._write_tx() as tx:
            tx.run("UPDATE transitions SET changed = ? WHERE seq = ?", ("[[1,", seq))
        with pytest.raises(CorruptData, match=f"transition {seq}"):
            store.transitions()
    finally:
        store.close()
