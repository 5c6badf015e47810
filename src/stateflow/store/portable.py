"""``stateflow dump`` / ``stateflow load``: a store as JSON Lines, portable between backends.

A dump is a header line, then (with history) every transition in seq order — its time, origin
and each document's change (revision, edits, touched paths) — then the idempotency ledger (each
op id with its scope, time and transition), then every document as it is now (state, subject,
revision, body; ``null`` for a deleted one), then an end line with the number of transition, op
and document lines: a dump cut short (a copy interrupted, a full disk) lacks it or its counts
disagree, and is refused whole rather than loaded as a smaller store. The catalog (``_states``, whose
declarations carry their attachments), the templates (``_templates``), agent memory and every
state's records are all documents, so all travel.

Loading with history replays each transition as one commit with its original time and origin,
into an empty store: documents, revisions, times, origins and edits come out identical (seq
numbers are given afresh in the same order; they match when the source has no gaps). Without
history, each document is written once (revision 1), :data:`PAGE` documents to a commit — the
bulk path: a million small records load in batched commits, checked batch by batch. A
document's time is its transition's, so each then has its commit's time and origin, not its
last write's: keeping those would take a commit per document. Op ids are kept either way (pointing at
their transition's new seq when history was loaded), so a call retried against the loaded
store is still recognised as a replay. The document lines are then compared with what was
loaded. While a load runs the store carries a mark (``stateflow_meta``) that only a finished
load removes, so ``stateflow check`` names a store a load left half filled.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from stateflow.doc.canonical import decode, encode_trusted
from stateflow.doc.diff import Edit
from stateflow.errors import Conflict, InvalidInput, InvalidJSON
from stateflow.store.base import SqlStore
from stateflow.store.clock import restoring_time, utc_now
from stateflow.store.model import DocKey, Write
from stateflow.subjects import record_name

FORMAT: Final = "stateflow-dump"
VERSION: Final = 2
"""Version 2 ends with an end line; version 1 (no end line) is still read, but a version-1 dump
cut short at a line boundary can only partly be told from a whole one."""
READABLE: Final = (1, 2)
PAGE: Final = 500
LOADING: Final = "load_unfinished"
"""The ``stateflow_meta`` key a load sets before its first commit and removes after its last."""

Progress = Callable[[str, int], None]
"""Told ``(what, n)`` as a dump or a load gets ``n`` more of ``what`` done."""


class InvalidDump(InvalidInput):
    code = "invalid-dump"


def dump(store: SqlStore, *, history: bool = True, progress: Progress | None = None) -> Iterator[bytes]:
    """The store as JSON Lines (each item one line, newline included), ending with the end line
    that counts the others. With history, a store whose retention pruned a document's early
    revisions is refused before the first line: a replay starts every document at revision 1
    (dump it with ``history=False``). Every line comes from one snapshot (``Backend.snapshot``):
    what commits while the dump runs is not in it."""
    # one snapshot for every line: transitions, ops and documents read while writers carry on
    # would otherwise disagree (a document at a revision no transition line reaches)
    with store.snapshot():
        store.check_schema()
        if history:
            _refuse_pruned(store)
        counts = dict.fromkeys(_COUNTED.values(), 0)

        def counted(kind: str, line: bytes) -> bytes:
            counts[_COUNTED[kind]] += 1
            if progress is not None:
                progress(_COUNTED[kind], 1)
            return line

        yield _line({"format": FORMAT, "version": VERSION, "history": history})
        if history:
            after = 0
            while page := store.transitions(after_seq=after, limit=PAGE):
                for t in page:
                    if not t.changes:
                        continue  # its changes were pruned or purged: nothing to replay
                    changes = [
                        {
                            "state": c.key.state,
                            "subject": c.key.subject,
                            "revision": c.revision,
                            "edits": [e.to_json() for e in c.edits],
                            "paths": c.paths,
                        }
                        for c in t.changes
                    ]
                    yield counted(
                        "transition",
                        _line(
                            {
                                "kind": "transition",
                                "seq": t.seq,
                                "at": t.at,
                                "origin": t.origin,
                                "changes": changes,
                            }
                        ),
                    )
                after = page[-1].seq
        for line in _ops(store):
            yield counted("op", line)
        with store._read_tx() as tx:
            rows = tx.all(
                "SELECT state, subject, revision FROM documents WHERE revision > 0 ORDER BY state, subject"
            )
        for start in range(0, len(rows), PAGE):
            batch = rows[start : start + PAGE]
            docs = store.read([DocKey(state, subject) for state, subject, _ in batch])
            for state, subject, _ in batch:
                doc = docs[DocKey(state, subject)]
                if doc.body is None and not history:
                    continue  # erased: without its history nothing of it is left to load
                yield counted(
                    "document",
                    _line(
                        {
                            "kind": "document",
                            "state": state,
                            "subject": subject,
                            "revision": doc.revision,
                            "body": doc.body,
                        }
                    ),
                )
        yield _line({"kind": "end", **counts})  # last: a dump without it was cut short


_COUNTED: Final = {"transition": "transitions", "op": "ops", "document": "documents"}
"""Each counted line kind and its field in the end line."""


def _refuse_pruned(store: SqlStore) -> None:
    """Refuse a dump with history of a store whose history no longer starts every document at
    revision 1 (retention pruned it): such a dump could never be loaded."""
    with store._read_tx() as tx:
        row = tx.one(
            "SELECT d.state, d.subject, d.revision FROM documents d WHERE d.revision > 0 AND NOT EXISTS "
            "(SELECT 1 FROM changes c WHERE c.doc_id = d.doc_id AND c.revision = 1) "
            "ORDER BY d.state, d.subject LIMIT 1"
        )
    if row is not None:
        state, subject, revision = row
        raise InvalidInput(
            f"the history of {record_name(state, subject)} (revision {int(revision)}) was pruned by retention: a "
            "dump with history replays every document from revision 1, so it could not be loaded; "
            "dump the store with --no-history (documents only)"
        )


def _ops(store: SqlStore) -> Iterator[bytes]:
    """The idempotency ledger: every op id still remembered, with when it was applied and the
    transition it produced (None: it changed nothing). Sorted here, not by the database, so that
    both backends write the same order whatever their text collation. (The ledger is bounded by
    its retention, ``prune_ops``; it is read in one query.)"""
    with store._read_tx() as tx:
        rows = tx.all("SELECT scope, op_id, applied_at, seq FROM applied_ops")
    rows.sort(key=lambda r: (r[3] is None, r[3] or 0, r[0], r[1]))
    for scope, op_id, applied_at, seq in rows:
        yield _line(
            {
                "kind": "op",
                "scope": scope,
                "op_id": op_id,
                "applied_at": applied_at,
                "seq": None if seq is None else int(seq),
            }
        )


@dataclass
class Checked:
    """What :func:`check` read: the header, the lines of each kind, and whether the dump ended
    with an end line that counts them (a version-1 dump has none)."""

    header: dict[str, Any] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_COUNTED.values(), 0))
    ended: bool = False

    @property
    def complete(self) -> bool:
        """Whether the dump is known to be whole (version 2 always is once checked)."""
        return self.ended


def check(lines: Iterable[bytes]) -> Checked:
    """Read a whole dump and check every line's shape (what :func:`load` checks as it goes) and
    that it is whole (its end line and counts), without a store: a file that is not a whole dump
    is refused before any store is opened or created, so nothing is written."""
    seen = Checked()
    for _ in _items(lines, seen):
        pass
    return seen


def load(store: SqlStore, lines: Iterable[bytes], *, progress: Progress | None = None) -> dict[str, int]:
    """Load a dump into ``store``, which must hold no transition yet; returns counts. A line
    refused here (or a missing end line, seen only at the end) has the loaded lines before it
    written, and the store keeps the mark that ``stateflow check`` reports: :func:`check` the
    dump first. ``progress`` is told of each page of documents compared with the dump once
    every line is in (the load's last step, after the lines' own progress)."""
    store.check_schema()
    with store._read_tx() as tx:
        has_ops = tx.one("SELECT 1 FROM applied_ops LIMIT 1") is not None
    if has_ops or store.transitions(limit=1):
        raise Conflict(f"{store.url} already holds data; load into an empty store")
    seen = Checked()
    items = _items(lines, seen)
    header = next(items)
    _mark_loading(store, utc_now())
    transitions = documents = 0
    expected: dict[DocKey, tuple[int, Any]] = {}
    seqs: dict[int, int] = {}
    """the dump's seq → the seq its transition got here"""
    ops: list[tuple[str, str, str, int | None]] = []
    batch: dict[DocKey, Any] = {}
    """documents of a dump without history, written :data:`PAGE` to a commit"""
    for item in items:
        kind = item["kind"]
        if kind == "transition":
            if item["changes"]:  # (an earlier dump's transition whose changes were pruned: nothing)
                seqs[int(item["seq"])] = _replay(store, item)
                transitions += 1
        elif kind == "op":
            seq = item.get("seq")
            # without history (or once retention dropped it) the transition is not here: the
            # op id is still remembered, so a retried call stays a replay
            ops.append((item["scope"], item["op_id"], item["applied_at"], seqs.get(seq) if seq else None))
        elif kind == "document":
            key = DocKey(item["state"], item["subject"])
            if header.get("history"):
                expected[key] = (int(item["revision"]), item["body"])
            elif item["body"] is not None:
                batch[key] = item["body"]
                if len(batch) == PAGE:
                    _write_batch(store, batch)
            documents += 1
    _write_batch(store, batch)
    if ops:
        with store._write_tx() as tx:
            for start in range(0, len(ops), PAGE):
                tx.many(
                    "INSERT INTO applied_ops (scope, op_id, applied_at, seq) VALUES (?, ?, ?, ?)",
                    ops[start : start + PAGE],
                )
    _verify(store, expected, bool(header.get("history")), progress)
    _mark_loading(store, None)
    return {"transitions": transitions, "documents": documents, "ops": len(ops)}


def _mark_loading(store: SqlStore, started: str | None) -> None:
    """Set (with the time the load started) or clear the store's unfinished-load mark."""
    with store._write_tx() as tx:
        tx.run("DELETE FROM stateflow_meta WHERE key = ?", (LOADING,))
        if started is not None:
            tx.run("INSERT INTO stateflow_meta (key, value) VALUES (?, ?)", (LOADING, started))


def unfinished_load(store: SqlStore) -> str | None:
    """When a load into ``store`` started that did not finish (the store holds only part of its
    dump), else None."""
    with store._read_tx() as tx:
        row = tx.one("SELECT value FROM stateflow_meta WHERE key = ?", (LOADING,))
    return None if row is None else str(row[0])


def _write_batch(store: SqlStore, batch: dict[DocKey, Any]) -> None:
    """Write each document of ``batch`` at revision 1 in one commit, check it reads back, and
    empty ``batch``: a large dump loads in bulk and is never held whole."""
    if not batch:
        return
    store.commit([Write.between(key, None, body, 0) for key, body in batch.items()], {"door": "load"})
    _verify(store, {key: (1, body) for key, body in batch.items()}, history=False)
    batch.clear()


def _replay(store: SqlStore, item: dict[str, Any]) -> int:
    writes = [
        Write(
            DocKey(c["state"], c["subject"]),
            [Edit.from_json(e) for e in c["edits"]],
            int(c["revision"]) - 1,
            [tuple(p) for p in c["paths"]],
        )
        for c in item["changes"]
    ]
    try:
        with restoring_time(item["at"]):
            commit = store.commit(writes, item["origin"])
    except (Conflict, InvalidInput) as exc:  # a damaged dump, not a concurrent writer
        raise InvalidDump(f"transition {item['seq']} does not replay: {exc.message}") from None
    if commit.seq is None:
        raise InvalidDump(f"transition {item['seq']} changed nothing when replayed")
    return commit.seq


def _verify(
    store: SqlStore, expected: dict[DocKey, tuple[int, Any]], history: bool, progress: Progress | None = None
) -> None:
    keys = list(expected)
    for start in range(0, len(keys), PAGE):
        docs = store.read(keys[start : start + PAGE])
        for key in keys[start : start + PAGE]:
            revision, body = expected[key]
            doc = docs[key]
            if doc.body != body or (history and doc.revision != revision):
                raise InvalidDump(f"{key} differs after loading (revision {doc.revision}, dump {revision})")
        if progress is not None:
            progress("documents compared", len(docs))


def _line(value: Any) -> bytes:
    # a line's envelope puts a record one level (a transition's edit, four) below its top: a
    # record as deep as a document may nest is past orjson's limit there, and encode_trusted
    # falls back to the standard library's encoder for it (load's parser reads 1024 levels)
    return encode_trusted(value) + b"\n"


def _items(lines: Iterable[bytes], seen: Checked) -> Iterator[dict[str, Any]]:
    """The header, then every other line but the end line, each refused by number unless it has
    the fields (and their types) its kind needs and, in a dump with history, the revisions a
    replay needs; then the dump is refused unless it is whole: a load never stops on a line it
    cannot read. ``seen`` gathers the header and the counts."""
    header: dict[str, Any] | None = None
    revisions: dict[tuple[str, str], int] = {}
    """each document's revision after the transitions read so far"""
    documents: set[tuple[str, str]] = set()
    number = 0
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = decode(line)
        except InvalidJSON as exc:
            raise InvalidDump(f"line {number} is not JSON: {exc}") from None
        if seen.ended:
            raise InvalidDump(f"line {number}: a line after the dump's end line")
        if header is None:
            _check_header(item)
            header = seen.header = item
        else:
            if isinstance(item, dict) and item.get("kind") == "end" and header["version"] >= 2:
                _check_end(number, item, seen.counts)
                seen.ended = True
                continue
            _check_line(number, item)
            seen.counts[_COUNTED[item["kind"]]] += 1
            if header.get("history"):
                _check_revisions(number, item, revisions)
                if item["kind"] == "document":
                    documents.add((item["state"], item["subject"]))
        yield item
    if header is None:
        raise InvalidDump("the dump is empty (the first line must be its header)")
    cut = f"the dump is cut short after line {number}"
    if header["version"] >= 2 and not seen.ended:
        raise InvalidDump(
            f"{cut}: it has no end line (a copy interrupted, a full disk?); dump the store again"
        )
    missing = next((key for key in revisions if key not in documents), None)
    if missing is not None:  # the document lines come last: the first cut loses some
        raise InvalidDump(
            f"{cut}: the transitions change {record_name(*missing)}, which has no document line"
        )


def _check_end(number: int, item: dict[str, Any], counts: dict[str, int]) -> None:
    """The end line counts the lines before it; a dump that lost lines in the middle (or gained
    some) disagrees with it."""
    for name, n in counts.items():
        if not _is_int(item.get(name)):
            raise InvalidDump(f"line {number}: end line without a count of {name}")
        if item[name] != n:
            raise InvalidDump(
                f"line {number}: the end line counts {item[name]} {name}, the dump holds {n}; "
                "the dump is damaged, dump the store again"
            )


def _check_revisions(number: int, item: dict[str, Any], revisions: dict[tuple[str, str], int]) -> None:
    """Each change takes its document one revision further, from 1, and each document line
    stands where the transitions leave it: what a replay needs."""
    pruned = " (history pruned before the dump? dump the store with --no-history)"
    if item["kind"] == "transition":
        for change in item["changes"]:
            key = (change["state"], change["subject"])
            before = revisions.get(key, 0)
            if change["revision"] != before + 1:
                raise InvalidDump(
                    f"line {number}: transition {item['seq']} takes {record_name(*key)} to revision "
                    f"{change['revision']}, but the transitions before it leave it at revision {before}"
                    + (pruned if before == 0 else "")
                )
            revisions[key] = before + 1
    elif item["kind"] == "document":
        key = (item["state"], item["subject"])
        after = revisions.get(key, 0)
        if item["revision"] != after:
            raise InvalidDump(
                f"line {number}: the document line of {record_name(*key)} is at revision {item['revision']}, but the "
                f"transitions take it to revision {after}" + (pruned if after == 0 else "")
            )


def _check_header(item: Any) -> None:
    if not isinstance(item, dict) or item.get("format") != FORMAT:
        raise InvalidDump("not a stateflow dump (the first line must be its header)")
    if item.get("version") not in READABLE or not _is_int(item.get("version")):
        readable = " and ".join(str(v) for v in READABLE)
        raise InvalidDump(f"dump version {item.get('version')!r} is not supported ({readable} are)")


def _is_int(value: Any) -> bool:
    return type(value) is int


def _is_str(value: Any) -> bool:
    return type(value) is str


def _is_paths(value: Any) -> bool:
    return type(value) is list and all(type(path) is list for path in value)


_FIELDS: Final[dict[str, dict[str, Callable[[Any], bool]]]] = {
    "transition": {
        "seq": _is_int,
        "at": _is_str,
        "origin": lambda v: type(v) is dict,
        "changes": lambda v: type(v) is list,
    },
    "op": {
        "scope": _is_str,
        "op_id": _is_str,
        "applied_at": _is_str,
        "seq": lambda v: v is None or _is_int(v),
    },
    "document": {
        "state": _is_str,
        "subject": _is_str,
        "revision": _is_int,
        "body": lambda v: v is None or type(v) is dict,
    },
}
_CHANGE: Final[dict[str, Callable[[Any], bool]]] = {
    "state": _is_str,
    "subject": _is_str,
    "revision": lambda v: _is_int(v) and v >= 1,
    "edits": lambda v: type(v) is list,
    "paths": _is_paths,
}


def _check_line(number: int, item: Any) -> None:
    if not isinstance(item, dict) or item.get("kind") not in _FIELDS:
        raise InvalidDump(f"line {number}: unknown dump line {str(item)[:80]!r}")
    kind: str = item["kind"]
    _check_fields(number, kind, item, _FIELDS[kind])
    for change in item["changes"] if kind == "transition" else ():
        if type(change) is not dict:
            raise InvalidDump(f"line {number}: a transition's change must be an object")
        _check_fields(number, "change", change, _CHANGE)
        for edit in change["edits"]:
            try:
                Edit.from_json(edit)
            except InvalidInput as exc:
                raise InvalidDump(f"line {number}: {exc.message}") from None


def _check_fields(
    number: int, kind: str, item: dict[str, Any], fields: Mapping[str, Callable[[Any], bool]]
) -> None:
    for name, valid in fields.items():
        if name not in item:
            raise InvalidDump(f"line {number}: {kind} without {name!r}")
        if not valid(item[name]):
            raise InvalidDump(f"line {number}: {kind} field {name!r} is not valid: {str(item[name])[:80]!r}")
