"""The saver's writes records: a checkpoint's pending writes, in the shape they are stored.

A writes record keeps its writes in at most :data:`BUCKETS` members, ``p0`` … ``pf`` (a task's
in the one its id hashes to), each ``{"<task_id>:<idx>": [channel, value, task_path]}``: the
entry's name says its task and index, so the entry holds neither again (the shape before kept
both in the name and in the entry, with every field's name: about half of a small write's
bytes). The shorter entry keeps more tasks within the store's bound for a record kept whole
(``plan.WHOLE_ROW_MAX``), below which a write rewrites one row.

Records of the earlier shapes still read: buckets ``w0`` … ``wf`` of entries ``{"task_id",
"idx", "channel", "value", "task_path"}``, a member ``w:<task_id>:<idx>`` per write, beside a
``config`` member naming the checkpoint (which the subject key names too). The saver's next
write to such a record converts it whole (:func:`converted`); an entry that does not convert
(not of the shape the saver wrote) stays where it is, and reads as before.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any, Final

from stateflow.doc.select import MISSING
from stateflow.store import Whole

BUCKETS: Final = 16
"""A writes record keeps its writes in at most this many members, a task's in the one its id
hashes to: a member's name is one of a few, not the task's own (the store counts members by
name, per state), and a write rewrites only the writes of tasks sharing its bucket."""
NAMES: Final = frozenset(f"p{n:x}" for n in range(BUCKETS))
"""The members of a writes record of the current shape."""

Pending = tuple[Any, str, int, Any, Any]
"""A pending write as read: ``(task_path, task_id, idx, channel, value)`` (the value as stored)."""


def bucket(task_id: str) -> str:
    return f"p{zlib.crc32(task_id.encode()) % BUCKETS:x}"


def entry_name(task_id: str, idx: int) -> str:
    return f"{task_id}:{idx}"


def _special(name: str) -> bool:
    """Whether an entry's index is negative (a special channel's write: an error, an interrupt)."""
    return name.rpartition(":")[2].startswith("-")


def pending(record: dict[str, Any]) -> Iterator[Pending]:
    """The pending writes a writes record holds, of either shape (malformed entries raise: the
    caller names the record)."""
    if not record.keys() <= NAMES:
        record = converted(record)
    for name, held in record.items():
        if name in NAMES:
            for entry, (channel, value, task_path) in held.items():
                task_id, _, idx = entry.rpartition(":")
                yield task_path, task_id, int(idx), channel, value
        elif name.startswith("w:"):  # (an entry of an earlier shape that did not convert)
            yield _earlier(held)
        elif len(name) == 2 and name[0] == "w":
            for held_entry in held.values():
                yield _earlier(held_entry)


def _earlier(entry: dict[str, Any]) -> Pending:
    return entry["task_path"], entry["task_id"], entry["idx"], entry["channel"], entry["value"]


def earlier(record: dict[str, Any]) -> bool:
    """Whether a writes record holds members of an earlier shape (its next write converts it)."""
    return not record.keys() <= NAMES and any(
        name == "config" or name.startswith("w:") or (len(name) == 2 and name[0] == "w") for name in record
    )


def converted(record: dict[str, Any]) -> dict[str, Any]:
    """A writes record in the current shape: each entry of an earlier shape moved into its
    task's bucket (where an entry of the same name is there too, the first written is kept,
    as a write keeps it — unless its index is negative: then the later), the ``config`` member
    dropped (the subject key names the checkpoint). An entry that does not convert stays in
    its member; any other member stays as it is."""
    earlier: list[tuple[str, str, Any]] = []  # (member, entry name, entry): the first written first
    body: dict[str, Any] = {}
    for name, held in record.items():
        if name.startswith("w:"):  # (a member per write: written before buckets)
            earlier.append((name, name[2:], held))
        elif name != "config" and not (len(name) == 2 and name[0] == "w" and type(held) is dict):
            body[name] = held
    for name, held in record.items():
        if len(name) == 2 and name[0] == "w" and type(held) is dict:
            earlier.extend((name, entry, entry_held) for entry, entry_held in held.items())
    buckets: dict[str, dict[str, Any]] = {}
    for member, name, entry in earlier:
        value = _entry_of(name, entry)
        if value is None:  # kept where it is, as it is
            if member.startswith("w:"):
                body[member] = entry
            else:
                body.setdefault(member, {})[name] = entry
            continue
        into = buckets.setdefault(bucket(entry["task_id"]), {})
        if name not in into or _special(name):
            into[name] = value
    for member, held in body.items():
        if member in NAMES and type(held) is dict:  # (entries of the current shape: written later)
            into = buckets.setdefault(member, {})
            for name, value in held.items():
                if name not in into or _special(name):
                    into[name] = value
    for member, held in buckets.items():
        body[member] = held
    return body


def _entry_of(name: str, entry: Any) -> list[Any] | None:
    """An entry of an earlier shape as ``[channel, value, task_path]``, or None where it is not
    of the shape the saver wrote (named by its task id and index, every field there)."""
    if type(entry) is not dict or not entry.keys() >= _FIELDS:
        return None
    task_id, idx = entry["task_id"], entry["idx"]
    if type(task_id) is not str or type(idx) is not int or name != entry_name(task_id, idx):
        return None
    return [entry["channel"], entry["value"], entry["task_path"]]


_FIELDS: Final = frozenset(("task_id", "idx", "channel", "value", "task_path"))


def writes_whole(
    into: str,
    fresh: dict[str, list[Any]],
    paths: list[list[str]],
    encoded: bytes,
    current: dict[str, Any] | None,
) -> Whole:
    """A writes record with a task's entries ``fresh`` (``encoded``: their bytes) put in its
    bucket ``into``, against the record as it is (``current``; one of an earlier shape is
    converted whole, :func:`converted`)."""
    if not current:  # a new writes record: its one member's bytes are these
        return Whole({into: fresh}, paths, {into: encoded}, rewritten=True)
    if earlier(current):
        merged = converted(current)
        held = merged.get(into)
        merged[into] = _merged(held, fresh) if type(held) is dict else fresh
        return Whole(merged, [[]], rewritten=True)
    # the edits the diff would give, where they are plain to see (the store then takes
    # no diff): a bucket new to the record is set whole; entries new to their bucket
    # (a task's first writes) are each set whole, in order
    held = current.get(into, MISSING)
    if held is MISSING:
        return Whole({**current, into: fresh}, paths, None, {into: [[[into], fresh]]}, rewritten=True)
    if type(held) is not dict:
        return Whole({**current, into: fresh}, paths, rewritten=True)
    if not held.keys().isdisjoint(fresh):  # (a task's entry written again: the diff)
        return Whole({**current, into: _merged(held, fresh)}, paths, rewritten=True)
    body = {**current, into: {**held, **fresh}}
    edits = []  # (a loop, not a comprehension: that would make ``into`` a cell on every call)
    for name, entry in fresh.items():
        edits.append([[into, name], entry])
    return Whole(body, paths, None, {into: edits}, rewritten=True)


def _merged(held: dict[str, Any], fresh: dict[str, list[Any]]) -> dict[str, Any]:
    """A bucket's entries with ``fresh`` added: a regular write (idx 0 and up) already held is
    kept, as LangGraph's savers keep the first; only a special channel's (a negative idx: an
    error, an interrupt) is replaced."""
    merged = dict(held)
    for name, entry in fresh.items():
        if name not in held or _special(name):
            merged[name] = entry
    return merged
