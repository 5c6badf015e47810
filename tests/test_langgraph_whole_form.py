"""The LangGraph adapters keep their records in whole form where the backend has it (SQLite):
at their open they call ``Store.keep_whole`` for their states, so a checkpoint, a checkpoint's
writes and a store item are each their ``documents`` row alone (``documents.body`` set, no
member rows). PostgreSQL keeps member form. A store written before (member rows, no choice
recorded) converts each record on its next write, and reads the same through every door."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata

from stateflow.errors import InvalidInput, StoreReadOnly
from stateflow.langgraph import StateflowSaver, StateflowStore
from stateflow.states import StatesService
from stateflow.store import DocKey, SqlStore, open_store
from stateflow.store.core import WHOLE_PREFIX
from stateflow.store.plan import WHOLE_ROW_MAX
from stateflow.store.postgres import PostgresStore
from stateflow.store.rows import CHANGE_MARK
from stateflow.store.sqlite import SqliteStore

CHECKPOINTS = "langgraph_checkpoints"
ITEMS = "langgraph_store"
KINDS = {CHECKPOINTS: ("checkpoint", "writes"), ITEMS: ("item",)}
FILTERS: dict[str, Any] = {CHECKPOINTS: {"saved": {"config": {"thread_id": "old"}}}, ITEMS: {"key": "k"}}


def _forms(store: SqlStore, state: str) -> dict[str, str]:
    """Each present record of ``state`` by ``kind/key``: ``whole`` (its body in its row, no
    member rows) or ``members`` (member rows, no body)."""
    with store._read_tx() as tx:
        rows = tx.all(
            "SELECT d.subject, d.body IS NOT NULL, (SELECT count(*) FROM members m WHERE m.doc_id = d.doc_id) "
            "FROM documents d WHERE d.state = ? AND d.present = 1 ORDER BY d.subject",
            (state,),
        )
    forms = {}
    for subject, whole, members in rows:
        kind, key = orjson.loads(subject)[2:]
        assert bool(whole) != bool(members), f"{kind}/{key}: a body and member rows, or neither"
        forms[f"{kind}/{key}"] = "whole" if whole else "members"
    return forms


def _write_some(
    saver: StateflowSaver, lg: StateflowStore, thread: str, head: RunnableConfig | None = None
) -> RunnableConfig:
    """A checkpoint (a child of ``head`` when given) with two tasks' writes, and an item put."""
    config: RunnableConfig = head or {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    step = 0 if head is None else 1
    checkpoint = generate_checkpoint(channel_values={"n": step}, channel_versions={"n": step + 1})
    config = saver.put(config, checkpoint, generate_metadata(step=step), {"n": step + 1})
    saver.put_writes(config, [("n", step), ("m", "a")], "task-a")
    saver.put_writes(config, [("n", step + 10)], "task-b")
    lg.put(("notes", thread), "k", {"step": step})
    return config


@pytest.fixture
def opened(backend: str) -> Iterator[tuple[SqlStore, StateflowSaver, StateflowStore]]:
    store = open_store(backend, auto_migrate=True)
    try:
        states = StatesService(store)
        yield store, StateflowSaver(states), StateflowStore(states)
    finally:
        store.close()


def test_new_records_are_whole_on_sqlite_member_rows_on_postgres(
    opened: tuple[SqlStore, StateflowSaver, StateflowStore],
) -> None:
    store, saver, lg = opened
    head = _write_some(saver, lg, "t")
    _write_some(saver, lg, "t", head)
    lg.put(("notes", "t"), "k", {"step": 2})  # an item rewritten
    forms = {**_forms(store, CHECKPOINTS), **_forms(store, ITEMS)}
    assert sorted({f.split("/")[0] for f in forms}) == ["checkpoint", "item", "writes"]
    expected = "whole" if store.whole_form else "members"
    assert set(forms.values()) == {expected}, forms
    recorded = {state: store.meta_value(WHOLE_PREFIX + state) for state in (CHECKPOINTS, ITEMS)}
    if store.whole_form:
        assert recorded == {CHECKPOINTS: str(WHOLE_ROW_MAX), ITEMS: str(WHOLE_ROW_MAX)}
    else:  # (PostgreSQL: nothing recorded, nothing refused)
        assert recorded == {CHECKPOINTS: None, ITEMS: None}
    got = saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
    assert got is not None and got.checkpoint["channel_values"] == {"n": 1}
    assert sorted(w[0] for w in got.pending_writes or []) == ["task-a", "task-a", "task-b"]
    item = lg.get(("notes", "t"), "k")
    assert item is not None and item.value == {"step": 2}


def _creations_marked(store: SqlStore, state: str) -> dict[str, bool]:
    """Each record of ``state`` by kind: whether the change creating it keeps the mark."""
    with store._read_tx() as tx:
        rows = tx.all(
            "SELECT d.subject, c.edits = ? FROM documents d JOIN changes c "
            "ON c.doc_id = d.doc_id AND c.revision = 1 WHERE d.state = ?",
            (CHANGE_MARK, state),
        )
    marked: dict[str, bool] = {}
    for subject, mark in rows:
        kind = orjson.loads(subject)[2]
        assert marked.setdefault(kind, bool(mark)) == bool(mark), f"{kind}: marked and not"
    return marked


def test_only_checkpoints_keep_the_mark_at_their_creation(
    opened: tuple[SqlStore, StateflowSaver, StateflowStore],
) -> None:
    """A checkpoint is written once: its creation keeps the mark, not a copy of its body. A
    writes record and an item are written again (each task's writes, each put): their creation
    keeps its body in its change, so their first rewrite copies nothing."""
    store, saver, lg = opened
    config: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    checkpoint = generate_checkpoint(channel_values={"n": 0}, channel_versions={"n": 1})
    config = saver.put(config, checkpoint, generate_metadata(step=0), {"n": 1})
    saver.put_writes(config, [("n", 0)], "task-a")
    lg.put(("notes", "t"), "k", {"step": 0})
    created = {**_creations_marked(store, CHECKPOINTS), **_creations_marked(store, ITEMS)}
    if store.whole_form:
        assert created == {"checkpoint": True, "writes": False, "item": False}
    else:  # (PostgreSQL keeps member form: no mark)
        assert created == {"checkpoint": False, "writes": False, "item": False}
    saver.put_writes(config, [("n", 10)], "task-b")  # the first rewrites: history reads right
    lg.put(("notes", "t"), "k", {"step": 1})
    got = saver.get_tuple(config)
    assert got is not None and sorted(w[0] for w in got.pending_writes or []) == ["task-a", "task-b"]
    item = lg.get(("notes", "t"), "k")
    assert item is not None and item.value == {"step": 1}
    key = DocKey(ITEMS, orjson.dumps(["agent", "langgraph", "item", "notes/t/k"]).decode())
    assert [c.revision for c in store.history([key])] == [2, 1]


def test_a_read_only_store_opens_with_or_without_the_choice_recorded(tmp_path: Path) -> None:
    """A read-only store without the choice opens and reads as it is (member form); one with it
    answers ``keep_whole`` of the recorded bound without writing, and refuses another."""
    older = str(tmp_path / "older.db")
    _member_form_store(older)
    read_only = open_store(f"sqlite:///{older}?mode=ro")
    try:
        states = StatesService(read_only)
        saver, lg = StateflowSaver(states), StateflowStore(states)
        assert read_only.meta_value(WHOLE_PREFIX + CHECKPOINTS) is None
        got = saver.get_tuple({"configurable": {"thread_id": "old", "checkpoint_ns": ""}})
        assert got is not None and got.checkpoint["channel_values"] == {"n": 1}
        item = lg.get(("notes", "old"), "k")
        assert item is not None and item.value == {"step": 1}
    finally:
        read_only.close()
    fresh = str(tmp_path / "fresh.db")
    with StateflowSaver.open(fresh), StateflowStore.open(fresh):
        pass
    read_only = open_store(f"sqlite:///{fresh}?mode=ro")
    try:
        assert read_only.keep_whole(CHECKPOINTS)  # recorded already: nothing to write
        with pytest.raises(StoreReadOnly):
            read_only.keep_whole(CHECKPOINTS, 100)
        states = StatesService(read_only)
        saver, lg = StateflowSaver(states), StateflowStore(states)
        assert saver.get_tuple({"configurable": {"thread_id": "none", "checkpoint_ns": ""}}) is None
        assert lg.get(("notes",), "none") is None
        assert read_only.meta_value(WHOLE_PREFIX + CHECKPOINTS) == str(WHOLE_ROW_MAX)
    finally:
        read_only.close()


def test_a_choice_the_store_records_already_stands(tmp_path: Path) -> None:
    """An operator's ``keep_whole(state, 0)`` recorded before the adapters open keeps that
    state's records in member rows; the other state's records are whole."""
    with open_store(str(tmp_path / "kept.db"), auto_migrate=True) as store:
        assert store.keep_whole(CHECKPOINTS, 0)
        states = StatesService(store)
        _write_some(StateflowSaver(states), StateflowStore(states), "t")
        assert store.meta_value(WHOLE_PREFIX + CHECKPOINTS) == "0"
        assert set(_forms(store, CHECKPOINTS).values()) == {"members"}
        assert set(_forms(store, ITEMS).values()) == {"whole"}


def _member_form_store(location: str) -> None:
    """A store as an adapter that kept member form left it: records of every kind written in
    member rows and no whole-form choice recorded (the state's bound set to 0 while writing,
    then its row deleted)."""
    with open_store(location, auto_migrate=True) as store:
        states = StatesService(store)
        saver, lg = StateflowSaver(states), StateflowStore(states)
        for state in (CHECKPOINTS, ITEMS):
            assert store.keep_whole(state, 0)
        head = _write_some(saver, lg, "old")
        _write_some(saver, lg, "old", head)
        with store._write_tx() as tx:
            tx.run("DELETE FROM stateflow_meta WHERE key LIKE 'whole:%'")
        assert set(_forms(store, CHECKPOINTS).values()) == set(_forms(store, ITEMS).values()) == {"members"}


def _doors(store: SqlStore, saver: StateflowSaver, lg: StateflowStore) -> dict[str, Any]:
    """What every door reads of the old thread's records and the item: the saver's reads, the
    store's current reads, as-of reads and history, the states service's record, audit and
    history reads, and the HTTP API's."""
    from tests.http_api import tenant_api

    states = saver.states
    config: RunnableConfig = {"configurable": {"thread_id": "old", "checkpoint_ns": ""}}
    listed = [
        (
            t.config["configurable"]["checkpoint_id"],
            t.checkpoint["channel_values"],
            sorted(t.pending_writes or []),
        )
        for t in saver.list(config)
    ]
    out: dict[str, Any] = {"saver list": listed}
    item = lg.get(("notes", "old"), "k")
    assert item is not None
    out["item"] = item.value
    out["search"] = [(i.key, i.value) for i in lg.search(("notes",))]
    for state in (CHECKPOINTS, ITEMS):
        with tenant_api(store) as api:  # the state's counts, listings by kind and search
            for path in (
                f"/api/states/{state}/stats",
                *(f"/api/states/{state}/subjects?kind={kind}" for kind in KINDS[state]),
            ):
                status, answer = api("GET", path)
                assert status == 200, answer
                if "subjects" in answer["data"]:  # (each listed with its revision and time)
                    answer["data"]["subjects"] = [listed["subject"] for listed in answer["data"]["subjects"]]
                out[path] = answer["data"]
            status, found = api("POST", f"/api/states/{state}/records/search", {"filters": FILTERS[state]})
            assert status == 200, found
            out[f"{state} search"] = sorted(str(m["subject"]) for m in found["data"]["matches"])
        for listed_doc in store.scan(state, limit=100):
            key = DocKey(state, listed_doc.key.subject)
            doc = store.get(key)
            name = f"{state} {orjson.loads(key.subject)[2:]}"
            out[f"{name} now"] = (doc.revision, doc.body, store.member_sizes(key))
            out[f"{name} as of"] = [store.read_at(key, revision=r).body for r in range(1, doc.revision + 1)]
            out[f"{name} history"] = [(c.revision, c.edits, c.paths, c.seq) for c in store.history([key])]
            subject = dict(
                zip(("target_kind", "target_name", "kind", "key"), orjson.loads(key.subject), strict=True)
            )
            record = states.read(state, subject)
            assert record is not None
            out[f"{name} record"] = (record["revision"], record["data"])
            out[f"{name} audit"] = [
                (w["revision"], w["action"], w["origin"].get("consumer"))
                for w in states.writes(state, subject)["items"]
            ]
            with tenant_api(store) as api:
                path = "/api/states/{}/records/agent/langgraph/{}/{}".format(
                    state, subject["kind"], subject["key"].replace("/", "%2F")
                )
                status, now = api("GET", path)
                assert status == 200, now
                out[f"{name} http"] = now["data"]["data"]
                out[f"{name} http as of"] = [
                    api("GET", f"{path}?revision={r}")[1]["data"]["data"] for r in range(1, doc.revision + 1)
                ]
                status, trail = api("GET", f"{path}/writes")
                assert status == 200, trail
                out[f"{name} http audit"] = [w["revision"] for w in trail["data"]["items"]]
    return out


def test_a_store_written_before_converts_each_record_on_its_next_write(tmp_path: Path) -> None:
    location = str(tmp_path / "older.db")
    _member_form_store(location)
    with open_store(location) as store:
        states = StatesService(store)
        saver, lg = StateflowSaver(states), StateflowStore(states)
        assert store.meta_value(WHOLE_PREFIX + CHECKPOINTS) == str(WHOLE_ROW_MAX)
        # opened: nothing rewritten, every record still in member rows, read as before
        assert set(_forms(store, CHECKPOINTS).values()) == {"members"}
        before = _doors(store, saver, lg)
        # rewritten: the item and the newest checkpoint's writes (a task more) convert; a new
        # checkpoint is whole from the start; the checkpoints written before stay as they are
        head = saver.get_tuple({"configurable": {"thread_id": "old", "checkpoint_ns": ""}})
        assert head is not None
        saver.put_writes(head.config, [("m", "late")], "task-c")
        lg.put(("notes", "old"), "k", {"step": 5})
        forms = _forms(store, CHECKPOINTS)
        writes = sorted(k for k in forms if k.startswith("writes/"))
        assert [forms[k] for k in writes] == ["members", "whole"]  # (the older one not rewritten)
        assert set(_forms(store, ITEMS).values()) == {"whole"}
        after = _doors(store, saver, lg)
    # what was there reads the same through every door; the rewrites read as written
    changed = {k for k in before if before[k] != after[k]}
    item_doc = f"{ITEMS} ['item', 'notes/old/k']"
    writes_doc = f"{CHECKPOINTS} ['writes', '{writes[-1].split('/', 1)[1]}']"
    assert changed <= {"saver list", "item", "search"} | {
        k for k in before if k.startswith((item_doc, writes_doc))
    }
    assert after["item"] == {"step": 5}
    assert after["search"] == [("k", {"step": 5})]
    for doc in (item_doc, writes_doc):
        revision, _, _ = before[f"{doc} now"]
        assert after[f"{doc} as of"][:revision] == before[f"{doc} as of"]
        assert after[f"{doc} http as of"][:revision] == before[f"{doc} http as of"]
        assert after[f"{doc} history"][1:] == before[f"{doc} history"]  # (newest first)
        assert after[f"{doc} audit"][1:] == before[f"{doc} audit"]
        assert after[f"{doc} http audit"][1:] == before[f"{doc} http audit"]
        assert after[f"{doc} now"][0] == revision + 1
    listed_before, listed_after = before["saver list"], after["saver list"]
    assert [c[:2] for c in listed_after] == [c[:2] for c in listed_before]
    assert listed_after[0][2] == sorted([*listed_before[0][2], ("task-c", "m", "late")])
    assert listed_after[1:] == listed_before[1:]


def test_a_saver_holds_its_latest_records_only(backend: str) -> None:
    """A checkpoint is written once and its writes record while its step runs: the store
    caches their bodies, heads, rows and member values (for the next put's check of its parent,
    the next task's writes) only for the latest writes of the saver's state
    (``Store.cache_recent``, ``RECENT_KEPT``), so a process writing checkpoints for hours keeps
    a bounded number alive — on SQLite (whole form: bodies) and on PostgreSQL (member form: the
    member cache's values too, and the keys it read). Each write still goes the lean way (its
    record held after it), and the older records read back whole from the store."""
    store = open_store(backend, auto_migrate=True)
    try:
        saver = StateflowSaver(StatesService(store))
        items = StateflowStore(StatesService(store))
        heads = store._heads
        store._recent_kept = 6
        with pytest.raises(InvalidInput, match="cache_recent: a state is a non-empty string"):
            store.cache_recent("")
        config: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        written = []
        records: set[int] = set()  # (every record of the saver's written so far)
        for n in range(12):
            checkpoint = generate_checkpoint(
                channel_values={"messages": [f"m{n}"], "n": n}, channel_versions={"messages": n + 1, "n": 1}
            )
            config = saver.put(config, checkpoint, generate_metadata(step=n), {"messages": n + 1, "n": 1})
            saver.put_writes(config, [("messages", f"w{n}")], f"task-{n}")
            saver.put_writes(config, [("n", n)], f"task-{n}b")
            items.put(("users",), f"u{n}", {"n": n})
            written.append(checkpoint["id"])
            held = {doc_id for doc_id, entry in heads._entries.items() if entry[2] is not None}
            rows = {row.doc_id: key for key, row in store._rows_known.items()}
            saved = {doc_id for doc_id in rows if rows[doc_id].state == CHECKPOINTS}
            records |= saved
            assert len(saved) <= 6 and saved <= held  # (the latest records, rows and bodies)
            assert sum(rows[doc_id].subject.count('"checkpoint"') for doc_id in saved) >= 1
            assert len([d for d in rows if rows[d].state == ITEMS]) == n + 1  # (items: all kept)
            valued = {doc_id for doc_id, _ in store._cache._entries} & records
            assert valued <= saved  # (member values of the latest records only: none on SQLite)
            if isinstance(store, PostgresStore):
                assert valued and len([k for k in store._seen if k.state == CHECKPOINTS]) <= 6
        assert len(records) > 6
        thread: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        other = open_store(backend)  # (a reader that held none of them)
        try:
            for reader in (saver, StateflowSaver(StatesService(other))):
                listed = list(reader.list(thread))
                assert [t.checkpoint["id"] for t in listed] == written[::-1]
                assert [t.checkpoint["channel_values"] for t in listed] == [
                    {"messages": [f"m{n}"], "n": n} for n in reversed(range(12))
                ]
                assert [t.pending_writes for t in listed] == [
                    [(f"task-{n}", "messages", f"w{n}"), (f"task-{n}b", "n", n)] for n in reversed(range(12))
                ]
        finally:
            other.close()
    finally:
        store.close()


def test_threads_writing_checkpoints_past_the_latest_writes_held_lose_nothing(tmp_path: Path) -> None:
    """Four threads write checkpoint chains at once (their commits grouped, their caches
    remembered concurrently) with only the latest 5 writes' records held: every put
    acknowledged, and every chain reads back whole, here and from a fresh saver."""
    import threading

    store = open_store(f"sqlite:///{tmp_path}/s.db")
    try:
        saver = StateflowSaver(StatesService(store))
        store._recent_kept = 5
        failures: list[BaseException] = []
        ids: dict[str, list[str]] = {}

        def chain(thread_id: str) -> None:
            config: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
            written = ids[thread_id] = []
            try:
                for n in range(25):
                    checkpoint = generate_checkpoint(channel_values={"n": n}, channel_versions={"n": n + 1})
                    config = saver.put(config, checkpoint, generate_metadata(step=n), {"n": n + 1})
                    saver.put_writes(config, [("n", n)], f"task-{n}")
                    written.append(checkpoint["id"])
            except BaseException as exc:  # (asserted none below: a thread's own is lost)
                failures.append(exc)

        threads = [threading.Thread(target=chain, args=(f"t{k}",)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert failures == []
        other = open_store(f"sqlite:///{tmp_path}/s.db")
        try:
            for reader in (saver, StateflowSaver(StatesService(other))):
                for thread_id, written in ids.items():
                    thread: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
                    listed = list(reader.list(thread))
                    assert [t.checkpoint["id"] for t in listed] == written[::-1]
                    assert [t.checkpoint["channel_values"] for t in listed] == [
                        {"n": n} for n in reversed(range(25))
                    ]
                    assert [t.pending_writes for t in listed] == [
                        [(f"task-{n}", "n", n)] for n in reversed(range(25))
                    ]
        finally:
            other.close()
    finally:
        store.close()


def _others(saver: StateflowSaver, n: int) -> None:
    """``n`` puts on threads of their own: a busy process's other conversations."""
    for k in range(n):
        saver.put(
            {"configurable": {"thread_id": f"other {k}", "checkpoint_ns": ""}},
            generate_checkpoint(channel_values={"n": k}, channel_versions={"n": 1}),
            generate_metadata(step=1),
            {"n": 1},
        )


def _traced_put(store: SqliteStore, saver: StateflowSaver, config: Any, n: int) -> tuple[Any, list[str]]:
    """The thread's next checkpoint (``n`` written, ``messages`` kept where its parent keeps
    it) and the statements its put sent."""
    sent: list[str] = []
    store._writer().set_trace_callback(sent.append)
    store._local.reader.conn.set_trace_callback(sent.append)
    checkpoint = generate_checkpoint(
        channel_values={"messages": ["a"], "n": n}, channel_versions={"messages": 1, "n": n}
    )
    config = saver.put(config, checkpoint, generate_metadata(step=n), {"n": n})
    store._writer().set_trace_callback(None)
    store._local.reader.conn.set_trace_callback(None)
    return config, sent


def test_a_put_whose_parent_was_let_go_writes_the_lean_way_on_one_read_or_none(tmp_path: Path) -> None:
    """A busy process puts a thread's next checkpoint long after its parent, whose record the
    store let go (``Store.cache_recent``) and the saver no longer knows. A parent this process
    never held is read once — by the statement the write itself starts from
    (``Store.body_as_seen``) —; one it wrote, still the thread's head when let go, is taken back
    from its spare copy, with no read. Either way the checkpoint is written the lean way (no
    read-modify-write transaction), the channel it did not write kept where the parent keeps it."""
    path = f"sqlite:///{tmp_path}/s.db"
    first = generate_checkpoint(
        channel_values={"messages": ["a"], "n": 1}, channel_versions={"messages": 1, "n": 1}
    )
    thread: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    before = open_store(path)  # (another process, or this one before a restart)
    try:
        config = StateflowSaver(StatesService(before)).put(
            thread, first, generate_metadata(step=1), {"messages": 1, "n": 1}
        )
    finally:
        before.close()
    store = open_store(path)
    try:
        assert isinstance(store, SqliteStore)
        store._recent_kept = 2
        saver = StateflowSaver(StatesService(store))
        _others(saver, 3)
        config, sent = _traced_put(store, saver, config, 2)  # (a parent never held here: read)
        lean = ["BEGIN", "INSERT", "INSERT", "INSERT", "COMMIT"]
        assert [s.split(" ")[0] for s in sent] == ["BEGIN", "SELECT", "ROLLBACK", *lean]
        assert sent[3] == "BEGIN IMMEDIATE"
        second = DocKey(CHECKPOINTS, sent[5].split("'")[3])
        _others(StateflowSaver(StatesService(store)), 3)  # (the head let go, with a copy)
        config, sent = _traced_put(store, StateflowSaver(StatesService(store)), config, 3)
        assert [s.split(" ")[0] for s in sent] == lean and sent[0] == "BEGIN IMMEDIATE"
        reader = open_store(path)
        try:
            record = reader.get(second)
            assert record.body is not None and record.body["saved"]["sources"] == {"messages": first["id"]}
            found = StateflowSaver(StatesService(reader)).get_tuple(config)
            assert found is not None and found.checkpoint["channel_values"] == {"messages": ["a"], "n": 3}
            assert [
                t.checkpoint["channel_values"]["n"]
                for t in StateflowSaver(StatesService(reader)).list(thread)
            ] == [3, 2, 1]
        finally:
            reader.close()
    finally:
        store.close()


def _traced(store: SqliteStore, call: Any) -> list[str]:
    """The statements ``call()`` sent, on the writer and this thread's reader."""
    sent: list[str] = []
    store._writer().set_trace_callback(sent.append)
    store._local.reader.conn.set_trace_callback(sent.append)
    try:
        call()
    finally:
        store._writer().set_trace_callback(None)
        store._local.reader.conn.set_trace_callback(None)
    return sent


def test_the_first_writes_on_a_checkpoint_put_long_ago_here_make_its_record_with_no_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server with many conversations at once puts far more checkpoints between a put and its
    step's pending writes than the saver keeps as parents: a checkpoint put here that has no
    writes record made here yet still gets its first one with no read before the write. One
    whose record another process made meanwhile loses nothing: the write guessed new finds the
    record, reads it and adds to it."""
    import stateflow.langgraph.saver as saver_module

    monkeypatch.setattr(saver_module, "_PARENTS_KEPT", 2)
    path = f"sqlite:///{tmp_path}/s.db"
    store = open_store(path)
    other = open_store(path)  # (another process)
    try:
        assert isinstance(store, SqliteStore)
        store._recent_kept = 2
        saver = StateflowSaver(StatesService(store))
        elsewhere = StateflowSaver(StatesService(other))
        configs = []
        for k in range(2):
            checkpoint = generate_checkpoint(channel_values={"n": k}, channel_versions={"n": 1})
            configs.append(
                saver.put(
                    {"configurable": {"thread_id": f"t{k}", "checkpoint_ns": ""}},
                    checkpoint,
                    generate_metadata(step=1),
                    {"n": 1},
                )
            )
        _others(saver, 6)  # (both past the parents kept, their records let go)
        sent = _traced(store, lambda: saver.put_writes(configs[0], [("n", 10)], "task-a"))
        assert [s.split(" ")[0] for s in sent] == ["BEGIN", "INSERT", "INSERT", "INSERT", "COMMIT"]
        elsewhere.put_writes(configs[1], [("n", 20)], "task-b")  # (its record made elsewhere)
        saver.put_writes(configs[1], [("n", 21)], "task-c")
        saver.put_writes(configs[0], [("n", 11)], "task-d")  # (its record known here now)
        for reader in (saver, StateflowSaver(StatesService(other))):
            found = [reader.get_tuple(config) for config in configs]
            assert [sorted(t.pending_writes or []) for t in found if t is not None] == [
                [("task-a", "n", 10), ("task-d", "n", 11)],
                [("task-b", "n", 20), ("task-c", "n", 21)],
            ]
    finally:
        other.close()
        store.close()
