"""SQLite's counters counted by the writers (schema 43): each commit keeps its counters' deltas in
its transition row (``transitions.counted``), the commit of every ``FOLD_EVERY``-th seq folds
them into ``state_counts``, and readers add the unfolded ones. Every path that adds or removes
members or moves ``present`` — commit, update (locked and optimistic), ``write_whole``, delete,
purge with ``erase``, prune, load, ``update_parts``, the memory service's patches — leaves the
counters equal to a recount on a real file; so do two processes writing at once across fold
boundaries, and a process killed in the middle of a fold. The subject kind is SQLite's rule,
computed in Python (``counting.sqlite_subject_kind``), pinned against the triggers that counted
until schema 41."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stateflow.memory import Identity, MemoryConfig, MemoryView
from stateflow.store import DocKey, SqlStore, Write, open_store
from stateflow.store.check import check_store
from stateflow.store.counting import FOLD_EVERY, count_plans, counted_one, encoded, sqlite_subject_kind
from stateflow.store.migrations import SQLITE, statements
from stateflow.store.model import Document, Whole
from stateflow.store.plan import WritePlan
from stateflow.store.portable import dump, load
from stateflow.store.rows import DocRow
from stateflow.subjects import encode_subject

ROOT = Path(__file__).resolve().parent.parent


def _subject(key: str, kind: str = "thread") -> str:
    return encode_subject("agent", "a", kind, key)


@pytest.fixture
def lite(tmp_path: Path) -> Iterator[SqlStore]:
    store = open_store(str(tmp_path / "counted.db"))
    try:
        yield store
    finally:
        store.close()


def _exact(store: SqlStore) -> dict[tuple[str, str, str], int]:
    """The counters, after asserting they equal a recount of the rows and ``check`` agrees."""
    with store._read_tx() as tx:
        stored, rows = store.recount(tx)
    assert stored == rows
    assert check_store(store).ok
    return stored


def _newest_counted(store: SqlStore) -> list[list[Any]] | None:
    """The newest transition's deltas as stored (sorted), None where it moved nothing."""
    with store._read_tx() as tx:
        row = tx.one("SELECT counted FROM transitions ORDER BY seq DESC LIMIT 1")
    assert row is not None
    return None if row[0] is None else sorted(json.loads(row[0]))


def _state_counts_rows(store: SqlStore) -> list[tuple[Any, ...]]:
    with store._read_tx() as tx:
        return tx.all("SELECT state, counter, name, n FROM state_counts ORDER BY 1, 2, 3")


def _replace(store: SqlStore, key: DocKey, body: dict[str, Any] | None, *, optimistic: bool = False) -> None:
    def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
        return [Write.between(key, docs[key].body, body, docs[key].revision)], None

    store.update([key], compute, {"by": "test"}, optimistic=optimistic)


def test_the_counting_triggers_are_gone_and_a_commit_writes_no_counter_row(lite: SqlStore) -> None:
    with lite._read_tx() as tx:
        triggers = tx.all("SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'count_%'")
    assert triggers == []
    key = DocKey("t", _subject("k"))
    lite.commit([Write.between(key, None, {"a": 1, "b": [2]})])
    assert _state_counts_rows(lite) == []  # (until a fold: the deltas are in the transition)
    assert _newest_counted(lite) == [
        ["t", "kind", "thread", 1],
        ["t", "member", "a", 1],
        ["t", "member", "b", 1],
    ]
    assert lite.counts("t").members == {"a": 1, "b": 1}
    _exact(lite)


def test_commit_and_update_on_either_path_count_what_they_move(lite: SqlStore) -> None:
    one, two = DocKey("t", _subject("one")), DocKey("t", _subject("two", "user"))
    lite.commit([Write.between(one, None, {"a": 1, "b": 2}), Write.between(two, None, {"a": 3})])
    assert _newest_counted(lite) == [
        ["t", "kind", "thread", 1],
        ["t", "kind", "user", 1],
        ["t", "member", "a", 2],
        ["t", "member", "b", 1],
    ]
    _replace(lite, one, {"a": 1, "c": 5})  # locked path: a member dropped, one added
    assert _newest_counted(lite) == [["t", "member", "b", -1], ["t", "member", "c", 1]]
    _replace(lite, one, {"a": 2, "c": 5}, optimistic=True)  # a rewrite moves nothing
    assert _newest_counted(lite) is None
    _replace(lite, two, {"a": 3, "d": {"e": 1}}, optimistic=True)
    assert _newest_counted(lite) == [["t", "member", "d", 1]]
    # deleted, then written again with other members
    _replace(lite, two, None)
    assert _newest_counted(lite) == [
        ["t", "kind", "user", -1],
        ["t", "member", "a", -1],
        ["t", "member", "d", -1],
    ]
    lite.commit([Write.between(two, None, {"x": 1})])
    assert _newest_counted(lite) == [["t", "kind", "user", 1], ["t", "member", "x", 1]]
    assert _exact(lite) == {
        ("t", "kind", "thread"): 1,
        ("t", "kind", "user"): 1,
        ("t", "member", "a"): 1,
        ("t", "member", "c"): 1,
        ("t", "member", "x"): 1,
    }
    # a subject that is not an encoded one counts under the empty kind
    plain = DocKey("t", "plain subject")
    lite.commit([Write.between(plain, None, {"a": 1})])
    assert ["t", "kind", "", 1] in (_newest_counted(lite) or [])
    assert lite.counts("t").kinds == {"thread": 1, "user": 1, None: 1}
    _exact(lite)


def _whole(body: dict[str, Any]) -> Any:
    def build(shared: dict[DocKey, Any], current: dict[str, Any] | None) -> Whole:
        return Whole(body, [[]])

    return build


def test_write_whole_counts_a_new_document_and_its_replacements(lite: SqlStore) -> None:
    guard = DocKey("_guard", "g")
    lite.commit([Write.between(guard, None, {"v": 1})])
    lite.read([guard])
    key = DocKey("items", _subject("w", "item"))
    assert lite.write_whole(key, _whole({"a": 1, "b": 2}), {"by": "t"}, shared=[guard])
    assert _newest_counted(lite) == [
        ["items", "kind", "item", 1],
        ["items", "member", "a", 1],
        ["items", "member", "b", 1],
    ]
    assert lite.write_whole(key, _whole({"a": 5, "b": 2}), {"by": "t"}, shared=[guard])
    assert _newest_counted(lite) is None
    assert lite.write_whole(key, _whole({"a": 5, "c": 2}), {"by": "t"}, shared=[guard])
    assert _newest_counted(lite) == [["items", "member", "b", -1], ["items", "member", "c", 1]]
    assert lite.counts("items").members == {"a": 1, "c": 1}
    _exact(lite)


def test_purge_with_erase_counts_both_states(lite: SqlStore) -> None:
    for i in range(5):
        lite.commit([Write.between(DocKey("gone", _subject(f"g{i}")), None, {"a": i, "b": i})])
        lite.commit([Write.between(DocKey("kept", _subject(f"k{i}", "user")), None, {"a": i})])
    entry = DocKey("_catalog", "gone")
    lite.commit([Write.between(entry, None, {"declared": True})])
    assert lite.purge("gone", erase=[entry]) == 5
    assert _newest_counted(lite) == [["_catalog", "kind", "", -1], ["_catalog", "member", "declared", -1]]
    counted = _exact(lite)
    assert not [k for k in counted if k[0] in ("gone", "_catalog")]
    assert [r for r in _state_counts_rows(lite) if r[0] == "gone"] == []
    assert lite.counts("kept").kinds == {"user": 5}


def test_prune_folds_the_deltas_of_the_transitions_it_deletes(lite: SqlStore) -> None:
    keys = [DocKey("t", _subject(f"p{i}")) for i in range(4)]
    for i, key in enumerate(keys):
        lite.commit([Write.between(key, None, {"a": i, f"m{i}": i})])
        lite.commit([Write.between(key, {"a": i, f"m{i}": i}, {"a": i, f"n{i}": i})])
    with lite._read_tx() as tx:
        before = tx.one("SELECT COUNT(*) FROM transitions WHERE counted IS NOT NULL")
    assert before is not None and before[0] == 8
    assert lite.prune_history("t", "2999-01-01T00:00:00Z") > 0
    with lite._read_tx() as tx:
        left = tx.one("SELECT COUNT(*) FROM transitions")
    assert left is not None and left[0] < 8  # transitions went, deltas and all: folded first
    assert _exact(lite)[("t", "kind", "thread")] == 4
    assert lite.counts("t").members == {"a": 4, **{f"n{i}": 1 for i in range(4)}}


def test_load_counts_what_it_loads(lite: SqlStore, tmp_path: Path) -> None:
    for i in range(12):
        lite.commit([Write.between(DocKey("t", _subject(f"l{i}", "user")), None, {"a": i, "b": [i]})])
    lines = list(dump(lite, history=True))
    target = open_store(str(tmp_path / "loaded.db"))
    try:
        load(target, lines)
        assert _exact(target) == _exact(lite)
        with target._read_tx() as tx:
            assert tx.one("SELECT COUNT(*) FROM transitions WHERE counted IS NOT NULL") == (12,)
    finally:
        target.close()


def test_update_parts_counts_every_part_in_its_one_transition(lite: SqlStore) -> None:
    keys = [DocKey("t", _subject(f"u{i:02d}")) for i in range(6)]
    lite.commit([Write.between(k, None, {"a": 1, "b": 2}) for k in keys[:4]])

    def compute(part: Any, docs: dict[DocKey, Document]) -> list[Write]:
        writes = []
        for key in part:
            doc = docs[key]
            if doc.body is None:
                writes.append(Write.between(key, None, {"c": 1}, doc.revision))
            elif key == keys[0]:
                writes.append(Write.between(key, doc.body, None, doc.revision))
            else:
                writes.append(Write.between(key, doc.body, {"a": 1, "d": 3}, doc.revision))
        return writes

    commit = lite.update_parts([keys[:3], keys[3:]], compute, {"by": "parts"})
    assert commit.seq is not None
    assert _newest_counted(lite) == [
        ["t", "kind", "thread", 1],  # (two new, one deleted)
        ["t", "member", "a", -1],
        ["t", "member", "b", -4],
        ["t", "member", "c", 2],
        ["t", "member", "d", 3],
    ]
    _exact(lite)


def test_the_memory_services_patches_count_their_scopes(
    lite: SqlStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = MemoryView(lite, Identity("agent-a", str(tmp_path), "s-1"), config=MemoryConfig())
    memory.patch_state({"session": {"tactics": {"next": "one"}}, "global": {"strategy": {"voice": "terse"}}})
    moved = _newest_counted(lite)
    assert moved and all(delta == 1 for *_, delta in moved)
    memory.patch_state({"session": {"tactics": {"next": "two"}}})
    memory.patch_state({"session": {"intents": {"goal": {"text": "ship"}}}})
    _exact(lite)
    # merged in the writer's turn (``patch_on_server``: the path a contended patch takes)
    monkeypatch.setattr(lite, "contended", lambda keys: True)
    other = MemoryView(lite, Identity("agent-a", str(tmp_path), "s-2"), config=MemoryConfig())
    other.patch_state({"session": {"tactics": {"next": "merged"}}})
    assert _newest_counted(lite)  # (a scope new to the store: its kind and members)
    other.patch_state({"session": {"strategy": {"plan": "merged too"}}})
    assert _newest_counted(lite) is not None  # (a member new to the scope)
    _exact(lite)


def test_a_fold_moves_the_deltas_into_the_rows_once_at_its_boundary(lite: SqlStore) -> None:
    key = DocKey("t", _subject("f"))
    lite.commit([Write.between(key, None, {"n": 0})])
    with lite._read_tx() as tx:
        (seq,) = tx.one("SELECT MAX(seq) FROM transitions") or (0,)
    n = 0
    while seq < FOLD_EVERY - 1:  # up to the seq before the boundary: nothing folded
        n += 1
        name = f"m{n % 7}"
        body = {"n": n, name: n}
        lite.commit([Write.between(key, None, body, None)])
        seq += 1
    assert _state_counts_rows(lite) == []
    before = _exact(lite)
    with lite._read_tx() as tx:
        assert tx.one("SELECT value FROM stateflow_meta WHERE key = 'counts_folded'") == ("0",)
    lite.commit([Write.between(DocKey("t", _subject("boundary")), None, {"n": 1})])  # seq FOLD_EVERY
    with lite._read_tx() as tx:
        assert tx.one("SELECT MAX(seq) FROM transitions") == (FOLD_EVERY,)
        assert tx.one("SELECT value FROM stateflow_meta WHERE key = 'counts_folded'") == (str(FOLD_EVERY),)
    after = _exact(lite)
    assert after[("t", "kind", "thread")] == before[("t", "kind", "thread")] + 1
    # the rows now hold every counter: no delta after the fold is counted twice
    assert {(s, c, name): n for s, c, name, n in _state_counts_rows(lite) if n} == after
    lite.commit([Write.between(DocKey("t", _subject("after")), None, {"n": 1, "z": 1})])
    assert _exact(lite)[("t", "member", "z")] == 1


_WRITER = textwrap.dedent(
    """
    import sys
    from stateflow.store import DocKey, Write, open_store
    from stateflow.subjects import encode_subject

    path, tag, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = open_store(path)
    for i in range(count):
        key = DocKey("race", encode_subject("agent", "a", tag, f"k{i % 23}"))
        doc = store.get(key)
        if doc.body is not None and i % 5 == 0:
            body = None
        else:
            body = {"n": i, f"{tag}{i % 3}": i}
        def compute(docs, key=key, body=body):
            return [Write.between(key, docs[key].body, body, docs[key].revision)], None
        store.update([key], compute, {"by": tag}, optimistic=bool(i % 2))
    store.close()
    """
)


def test_two_processes_writing_at_once_keep_the_counts_exact(tmp_path: Path) -> None:
    path = str(tmp_path / "race.db")
    open_store(path).close()
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    writers = [
        subprocess.Popen([sys.executable, "-c", _WRITER, path, tag, "330"], env=env) for tag in ("x", "y")
    ]
    for writer in writers:
        assert writer.wait(timeout=300) == 0
    store = open_store(path)
    try:
        with store._read_tx() as tx:
            (seq,) = tx.one("SELECT MAX(seq) FROM transitions") or (0,)
            (folded,) = tx.one("SELECT value FROM stateflow_meta WHERE key = 'counts_folded'") or ("0",)
        assert seq >= 2 * FOLD_EVERY and int(folded) >= FOLD_EVERY  # folds crossed while both wrote
        counted = _exact(store)
        assert counted[("race", "kind", "x")] + counted[("race", "kind", "y")] == store.count("race")
    finally:
        store.close()


_KILLED_IN_FOLD = textwrap.dedent(
    """
    import os, signal, sys
    from stateflow.store import DocKey, Write, open_store
    from stateflow.subjects import encode_subject

    store = open_store(sys.argv[1])
    conn = store._writer()

    def kill_mid_fold(sql):
        # the fold's rows are added; the killed process never moves counts_folded
        if sql.startswith("INSERT INTO stateflow_meta (key, value) VALUES ('counts_folded'"):
            os.kill(os.getpid(), signal.SIGKILL)

    conn.set_trace_callback(kill_mid_fold)
    for i in range(10 ** 6):
        store.commit([Write.between(DocKey("t", encode_subject("agent", "a", "thread", f"k{i}")), None, {"a": i})])
    """
)


def test_a_process_killed_in_the_middle_of_a_fold_leaves_the_counts_exact(tmp_path: Path) -> None:
    path = str(tmp_path / "killed.db")
    store = open_store(path)
    for i in range(20):
        store.commit([Write.between(DocKey("t", _subject(f"pre{i}", "user")), None, {"b": i})])
    store.close()
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    killed = subprocess.run([sys.executable, "-c", _KILLED_IN_FOLD, path], env=env, timeout=300, check=False)
    assert killed.returncode == -signal.SIGKILL
    store = open_store(path)
    try:
        with store._read_tx() as tx:
            # the fold and the commit it rode in went together: the boundary's seq is not there
            assert tx.one("SELECT MAX(seq) FROM transitions") == (FOLD_EVERY - 1,)
            assert tx.one("SELECT value FROM stateflow_meta WHERE key = 'counts_folded'") == ("0",)
        assert _state_counts_rows(store) == []
        counted = _exact(store)
        assert counted[("t", "kind", "thread")] == FOLD_EVERY - 1 - 20
        # the next writer's commit at the boundary folds, once
        store.commit([Write.between(DocKey("t", _subject("next")), None, {"a": 1})])
        with store._read_tx() as tx:
            assert tx.one("SELECT value FROM stateflow_meta WHERE key = 'counts_folded'") == (
                str(FOLD_EVERY),
            )
        assert _exact(store)[("t", "kind", "thread")] == FOLD_EVERY - 20
    finally:
        store.close()


# ------------------------------------------------------------------ the kind's rule, pinned


def _triggered_kinds(subjects: list[str]) -> list[str]:
    """Each subject's kind as the schema-41 trigger counted it: documents inserted present into a
    store of that version, one state each, and the kind read back from ``state_counts``."""
    lite = sqlite3.connect(":memory:")
    for version in range(1, 42):
        for statement in statements(SQLITE[version]):
            lite.execute(statement)
    kinds = []
    for i, subject in enumerate(subjects):
        lite.execute(
            "INSERT INTO documents (state, subject, revision, present) VALUES (?, ?, 1, 1)",
            (f"s{i}", subject),
        )
        rows = lite.execute("SELECT name FROM state_counts WHERE state = ? AND counter = 'kind'", (f"s{i}",))
        (kind,) = rows.fetchall()
        kinds.append(kind[0])
    lite.close()
    return kinds


_AWKWARD = [
    encode_subject("agent", "a", "thread", "k"),
    encode_subject("agent", 'a"b', "thread", "k\\x"),
    encode_subject("agent", "a", 'th"re\\ad', "k"),
    encode_subject("agent", "a", "\u00e9t\u00e9 \U0001f600", "k"),
    '["a","b","c","d"]',
    '[1,2,"k",{}]',
    '["a","b",3,"d"]',
    '["a","b","c"]',
    '["a","b","c","d","e"]',
    '{"a":1}',
    '["a","b\\n","c","d"]',
    '["a","b\n","c","d"]',
    '["a","b","c","d",]',
    "['a','b','c','d']",
    '["a","b","c",NaN]',
    '["a","b","c",1e999]',
    '["a","b","c",123456789012345678901234567890]',
    ' ["a" , "b","k","d"] ',
    '["a","b","k\\"x","d"]',
    '["a","b","k\\u0000z","d"]',
    '["a","b","\x7f","d"]',
    '["a","b","","d"]',
    '["a","b","c\\/","d"]',
    '["a","b","c","d"]x',
    "",
    "[]",
    "plain",
    "[" * 1200 + "]" * 1200,
    "[[" + "[" * 1100 + "]" * 1100 + '],"b","k","d"]',
    "[[" + "[" * 1998 + "]" * 1998 + '],"b","deep","d"]',
    "[[" + "[" * 1999 + "]" * 1999 + '],"b","too deep","d"]',
    '[{"x":' + "[" * 1500 + "]" * 1500 + '}, 1, "k", {"a" : [1, 2.5e3, true, null, -0.5E-2]}]',
]


def test_the_kind_in_python_is_the_triggers_for_awkward_subjects() -> None:
    assert [sqlite_subject_kind(s) for s in _AWKWARD] == _triggered_kinds(_AWKWARD)


_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)


@given(
    st.lists(
        st.one_of(
            st.lists(_JSONISH, min_size=3, max_size=5).map(lambda v: json.dumps(v, ensure_ascii=False)),
            st.lists(st.text(max_size=8), min_size=4, max_size=4).map(lambda v: json.dumps(v)),
            st.lists(st.text(max_size=8), min_size=4, max_size=4).map(
                lambda v: json.dumps(v, ensure_ascii=False)
            ),
            st.text(alphabet='[]",\\ abc\n\t{}:0u', max_size=24),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_the_kind_in_python_is_the_triggers_for_any_subject(subjects: list[str]) -> None:
    assert [sqlite_subject_kind(s) for s in subjects] == _triggered_kinds(subjects)


_NAMES = st.lists(st.sampled_from(["a", "b", "c", 'q"uote', "\\"]), max_size=4)


@given(
    present=st.booleans(),
    was_present=st.booleans(),
    kind=st.sampled_from(["thread", "", "k\\u00e9", "\\ud800"]),
    whole=st.booleans(),
    added=_NAMES,
    dropped=_NAMES,
    state=st.sampled_from(["t", "u"]),
)
def test_one_documents_counters_text_is_the_general_counts(
    present: bool, was_present: bool, kind: str, whole: bool, added: list[str], dropped: list[str], state: str
) -> None:
    """``counted_one`` (a commit of one document: the text kept by what decides it) gives the
    bytes ``encoded(count_plans(…))`` gives, the first time and every time after — for each
    state (its texts are kept across states: one state's must never answer for another's)."""
    key = DocKey(
        state, encode_subject("agent", "a", "x", "k") if kind == "thread" else f'["a","b","{kind}","k"]'
    )
    row = DocRow(7, 1, True, None, 0, 0, 0, 0)
    for created in (key, None):
        plan = WritePlan(7, 2, present, was_present)
        plan.created = created
        if whole:
            plan.names_moved = (added, dropped)
        else:
            plan.inserts = [(7, name) for name in added]
            plan.deletes = [(7, name) for name in dropped]
        expected = encoded(count_plans([plan], lambda: [(7, key)]))
        locked = (
            []
            if created is not None
            else [(DocKey("t", "other"), DocRow(3, 1, True, None, 0, 0, 0, 0)), (key, row)]
        )
        assert counted_one(plan, locked) == expected
        assert counted_one(plan, locked) == expected  # (kept)
