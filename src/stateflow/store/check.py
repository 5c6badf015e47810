"""``stateflow check``: is a store whole? The file's own integrity, then every revision it keeps.

A check is a function ``(store, report)`` that records what it looked at and what is wrong; the
list :data:`CHECKS` runs in order. Further checks (for example a walk of new storage structures)
add themselves with :func:`register`. A check never writes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from stateflow.errors import CorruptStore, StateflowError, StoreNotFound, StoreUnavailable
from stateflow.store.base import SqlStore
from stateflow.store.model import DocKey, Document
from stateflow.store.nodes import all_roots, walk
from stateflow.store.portable import unfinished_load
from stateflow.store.tx import Tx

MAX_PROBLEMS = 100
"""A damaged store can have thousands of bad rows; the report names the first ones."""

NOT_DAMAGE: Final = (StoreNotFound, StoreUnavailable)
"""Refusals that say the store could not be read (missing, unreachable, a connection lost part
way, a statement timed out), never what it holds: wherever a check catches a refusal to report
it as a problem, these pass through, so ``check_store`` raises them rather than telling an
operator to restore a sound store from a backup."""


@dataclass
class CheckReport:
    store: str
    checked: dict[str, int] = field(default_factory=dict)
    """what was looked at, by kind (``documents``, ``revisions``, ``pages`` …)"""
    problems: list[str] = field(default_factory=list)
    more_problems: int = 0
    advised: int = 0
    """how many of the problems say what fixes them (the rest only a backup can undo)"""
    refused_records: list[str] = field(default_factory=list)
    """records a state's record rule refuses (:func:`refused_record`): sound, not damage —
    written before the rule, they are to be rewritten, not restored"""
    more_refused_records: int = 0
    progress: Callable[[str, int], None] | None = field(default=None, repr=False, compare=False)
    """told each count as it is made (a long check shows how far it got)"""

    @property
    def ok(self) -> bool:
        return not self.problems and not self.refused_records

    def count(self, what: str, n: int = 1) -> None:
        self.checked[what] = self.checked.get(what, 0) + n
        if self.progress is not None:
            self.progress(what, n)

    def problem(self, message: str, *, advised: bool = False) -> None:
        """Record a problem; ``advised``: its message says what fixes it."""
        if len(self.problems) < MAX_PROBLEMS:
            self.advised += advised
            self.problems.append(message)
        else:
            self.more_problems += 1

    def refused_record(self, message: str) -> None:
        if len(self.refused_records) < MAX_PROBLEMS:
            self.refused_records.append(message)
        else:
            self.more_refused_records += 1

    def to_json(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "ok": self.ok,
            "checked": self.checked,
            "problems": self.problems,
            "more_problems": self.more_problems,
            "refused_records": self.refused_records,
            "more_refused_records": self.more_refused_records,
        }


Check = Callable[[SqlStore, CheckReport], None]
CHECKS: list[tuple[str, Check]] = []


def register(name: str, check: Check) -> None:
    """Run ``check`` after the ones registered before it (a name registers once)."""
    if all(existing != name for existing, _ in CHECKS):
        CHECKS.append((name, check))


def check_store(store: SqlStore, progress: Callable[[str, int], None] | None = None) -> CheckReport:
    """Run every registered check; a check that cannot run at all is itself a problem (but a
    store that is missing or unreachable, or at another schema version than this stateflow's, is
    an error to act on — find it, migrate it, upgrade stateflow —, not damage)."""
    report = CheckReport(store.url, progress=progress)
    for name, check in CHECKS:
        try:
            check(store, report)
        except NOT_DAMAGE:
            raise
        except _OtherVersion as exc:
            raise exc.refusal from None
        except StateflowError as exc:
            report.problem(
                f"{name}: {exc.code}: {exc.message}", advised=isinstance(exc, CorruptStore) and exc.advised
            )
            if name == "schema":
                break  # nothing below can be read without a schema
    return report


def sqlite_file_integrity(path: str, report: CheckReport) -> None:
    """SQLite's own integrity check of every page and index, read-only (runs before the store
    is opened: a damaged file may not open at all). A file that cannot be read here at all (no
    WAL index in a read-only place while its WAL holds commits) is refused, not called damaged."""
    from stateflow.store.sqlite_file import connect_read_only, holding, preflight

    file = Path(path)
    try:
        preflight(file)
    except CorruptStore as exc:
        report.problem(f"file: {exc.message}", advised=exc.advised)
        return
    try:
        with holding(file):
            conn = connect_read_only(file, timeout=5)
            try:
                try:
                    rows = conn.execute("PRAGMA integrity_check(100)").fetchall()
                except sqlite3.DatabaseError:
                    # a damaged page stops the full check (it reads the indexes' entries
                    # through it) where the lighter one still lists it by number: that
                    # answer, else the error as it stands
                    rows = conn.execute("PRAGMA quick_check(100)").fetchall()
                pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
            finally:
                conn.close()
    except sqlite3.Error as exc:
        report.problem(f"file: {exc}")
        return
    report.count("pages", pages)
    for (row,) in rows:
        for line in str(row).splitlines():  # (a row may hold several, under a header line)
            if line != "ok" and not line.startswith("*** in database"):
                report.problem(f"file: {line}")


def _schema(store: SqlStore, report: CheckReport) -> None:
    version = store.schema_version()
    report.checked["schema_version"] = version or 0
    # refused as at open, read afresh: a store this process found migrated (``check_schema``
    # remembers it) may have been migrated since by another release, which is no damage either
    refusal = store.version_refusal(version)
    if refusal is not None:
        raise _OtherVersion(refusal)


class _OtherVersion(Exception):
    """The store is at another schema version than this stateflow's (not migrated yet, or
    newer): ``check_store`` refuses it as such — run ``migrate``, upgrade stateflow — rather than
    reading every row against the wrong schema and calling what it finds damage."""

    def __init__(self, refusal: StateflowError) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


def _oldest(tx: Tx) -> dict[int, int]:
    """Each document's oldest revision its history still rebuilds (retention prunes below it)."""
    return {
        int(doc_id): int(revision)
        for doc_id, revision in tx.all(
            "SELECT doc_id, min(revision) FROM ("
            "SELECT doc_id, revision FROM snapshots UNION ALL "
            "SELECT doc_id, revision - 1 FROM changes) AS kept GROUP BY doc_id"
        )
    }


def _revisions(store: SqlStore, report: CheckReport) -> None:
    """Every document's current body and every revision its history still reaches decode and
    replay (revisions older than the retained history are skipped, not counted as damage), and
    the current body is what the history builds at the document's revision: a lost member row,
    a lost newest change or a revision the history never reached would otherwise read as a
    sound document."""
    with store._read_tx() as tx:
        docs = tx.all("SELECT doc_id, state, subject, revision FROM documents ORDER BY doc_id")
        oldest = _oldest(tx)
    currents: dict[DocKey, Document | StateflowError] = {}
    for i, (doc_id, state, subject, revision) in enumerate(docs):
        key = DocKey(state, subject)
        if i % CURRENT_BATCH == 0:
            currents = _currents(store, [DocKey(d[1], d[2]) for d in docs[i : i + CURRENT_BATCH]])
        report.count("documents")
        first = max(1, oldest.get(doc_id, int(revision)))
        built: Document | None = None
        # each revision as an as-of read rebuilds it, carried forward from the one before
        # (``replay``), not rebuilt from its snapshot again: the current revision too, which
        # ``read_at`` would answer from the current body
        r = first
        try:
            for doc in store.replay(key, int(doc_id), first, int(revision)):
                built = doc
                report.count("revisions")
                r += 1
        except NOT_DAMAGE:
            raise
        except StateflowError as exc:
            report.problem(f"revisions: {key} revision {r}: {exc.code}: {exc.message}")
            built = None  # later revisions replay through this one
        current = currents[key]
        if isinstance(current, StateflowError):
            report.problem(f"documents: {key} current body: {current.code}: {current.message}")
            continue
        # (a document written since the listing is compared by the next check, not at a
        # revision its history was not built to)
        if built is not None and current.revision == revision and built.body != current.body:
            report.problem(
                f"documents: {key} current body (revision {revision}) is not what its history builds "
                f"at that revision ({_difference(built.body, current.body)})"
            )


CURRENT_BATCH: Final = 256
"""Documents whose current bodies one read fetches: a read per document cost a transaction and
its statements each, most of a check's time on a large store (a PostgreSQL round trip each)."""


def _currents(store: SqlStore, keys: list[DocKey]) -> dict[DocKey, Document | StateflowError]:
    """The current documents of ``keys``, in one read; where it is refused (a body that does not
    decode), each is read alone, so the refusal names its own document."""
    try:
        read = store.read(keys)
        return {key: read[key] for key in keys}
    except NOT_DAMAGE:
        raise
    except StateflowError:
        out: dict[DocKey, Document | StateflowError] = {}
        for key in keys:
            try:
                out[key] = store.get(key)
            except NOT_DAMAGE:
                raise
            except StateflowError as exc:
                out[key] = exc
        return out


def _difference(built: Any, current: Any) -> str:
    """What differs between the body the history builds and the current one, by member."""
    if type(built) is not dict or type(current) is not dict:
        return (
            "the history builds "
            + ("no body" if built is None else "a body")
            + (", the current body is missing" if current is None else "")
        )
    missing = [n for n in built if n not in current]
    extra = [n for n in current if n not in built]
    changed = [n for n in built if n in current and built[n] != current[n]]
    parts = [
        f"{what} {names}"
        for what, names in (("missing", missing), ("extra", extra), ("changed", changed))
        if names
    ]
    return "members " + ", ".join(parts)


def _transitions(store: SqlStore, report: CheckReport) -> None:
    """Every transition's origin decodes (history pages show it); where a transition's row
    lists its changes' keys (``transition_keys``), every change's transition exists and lists
    it (the audit page finds a transition's changes only through that list)."""
    after = 0
    while True:
        page = store.transitions(after_seq=after, limit=1000)
        if not page:
            break
        report.count("transitions", len(page))
        after = page[-1].seq
    if not store.transition_keys:
        return
    with store._read_tx() as tx:
        unlisted = tx.all(
            "SELECT c.doc_id, c.revision, c.seq, t.seq IS NULL FROM changes c "
            "LEFT JOIN transitions t ON t.seq = c.seq WHERE t.seq IS NULL OR NOT json_valid(t.changed) OR NOT EXISTS ("
            "SELECT 1 FROM json_each(t.changed) k WHERE k.value ->> 0 = c.doc_id AND k.value ->> 1 = c.revision) "
            "ORDER BY c.seq, c.doc_id"
        )
        # the other way: each key a transition lists is a change row of a document, unless
        # retention pruned it (below the document's oldest kept revision) or the document went
        listed = tx.all(
            "SELECT t.seq, k.value ->> 0, k.value ->> 1 FROM transitions t, json_each(t.changed) k "
            "WHERE json_valid(t.changed) AND EXISTS (SELECT 1 FROM documents d WHERE d.doc_id = k.value ->> 0) "
            "AND NOT EXISTS (SELECT 1 FROM changes c WHERE c.doc_id = k.value ->> 0 AND c.revision = k.value ->> 1) "
            "ORDER BY t.seq"
        )
        oldest = _oldest(tx) if listed else {}
    for doc_id, revision, seq, missing in unlisted:
        why = "which is missing" if missing else "which does not list it"
        report.problem(
            f"transitions: the change of document {doc_id} at revision {revision} names transition {seq}, {why}"
        )
    for seq, doc_id, revision in listed:
        if int(revision) > oldest.get(int(doc_id), 0):
            report.problem(
                f"transitions: transition {seq} lists the change of document {doc_id} at revision "
                f"{revision}, which is missing"
            )


def _nodes(store: SqlStore, report: CheckReport) -> None:
    """Every node reachable from a member or a snapshot is present and matches its id (the
    hash of its bytes); each missing or damaged one is named."""
    with store._read_tx() as tx:
        reached = walk(tx, all_roots(tx), lambda message: report.problem(f"nodes: {message}"))
    report.count("nodes", len(reached))


def _counters(store: SqlStore, report: CheckReport) -> None:
    """The maintained counts (records per state and subject kind, documents per top-level
    member) equal what the rows say now; each difference is named."""
    with store._read_tx() as tx:
        stored, counted = store.recount(tx)
    for key in sorted(set(stored) | set(counted)):
        if stored.get(key, 0) != counted.get(key, 0):
            state, counter, name = key
            report.problem(
                f"counters: state {state!r} {counter} {name!r} is counted {stored.get(key, 0)}, "
                f"the rows hold {counted.get(key, 0)}"
            )
    report.count("counters", len(stored))


def _scalars(store: SqlStore, report: CheckReport) -> None:
    """Each member's kept ``scalar`` (PostgreSQL: what the value indexes read, set by every
    writer) is what its body makes it: a stale one is missed or found wrongly by searches."""
    with store._read_tx() as tx:
        stale = store._stale_scalars(tx, MAX_PROBLEMS)
    for doc_id, name in stale:
        report.problem(
            f"members: member {name!r} of document {doc_id} keeps a scalar its body does not make, so "
            "searches by its value go wrong; set it again: UPDATE members SET scalar = "
            f"stateflow_scalar(body, size) WHERE doc_id = {doc_id}",
            advised=True,
        )


def _load(store: SqlStore, report: CheckReport) -> None:
    """A load that started and did not finish (refused part way, interrupted) left the store
    holding only part of its dump, however consistent each part is."""
    started = unfinished_load(store)
    if started is not None:
        report.problem(
            f"load: a load started at {started} did not finish, so the store holds only part of its "
            "dump; load the dump again into an empty store",
            advised=True,
        )


register("schema", _schema)
register("load", _load)
register("nodes", _nodes)
register("revisions", _revisions)
register("transitions", _transitions)
register("counters", _counters)
register("scalars", _scalars)
