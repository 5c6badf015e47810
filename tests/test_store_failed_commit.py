"""A write that the database refuses at the very end — after the transition row and member rows
went out, in the same batch as the COMMIT on PostgreSQL — leaves nothing behind, and the store
keeps working."""

from __future__ import annotations

import sqlite3
from typing import Any

import psycopg
import pytest

from stateflow.errors import StoreError
from stateflow.store import DocKey, Write

from .conftest import StoreFactory

DOC = DocKey("notes", "refused")
OTHER = DocKey("notes", "fine")


def _refuse_changes_of(backend: str, subject: str) -> None:
    """A trigger that fails the `changes` insert of one document (think: a full disk)."""
    if backend.startswith("postgresql://"):
        with psycopg.connect(backend, autocommit=True) as conn:
            conn.execute(
                "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "IF (SELECT subject FROM documents WHERE doc_id = NEW.doc_id) = '" + subject + "' "
                "THEN RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END $$"
            )
            conn.execute(
                "CREATE TRIGGER refuse BEFORE INSERT ON changes FOR EACH ROW EXECUTE FUNCTION refuse()"
            )
    else:
        with sqlite3.connect(backend) as conn:
            conn.execute(
                "CREATE TRIGGER refuse BEFORE INSERT ON changes WHEN "
                f"(SELECT subject FROM documents WHERE doc_id = NEW.doc_id) = '{subject}' "
                "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
            )


def test_a_commit_refused_at_the_end_leaves_nothing_and_the_store_keeps_working(
    backend: str, open_migrated: StoreFactory
) -> None:
    store = open_migrated()
    store.commit([Write.between(DOC, None, {"v": 1})])
    before = store.transitions(limit=100)
    _refuse_changes_of(backend, DOC.subject)
    for _ in range(3):  # each time on whatever pooled connection: none is left half-way
        with pytest.raises(StoreError, match="refused by the test"):
            store.update([DOC], lambda docs: ([Write.between(DOC, docs[DOC].body, {"v": 2})], None))
        with pytest.raises(StoreError, match="refused by the test"):
            store.commit([Write.between(DOC, {"v": 1}, {"v": 3}, 1)], op_id="once")
    doc = store.get(DOC)
    assert doc.body == {"v": 1} and doc.revision == 1
    assert store.transitions(limit=100) == before
    assert store.applied_op("once") is False  # a refused write does not consume its op id
    # other documents (and the op id) still commit
    commit = store.commit([Write.between(OTHER, None, {"ok": True})], op_id="once")
    assert commit.applied and store.get(OTHER).body == {"ok": True}
    assert store.applied_op("once") == commit.seq


def test_an_optimistic_write_refused_at_the_end_leaves_nothing(
    backend: str, open_migrated: StoreFactory
) -> None:
    """The same for a write computed against known revisions (on PostgreSQL: one statement)."""
    store = open_migrated()
    store.commit([Write.between(DOC, None, {"v": 1})])  # the store now knows DOC at revision 1
    before = store.transitions(limit=100)
    _refuse_changes_of(backend, DOC.subject)

    def set_v(docs: dict[DocKey, Any]) -> tuple[list[Write], None]:
        return [Write.between(DOC, docs[DOC].body, {"v": 2}, docs[DOC].revision)], None

    for _ in range(3):
        with pytest.raises(StoreError, match="refused by the test"):
            store.update([DOC], set_v, op_id="op-a", op_scope="notes", optimistic=True)
    assert store.get(DOC).body == {"v": 1} and store.get(DOC).revision == 1
    assert store.transitions(limit=100) == before
    assert store.applied_op("op-a", "notes") is False
    commit, _ = store.update(
        [OTHER], lambda docs: ([Write.between(OTHER, None, {"ok": 1})], None), op_id="op-a", op_scope="notes"
    )
    assert store.applied_op("op-a", "notes") == commit.seq
