"""The creating change of a whole-form document keeps the mark ``=`` (``rows.CHANGE_MARK``, schema
44), not a copy of its body: "the whole body, as the document's row holds it at this revision".
The first write that moves the document past that revision (a rewrite, a delete, a conversion
to member form, an erase) replaces the mark with the body, placed as any whole-document edit is
(inline in the change row while it fits, else a ``change_edits`` row of member ``''``), in the
same transaction. Every reader of change edits resolves the mark: history pages, the transition
feed, as-of reads by revision and by seq, path reads of the past, the memory service's patch
projection, the HTTP audit page, prune's snapshot at a cut, ``stateflow check``, dump and load.
Each answer is compared with the same writes on a member-form store (which keeps copies), on
real SQLite files; a mark left behind a moved row is ``CorruptData``, and ``check`` reports it."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from stateflow.doc.diff import Edit
from stateflow.errors import CorruptData
from stateflow.memory import Identity, MemoryView
from stateflow.store import DocKey, SqlStore, Whole, Write, open_store
from stateflow.store.check import check_store
from stateflow.store.migrations import CHANGE_ROW_MAX
from stateflow.store.portable import dump, load
from stateflow.store.rows import CHANGE_MARK, decode_inline
from stateflow.store.sqlite import SqliteStore
from tests.http_api import tenant_api

ROOT = Path(__file__).resolve().parent.parent
STATE = "kept"
SMALL = {"a": 1, "b": {"c": [1, 2]}}
LARGE = {"a": 1, "text": "x" * 1500}  # (whole form, but its copy too long for the change row)


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[SqlStore, SqlStore]]:
    """Two SQLite files: the first keeps ``STATE`` in whole form, the second in member form."""
    whole = open_store(str(tmp_path / "whole.db"))
    members = open_store(str(tmp_path / "members.db"))
    assert isinstance(whole, SqlStore) and isinstance(members, SqlStore)
    assert whole.keep_whole(STATE)
    try:
        yield whole, members
    finally:
        whole.close()
        members.close()


def _change_rows(store: SqlStore, key: DocKey) -> list[tuple[int, bytes | None, list[tuple[str, bytes]]]]:
    """Each change of ``key`` as stored: revision, the row's edits, its ``change_edits`` rows."""
    with store._read_tx() as tx:
        found = tx.one("SELECT doc_id FROM documents WHERE state = ? AND subject = ?", tuple(key))
        assert found is not None
        out = []
        for revision, edits in tx.all(
            "SELECT revision, edits FROM changes WHERE doc_id = ? ORDER BY revision", (found[0],)
        ):
            apart = tx.all(
                "SELECT member, edits FROM change_edits WHERE doc_id = ? AND revision = ? ORDER BY ord",
                (found[0], revision),
            )
            out.append(
                (int(revision), None if edits is None else bytes(edits), [(m, bytes(e)) for m, e in apart])
            )
    return out


def _marks(store: SqlStore) -> list[tuple[str, int]]:
    """Every change keeping the mark: (subject, revision)."""
    with store._read_tx() as tx:
        return [
            (s, int(r))
            for s, r in tx.all(
                "SELECT d.subject, c.revision FROM changes c JOIN documents d ON d.doc_id = c.doc_id "
                "WHERE c.edits = X'3D' ORDER BY 1, 2"
            )
        ]


def _seen(store: SqlStore, key: DocKey) -> dict[str, Any]:
    """What every history reader says of ``key``."""
    doc = store.get(key)
    changes = store.history([key], limit=1000)
    names = sorted(
        {n for c in changes for e in c.edits if e.path == () and type(e.value) is dict for n in e.value}
    )
    out: dict[str, Any] = {
        "revision": doc.revision,
        "history": [(c.revision, c.seq, [e.to_json() for e in c.edits], c.paths) for c in changes],
        "shallow": [[e.to_json() for e in c.edits] for c in store.history([key], shallow=True)],
        "some members": [[e.to_json() for e in c.edits] for c in store.history([key], members=names[:1])],
        "feed": [
            (t.seq, [(c.revision, [e.to_json() for e in c.edits]) for c in t.changes if c.key == key])
            for t in store.transitions(limit=1000)
        ],
        "by revision": [store.read_at(key, revision=r).body for r in range(doc.revision + 1)],
        "by seq": [(c.seq, store.read_at(key, seq=c.seq).body) for c in changes],
        "a member by revision": [
            store.read_at(key, revision=r, members=names[:1]).body for r in range(1, doc.revision + 1)
        ],
    }
    asked: list[tuple[Any, ...]] = [(n,) for n in names] + [(n, "c") for n in names]
    if asked:
        out["paths at revisions"] = [
            [(t.value, t.reached) for t in store.read_paths({key: asked}, revisions={key: r})[key].trails]
            for r in range(1, doc.revision + 1)
        ]
        out["paths by seq"] = [
            [(t.value, t.reached) for t in store.read_paths({key: asked}, seq=c.seq)[key].trails]
            for c in changes
        ]
        out["paths back"] = [
            [(t.value, t.reached) for t in store.read_paths({key: asked}, back=b)[key].trails]
            for b in range(len(changes))
        ]
    return out


def _rewrite(store: SqlStore, key: DocKey, body: dict[str, Any] | None, how: str) -> None:
    if how == "whole" and body is not None:
        if store.write_whole(key, lambda _, was: Whole(dict(body), [[]]), {"by": "t"}):
            return
        how = "commit"  # (not as last seen here: written by the general path)
    current = store.get(key)
    if how == "commit":
        store.commit([Write.between(key, current.body, body, current.revision)])
    else:

        def compute(docs: dict[DocKey, Any]) -> tuple[list[Write], None]:
            return [Write.between(key, docs[key].body, body, docs[key].revision)], None

        store.update([key], compute, optimistic=how == "optimistic")


def _both(pair: tuple[SqlStore, SqlStore], key: DocKey, body: dict[str, Any] | None, how: str) -> None:
    for store in pair:
        _rewrite(store, key, body, how)


@pytest.mark.parametrize("first", [SMALL, LARGE])
@pytest.mark.parametrize("how", ["commit", "whole", "locked", "optimistic"])
def test_the_creating_change_keeps_the_mark_and_every_reader_resolves_it_before_and_after_its_copy(
    pair: tuple[SqlStore, SqlStore], first: dict[str, Any], how: str
) -> None:
    whole, members = pair
    key = DocKey(STATE, "doc")
    _both(pair, key, first, "commit" if how in ("locked", "optimistic") else how)
    assert _change_rows(whole, key) == [(1, CHANGE_MARK, [])]
    assert _seen(whole, key) == _seen(members, key)
    # the first write past it puts the copy in its place, byte for byte what member form keeps
    _both(pair, key, {**first, "a": 2, "d": [3]}, how)
    assert _marks(whole) == []
    assert _change_rows(whole, key) == _change_rows(members, key)
    copy = _change_rows(whole, key)[0]
    assert (copy[1] is None) == (first is LARGE)  # (too long for the row: apart, member '')
    _both(pair, key, {"e": 5}, how)
    assert _seen(whole, key) == _seen(members, key)
    assert check_store(whole).problems == []


def test_a_delete_and_a_body_after_it_copy_the_mark_and_mark_the_new_creation(
    pair: tuple[SqlStore, SqlStore],
) -> None:
    whole, members = pair
    key = DocKey(STATE, "doc")
    _both(pair, key, SMALL, "commit")
    _both(pair, key, None, "commit")  # the delete moves past the mark
    assert _marks(whole) == []
    _both(pair, key, LARGE, "commit")  # the first revision after a delete: marked again
    assert _marks(whole) == [("doc", 3)]
    assert _seen(whole, key) == _seen(members, key)
    big = {"text": "y" * 5000}  # past the bound: converted to member form, past the mark
    _both(pair, key, big, "locked")
    assert _marks(whole) == []
    assert _change_rows(whole, key) == _change_rows(members, key)
    assert _seen(whole, key) == _seen(members, key)
    assert check_store(whole).problems == []


def test_an_erase_copies_the_mark_of_the_document_it_deletes(pair: tuple[SqlStore, SqlStore]) -> None:
    whole, members = pair
    entry = DocKey(STATE, "declaration")
    for store in pair:
        store.commit([Write.between(entry, None, SMALL)])
        store.commit([Write.between(DocKey("records", "r"), None, {"v": 1})])
    assert _marks(whole) == [("declaration", 1)]
    for store in pair:
        assert store.purge("records", erase=[entry], origin={"by": "purge"}) == 1
    assert _marks(whole) == []
    assert _change_rows(whole, entry) == _change_rows(members, entry)
    assert _seen(whole, entry) == _seen(members, entry)
    assert check_store(whole).problems == []


def test_prune_snapshots_a_marked_revision_at_its_cut_and_drops_the_mark_with_its_change(
    pair: tuple[SqlStore, SqlStore],
) -> None:
    whole, members = pair
    only = DocKey(STATE, "only")  # created, never rewritten: the cut is at its mark
    later = DocKey(STATE, "later")
    for store in pair:
        store.commit([Write.between(only, None, SMALL)])
        store.commit([Write.between(later, None, LARGE)])
    assert _marks(whole) == [("later", 1), ("only", 1)]
    for store in pair:
        assert store.prune_history(STATE, "2999-01-01T00:00:00Z") == 2
    assert _marks(whole) == []
    for key in (only, later):
        assert _change_rows(whole, key) == []
        assert whole.read_at(key, revision=1).body == members.read_at(key, revision=1).body
        with whole._read_tx() as tx:  # the snapshot at the cut holds the body the mark stood for
            assert tx.one(
                "SELECT count(*) FROM snapshots s JOIN documents d ON d.doc_id = s.doc_id "
                "WHERE d.subject = ? AND s.revision = 1",
                (key.subject,),
            ) == (1,)
    # a write after the cut finds no mark to copy, and leaves no row apart for a pruned change
    _both(pair, later, {"a": 3}, "whole")
    assert _change_rows(whole, later) == _change_rows(members, later)
    assert _seen(whole, later) == _seen(members, later)
    assert check_store(whole).problems == []


def _corrupt_a_copied_mark(store: SqlStore, key: DocKey) -> None:
    """Put the mark back at revision 1 of a document rewritten since (a writer that moved the
    row on without copying it)."""
    path = store.url.removeprefix("sqlite:///").split("?")[0]
    with sqlite3.connect(path) as raw:
        raw.execute(
            "UPDATE changes SET edits = X'3D' WHERE revision = 1 AND doc_id = "
            "(SELECT doc_id FROM documents WHERE state = ? AND subject = ?)",
            tuple(key),
        )
        raw.execute("DELETE FROM change_edits")


def test_a_mark_behind_its_documents_row_is_corrupt_data_and_check_reports_it(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "w.db"))
    assert isinstance(store, SqlStore)
    try:
        store.keep_whole(STATE)
        key = DocKey(STATE, "doc")
        store.commit([Write.between(key, None, SMALL)])
        store.commit([Write.between(key, SMALL, {"a": 2}, 1)])
        assert check_store(store).problems == []
    finally:
        store.close()
    _corrupt_a_copied_mark(store, key)
    store = open_store(str(tmp_path / "w.db"))
    assert isinstance(store, SqlStore)
    try:
        with pytest.raises(CorruptData, match=r"keeps the mark .* but the document has a row at revision 2"):
            store.read_at(key, revision=1)
        with pytest.raises(CorruptData, match="mark was not replaced"):
            store.history([key])
        problems = check_store(store).problems
        assert problems and any("revision 1" in p and "mark" in p for p in problems), problems
        # a reader that does not know the mark (schema 43's, whose decoding of inline edits
        # this is) refuses it rather than reading a body: the mark is not JSON
        with pytest.raises(CorruptData, match="is corrupt"):
            decode_inline(CHANGE_MARK, "a change")
    finally:
        store.close()


def test_check_resolves_many_documents_marks_together_and_names_a_damaged_one_alone(tmp_path: Path) -> None:
    """``stateflow check`` reads the marks of a batch of documents at once (a store of LangGraph
    checkpoints is a mark per document), in batches past the first; a mark left behind its row
    among them is reported for its own document only."""
    store = open_store(str(tmp_path / "w.db"))
    assert isinstance(store, SqlStore)
    keys = [DocKey(STATE, f"doc{i:03d}") for i in range(300)]  # (more than one batch)
    try:
        store.keep_whole(STATE)
        for i, key in enumerate(keys):
            store.commit([Write.between(key, None, {"n": i})])
        moved = keys[280]
        store.commit([Write.between(moved, {"n": 280}, {"n": -1}, 1)])
        report = check_store(store)
        assert report.problems == [] and report.checked["revisions"] == 301, report.to_json()
    finally:
        store.close()
    _corrupt_a_copied_mark(store, moved)
    store = open_store(str(tmp_path / "w.db"))
    assert isinstance(store, SqlStore)
    try:
        problems = check_store(store).problems
        assert problems[0].startswith(f"revisions: {moved} revision 1: corrupt-data: "), problems
        assert all("mark" in p and f"{STATE}/doc" not in p.replace(str(moved), "") for p in problems), (
            problems
        )
    finally:
        store.close()


def _timeless(lines: Any) -> list[Any]:
    """Dumped lines without their times (two stores written a moment apart)."""
    out = []
    for line in lines:
        item = orjson.loads(line)
        item.pop("at", None)
        out.append(item)
    return out


def test_dump_and_load_carry_marked_history_to_either_form(
    tmp_path: Path, pair: tuple[SqlStore, SqlStore]
) -> None:
    whole, members = pair
    keys = [DocKey(STATE, f"d{i}") for i in range(4)]
    for i, key in enumerate(keys):
        for store in pair:
            store.commit([Write.between(key, None, {"n": i, "text": "t" * (300 * i)})])
            if i % 2:
                store.commit([Write.between(key, store.get(key).body, {"n": -i}, 1)])
    assert _marks(whole) == [("d0", 1), ("d2", 1)]
    lines = list(dump(whole))
    assert _timeless(lines) == _timeless(dump(members))  # the same history out of either form
    again = open_store(str(tmp_path / "again.db"))
    assert isinstance(again, SqlStore)
    try:
        again.keep_whole(STATE)
        load(again, lines)
        assert _marks(again) == [("d0", 1), ("d2", 1)]  # loaded whole form keeps marks again
        for key in keys:
            assert _seen(again, key)["by revision"] == _seen(members, key)["by revision"]
            assert _seen(again, key)["history"] == _seen(members, key)["history"]
        assert _timeless(dump(again)) == _timeless(lines)
        assert check_store(again).problems == []
    finally:
        again.close()


def test_the_memory_services_patch_projection_reads_a_marked_scope(tmp_path: Path) -> None:
    stores = [open_store(str(tmp_path / f"{form}.db")) for form in ("whole", "members")]
    try:
        seen = []
        for n, store in enumerate(stores):
            assert isinstance(store, SqlStore)
            view = MemoryView(store, Identity.of("acme", str(tmp_path), "agent"))
            cwd = view.keys["cwd"]
            if n == 0:
                store.keep_whole(cwd.state)
            # the scope created whole (a body set whole: the change the mark stands for), then
            # patched by the service
            store.commit([Write.between(cwd, None, {"tactics": {"next": "a"}, "strategy": {"goal": "g"}})])
            first = view.read_state({"path": "cwd.patches[0]"})
            marked = _marks(store)
            view.patch_state({"cwd": {"tactics": {"next": "b"}}})
            seen.append((first, view.read_state({"path": "cwd.patches"}), marked != [], _marks(store)))
        assert seen[0][0] == seen[1][0] and seen[0][1] == seen[1][1]
        assert seen[0][2:] == (True, []) and seen[1][2:] == (False, [])
    finally:
        for store in stores:
            store.close()


def test_the_http_audit_page_and_as_of_reads_of_a_marked_record(tmp_path: Path) -> None:
    decl = {
        "schema": {"type": "object", "properties": {"status": {"type": "string"}}},
        "subject_kinds": ["thread"],
        "default_subject_kind": "thread",
    }
    rec = "/api/states/tickets/records/agent/alice/thread/t1"
    answers = []
    for form in ("whole", "members"):
        store = open_store(str(tmp_path / f"{form}.db"))
        assert isinstance(store, SqlStore)
        try:
            with tenant_api(store) as api:
                assert api("PUT", "/api/states/tickets", decl)[0] == 200
                if form == "whole":
                    store.keep_whole("tickets")  # (the records' state)
                assert api("PUT", rec, {"status": "open"})[0] == 200
                marked = _marks(store)
                page = api("GET", f"{rec}/writes")[1]["data"]
                then = api("GET", f"{rec}?revision=1")[1]["data"]
                assert api("PUT", rec, {"status": "closed"})[0] == 200
                after = api("GET", f"{rec}/writes")[1]["data"], api("GET", f"{rec}?revision=1")[1]["data"]
                answers.append((page, then, after, bool(marked), _marks(store)))
        finally:
            store.close()

    def without_times(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: without_times(v) for k, v in value.items() if k not in ("at", "updated_at", "created_at")
            }
        if isinstance(value, list | tuple):
            return [without_times(v) for v in value]
        return value

    assert without_times(answers[0][:3]) == without_times(answers[1][:3])
    assert answers[0][3:] == (True, []) and answers[1][3:] == (False, [])


_REWRITER = textwrap.dedent(
    """
    import sys
    from stateflow.store import DocKey, Whole, Write, open_store

    path, tag, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = open_store(path)
    for i in range(count):
        for n in range(6):
            key = DocKey("kept", f"d{n}")
            body = {"by": tag, "i": i, "pad": "p" * (n * 200)}
            if i % 2 and store.write_whole(key, lambda _, was, b=body: Whole(dict(b), [[]]), {"by": tag}):
                continue
            def compute(docs, key=key, body=body):
                return [Write.between(key, docs[key].body, body, docs[key].revision)], None
            store.update([key], compute, {"by": tag}, optimistic=bool(i % 3))
    store.close()
    """
)


def test_two_processes_rewriting_freshly_created_documents_copy_each_mark_once(tmp_path: Path) -> None:
    path = str(tmp_path / "race.db")
    store = open_store(path)
    assert isinstance(store, SqlStore)
    store.keep_whole(STATE)
    created = {DocKey(STATE, f"d{n}"): {"n": n, "pad": "c" * (n * 200)} for n in range(6)}
    for key, body in created.items():
        store.commit([Write.between(key, None, body)])
    assert len(_marks(store)) == 6
    store.close()
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    writers = [
        subprocess.Popen([sys.executable, "-c", _REWRITER, path, tag, "15"], env=env) for tag in ("x", "y")
    ]
    for writer in writers:
        assert writer.wait(timeout=300) == 0
    store = open_store(path)
    assert isinstance(store, SqlStore)
    try:
        assert _marks(store) == []
        for key, body in created.items():
            assert store.read_at(key, revision=1).body == body
            history = store.history([key], limit=1000)
            assert [c.revision for c in history] == list(range(31, 0, -1))  # (its creation, 15 rewrites each)
            assert history[-1].edits == [Edit((), body)]
            rows = _change_rows(store, key)
            first = rows[0]
            assert (first[1] is None) == (len(first[2]) == 1)  # inline, or one row apart
        assert check_store(store).problems == []
    finally:
        store.close()


_KILLED_AFTER_COPY = textwrap.dedent(
    """
    import os, signal, sys
    from stateflow.store import DocKey, Write, open_store

    store = open_store(sys.argv[1])
    conn = store._writer()
    copied = []

    def kill_after_copy(sql):
        # the copy has run in the write's transaction; the next statement never does
        if copied:
            os.kill(os.getpid(), signal.SIGKILL)
        if sql.startswith("UPDATE changes SET edits"):
            copied.append(sql)

    key = DocKey("kept", sys.argv[2])
    doc = store.get(key)
    conn.set_trace_callback(kill_after_copy)
    store.commit([Write.between(key, doc.body, {"a": 2}, doc.revision)])
    """
)


@pytest.mark.parametrize("body", [SMALL, LARGE])
def test_a_writer_killed_between_the_copy_and_its_commit_leaves_the_mark_whole(
    tmp_path: Path, body: dict[str, Any]
) -> None:
    path = str(tmp_path / "killed.db")
    store = open_store(path)
    assert isinstance(store, SqlStore)
    store.keep_whole(STATE)
    key = DocKey(STATE, "doc")
    store.commit([Write.between(key, None, body)])
    store.close()
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_AFTER_COPY, path, "doc"], env=env, timeout=300, check=False
    )
    assert killed.returncode == -signal.SIGKILL
    store = open_store(path)
    assert isinstance(store, SqlStore)
    try:
        # nothing of the killed write: the mark is still there, no copy, no row apart
        assert _change_rows(store, key) == [(1, CHANGE_MARK, [])]
        assert store.get(key).body == body and store.read_at(key, revision=1).body == body
        assert check_store(store).problems == []
        store.commit([Write.between(key, body, {"a": 3}, 1)])
        assert _marks(store) == []
        assert store.read_at(key, revision=1).body == body
        assert check_store(store).problems == []
    finally:
        store.close()


def test_a_whole_form_copy_fits_the_change_row_by_the_rule_of_every_whole_document_edit(
    pair: tuple[SqlStore, SqlStore],
) -> None:
    whole, members = pair
    # bodies around the row's bound: each copy placed where member form placed its edit
    for n, size in enumerate(range(CHANGE_ROW_MAX - 40, CHANGE_ROW_MAX + 10, 7)):
        key = DocKey(STATE, f"edge{n}")
        for store in pair:
            store.commit([Write.between(key, None, {"t": "z" * size})])
        assert _marks(whole) == [(key.subject, 1)]
        for store in pair:
            store.commit([Write.between(key, {"t": "z" * size}, {"t": 1}, 1)])
        assert _change_rows(whole, key) == _change_rows(members, key), size
    assert _marks(whole) == []


def test_a_writer_that_read_the_row_probes_for_the_mark_once_and_copies_what_it_finds(tmp_path: Path) -> None:
    path = str(tmp_path / "w.db")
    first = open_store(path)
    second = open_store(path)
    assert isinstance(first, SqlStore) and isinstance(second, SqliteStore)
    try:
        first.keep_whole(STATE)
        copied, marked = DocKey(STATE, "copied"), DocKey(STATE, "marked")
        first.commit([Write.between(copied, None, SMALL)])
        first.commit([Write.between(copied, SMALL, {"a": 2}, 1)])  # copied by the writer that planned it
        first.commit([Write.between(marked, None, LARGE)])
        sent: list[str] = []
        second._writer().set_trace_callback(sent.append)

        def rewrite(key: DocKey, body: dict[str, Any]) -> list[str]:
            def compute(docs: dict[DocKey, Any]) -> tuple[list[Write], None]:
                return [Write.between(key, docs[key].body, body, docs[key].revision)], None

            sent.clear()
            second.update([key], compute)  # (the locked path: the row read under its lock)
            return [s.split()[0] for s in sent if "X'3D'" in s or "CAST(body AS TEXT)" in s]

        # no mark where the row was read: one probe, nothing written
        assert rewrite(copied, {"a": 3}) == ["SELECT"]
        # a mark found is copied (apart: too long for the change row)
        assert rewrite(marked, {"a": 4}) == ["SELECT", "UPDATE", "INSERT"]
        assert _marks(second) == []
        assert second.read_at(marked, revision=1).body == LARGE
        assert check_store(second).problems == []
    finally:
        second.close()
        first.close()
