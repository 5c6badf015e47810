"""One contract, every backend: each test runs on a real SQLite file and a real PostgreSQL."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from stateflow.doc.diff import Edit
from stateflow.errors import Conflict, InvalidInput, InvalidJSON, NotFound, StoreUnavailable
from stateflow.store import HEAD, DocKey, Document, OpIdTaken, SqlStore, Write, open_store
from stateflow.store.plan import SNAPSHOT_MAX_CHAIN
from stateflow.store.rows import outline_of

A = DocKey("notes", "a")
B = DocKey("notes", "b")
C = DocKey("other", "a")


def put(store: SqlStore, key: DocKey, body: dict[str, Any] | None, **kw: Any) -> Any:
    current = store.get(key)
    return store.commit(
        [Write.between(key, current.value, body if body is not None else current.value, current.revision)],
        **kw,
    )


def test_an_unwritten_document_reads_as_absent_revision_zero(store: SqlStore) -> None:
    doc = store.get(A)
    assert (doc.revision, doc.body, doc.exists, doc.seq) == (0, None, False, None)


def test_commit_writes_revision_transition_and_origin(store: SqlStore) -> None:
    c1 = store.commit([Write.between(A, None, {"x": 1}, expect=0)], {"door": "api", "actor": "t"})
    assert c1.applied and c1.seq is not None and c1.revisions == {A: 1}
    c2 = store.commit([Write(A, [Edit(("y",), None)], expect=1)])
    assert c2.seq is not None and c2.seq > c1.seq
    doc = store.get(A)
    assert doc.body == {"x": 1, "y": None} and doc.revision == 2 and doc.seq == c2.seq
    [t1, t2] = store.transitions()
    assert t1.seq == c1.seq and t1.origin == {"door": "api", "actor": "t"}
    assert [ch.key for ch in t1.changes] == [A] and t1.changes[0].paths == [[]]
    assert t2.changes[0].paths == [["y"]] and t2.at >= t1.at
    # times are fixed-width UTC text, so text order is time order
    for at in (t1.at, t2.at):
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", at), at
        moment = datetime.strptime(at, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
        assert abs((datetime.now(UTC) - moment).total_seconds()) < 60


def test_a_cohort_spans_documents_in_one_transition(store: SqlStore) -> None:
    c = store.commit(
        [Write.between(A, None, {"n": 1}), Write.between(B, None, {"n": 2}), Write.between(C, None, {"n": 3})]
    )
    [t] = store.transitions()
    assert t.seq == c.seq
    assert sorted(ch.key for ch in t.changes) == [A, B, C]
    assert {k: d.body for k, d in store.read([A, B, C]).items()} == {A: {"n": 1}, B: {"n": 2}, C: {"n": 3}}


def test_a_failed_compare_and_set_writes_nothing_at_all(store: SqlStore) -> None:
    store.commit([Write.between(A, None, {"n": 1}), Write.between(B, None, {"n": 1})])
    with pytest.raises(Conflict, match="revision 1"):
        store.commit(
            [Write(A, [Edit(("n",), 2)], expect=1), Write(B, [Edit(("n",), 2)], expect=0)],
            op_id="op-1",
        )
    docs = store.read([A, B])
    assert docs[A].body == {"n": 1} and docs[A].revision == 1
    assert docs[B].body == {"n": 1} and docs[B].revision == 1
    assert len(store.transitions()) == 1
    assert store.applied_op("op-1") is False  # a refused cohort does not consume its op_id


def test_an_edit_that_no_longer_fits_the_head_refuses_the_whole_cohort(store: SqlStore) -> None:
    store.commit([Write.between(A, None, {"l": [1]}), Write.between(B, None, {"n": 1})])
    with pytest.raises(Conflict, match="index 4"):
        store.commit([Write(B, [Edit(("n",), 2)]), Write(A, [Edit(("l", 4), 0)])])
    assert store.get(B).body == {"n": 1}


def test_an_edit_that_no_longer_fits_names_its_place_from_the_document_root(store: SqlStore) -> None:
    # the members are stored apart and an edit is applied to its member alone: the place it names
    # still starts at the document, member included
    store.commit([Write.between(A, None, {"outer": {"z": [1, 2]}, "q": 1})])
    refusals = {
        ("outer", "z", 5): f"{A}: change at $.outer.z[5]: index 5 is outside an array of length 2",
        ("q", "w"): f"{A}: change at $.q.w expects an object at $.q",
        ("outer", "z", "k"): f"{A}: change at $.outer.z.k expects an object at $.outer.z",
    }
    for path, message in refusals.items():
        with pytest.raises(Conflict) as refused:
            store.commit([Write(A, [Edit(path, 2)], expect=HEAD)])
        assert str(refused.value) == message
    assert store.get(A).revision == 1


def test_apply_to_head_keeps_fields_written_concurrently(store: SqlStore) -> None:
    store.commit([Write.between(A, None, {"a": 1})])
    basis = store.get(A)
    store.commit([Write(A, [Edit(("other",), "kept")])])
    store.commit([Write.between(A, basis.value, {"a": 2}, expect=HEAD)])
    assert store.get(A).body == {"a": 2, "other": "kept"}


def test_members_filter_reads_only_those_members(store: SqlStore) -> None:
    store.commit([Write.between(A, None, {"hot": {"x": 1}, "lazy": {"big": list(range(100))}, "z": 0})])
    assert store.get(A, members=["hot", "z", "missing"]).body == {"hot": {"x": 1}, "z": 0}
    assert store.get(A, members=[]).body == {}


def test_key_order_of_members_and_nested_objects_is_kept(store: SqlStore) -> None:
    body = {"z": 1, "a": {"y": 1, "b": 2}, "m": 3}
    store.commit([Write.between(A, None, body)])
    store.commit([Write(A, [Edit(("c",), 4)])])
    assert list(store.get(A).body or {}) == ["z", "a", "m", "c"]
    assert list((store.get(A).body or {})["a"]) == ["y", "b"]


def test_delete_and_recreate_keep_one_revision_line(store: SqlStore) -> None:
    store.commit([Write.between(A, None, {"x": 1})])
    store.commit([Write.between(A, {"x": 1}, None)])
    gone = store.get(A)
    assert gone.body is None and gone.revision == 2
    store.commit([Write.between(A, None, {"y": 2}, expect=2)])
    assert store.get(A).body == {"y": 2}
    assert store.read_at(A, revision=1).body == {"x": 1}
    assert store.read_at(A, revision=2).body is None


def test_as_of_reads_by_revision_and_by_seq(store: SqlStore) -> None:
    seqs = []
    bodies: list[dict[str, Any]] = []
    for i in range(5):
        body = {"i": i, "l": list(range(i)), "n": None if i % 2 else {"k": i}}
        seqs.append(put(store, A, body).seq)
        bodies.append(body)
        store.commit([Write(B, [Edit(("i",), i)])])  # interleave another document
    for r, body in enumerate(bodies, start=1):
        assert store.read_at(A, revision=r).body == body
        assert store.read_at(A, seq=seqs[r - 1]).body == body
        assert store.read_at(A, seq=seqs[r - 1] + 1).body == body  # B's transition in between
    assert store.read_at(A, revision=0).body is None
    assert store.read_at(A, seq=0).revision == 0
    assert store.read_at(A, revision=3, members=["i"]).body == {"i": 2}
    with pytest.raises(NotFound, match="no revision 6"):
        store.read_at(A, revision=6)
    with pytest.raises(InvalidInput):
        store.read_at(A)


def test_as_of_reads_stay_exact_across_many_snapshots(store: SqlStore) -> None:
    bodies = {}
    doc: dict[str, Any] = {"big": "x" * 2000, "n": 0, "hist": []}
    store.commit([Write.between(A, None, doc)])
    bodies[1] = doc
    total = SNAPSHOT_MAX_CHAIN + 40
    for r in range(2, total + 1):
        new = dict(doc, n=r, hist=[*doc["hist"][-3:], r])
        store.commit([Write.between(A, doc, new, expect=r - 1)])
        doc = bodies[r] = new
    for r in (
        1,
        2,
        3,
        17,
        SNAPSHOT_MAX_CHAIN - 1,
        SNAPSHOT_MAX_CHAIN,
        SNAPSHOT_MAX_CHAIN + 1,
        total - 1,
        total,
    ):
        assert store.read_at(A, revision=r).body == bodies[r], r


def test_history_is_newest_first_with_limit_and_cursor(store: SqlStore) -> None:
    for i in range(4):
        store.commit([Write(A, [Edit(("i",), i)])], {"n": i})
    store.commit([Write(B, [Edit(("j",), 0)])])
    changes = store.history([A, B], limit=3)
    assert [(c.key, c.revision) for c in changes] == [(B, 1), (A, 4), (A, 3)]
    older = store.history([A, B], limit=10, before_seq=changes[-1].seq)
    assert [(c.key, c.revision) for c in older] == [(A, 2), (A, 1)]
    assert older[0].origin == {"n": 1} and older[0].edits == [Edit(("i",), 1)]


def test_idempotent_op_ids_replay_without_writing(store: SqlStore) -> None:
    first = store.commit([Write(A, [Edit(("n",), 1)])], op_id="op-1", op_scope="notes")
    assert first.applied and first.changed
    again = store.commit([Write(A, [Edit(("n",), 2)])], op_id="op-1", op_scope="notes")
    assert not again.applied and again.seq is None
    assert store.get(A).body == {"n": 1}
    other_scope = store.commit([Write(A, [Edit(("n",), 3)])], op_id="op-1", op_scope="other")
    assert other_scope.applied
    assert store.applied_op("op-1", "notes") == first.seq
    assert store.prune_ops("9999-01-01T00:00:00Z") == 2
    assert store.applied_op("op-1", "notes") is False


def test_a_cohort_that_changes_nothing_records_no_transition(store: SqlStore) -> None:
    store.commit([Write.between(A, None, {"n": 1})])
    c = store.commit([Write.between(A, {"n": 1}, {"n": 1}, expect=1)])
    assert c.applied and not c.changed and c.revisions == {A: 1}
    assert len(store.transitions()) == 1


def test_update_reads_under_lock_and_commits_what_compute_returns(store: SqlStore) -> None:
    store.commit([Write.between(A, None, {"n": 1})])

    def bump(docs: dict[DocKey, Document]) -> tuple[list[Write], int]:
        doc = docs[A]
        n = (doc.body or {})["n"] + 1
        return [Write.between(A, doc.value, {"n": n}, doc.revision)], n

    commit, result = store.update([A], bump, {"door": "test"})
    assert result == 2 and store.get(A).body == {"n": 2} and commit.revisions == {A: 2}


def test_an_exception_inside_update_rolls_everything_back(store: SqlStore) -> None:
    store.commit([Write.between(A, None, {"n": 1})])

    def fail(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
        raise InvalidInput("computed value is invalid")

    with pytest.raises(InvalidInput):
        store.update([A, B], fail, op_id="x")
    assert store.get(A).revision == 1 and store.get(B).revision == 0
    assert store.applied_op("x") is False


def test_update_claims_record_op_ids_with_the_commit_or_write_nothing(store: SqlStore) -> None:
    def set_to(value: int) -> Any:
        return lambda docs: ([Write.between(A, docs[A].body, {"v": value}, docs[A].revision)], None)

    commit, _ = store.update([A], set_to(1), claims=[("s", "one"), ("t", "one")])
    assert store.applied_op("one", "s") == commit.seq == store.applied_op("one", "t")
    with pytest.raises(OpIdTaken, match="one"):
        store.update([A], set_to(2), claims=[("s", "two"), ("s", "one")])
    assert store.get(A).body == {"v": 1} and store.applied_op("two", "s") is False
    # a call that changes nothing still records its claims (a replay of it must not apply)
    commit, _ = store.update([A], set_to(1), claims=[("s", "three")])
    assert commit.seq is None and store.applied_op("three", "s") is None


def test_update_replay_skips_compute(store: SqlStore) -> None:
    calls = []

    def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], str]:
        calls.append(1)
        return [Write(A, [Edit(("n",), len(calls))])], "ran"

    assert store.update([A], compute, op_id="k")[1] == "ran"
    commit, result = store.update([A], compute, op_id="k")
    assert not commit.applied and result is None and len(calls) == 1


@pytest.mark.parametrize(
    ("writes", "error", "message"),
    [
        ([Write(A, [Edit((), [1])])], InvalidInput, "must be a JSON object"),
        ([Write(A, [Edit((0,), 1)])], InvalidInput, "top level is an object"),
        ([Write(A, [Edit(("x",), float("nan"))])], InvalidJSON, "NaN"),
        ([Write(A, []), Write(A, [])], InvalidInput, "appears twice"),
        ([Write(A, [], expect=-1)], InvalidInput, "expected revision"),
    ],
)
def test_malformed_writes_are_refused_before_any_database_work(
    store: SqlStore, writes: list[Write], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        store.commit(writes)
    assert store.transitions() == []


def test_unicode_and_large_values_round_trip(store: SqlStore) -> None:
    body = {"text": "héllo 😀 \u0000 end", "big": list(range(20_000)), "f": 1.5, "i": -(2**63)}
    store.commit([Write.between(A, None, body)])
    assert store.get(A).body == body


def _dump(location: str) -> list[Any]:
    """Every row of every table, straight from the database."""
    import sqlite3

    import psycopg

    tables = ["documents", "members", "transitions", "changes", "snapshots", "applied_ops", "stateflow_meta"]
    if location.startswith("postgresql://"):
        with psycopg.connect(location) as conn:
            return [conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall() for t in tables]
    with sqlite3.connect(location) as conn:
        return [conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall() for t in tables]


def test_rejected_writes_leave_every_stored_byte_as_it_was(backend: str, store: SqlStore) -> None:
    store.commit([Write.between(A, None, {"l": [1, 2], "n": None})], op_id="first")
    store.commit([Write.between(B, None, {"x": 1})])
    before = _dump(backend)
    rejected: list[Callable[[], object]] = [
        lambda: store.commit([Write(B, [Edit(("x",), 2)]), Write(A, [Edit(("l", 9), 0)])]),
        lambda: store.commit([Write(B, [Edit(("x",), 2)], expect=0)], op_id="second"),
        lambda: store.update([A, B, C], lambda docs: (_ for _ in ()).throw(InvalidInput("no"))),
    ]
    for call in rejected:
        with pytest.raises((Conflict, InvalidInput)):
            call()
    store.commit([Write(A, [Edit(("n",), 1)])], op_id="first")  # replay: writes nothing
    assert _dump(backend) == before


def test_outlines_describe_object_members_without_reading_them(store: SqlStore) -> None:
    store.commit([Write.between(A, None, {"lazy": {"memory": [1], "rules": {"a": 1}, "n": None}, "s": "x"})])
    doc = store.get(A, members=[], outlines=["lazy", "s", "missing"])
    assert doc.body == {}
    assert doc.outlines == {"lazy": {"memory": "array", "rules": "object", "n": "null"}, "s": None}
    store.commit([Write(A, [Edit(("lazy", "extra"), True)])])
    assert store.get(A, members=[], outlines=["lazy"]).outlines["lazy"]["extra"] == "boolean"


def test_cached_members_never_hide_a_write_from_another_store_object(open_migrated: Any) -> None:
    reader, writer = open_migrated(), open_migrated()
    writer.commit([Write.between(A, None, {"big": list(range(1000)), "small": 1})])
    assert reader.get(A).body == {"big": list(range(1000)), "small": 1}  # now cached
    writer.commit([Write(A, [Edit(("big", 5), "changed")])])
    assert reader.get(A).body["big"][5] == "changed"
    writer.commit([Write(A, [Edit(("small",), 2)])])
    body = reader.get(A).body or {}
    assert body["small"] == 2 and body["big"][5] == "changed"
    with pytest.raises(Conflict):  # a rolled-back write never reaches the cache
        writer.commit([Write(A, [Edit(("big", 0), "x")]), Write(B, [Edit(("n",), 1)], expect=7)])
    assert (reader.get(A).body or {})["big"][0] == 0


def test_remembered_documents_never_hide_creation_or_deletion_elsewhere(open_migrated: Any) -> None:
    reader, writer = open_migrated(), open_migrated()
    assert reader.read([A, B]) == {A: Document(A, 0, None), B: Document(B, 0, None)}  # both seen
    writer.commit([Write.between(A, None, {"v": 1})])
    assert reader.get(A).body == {"v": 1}
    assert reader.get(A).body == {"v": 1}  # served again (remembered at revision 1)
    writer.commit([Write.between(A, {"v": 1}, None)])
    doc = reader.get(A)
    assert doc.body is None and doc.revision == 2
    reader.commit([Write.between(A, None, {"v": 3})])  # the reader's own write is remembered too
    writer.commit([Write(B, [Edit(("n",), 1)])])
    docs = reader.read([A, B])
    assert docs[A].body == {"v": 3} and docs[A].revision == 3 and docs[B].body == {"n": 1}
    assert writer.read([A, B]) == docs


def test_cached_member_heads_never_hide_a_write_from_another_store_object(open_migrated: Any) -> None:
    """Each store remembers the member list a write left behind; another writer adding,
    replacing or deleting members moves the revision on, so nothing stale is used."""
    one, two = open_migrated(), open_migrated()

    def bump(store: SqlStore) -> Any:
        def compute(docs: dict[DocKey, Document]) -> Any:
            body = dict(docs[A].body or {})
            body["n"] = body.get("n", 0) + 1
            return [Write.between(A, docs[A].body, body, docs[A].revision)], None

        return store.update([A], compute)

    bump(one)  # `one` now knows A's members at revision 1
    two.commit([Write(A, [Edit(("extra",), {"x": 1})])])  # a member `one` has not seen
    bump(one)
    assert one.get(A).body == {"n": 2, "extra": {"x": 1}}
    two.commit([Write(A, [Edit(("extra",))])])  # deleted behind `one`'s back
    bump(one)
    assert one.get(A).body == {"n": 3} and two.get(A).body == {"n": 3}
    two.commit([Write(A, [Edit((), {"fresh": True})])])  # replaced as a whole
    bump(one)
    assert one.get(A).body == two.get(A).body == {"fresh": True, "n": 1}
    assert [c.revision for c in two.history([A], limit=10)] == [7, 6, 5, 4, 3, 2, 1]


def test_pruning_history_keeps_later_revisions_readable(store: SqlStore) -> None:
    commits = []
    for i in range(1, 6):
        commits.append(store.commit([Write(A, [Edit(("n",), i)])]))
        store.commit([Write(B, [Edit(("m",), i)])])
    cutoff = commits[3].at  # revision 4's time: revisions 1-3 (and B's older rows) go
    assert cutoff is not None
    removed = store.prune_history("notes", cutoff)
    assert removed == 3 + 3
    assert store.get(A).body == {"n": 5}
    assert [c.revision for c in store.history([A])] == [5, 4]
    assert store.read_at(A, revision=3).body == {"n": 3}  # kept as a snapshot
    assert store.read_at(A, revision=4).body == {"n": 4}
    with pytest.raises(NotFound, match="predates the retained history"):
        store.read_at(A, revision=2)
    assert all(t.changes for t in store.transitions(limit=100))  # no empty transition is left
    assert store.prune_history("notes", cutoff) == 0


def test_history_pages_over_several_documents_newest_first(store: SqlStore) -> None:
    """Every page of a multi-document history is the newest `limit` changes before the cursor,
    whatever the interleaving — also once older history has been pruned."""
    import random

    rng = random.Random(7)
    written: list[tuple[int, int, DocKey]] = []  # (seq, value written, key)
    for i in range(60):
        picked = rng.sample([A, B, C], rng.choice([1, 1, 2]))
        commit = store.commit([Write(k, [Edit(("n",), i)]) for k in picked])
        assert commit.seq is not None
        written += [(commit.seq, i, k) for k in picked]
    for seq in range(written[-1][0] + 2):  # as of every seq, found the same way
        for key in (A, B, C):
            values = [i for s, i, k in written if k == key and s <= seq]
            assert store.read_at(key, seq=seq).body == ({"n": values[-1]} if values else None)

    def expect(limit: int, before: int | None) -> list[tuple[int, DocKey]]:
        rows = sorted(
            ((seq, k) for seq, _, k in written if before is None or seq < before), key=lambda r: -r[0]
        )
        return rows[:limit]

    def check() -> None:
        for before in [None, *sorted({seq for seq, _, _ in written}), 10**9]:
            for limit in (1, 2, 5):
                got = [(c.seq, c.key) for c in store.history([A, B, C], limit=limit, before_seq=before)]
                want = expect(limit, before)
                assert [seq for seq, _ in got] == [seq for seq, _ in want]
                # the same changes (where a page ends inside a transition, either document may come first)
                assert len(set(got)) == len(got) and set(got) <= {(seq, k) for seq, _, k in written}

    check()
    cut = sorted({seq for seq, _, _ in written})[20]
    [at] = [t.at for t in store.transitions(after_seq=cut - 1, limit=1)]
    store.prune_history("notes", at)
    kept = {(c.seq, c.key) for c in store.history([A, B, C], limit=1000)}
    written = [w for w in written if (w[0], w[2]) in kept]
    assert any(seq < cut for seq, _, _ in written)  # `other` kept its early changes
    check()


def test_seq_numbers_never_repeat_after_the_newest_writes_are_deleted(store: SqlStore) -> None:
    last = store.commit([Write(A, [Edit(("n",), 1)])]).seq
    assert last is not None
    store.purge(A.state)
    assert store.get(A).revision == 0
    again = store.commit([Write(A, [Edit(("n",), 2)])]).seq
    assert again is not None and again > last
    assert [t.seq for t in store.transitions()][-1] == again


def test_a_purge_refuses_to_erase_a_document_of_its_own_state_and_changes_nothing(store: SqlStore) -> None:
    for key in (A, B, C):
        put(store, key, {"v": 1})
    before = [(t.seq, t.at) for t in store.transitions()]
    with pytest.raises(
        InvalidInput, match=r"purge of state 'notes' cannot also erase its own documents \('a'\)"
    ):
        store.purge(A.state, erase=[C, A])
    assert [store.get(k).body for k in (A, B, C)] == [{"v": 1}] * 3
    assert [(t.seq, t.at) for t in store.transitions()] == before
    assert [c.revision for c in store.history([A, B, C], limit=10)] == [1, 1, 1]
    # the same purge erasing only documents of other states goes through, as one transition
    assert store.purge(A.state, erase=[C]) == 2
    assert (store.get(A).revision, store.get(C).revision, store.get(C).exists) == (0, 2, False)
    with store._read_tx() as tx:
        stored, counted = store.recount(tx)
    assert stored == counted and not [k for k in stored if k[0] == "notes"]


def test_whole_document_reads_see_commits_from_other_connections_and_threads(open_migrated: Any) -> None:
    import threading

    reader, writer = open_migrated(), open_migrated()
    writer.commit([Write.between(A, None, {"v": 1})])
    assert reader.get(A).body == {"v": 1}
    assert reader.get(A).body == {"v": 1}  # served again (cached on SQLite)
    writer.commit([Write(A, [Edit(("v",), 2)])])
    assert reader.get(A).body == {"v": 2}
    reader.commit([Write(A, [Edit(("v",), 3)])])  # the reader's own write
    assert reader.get(A).body == {"v": 3}
    seen: list[Any] = []

    def write_then_read() -> None:
        reader.commit([Write(A, [Edit(("v",), 4)])])
        seen.append(reader.get(A).body)

    thread = threading.Thread(target=write_then_read)
    thread.start()
    thread.join()
    assert seen == [{"v": 4}] and reader.get(A).body == {"v": 4}  # another thread of the same store


def test_a_first_write_of_a_very_large_document_completes_with_its_snapshot(store: SqlStore) -> None:
    # A first write this large also takes a snapshot of the body as written. (On PostgreSQL the
    # snapshot once read the members back in the middle of the pipeline carrying tens of MB,
    # and client and server could end up each waiting for the other.)
    key = DocKey("big", "one")
    body = {"blob": "x" * 30_000_000, "items": list(range(100_000))}
    outcome: list[object] = []

    def write() -> None:
        try:
            outcome.append(store.commit([Write.between(key, None, body)]))
        except BaseException as exc:  # reported below
            outcome.append(exc)

    worker = threading.Thread(target=write, daemon=True)  # a hang fails the test, not the run
    worker.start()
    worker.join(timeout=120)
    assert outcome and not isinstance(outcome[0], BaseException), outcome or "the write hung"
    got = store.read_at(key, revision=1).body
    assert got is not None and len(got["blob"]) == 30_000_000 and got["items"][-1] == 99_999


def test_an_outline_names_each_kind_in_the_members_order_and_refuses_what_json_cannot_hold() -> None:
    value = {"o": {}, "a": [1], "s": "x", "b": True, "i": 1, "f": 1.0, "n": None}
    outline = outline_of(value)
    assert list(outline.items()) == [
        ("o", "object"),
        ("a", "array"),
        ("s", "string"),
        ("b", "boolean"),
        ("i", "number"),
        ("f", "number"),
        ("n", "null"),
    ]
    assert outline_of({}) == {}

    class Label(str):
        pass

    for odd in (Label("x"), (1,), b"x", {1, 2}):  # a subclass or a type JSON has not: refused
        with pytest.raises(InvalidJSON):
            outline_of({"ok": 1, "odd": odd})


def test_a_call_after_close_is_refused_saying_the_store_was_closed(backend: str) -> None:
    # the store's own close, not an outage: PostgreSQL's pool raised its own PoolClosed (no
    # stateflow code) on a read, and said "PostgreSQL is unreachable" on the other calls
    store = open_store(backend, auto_migrate=True)
    store.commit([Write.between(A, None, {"x": 1}, expect=0)])
    store.close()
    calls: dict[str, Callable[[], object]] = {
        "get": lambda: store.get(A),
        "read_at": lambda: store.read_at(A, revision=1),
        "history": lambda: store.history([A]),
        "commit": lambda: store.commit([Write.between(A, {"x": 1}, {"x": 2}, expect=1)]),
    }
    for name, call in calls.items():
        with pytest.raises(StoreUnavailable, match=r"was closed: open it again to use it$"):
            call()
            pytest.fail(f"{name} after close was not refused")
