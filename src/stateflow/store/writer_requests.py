"""Memory patches handed to the SQLite writer whose turn comes first: a group commit across
processes.

With several processes writing one memory scope, every writer's turn re-reads the rows and the
member the writer before it moved (on a cold page cache), merges its patch on them, plans and
commits alone: the turn is several times a lone call's. A patch of ``memory.served``'s common
case is plain data (the memory layer computes its receipt afterwards from the basis it was
merged into, as on PostgreSQL), so a writer that has to wait for its turn **publishes** it: the
file ``<database>-requests/r<ticket>`` (written aside, then renamed into place), named by its
writer-queue ticket. The writer whose turn comes first (``SqliteStore.patch_on_server``) writes
its own patch, then **takes** the requests of the tickets right behind its own, in ticket order
and with no gap (renamed to ``t<ticket>``: taken once), at most :data:`TAKEN_MAX`, and merges
each on the documents as the one before left them, in one transaction: each request in a
savepoint of its own, its id recorded as a claim of its commit (``applied_ops``, scope
:data:`SCOPE`: no schema of its own), one transition each, one ``COMMIT`` (one fsync) for all.
After the commit, and before it lets its turn go, it sends each requester its answer (the basis
its patch was merged into, the transition and the paths written) as a datagram to the name the
requester waits on in the writer queue. A requester that is answered lets its ticket go at once
and returns without a transaction of its own; it takes its request's file back as a spare for
its next request (:class:`SpareFiles`: a file created per request cost more than a lone turn).

A request's failure stays with it: its savepoint is rolled back, it gets no answer, and its
writer, when its turn comes, finds its request taken but not claimed and writes it itself
(raising its own error there). Crash safety rests on the claim: an answer is only sent after the
commit; a requester that gets its turn without one looks its id up in ``applied_ops`` under the
write lock — found (the holder died after its commit, or the answer was too large to send):
the basis is read back as of the transition before; not found (the holder's transaction died
with it, or the request failed): it writes the request itself. A request is never taken twice
(a rename succeeds once) and a claimed id is never written again (``OpIdTaken``).
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Final

from stateflow.doc.canonical import ascii_digits, decode_trusted, encode_trusted
from stateflow.doc.merge import Emitted, merge_patch
from stateflow.errors import InvalidJSON
from stateflow.store.cache import Heads
from stateflow.store.model import DocKey, Document, Write, made_document, made_write
from stateflow.store.rows import DocRow
from stateflow.store.spares import SPARES
from stateflow.store.writes import named_document

SCOPE: Final = "_writer_requests"
"""The ``applied_ops`` scope of request ids (a reserved name: no state or memory scope)."""
TAKEN_MAX: Final = 7
"""Requests one turn takes behind its own write: with one lone turn's work each, the last of
them is answered a few milliseconds after its turn would have come."""
MARGIN: Final = 1.0
"""Seconds before its requester's deadline that a request is no longer taken: a requester
whose wait ends finds it untaken and withdraws it, unless a holder is stuck in its commit."""
ANSWER_MAX: Final = 200_000
"""The largest answer sent whole (a datagram), at most; a larger one says only "committed", and
the requester reads its basis back from the store. (The writer queue sends less whole: a turn's
answers must fit its socket's send buffer together.)"""
READ_SIZE: Final = 65_536
"""Bytes a request file is read in at a time."""
COMMITTED: Final = b"c"
"""The answer that says only that the request committed."""


class SpareFiles:
    """Request files of this store that no request holds any more, for the next one to be
    written into: creating a file in the folder that 8 writer processes share costs ~0.1 ms of
    kernel time (more than a lone write's whole turn), renaming one a fiftieth of that. A taken
    request's file goes back to its own writer, which renames it to a spare's name once it is
    answered or has its turn — not removed by the turn that took it. (A list: appended and
    popped whole, each one step for the threads of a process.)"""

    __slots__ = ("folder", "names")

    def __init__(self, database: Path) -> None:
        self.folder = f"{database}-requests/"
        self.names: list[str] = []

    def keep(self, current: str, ticket: int, request: str) -> bool:
        """Make the file named ``current`` a spare (False: it is not there)."""
        name = f"{self.folder}p{ticket}-{request}"  # (swept as a leftover once earlier than a turn)
        try:
            os.rename(current, name)
        except OSError:
            return False
        self.names.append(name)
        return True

    def drop(self) -> None:
        """Remove the spares (the store is closing, or the process exiting)."""
        names = self.names
        while names:
            with contextlib.suppress(OSError):
                os.unlink(names.pop())


@dataclass(slots=True)
class Request:
    """One ``patch_on_server`` call of this process, as published."""

    id: str
    keys: list[DocKey]
    patches: dict[DocKey, bytes]
    members: list[str]
    outlines: list[str]
    origin: dict[str, Any]
    spares: SpareFiles
    ticket: int | None = None
    """the ticket it was published under (None: not published)"""

    @classmethod
    def new(
        cls,
        spares: SpareFiles,
        keys: list[DocKey],
        patches: Mapping[DocKey, bytes],
        members: Sequence[str],
        outlines: Sequence[str],
        origin: dict[str, Any],
    ) -> Request:
        return cls(uuid.uuid4().hex, keys, dict(patches), list(members), list(outlines), origin, spares)

    def publish(self, ticket: int, deadline: float) -> bool:
        """Write the request where the holder of an earlier turn may take it (False: it could
        not be written, and is not published). ``deadline``: ``time.monotonic`` value of the
        requester's wait's end."""
        parts = [
            b'{"id":"',
            self.id.encode(),
            b'","until":',
            str(time.time() + deadline - time.monotonic() - MARGIN).encode(),
            b',"keys":',
            encode_trusted([[k.state, k.subject] for k in self.keys]),
            b',"patches":[',
            b",".join(self.patches.get(k, b"null") for k in self.keys),
            b'],"members":',
            encode_trusted(self.members),
            b',"outlines":',
            encode_trusted(self.outlines),
            b',"origin":',
            encode_trusted(self.origin),
            b"}",
        ]
        data = b"".join(parts)
        folder = self.spares.folder
        try:
            fd = None
            names = self.spares.names
            while names and fd is None:  # a spare, as long as it was not swept meanwhile
                aside = names.pop()
                with contextlib.suppress(FileNotFoundError):
                    fd = os.open(aside, os.O_WRONLY | os.O_CLOEXEC)
            fresh = fd is None
            if fd is None:
                aside = f"{folder}p{ticket}-{self.id}"
                try:
                    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
                except FileNotFoundError:
                    os.makedirs(folder, mode=0o700, exist_ok=True)
                    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, data)
                if not fresh:  # (a spare holds an earlier request: cut to this one's length)
                    os.ftruncate(fd, len(data))
            finally:
                os.close(fd)
            os.rename(aside, f"{folder}r{ticket}")
        except OSError:
            return False
        self.ticket = ticket
        return True

    def withdraw(self) -> bool:
        """Take the request back before anyone took it: True if it was still there (or never
        published); False: a holder took it."""
        ticket = self.ticket
        if ticket is None:
            return True
        current = f"{self.spares.folder}r{ticket}"
        if not self.spares.keep(current, ticket, self.id):  # (a rename, as a take is: one wins)
            try:
                os.unlink(current)
            except FileNotFoundError:
                return False
            except OSError:
                return True  # (still there, but not takeable by us either: treat as withdrawn)
        self.ticket = None
        return True

    def forget(self) -> None:
        """The taken file of this request kept as a spare, once its turn is over — answered,
        or this writer's own turn come (the turn that took it has read it and let go)."""
        ticket = self.ticket
        if ticket is not None:
            self.spares.keep(f"{self.spares.folder}t{ticket}", ticket, self.id)
            self.ticket = None


@dataclass(frozen=True, slots=True)
class Taken:
    """A published request another writer's turn took."""

    ticket: int
    id: str
    keys: list[DocKey]
    patches: dict[DocKey, Any]
    members: list[str]
    outlines: list[str]
    origin: dict[str, Any]


def take(database: Path, after: int, drawn: int) -> list[Taken]:
    """The published requests of the tickets right after ``after`` (below ``drawn``), in ticket
    order, each renamed as taken; up to the first ticket with none (no gap: a writer in between
    keeps its place) and at most :data:`TAKEN_MAX`."""
    folder = f"{database}-requests/"  # (strings, not ``Path``s: this runs in the turn)
    taken: list[Taken] = []
    now = time.time()
    for ticket in range(after + 1, min(drawn, after + 1 + TAKEN_MAX)):
        path = f"{folder}t{ticket}"
        try:
            os.rename(f"{folder}r{ticket}", path)
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:  # (not ``open``: its buffer, size and terminal checks are four system calls more)
                raw = chunk = os.read(fd, READ_SIZE)
                while len(chunk) == READ_SIZE:
                    chunk = os.read(fd, READ_SIZE)
                    raw += chunk
            finally:
                os.close(fd)
            request = decode_trusted(raw)
        except (OSError, InvalidJSON):
            break
        try:
            keys = [DocKey(state, subject) for state, subject in request["keys"]]
            if float(request["until"]) < now:
                raise ValueError("expired")
            entry = Taken(
                ticket,
                str(request["id"]),
                keys,
                {k: p for k, p in zip(keys, request["patches"], strict=True) if p is not None},
                list(request["members"]),
                list(request["outlines"]),
                dict(request["origin"]),
            )
        except (KeyError, TypeError, ValueError):
            # not one this code can merge (or its requester's wait is ending): it stays taken and
            # unanswered, and its requester writes it itself (or has given up: nothing written)
            break
        taken.append(entry)
    return taken


SWEEP_EVERY: Final = 4096
"""Tickets between two sweeps of one store's (:func:`sweep`): a file left behind costs only its
few hundred bytes until then."""


def sweep(database: Path, below: int) -> None:
    """Remove the request files of tickets before ``below`` — the ticket whose turn it is: the
    queue is first come, first served, so every writer before it has had its turn, given up or
    died, and nobody takes, withdraws or answers those files any more (a writer that gave up
    just now finds its request gone, as if taken, and its claim absent: nothing written). What
    a requester killed after publishing leaves (``r``), or after its request was taken, before it
    took the file back (``t``), or while writing it aside (``p``); and spares (``p``): a live
    writer whose spare is swept makes a new file for its next request."""
    folder = f"{database}-requests/"
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        number = name[1:].split("-", 1)[0]
        if name[:1] in ("r", "t", "p") and ascii_digits(number) and int(number) < below:
            with contextlib.suppress(OSError):
                os.unlink(folder + name)


class NotMerged(Exception):
    """A request's merge is not the common case after all: nothing written for it."""


def merged(
    docs: Mapping[DocKey, Document], patches: Mapping[DocKey, Any]
) -> tuple[list[Write], dict[DocKey, bytes]]:
    """The writes of ``patches`` merged on ``docs`` — the merge ``patch_state`` makes of such a
    patch (pruning, its edits listed by the merge) — and the paths each writes, encoded as the
    memory layer's check compares them."""
    writes: list[Write] = []
    paths: dict[DocKey, bytes] = {}
    for key, patch in patches.items():
        doc = docs[key]
        basis = doc.body or {}
        edits = Emitted()
        new = merge_patch(basis, patch, copies=SPARES, prune=True, edits=edits)
        if not edits.exact or type(new) is not dict:
            raise NotMerged(str(key))
        if edits:
            writes.append(made_write(key, edits, doc.revision, None, (basis, new)))
            paths[key] = encode_trusted([list(e.path) for e in edits])
    return writes, paths


Held = dict[DocKey, tuple[DocRow, dict[str, Any] | None, Heads]]
"""The documents as a turn's transaction has left them so far (row, body, member heads), for
the requests it writes next: what its writes planned (``Fresh``), not the caches (which take
only committed data)."""


_ROW_FIELDS: Final = tuple(f.name for f in fields(DocRow))
"""A document row's fields in order, as ``handed_on`` lists them and ``DocRow(*row)`` takes them
back (every field: one added to the row travels with it)."""


def handed_on(held: Held, most: int) -> bytes | None:
    """``held`` encoded for the next turn (``WriterQueue.hand_on``): each document's key, row,
    body and member heads in position order; None where a body alone may take more than
    ``most`` bytes (its row's size says so before anything is encoded) or the whole does."""
    out = []
    for key, (row, body, heads) in held.items():
        if row.body_size > most:
            return None
        listed = []
        for head in heads.values():
            outline = head[5]  # (the stored outline's JSON text, as bytes, or None)
            if outline is not None:
                if type(outline) is not bytes:
                    return None
                try:
                    outline = outline.decode()
                except UnicodeDecodeError:
                    return None
            listed.append([*head[:5], outline])
        out.append(
            [
                key.state,
                key.subject,
                [getattr(row, name) for name in _ROW_FIELDS],
                body,
                listed,
            ]
        )
    try:
        data = encode_trusted(out)
    except InvalidJSON:  # (a value orjson cannot write, e.g. an integer past 64 bits)
        return None
    return data if len(data) <= most else None


def held_of(data: bytes) -> Held:
    """What ``handed_on`` encoded, as it was: rows, bodies and heads (each head a tuple again,
    its outline bytes)."""
    held: Held = {}
    for state, subject, row, body, heads in decode_trusted(data):
        held[DocKey(state, subject)] = (
            DocRow(*row),
            body,
            {h[1]: (h[0], h[1], h[2], h[3], h[4], None if h[5] is None else h[5].encode()) for h in heads},
        )
    return held


def handed(
    entries: Mapping[DocKey, tuple[DocRow, dict[str, Any] | None, Heads]],
    members: Sequence[str],
    outlines: Sequence[str],
) -> dict[DocKey, Document]:
    """The documents a request's merge is handed, from ``entries``: the named members and
    outlines, as the locked read hands them (``writes.named_document``)."""
    return {
        key: made_document(key, row.revision, None, row.updated_seq, {})
        if body is None
        else named_document(key, row, body, heads, members, outlines)
        for key, (row, body, heads) in entries.items()
    }


def answer(
    keys: Sequence[DocKey],
    docs: Mapping[DocKey, Document],
    paths: Mapping[DocKey, bytes],
    seq: int | None,
    at: str | None,
    revisions: Mapping[DocKey, int],
) -> bytes:
    """A committed request's answer: its transition, the basis of each document and the paths
    written (as ``merged`` encoded them: spliced in, not decoded and encoded again). Sent led
    by the request's id (``WriterQueue.answer``); one too large to send whole is sent as
    :data:`COMMITTED`."""
    head = encode_trusted(
        {
            "seq": seq,
            "at": at,
            "revisions": [revisions.get(k) for k in keys],
            "docs": [[docs[k].revision, docs[k].seq, docs[k].body, docs[k].outlines] for k in keys],
        }
    )
    return b"".join((head[:-1], b',"paths":[', b",".join(paths.get(k, b"null") for k in keys), b"]}"))


def answered(
    raw: bytes, keys: Sequence[DocKey]
) -> tuple[int | None, str | None, dict[DocKey, int], dict[DocKey, Document], dict[DocKey, bytes]] | None:
    """An answer decoded: seq, time, revisions, basis documents and paths written; None: the
    answer says only that the request committed (the basis is read back from the store)."""
    if raw == COMMITTED:
        return None
    data = decode_trusted(raw)
    revisions = {k: int(r) for k, r in zip(keys, data["revisions"], strict=True) if r is not None}
    docs = {
        k: Document(k, int(revision), body, seq, outlines or {})
        for k, (revision, seq, body, outlines) in zip(keys, data["docs"], strict=True)
    }
    paths = {k: encode_trusted(p) for k, p in zip(keys, data["paths"], strict=True) if p is not None}
    return data["seq"], data["at"], revisions, docs, paths
