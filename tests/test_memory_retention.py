"""Retention and agent memory: the deployment default sweeps declared states only (both backends)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from stateflow.config import Config, RetentionConfig
from stateflow.errors import NotFound
from stateflow.states.builtin import MEMORY_DECLARATION
from stateflow.states.service import CATALOG, StatesService
from stateflow.store import SqlStore
from stateflow.store.model import DocKey, Write

from .memory_helpers import view

NOTES = {
    "schema": {"type": "object", "properties": {"text": {"type": "string"}}},
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}
LATER = datetime.now(UTC) + timedelta(days=400)


def _service(store: SqlStore, default_days: int | None) -> StatesService:
    service = StatesService(store, Config(retention=RetentionConfig(default_days=default_days)))
    service.install_builtins()
    service.declare("notes", NOTES)
    service.replace(
        "notes", {"target_kind": "agent", "target_name": "a", "kind": "thread", "key": "t1"}, {"text": "old"}
    )
    return service


def test_the_default_retention_never_erases_memory(store: SqlStore) -> None:
    service = _service(store, default_days=30)
    m = view(store)
    m.patch_state({"session": {"intents": {"goal": {"text": "ship"}}}, "global": {"strategy": {"k": 1}}})
    before = m.read_state({"path": "session"})

    report = service.prune(now=LATER)

    assert report["pruned"]["notes"] == 1  # a declared state without retention_days: swept
    assert "memory" not in report["pruned"]
    assert m.read_state({"path": "session"}) == before
    assert m.read_state({"path": "effective.strategy.k"})["value"] == 1


def test_memory_declared_with_its_own_retention_is_swept(store: SqlStore) -> None:
    service = _service(store, default_days=None)
    m = view(store)
    m.patch_state({"session": {"tactics": {"k": 1}}})
    memory = service.get_declaration("memory")
    declaration = {k: memory[k] for k in ("description", "schema", "subject_kinds", "default_subject_kind")}
    service.declare("memory", {**declaration, "retention_days": 30})

    report = service.prune(now=LATER)

    assert report["pruned"] == {"memory": 1}  # notes: no retention at all, not listed
    assert m.read_state({"path": "session"})["value"] == {}


def test_a_memory_retention_survives_a_newer_versions_redeclare(store: SqlStore) -> None:
    # a store declared by an older version (its memory schema without `lazy`), given a retention
    old = copy.deepcopy(MEMORY_DECLARATION)
    del old["schema"]["properties"]["lazy"]
    old = {**old, "name": "memory", "retention_days": 30}
    key = DocKey(CATALOG, "memory")
    store.update([key], lambda docs: ([Write.between(key, docs[key].body, old, docs[key].revision)], None))

    service = StatesService(store, Config())
    service.install_builtins()  # this version's schema adds `lazy`: memory is re-declared

    memory = service.get_declaration("memory")
    assert "lazy" in memory["schema"]["properties"]
    assert memory["retention_days"] == 30


def test_a_record_written_during_the_sweep_is_kept(store: SqlStore) -> None:
    service = _service(store, default_days=30)  # notes/t1, expired at LATER
    thread = {"target_kind": "agent", "target_name": "a", "kind": "thread"}
    service.replace("notes", {**thread, "key": "t2"}, {"text": "old"})
    service.replace("notes", {**thread, "key": "t3"}, {"text": "old"})

    def meanwhile(state: str, erased: int) -> None:
        # after t1's erase, while t2 and t3 are already listed as expired: another writer
        # writes t2 and erases t3
        if erased == 1:
            service.replace("notes", {**thread, "key": "t2"}, {"text": "written during the sweep"})
            service.erase("notes", {**thread, "key": "t3"})

    report = service.prune(now=LATER, progress=meanwhile)

    assert report["pruned"] == {"notes": 1}  # t1 only: t2 changed since it was listed, t3 was gone
    assert service.read("notes", {**thread, "key": "t1"}) is None
    kept = service.read("notes", {**thread, "key": "t2"})
    assert kept is not None and kept["data"] == {"text": "written during the sweep"}
    assert service.read("notes", {**thread, "key": "t3"}) is None


def test_a_retention_longer_than_the_calendar_keeps_everything(store: SqlStore) -> None:
    """A retention is accepted up to 2^31 - 1 days; one reaching before the calendar's first day
    failed the whole sweep (OverflowError, every state left unswept) instead of keeping all."""
    service = StatesService(
        store, Config(retention=RetentionConfig(default_days=30, op_days=1_000_000, audit_days=2_147_483_647))
    )
    service.install_builtins()
    service.declare("notes", NOTES)
    service.declare("kept", {**NOTES, "retention_days": 2_147_483_647})
    subject = {"target_kind": "agent", "target_name": "a", "kind": "thread", "key": "t1"}
    service.replace("notes", subject, {"text": "old"})
    service.replace("kept", subject, {"text": "old"})
    report = service.prune(now=LATER)
    assert report["pruned"] == {"notes": 1, "kept": 0} and report["op_ids"] == 0
    kept = service.read("kept", subject)
    assert kept is not None and kept["data"] == {"text": "old"}


def test_history_before_the_oldest_kept_transition_reads_the_snapshot_the_audit_sweep_kept(
    store: SqlStore,
) -> None:
    """Once the audit sweep forgot a session's first transition, the state before the oldest
    kept one is the snapshot the sweep kept (not ``{}``, a state the session never had) at
    every memory door; the change that led to it is gone, so its patch predates the history."""
    m = view(store)
    m.patch_state({"session": {"tactics": {"a": 1}}})
    m.patch_state({"session": {"tactics": {"b": 2}}})
    newest = store.transitions(limit=10_000)[-1]
    assert store.prune_history("memory", newest.at) > 0  # the first transition goes

    was = {"tactics": {"a": 1}}
    assert m.read_state({"path": "session[1]"}) == {"value": was}
    assert m.read_state({"path": "effective[1].tactics"}) == {"value": {"a": 1}}
    assert m.read_state({"path": "session[1].tactics.a"}) == {"value": 1}  # read along the path
    for path in ("session[1]", "session[1].tactics", "effective[1]"):
        with pytest.raises(NotFound, match="predates the retained history"):
            m.read_state({"path": path, "projection": "patch"})
    with pytest.raises(NotFound, match="predates the retained history"):
        m.read_state({"path": "session[2]"})
    assert m.as_of(1, "session") == was
    assert m.read_state({"path": "session[0]", "projection": "patch"}) == {"patch": {"tactics": {"b": 2}}}

    assert m.fork("s2", 1).read_state({"path": "session"}) == {"value": was}
    assert m.restore(1)
    assert m.read_state({"path": "session"}) == {"value": was}


def test_records_whose_audit_rows_were_swept_still_expire(store: SqlStore) -> None:
    """Audit rows kept for less time than records: the audit sweep forgets a record's last
    write, but not its time — the record's ``updated_at``, which record retention compares with
    its cutoff (gone, the record was never erased)."""
    service = StatesService(store, Config(retention=RetentionConfig(default_days=90, audit_days=30)))
    service.install_builtins()
    service.declare("notes", NOTES)
    thread = {"target_kind": "agent", "target_name": "a", "kind": "thread"}
    service.replace("notes", {**thread, "key": "t1"}, {"text": "old"})
    service.replace("notes", {**thread, "key": "t2"}, {"text": "old too"})
    written = service.read("notes", {**thread, "key": "t1"})
    assert written is not None and written["updated_at"] is not None

    swept = service.prune(now=datetime.now(UTC) + timedelta(days=40))
    assert swept["pruned"]["notes"] == 0 and swept["audit_rows"]["notes"] == 2
    assert service.writes("notes", {**thread, "key": "t1"})["items"] == []  # its audit is gone
    kept = service.read("notes", {**thread, "key": "t1"})
    assert kept is not None and kept["updated_at"] == written["updated_at"]

    assert service.prune(now=datetime.now(UTC) + timedelta(days=100))["pruned"]["notes"] == 2
    assert service.read("notes", {**thread, "key": "t1"}) is None


def test_the_audit_sweep_keeps_every_last_write_across_many_transitions_and_states(store: SqlStore) -> None:
    """The sweep deletes transitions in parts of 500: the last writes it keeps lie in every part,
    and a batch's transition may be the last write of a record of another state (swept before
    or after), whose ``updated_at`` it is too."""
    service = StatesService(store, Config(retention=RetentionConfig(default_days=90, audit_days=30)))
    service.install_builtins()
    service.declare("notes", NOTES)
    service.declare("logs", NOTES)
    thread = {"target_kind": "agent", "target_name": "a", "kind": "thread"}
    keys = [f"n{i}" for i in range(300)]
    # 600 writes swept: the first write of each record goes, its last one stays
    gone = {_seq(service.replace("notes", {**thread, "key": k}, {"text": "a"})) for k in keys}
    gone.add(_seq(service.replace("notes", {**thread, "key": keys[0]}, {"text": "b"})))
    for k in keys[1:]:
        service.replace("notes", {**thread, "key": k}, {"text": "b"})
    ops = [{"op": "set", "path": ["text"], "value": "c"}]
    batch: list[dict[str, Any]] = [
        {"state": s, "subject": {**thread, "key": k}, "ops": ops}
        for s, k in (("notes", "n0"), ("logs", "l0"))
    ]
    shared = service.apply_batch(batch)[0].seq  # l0's last write, not n0's
    service.replace("notes", {**thread, "key": "n0"}, {"text": "d"})
    before = [service.read("notes", {**thread, "key": k}) for k in keys]
    logged = service.read("logs", {**thread, "key": "l0"})

    service.prune(now=datetime.now(UTC) + timedelta(days=40))
    left = {t.seq for t in store.transitions(limit=10_000)}
    assert not gone & left and shared in left
    assert [service.read("notes", {**thread, "key": k}) for k in keys] == before  # updated_at too
    assert service.read("logs", {**thread, "key": "l0"}) == logged


def _seq(record: Mapping[str, Any] | None) -> int:
    assert record is not None
    return int(record["seq"])
