"""A document's key order is the same at every revision however it is read: as of a past
revision (rebuilt from history), now, or after ``stateflow dump`` → ``stateflow load``.

The current read keeps members in write order (``members.position``: a new member after the
others, one deleted and added again last); history records each change's member edits in that
order too (inline, and in ``change_edits`` by ``ord``), so a rebuilt revision and a replayed
load give the keys the current read gave at that revision. Nested objects travel as JSON.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from stateflow.doc.diff import Edit
from stateflow.doc.select import MISSING
from stateflow.states import StatesService
from stateflow.store import DocKey, Write, open_store
from stateflow.store.base import SqlStore

from .conftest import StoreFactory
from .memory_helpers import view

SUBJECT = {"target_kind": "agent", "target_name": "a", "kind": "thread", "key": "k"}
STATE = {
    "schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}


def _set(**members: Any) -> list[dict[str, Any]]:
    return [{"op": "set", "path": [name], "value": value} for name, value in members.items()]


def _walk(service: StatesService, pad: str, subject: dict[str, str] = SUBJECT) -> list[Any]:
    """Write a record through its revisions; the data the current read gave after each (index:
    revision)."""
    seen: list[Any] = [None]

    def now() -> None:
        record = service.read("notes", subject)
        assert record is not None and record["revision"] == len(seen)
        seen.append(record["data"])

    service.replace("notes", subject, {"zeta": 1 + len(pad), "alpha": pad or 2, "obj": {"z": 1, "a": 2}})
    now()
    service.apply("notes", subject, _set(zeta=10))
    now()
    service.apply("notes", subject, _set(mid=pad or 3))  # a member added later: after the others
    now()
    service.apply("notes", subject, _set(yy=pad or 1, bb={"y": pad, "b": 2}))  # two at once: as written
    now()
    service.apply("notes", subject, [{"op": "remove", "path": ["alpha"]}])
    now()
    service.apply("notes", subject, _set(alpha=7))  # deleted and added again: last
    now()
    service.apply("notes", subject, _set(zeta=11, obj={"q": pad, "c": 1}))
    now()
    return seen


def _keys(data: Any) -> Any:
    """The key order of a value, nested objects included."""
    if isinstance(data, dict):
        return [(k, _keys(v)) for k, v in data.items()]
    if isinstance(data, list):
        return [_keys(v) for v in data]
    return None


@pytest.mark.parametrize("pad", ["", "p" * 600], ids=["inline-edits", "edits-apart"])
def test_a_record_read_as_of_each_revision_keeps_the_key_order_it_had(store: SqlStore, pad: str) -> None:
    service = StatesService(store)
    service.declare("notes", STATE)
    seen = _walk(service, pad)
    assert list(seen[1]) == ["zeta", "alpha", "obj"]
    assert list(seen[3]) == ["zeta", "alpha", "obj", "mid"]
    assert list(seen[4]) == ["zeta", "alpha", "obj", "mid", "yy", "bb"]
    assert list(seen[6]) == ["zeta", "obj", "mid", "yy", "bb", "alpha"]
    for revision in range(1, len(seen)):
        record = service.read("notes", SUBJECT, revision=revision)
        assert record is not None and record["data"] == seen[revision]
        assert _keys(record["data"]) == _keys(seen[revision]), revision
    if pad:  # (the walk kept some edits apart: the case change_edits rows order)
        with store._read_tx() as tx:
            assert tx.one("SELECT count(*) FROM change_edits")[0] > 0  # type: ignore[index]


def test_store_writes_of_several_new_members_read_back_in_write_order(store: SqlStore) -> None:
    """Through the store's own writes, a change's new members replayed (``read_at``) in the
    order they were written, its edits inline or kept apart."""
    key = DocKey("notes", "d")
    bodies: list[dict[str, Any]] = [
        {"zeta": 1, "alpha": 2},
        {"zeta": 1, "alpha": 2, "mid": 3, "beta": 4},
        {"zeta": 1, "alpha": 2, "mid": 3, "beta": 4, "w": "x" * 700, "c": "y" * 700},
        {"zeta": 2, "alpha": 2, "mid": 3, "beta": 4, "w": "x" * 700, "c": "y" * 700},
    ]
    old: Any = None
    for body in bodies:
        store.commit([Write.between(key, old, body)])
        old = body
    assert list(store.get(key).body or {}) == list(bodies[-1])
    for revision, body in enumerate(bodies, 1):
        assert list(store.read_at(key, revision=revision).body or {}) == list(body), revision


def writes_keep_member_order(store: SqlStore) -> None:
    """Each write path — a commit, a locked and an optimistic update, a memory patch merged by
    the store (``patch_on_server``, taken where the scope is contended) — adds two members kept
    apart in ``change_edits`` (edits over 512 bytes) in an order that is not their names'; the
    document read as of each revision gives the keys the current read gave then, and the rows
    carry each member's place (``ord``)."""
    big = "v" * 600
    key = DocKey("notes", "paths")
    seen: list[list[str]] = []

    def now() -> None:
        doc = store.get(key)
        assert doc.revision == len(seen) + 1
        seen.append(list(doc.body or {}))

    store.commit([Write.between(key, None, {"zeta": 1})])
    now()
    store.commit([Write.between(key, store.get(key).body, {"zeta": 1, "s2": big, "s1": big})])
    now()
    for optimistic in (False, True):

        def compute(docs: dict[DocKey, Any], o: bool = optimistic) -> tuple[list[Write], None]:
            old = docs[key].body
            return [Write.between(key, old, {**old, f"u{int(o)}b": big, f"u{int(o)}a": big})], None

        store.update([key], compute, {"by": "test"}, optimistic=optimistic)
        now()
    assert seen[-1] == ["zeta", "s2", "s1", "u0b", "u0a", "u1b", "u1a"]
    for revision, keys in enumerate(seen, 1):
        assert list(store.read_at(key, revision=revision).body or {}) == keys, revision
    with store._read_tx() as tx:
        doc_id = tx.one("SELECT doc_id FROM documents WHERE state = 'notes' AND subject = 'paths'")[0]  # type: ignore[index]
        rows = tx.all(
            "SELECT revision, member, ord FROM change_edits WHERE doc_id = ? ORDER BY 1, 3", (doc_id,)
        )
    assert [tuple(r) for r in rows] == [
        (2, "s2", 0),
        (2, "s1", 1),
        (3, "u0b", 0),
        (3, "u0a", 1),
        (4, "u1b", 0),
        (4, "u1a", 1),
    ]

    m = view(store, session="order")
    m.patch_state({"session": {"intents": {"i": 1}}})
    scope = m.keys["session"]
    served = dict(store._served_revisions)
    store._contended.update(dict.fromkeys(m.keys.values(), math.inf))  # (another writer's, a moment ago)
    m.patch_state({"session": {"tactics": {"t": big}, "strategy": {"s": big}}})  # (the planes it serves)
    assert store._served_revisions != served  # (merged by patch_on_server)
    doc = store.get(scope)
    assert list(doc.body or {})[-2:] == ["tactics", "strategy"]
    m.patch_state({"session": {"intents": {"i": 2}}})  # (the merged revision now read from history)
    assert list(store.read_at(scope, revision=doc.revision).body or {}) == list(doc.body or {})
    with store._read_tx() as tx:
        rows = tx.all(
            "SELECT e.member, e.ord FROM change_edits e JOIN documents d ON d.doc_id = e.doc_id "
            "WHERE d.state = ? AND d.subject = ? AND e.revision = ? ORDER BY 2",
            (scope.state, scope.subject, doc.revision),
        )
    assert [tuple(r) for r in rows] == [("tactics", 0), ("strategy", 1)]


def test_every_write_path_keeps_a_changes_member_order(store: SqlStore) -> None:
    writes_keep_member_order(store)


def test_a_memory_scope_read_as_of_each_offset_is_the_view_it_was(store: SqlStore) -> None:
    """A scope shows its planes in the view's own order; the keys a patch adds inside a plane
    keep the order written. Read at each history offset, the scope is the view it was then,
    key order at every level included."""
    m = view(store)
    patches: list[dict[str, Any]] = [
        {"session": {"tactics": {"z": 1, "a": 2}}},
        {"session": {"strategy": {"s": 1}, "intents": {"i": 1}}},
        {"session": {"tactics": {"z": 3, "m": {"y": 1, "b": 2}, "c": 4}}},  # nested keys added
    ]
    seen: list[Any] = []
    for patch in patches:
        m.patch_state(patch)
        seen.insert(0, m.as_of(0, "session"))
    for offset, then in enumerate(seen):
        assert _keys(m.as_of(offset, "session")) == _keys(then), offset
        assert _keys(m.read_state({"path": f"session[{offset}]"})["value"]) == _keys(then), offset


def sf(location: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, STATEFLOW_STORE=location)
    return subprocess.run(["stateflow", *args], capture_output=True, text=True, timeout=120, env=env)


def _orders(location: str) -> dict[str, list[Any]]:
    """Every record's data at each of its revisions, as key orders."""
    store = open_store(location)
    service = StatesService(store)
    try:
        with store._read_tx() as tx:
            rows = tx.all("SELECT state, subject, revision FROM documents WHERE state = 'notes'")
        out = {}
        for state, subject, top in rows:
            key = DocKey(state, subject)
            out[subject] = [_keys(store.read_at(key, revision=r).body) for r in range(1, int(top) + 1)]
        return out
    finally:
        service.close()
        store.close()


@pytest.mark.parametrize("route", ["sqlite-sqlite", "sqlite-postgres", "postgres-sqlite"])
def test_dump_then_load_keeps_each_documents_key_order_at_every_revision(
    route: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    source, target = route.split("-")
    locations = {"sqlite": [str(tmp_path / "a.db"), str(tmp_path / "b.db")]}
    if "postgres" in route:
        locations["postgres"] = [request.getfixturevalue("pg_schema_url")]
    first = locations[source][0]
    second = locations[target][-1]
    store = open_store(first, auto_migrate=True)
    service = StatesService(store)
    try:
        service.declare("notes", STATE)
        seen = {pad: _walk(service, pad, {**SUBJECT, "key": f"k{len(pad)}"}) for pad in ("", "p" * 600)}
        other = {**SUBJECT, "key": "new"}
        service.apply("notes", other, _set(zeta=1, alpha=2, mid={"z": 1, "a": 2}))  # created by ops
    finally:
        service.close()
        store.close()
    before = _orders(first)
    lasts = [orders[-1] for orders in before.values()]
    assert all(_keys(walked[-1]) in lasts for walked in seen.values())
    dump = tmp_path / "dump.jsonl"
    assert sf(first, "dump", str(dump)).returncode == 0
    assert sf(second, "migrate").returncode == 0
    loaded = sf(second, "load", str(dump))
    assert loaded.returncode == 0, loaded.stderr
    assert _orders(second) == before
    checked = sf(second, "check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # the dump's own lines name the members in that order too (a document line as it is now)
    docs = [json.loads(line) for line in dump.read_text().splitlines()]
    (line,) = [
        d for d in docs if d.get("kind") == "document" and d["state"] == "notes" and "new" in d["subject"]
    ]
    assert list(line["body"]) == ["zeta", "alpha", "mid"]


def test_a_body_set_whole_over_a_document_replays_in_the_order_the_write_left(
    open_migrated: StoreFactory, backend: str, tmp_path: Path
) -> None:
    """A whole-document edit keeps the places of the members the document had (new ones go
    after, in the body's order), and a member a write deletes and writes again goes to the
    next place: an as-of read, on this store and after ``stateflow dump`` → ``stateflow load``,
    gives each revision's keys as the current read gave them (the change used to record the
    body in its own order, and a replay to put a member written again back in its old place)."""
    store, reader = open_migrated(), open_migrated()
    writes: dict[str, list[list[Edit]]] = {
        "whole": [
            [Edit((), {"b": 1, "a": 2})],
            [Edit((), {"z": 1, "b": 2, "a": 3})],
            [Edit((), {"q": 1, "a": 4, "y": 5})],
        ],
        "big": [  # the edits over 512 bytes, kept apart in change_edits
            [Edit((), {"b": 1, "a": 2})],
            [Edit((), {"z": "x" * 600, "b": 2, "a": "y" * 600})],
        ],
        "again": [
            [Edit((), {"e": 1, "b": 2})],
            [Edit(("e",), MISSING), Edit(("f",), 1), Edit(("e",), 3)],
        ],
        "whole-then-members": [
            [Edit((), {"e": 1, "b": 2, "c": 3})],
            [Edit(("n",), 0), Edit((), {"m": 1, "b": 1}), Edit(("e",), 2), Edit(("n",), 1)],
        ],
    }
    seen: dict[DocKey, list[list[str]]] = {}
    for name, changes in writes.items():
        key = DocKey("notes", name)
        for revision, edits in enumerate(changes):
            store.commit([Write(key, edits, expect=revision)])
            seen.setdefault(key, []).append(list(reader.get(key).body or {}))
        store.commit([Write(key, [Edit(("last",), True)], expect=len(changes))])  # each one history
    assert seen[DocKey("notes", "whole")] == [["b", "a"], ["b", "a", "z"], ["a", "q", "y"]]
    assert seen[DocKey("notes", "big")][-1] == ["b", "a", "z"]
    assert seen[DocKey("notes", "again")][-1] == ["b", "e", "f"]
    assert seen[DocKey("notes", "whole-then-members")][-1] == ["b", "m", "e", "n"]
    for key, keys in seen.items():
        for revision, then in enumerate(keys, 1):
            assert list(reader.read_at(key, revision=revision).body or {}) == then, (key, revision)
    dump, copy = tmp_path / "dump.jsonl", str(tmp_path / "copy.db")
    assert sf(backend, "dump", str(dump)).returncode == 0
    loaded = sf(copy, "load", str(dump))
    assert loaded.returncode == 0, loaded.stderr
    with open_store(copy) as target:
        for key, keys in seen.items():
            got = [list(target.read_at(key, revision=r).body or {}) for r in range(1, len(keys) + 1)]
            assert got == keys, key
