"""Whole form: a small document of a state that keeps whole bodies is its ``documents.body``,
with no member rows (``SqlStore.keep_whole``, ``plan.WHOLE_ROW_MAX``). Every write reads back
exactly as in member form, through every writer, across the bound both ways, on real SQLite
files; PostgreSQL keeps member form."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from stateflow.doc.diff import Edit
from stateflow.doc.select import MISSING
from stateflow.errors import InvalidInput
from stateflow.states.search import matches
from stateflow.store import DocKey, SqlStore, Whole, Write, open_store
from stateflow.store.plan import WHOLE_ROW_MAX
from stateflow.store.postgres import PostgresStore
from stateflow.store.rows import outline_of, whole_members
from stateflow.store.sqlite import _UNSPELLED
from stateflow.subjects import encode_subject

STATE = "kept"
_SUBJECTS = itertools.count()
_MARKED: set[str] = set()
"""The kinds of step after which a whole-form document's creating change kept the mark."""
_READERS: dict[Path, SqlStore] = {}
"""A second store on each test's whole-form file (one for all of a property test's examples)."""


def _rows(store: SqlStore, key: DocKey) -> tuple[bytes | None, int]:
    """The document's ``documents.body`` and its count of member rows."""
    with store._read_tx() as tx:
        found = tx.one("SELECT doc_id, body FROM documents WHERE state = ? AND subject = ?", tuple(key))
        if found is None:
            return None, 0
        members = tx.one("SELECT count(*) FROM members WHERE doc_id = ?", (found[0],))
    assert members is not None
    return (None if found[1] is None else bytes(found[1])), int(members[0])


def _form(store: SqlStore, key: DocKey) -> str:
    body, members = _rows(store, key)
    if body is not None:
        assert members == 0, "a whole-form document has no member rows"
        return "whole"
    return "members"


def _everything(store: SqlStore, key: DocKey) -> dict[str, Any]:
    """What the store's current reads say of ``key``: the document, its sizes, a member's read
    with an outline, and every revision as of its number."""
    doc = store.get(key)
    names = list(doc.body or {})
    out: dict[str, Any] = {
        "revision": doc.revision,
        "body": doc.body,
        "order": names,
        "sizes": store.member_sizes(key),
    }
    if names:
        part = store.get(key, [names[-1]], outlines=[names[0]])
        out["part"] = (part.body, part.outlines)
    asked = [(n,) for n in names] + [(n, "k") for n in names] + [("absent",)]
    now = store.read_paths({key: asked})[key]
    out["paths"] = (now.revision, [(t.value, t.reached) for t in now.trails])
    out["children"] = [store.children(key, (n,)) for n in names]
    if doc.revision > 1:
        then = store.read_paths({key: asked}, revisions={key: doc.revision - 1})[key]
        out["paths before"] = [(t.value, t.reached) for t in then.trails]
    out["history"] = [store.read_at(key, revision=r).body for r in range(1, doc.revision + 1)]
    # the changes as every history reader decodes them: a marked creation (whole form) reads as
    # the body set whole, which member form keeps as a copy
    out["changes"] = [([e.to_json() for e in c.edits], c.paths) for c in store.history([key], limit=1000)]
    return out


def _marks_hold(store: SqlStore, key: DocKey) -> bool:
    """The mark is only ever at a whole-form document's current revision, its creation written
    whole (revision 1 or the first after a delete), and nowhere in member form; whether it is
    there now."""
    with store._read_tx() as tx:
        row = tx.one(
            "SELECT doc_id, revision, body FROM documents WHERE state = ? AND subject = ?", tuple(key)
        )
        if row is None:
            return False
        marked = [
            int(r)
            for (r,) in tx.all("SELECT revision FROM changes WHERE doc_id = ? AND edits = X'3D'", (row[0],))
        ]
        before = tx.one(
            "SELECT edits FROM changes WHERE doc_id = ? AND revision = ?", (row[0], int(row[1]) - 1)
        )
    assert marked in ([], [int(row[1])]), marked
    if marked:
        assert row[2] is not None, "a mark stands for a whole-form body"
        assert int(row[1]) == 1 or (before is not None and before[0] is not None), "its creation"
    return bool(marked)


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[SqlStore, SqlStore, Path]]:
    """Two SQLite files: the first keeps ``STATE`` in whole form, the second in member form."""
    whole = open_store(str(tmp_path / "whole.db"))
    members = open_store(str(tmp_path / "members.db"))
    assert isinstance(whole, SqlStore) and isinstance(members, SqlStore)
    assert whole.keep_whole(STATE)
    try:
        yield whole, members, tmp_path / "whole.db"
    finally:
        whole.close()
        members.close()
        reader = _READERS.pop(tmp_path / "whole.db", None)
        if reader is not None:
            reader.close()


def _value(size: int) -> str:
    return "x" * size


Body = dict[str, Any]

# (name, encoded size of its value): small members, and large ones that push a body past the bound
_names = st.sampled_from(["a", "b", "c", "d", "é"])
_values = st.one_of(
    st.integers(-5, 5),
    st.sampled_from([None, True, "s", [1, 2], {"k": 1, "l": [2]}]),
    st.integers(1, 5).map(lambda n: _value(n * 900)),
)
_bodies = st.dictionaries(_names, _values, max_size=5)
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("put"), _bodies, st.sampled_from(["commit", "update", "optimistic", "whole"])),
        st.tuples(st.just("set"), _names, _values),
        st.tuples(st.just("drop"), _names),
        st.tuples(st.just("delete")),
    ),
    min_size=1,
    max_size=12,
)


def _apply(store: SqlStore, key: DocKey, step: tuple[Any, ...]) -> None:
    """One write of ``key``, by the writer the step names."""
    current = store.get(key)
    before = current.body
    kind = step[0]
    if kind == "put":
        body, how = step[1], step[2]
        if how == "commit":
            store.commit([Write.between(key, before, body, current.revision)])
        elif how == "whole":

            def build(_: dict[DocKey, Any], was: dict[str, Any] | None) -> Whole:
                return Whole(dict(body), [[]])

            if not store.write_whole(key, build, {"door": "test"}):
                store.commit([Write.between(key, before, body, current.revision)])
        else:

            def compute(docs: dict[DocKey, Any]) -> tuple[list[Write], None]:
                return [Write.between(key, docs[key].body, body, docs[key].revision)], None

            store.update([key], compute, optimistic=how == "optimistic")
    elif kind == "set":
        if before is None:
            store.commit([Write(key, [Edit((), {step[1]: step[2]})], current.revision)])
        else:
            store.commit([Write(key, [Edit((step[1],), step[2])], current.revision)])
    elif kind == "drop":
        if before is not None and step[1] in before:
            store.commit([Write(key, [Edit((step[1],), MISSING)], current.revision)])
    elif before is not None:
        store.commit([Write.between(key, before, None, current.revision)])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=_steps)
def test_any_sequence_of_writes_reads_back_the_same_in_whole_form_and_member_form(
    stores: tuple[SqlStore, SqlStore, Path], steps: list[tuple[Any, ...]]
) -> None:
    whole, members, path = stores
    reader = _READERS.get(path)
    if reader is None:
        opened = open_store(str(path))
        assert isinstance(opened, SqlStore)
        reader = _READERS[path] = opened
    key = DocKey(STATE, f"doc-{next(_SUBJECTS)}")
    forms = set()
    for step in steps:
        _apply(whole, key, step)
        _apply(members, key, step)
        if _marks_hold(whole, key):
            _MARKED.add(step[0])
        assert not _marks_hold(members, key)
        expected = _everything(members, key)
        assert _everything(whole, key) == expected, step
        # another store on the same file: what it caches is only what it read itself
        assert _everything(reader, key) == expected, step
        assert _form(members, key) == "members"
        doc = whole.get(key)
        if doc.body is not None:
            fits = len(orjson.dumps(doc.body)) <= WHOLE_ROW_MAX
            form = _form(whole, key)
            forms.add(form)
            # a write that leaves the body within the bound leaves it whole; one past it, rows
            assert form == ("whole" if fits else "members"), (step, doc.body)
    # read afresh: nothing cached, every answer from the file
    again = open_store(str(path))
    assert isinstance(again, SqlStore)
    try:
        assert _everything(again, key) == _everything(members, key)
    finally:
        again.close()


def test_the_property_tests_writes_met_the_mark(stores: tuple[SqlStore, SqlStore, Path]) -> None:
    """The steps above create documents whole (the mark) and move them past it; run alone, it
    replays a few sequences that do so."""
    whole, members, _ = stores
    key = DocKey(STATE, "marked")
    steps: list[tuple[Any, ...]] = [
        ("put", {"a": 1}, "whole"),
        ("set", "b", 2),
        ("delete",),
        ("set", "a", [1, 2]),
        ("drop", "a"),
    ]
    for step in steps:
        _apply(whole, key, step)
        _apply(members, key, step)
        if _marks_hold(whole, key):
            _MARKED.add(step[0])
        assert _everything(whole, key) == _everything(members, key), step
    assert {"put", "set"} <= _MARKED


def _fill(store: SqlStore, key: DocKey, body: Body) -> None:
    store.commit([Write.between(key, None, body)])


def test_a_small_document_is_one_row_and_converts_both_ways_across_the_bound(
    stores: tuple[SqlStore, SqlStore, Path],
) -> None:
    whole, _, path = stores
    key = DocKey(STATE, "t")
    _fill(whole, key, {"a": 1, "b": {"c": [1, 2]}})
    assert _rows(whole, key) == (b'{"a":1,"b":{"c":[1,2]}}', 0)
    big = _value(WHOLE_ROW_MAX)
    whole.commit([Write(key, [Edit(("big",), big)])])  # past the bound: every member a row
    assert _rows(whole, key) == (None, 3)
    assert whole.get(key).body == {"a": 1, "b": {"c": [1, 2]}, "big": big}
    whole.commit([Write(key, [Edit(("big",), MISSING)])])  # back within it: whole again
    assert _rows(whole, key) == (b'{"a":1,"b":{"c":[1,2]}}', 0)
    whole.commit([Write(key, [Edit(("a",), 2)])])
    assert _rows(whole, key) == (b'{"a":2,"b":{"c":[1,2]}}', 0)
    assert whole.get(key, ["b"], outlines=["b"]).outlines == {"b": {"c": "array"}}
    assert whole.member_sizes(key) == {"a": 1, "b": 11}
    fresh = open_store(str(path))
    assert isinstance(fresh, SqlStore)
    try:
        assert fresh.get(key).body == {"a": 2, "b": {"c": [1, 2]}}
        assert fresh.get(key, ["b"], outlines=["b"]).outlines == {"b": {"c": "array"}}
        assert fresh.member_sizes(key) == {"a": 1, "b": 11}
        assert [fresh.read_at(key, revision=r).body for r in range(1, 5)] == [
            {"a": 1, "b": {"c": [1, 2]}},
            {"a": 1, "b": {"c": [1, 2]}, "big": big},
            {"a": 1, "b": {"c": [1, 2]}},
            {"a": 2, "b": {"c": [1, 2]}},
        ]
    finally:
        fresh.close()


def test_the_bound_is_the_states_and_other_states_keep_member_form(
    stores: tuple[SqlStore, SqlStore, Path],
) -> None:
    whole, _, _ = stores
    assert whole.keep_whole("small", 18)
    _fill(whole, DocKey("small", "fits"), {"a": "0123456789"})  # 16 bytes encoded
    _fill(whole, DocKey("small", "over"), {"a": "01234567890"})
    _fill(whole, DocKey("other", "x"), {"a": 1})
    assert _form(whole, DocKey("small", "fits")) == "whole"
    assert _form(whole, DocKey("small", "over")) == "members"
    assert _form(whole, DocKey("other", "x")) == "members"
    # a bound of 0: member form again from each document's next write
    assert whole.keep_whole("small", 0)
    whole.commit([Write(DocKey("small", "fits"), [Edit(("b",), 1)])])
    assert _form(whole, DocKey("small", "fits")) == "members"
    assert whole.get(DocKey("small", "fits")).body == {"a": "0123456789", "b": 1}


def test_keep_whole_refuses_a_bound_it_cannot_keep(stores: tuple[SqlStore, SqlStore, Path]) -> None:
    whole, _, _ = stores
    for bad in (-1, WHOLE_ROW_MAX + 1, 1.5, True):
        with pytest.raises(InvalidInput, match="max_bytes"):
            whole.keep_whole(STATE, bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="state"):
        whole.keep_whole("")


def test_the_choice_is_kept_in_the_store_for_every_store_opened_on_it(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    first = open_store(path)
    assert isinstance(first, SqlStore)
    try:
        first.keep_whole(STATE, 100)
    finally:
        first.close()
    second = open_store(path)
    assert isinstance(second, SqlStore)
    try:
        _fill(second, DocKey(STATE, "a"), {"n": 1})
        assert _form(second, DocKey(STATE, "a")) == "whole"
    finally:
        second.close()


def test_postgresql_keeps_member_form(backend: str) -> None:
    store = open_store(backend, auto_migrate=True)
    assert isinstance(store, SqlStore)
    try:
        state = f"kept_{id(store)}"
        kept = store.keep_whole(state)
        assert kept is (not isinstance(store, PostgresStore))
        if not isinstance(store, PostgresStore):
            return
        key = DocKey(state, "a")
        _fill(store, key, {"a": 1, "b": [1]})
        store.commit([Write(key, [Edit(("a",), 2)])])
        assert _rows(store, key) == (None, 2)
        assert store.get(key).body == {"a": 2, "b": [1]}
    finally:
        store.close()


_SEARCH_NAMES = ["a", "b", 'q"x', "n\\m"]  # (two no JSON path of SQLite's spells)
_SEARCH_SCALARS = st.one_of(
    st.integers(-3, 3),
    st.sampled_from([None, True, False, "", "s", "t", "é", "a\u0000b", 1.5, 2**63, 2**53 + 1]),
)
_SEARCH_VALUES = st.one_of(
    _SEARCH_SCALARS,
    st.lists(_SEARCH_SCALARS, max_size=2),
    st.dictionaries(st.sampled_from(["k", "l"]), _SEARCH_SCALARS, max_size=2),
    st.integers(1, 3).map(lambda n: _value(n * 150)),  # (crosses the bound of 300 bytes)
)
_SEARCH_BODIES = st.dictionaries(st.sampled_from(_SEARCH_NAMES), _SEARCH_VALUES, max_size=4)
_SEARCH_WRITES = st.lists(
    st.tuples(st.sampled_from(["x", "y"]), st.integers(0, 5), st.one_of(st.none(), _SEARCH_BODIES)),
    min_size=1,
    max_size=14,
)
_FILTERS = st.dictionaries(
    st.sampled_from(_SEARCH_NAMES),
    st.one_of(_SEARCH_SCALARS, st.lists(_SEARCH_SCALARS, max_size=1), st.just({}), st.just({"k": 1})),
    max_size=2,
)
_BOUNDS = st.lists(
    st.tuples(
        st.sampled_from(_SEARCH_NAMES),
        st.sampled_from(["$gt", "$gte", "$lt", "$lte"]),
        st.one_of(st.integers(-3, 3), st.sampled_from(["", "s", 2**64])),
    ),
    max_size=1,
)
_ORDERS = st.lists(
    st.tuples(st.sampled_from([("a",), ("b",), ("a", "k"), ('q"x',), ("b", "n\\m")]), st.booleans()),
    min_size=1,
    max_size=2,
)


def _answers(store: SqlStore, filters: dict[str, Any], bounds: Any, order: Any, within: str) -> Any:
    """What the listings of ``STATE`` answer, time left out (the stores' clocks differ)."""

    def keys(listed: Any) -> list[tuple[str, int]]:
        return [(item.key.subject, item.revision) for item in listed]

    out: dict[str, Any] = {"counts": store.counts(STATE), "scan": keys(store.scan(STATE))}
    if filters or bounds:
        out["search"] = keys(store.search(STATE, filters, bounds=bounds))
        paged, after = [], None
        while True:  # (two at a time, each page after the last one's subject)
            page = store.search(STATE, filters, after=after, limit=2, bounds=bounds, within=within)
            paged += keys(page)
            if len(page) < 2:
                break
            after = page[-1].key.subject
        out["paged"] = paged
    ordered = store.search_sorted(STATE, filters, order, bounds=bounds)
    out["sorted"] = None if ordered is None else [(x.key.subject, x.revision, v) for x, v in ordered]
    if ordered is not None:
        sorted_paged: list[tuple[str, int, Any]] = []
        at = None
        while True:
            found = store.search_sorted(STATE, filters, order, after=at, limit=2, bounds=bounds)
            assert found is not None
            sorted_paged += [(x.key.subject, x.revision, v) for x, v in found]
            if len(found) < 2:
                break
            at = (found[-1][1], found[-1][0].key.subject)
        out["sorted pages"] = sorted_paged
    return out


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(writes=_SEARCH_WRITES, filters=_FILTERS, bounds=_BOUNDS, order=_ORDERS)
@example(writes=[("x", 0, {"a": "a\x00b"})], filters={'q"x': 0}, bounds=[], order=[(("a",), False)])
def test_listings_over_both_forms_answer_as_over_member_form(
    tmp_path: Path,
    writes: list[tuple[str, int, Body | None]],
    filters: dict[str, Any],
    bounds: list[tuple[str, str, Any]],
    order: list[tuple[tuple[str, ...], bool]],
) -> None:
    """A state holding both forms (small documents whole, larger ones as member rows, writes
    crossing the bound both ways) is searched, sorted, paged and counted exactly as the same
    writes in member form: every filter and bound the store takes (scalars, arrays, objects,
    names no JSON path spells, a string holding U+0000, numbers SQL reads rounded), cursors, and
    counters equal to a recount of the rows and bodies."""
    run = next(_SUBJECTS)
    whole = open_store(str(tmp_path / f"whole-{run}.db"))
    members = open_store(str(tmp_path / f"members-{run}.db"))
    assert isinstance(whole, SqlStore) and isinstance(members, SqlStore)
    try:
        assert whole.keep_whole(STATE, 300)
        for kind, n, body in writes:
            key = DocKey(STATE, encode_subject("agent", "a", kind, f"k{n}"))
            for store in (whole, members):
                now = store.get(key)
                if now.body != body:
                    store.commit([Write.between(key, now.body, body, now.revision)])
        within = encode_subject("agent", "a", "x", "")[:-2]
        got = _answers(whole, filters, bounds, order, within)
        expected = _answers(members, filters, bounds, order, within)
        # (a bound narrows candidates as far as SQL tells, a superset the caller checks: so here)
        predicates: list[tuple[tuple[str, ...], str, Any]] = [
            ((name,), op, operand) for name, op, operand in bounds
        ]
        bodies = {item.key.subject: members.get(item.key).body for item in members.scan(STATE, limit=100)}
        for answers in (got, expected):
            for part, listed in answers.items():
                if part != "counts" and listed is not None:
                    answers[part] = [item for item in listed if matches(bodies[item[0]], predicates)]
        names = [*(name for path, _ in order for name in path), *filters, *(name for name, _, _ in bounds)]
        if got["sorted"] is None and any(_UNSPELLED.search(name) for name in names):
            # (no JSON path spells a name it sorts or filters by: SQL cannot read it from a
            # whole body, so the store answers None, and the caller sorts)
            for answers in (got, expected):
                answers.pop("sorted")
                answers.pop("sorted pages", None)
        assert got == expected
        with whole._read_tx() as tx:
            stored, counted = whole.recount(tx)
        assert stored == counted
    finally:
        whole.close()
        members.close()


def test_a_store_holding_both_forms_checks_clean(stores: tuple[SqlStore, SqlStore, Path]) -> None:
    from stateflow.store.check import check_store

    whole, _, _ = stores
    key = DocKey(STATE, "c")
    _fill(whole, key, {"a": 1})
    for n in range(40):  # rewrites enough for snapshots, crossing the bound and back
        big = _value(WHOLE_ROW_MAX) if n % 3 == 1 else n
        whole.commit([Write(key, [Edit(("big",), big)])])
    _fill(whole, DocKey("other", "c"), {"a": 1})
    report = check_store(whole)
    assert report.problems == [], report.problems


def _whole_write(store: SqlStore, key: DocKey, body: Body) -> None:
    """``body`` written whole by ``write_whole`` (the adapters' writer)."""

    def build(_: dict[DocKey, Any], was: dict[str, Any] | None) -> Whole:
        return Whole(dict(body), [[]])

    assert store.write_whole(key, build, {"door": "test"})


def _members_cached(store: SqlStore, key: DocKey) -> dict[str, bool]:
    """Whether the member cache holds each member of ``key`` at its revision."""
    row = store._rows_known[key]
    heads = store._heads.entry(row.doc_id, row.revision)
    assert heads is not None
    return {name: store._cache.lookup((row.doc_id, name), head[3])[0] for name, head in heads[1].items()}


def test_a_document_written_once_holds_its_body_alone_until_its_heads_are_asked(
    stores: tuple[SqlStore, SqlStore, Path],
) -> None:
    """A whole-form creation whose change keeps the mark (a record written once: a checkpoint)
    leaves the head cache its body alone: its heads — an outline for each object member — are
    made when first asked, and a writer that checks the document did not move (``write_whole``'s
    ``also``: a checkpoint's parent) reads the body alone. The heads made are those a reader
    of the row makes (positions from 0, also when the document is created again after a delete,
    where the row's next position is past them), and every read and later write answers as
    another store on the file does."""
    whole, _, path = stores
    key, child = DocKey(STATE, "once"), DocKey(STATE, "child")
    _fill(whole, DocKey("other", "first"), {"a": 1})  # (ids are reserved once a document exists)

    def held(at: DocKey) -> tuple[int, Any, Any, int]:
        row = whole._rows_known[at]
        return whole._heads._entries[row.doc_id]

    def written_on(body: Body) -> None:
        def build(shared: dict[DocKey, Any], was: dict[str, Any] | None) -> Whole:
            assert shared[key] == body  # (the document checked: its body as last written)
            return Whole({"n": len(body)}, [[]])  # (each call another body: written)

        assert whole.write_whole(child, build, {"door": "test"}, also=key)

    body = {"a": 1, "b": {"c": [1, 2]}, "d": "x"}
    _whole_write(whole, key, body)
    assert held(key)[1] is None and held(key)[2] == body
    written_on(body)
    assert held(key)[1] is None  # read as a parent: no heads made
    reader = open_store(str(path))
    assert isinstance(reader, SqlStore)
    try:
        row = whole._rows_known[key]
        made = whole._heads.get(row.doc_id, row.revision)  # first asked: made from the body
        assert made == whole_members(row.doc_id, row.revision, _rows(whole, key)[0], "a row")[0]
        assert held(key)[1] is made  # (made once, kept)
        assert _everything(whole, key) == _everything(reader, key)
        whole.commit([Write.between(key, whole.get(key).body, None, row.revision)])
        assert whole._rows_known[key].next_position == 3
        again = {"e": {"f": 1}, "a": 2}
        _whole_write(whole, key, again)  # created again: its row's next position is 3
        assert held(key)[1] is None
        written_on(again)
        row = whole._rows_known[key]
        assert row.next_position == 5
        made = whole._heads.get(row.doc_id, row.revision)
        assert made is not None and [h[2] for h in made.values()] == [0, 1]
        assert made == whole_members(row.doc_id, row.revision, _rows(whole, key)[0], "a row")[0]
        # the next writes start from the heads made: a member added, then past the bound
        _whole_write(whole, key, {**again, "g": [1]})
        _whole_write(whole, key, {**again, "g": [1], "big": _value(WHOLE_ROW_MAX)})
        assert _form(whole, key) == "members"
        assert _everything(whole, key) == _everything(reader, key)
    finally:
        reader.close()


def test_a_whole_form_write_is_planned_without_member_entries_and_reads_back(
    stores: tuple[SqlStore, SqlStore, Path],
) -> None:
    """A document written in whole form — new, rewritten, given a member — leaves the member
    cache no entries (its members come from the head cache's body, store v5 phase E); one
    written out of whole form past the bound caches every member it now has a row for."""
    whole, _, path = stores
    key = DocKey(STATE, "cache")
    _fill(whole, DocKey("other", "first"), {"a": 1})  # (ids are reserved once a document exists)
    _whole_write(whole, key, {"a": 1, "b": {"c": [1, 2]}})
    assert _members_cached(whole, key) == {"a": False, "b": False}
    _whole_write(whole, key, {"a": 2, "b": {"c": [1, 2]}, "d": "new"})
    assert _form(whole, key) == "whole"
    assert _members_cached(whole, key) == {"a": False, "b": False, "d": False}
    assert whole.get(key).body == {"a": 2, "b": {"c": [1, 2]}, "d": "new"}
    assert whole.get(key, ["b"], outlines=["b"]).outlines == {"b": {"c": "array"}}
    big = _value(WHOLE_ROW_MAX)
    _whole_write(whole, key, {"a": 2, "b": {"c": [1, 2]}, "d": "new", "big": big})
    assert _form(whole, key) == "members"
    assert _members_cached(whole, key) == {"a": True, "b": True, "d": True, "big": True}
    other = open_store(str(path))
    assert isinstance(other, SqlStore)
    try:
        assert [other.read_at(key, revision=r).body for r in (1, 2, 3)] == [
            {"a": 1, "b": {"c": [1, 2]}},
            {"a": 2, "b": {"c": [1, 2]}, "d": "new"},
            {"a": 2, "b": {"c": [1, 2]}, "d": "new", "big": big},
        ]
    finally:
        other.close()


def test_a_rewrite_keeps_an_object_members_outline_only_where_it_is_unchanged(
    stores: tuple[SqlStore, SqlStore, Path],
) -> None:
    """A whole-form rewrite keeps an object member's outline from before only where its keys,
    their order and their values' types are unchanged; every other rewrite outlines it again —
    the cached outline is the one a reader of the file makes (another store on it)."""
    whole, _, path = stores
    key = DocKey(STATE, "outline")
    _fill(whole, DocKey("other", "first"), {"a": 1})  # (ids are reserved once a document exists)
    bodies: list[Body] = [
        {"v": {"n": 1, "t": "x", "l": ["a"]}, "w": 1},
        {"v": {"n": 2, "t": "x", "l": ["a"]}, "w": 1},  # (kept: a value changed, its type not)
        {"v": {"t": "x", "n": 3, "l": ["a"]}, "w": 1},  # the keys reordered
        {"v": {"t": "x", "n": "3", "l": ["a"]}, "w": 1},  # a value's kind changed
        {"v": {"t": "x", "n": True, "l": ["a"]}, "w": 2},  # a string to a boolean
        {"v": {"t": "x", "n": 1, "l": ["a"]}, "w": 2},  # a boolean to a number
        {"v": {"t": "x", "n": 1.5, "l": ["a"]}, "w": 2},  # an integer to a float: the same kind
        {"v": {"t": "x", "n": 1.5, "m": ["a"]}, "w": 2},  # a key renamed
        {"v": {"t": "x", "n": 1.5}, "w": 2},  # a key dropped
        {"v": {"t": "x", "n": 1.5, "k": {}}, "w": 2},  # a key added
        {"v": [1], "w": 2},  # no longer an object
        {"v": {"t": None}, "w": 2},  # an object again
        {"v": {"p": 1, "q": 2}, "w": 2},
        {"v": {"q": 2, "p": 3}, "w": 2},  # two keys of one type swapped
    ]
    other = open_store(str(path))
    assert isinstance(other, SqlStore)
    try:
        for body in bodies:
            _whole_write(whole, key, body)
            assert _form(whole, key) == "whole"
            cached = whole.get(key, ["w"], outlines=["v"]).outlines
            other._heads.clear()  # (the file's rows, outlined again)
            assert cached == other.get(key, ["w"], outlines=["v"]).outlines, body
            assert cached == {"v": outline_of(body["v"]) if type(body["v"]) is dict else None}, body
    finally:
        other.close()
