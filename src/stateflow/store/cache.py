"""Bounded caches of what the store read or wrote, keyed by revision.

A member row's ``revision`` changes on every write of that member (a document's on every write
of the document), so an entry can never be stale: a newer write simply misses. Values are
shared with readers and must be treated as immutable (every ``doc/`` function is
copy-on-write). Only committed data enters a cache.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any, Final, Generic, TypeVar

from stateflow.doc.canonical import encode_trusted
from stateflow.errors import InvalidJSON
from stateflow.store.model import DocKey
from stateflow.store.rows import DocRow, MemberHead, whole_heads

DEFAULT_CACHE_BYTES: Final = 256 * 1024 * 1024


DEFAULT_HEAD_DOCS: Final = 100_000
DEFAULT_KNOWN_BYTES: Final = 64 * 1024 * 1024
DEFAULT_SPARE_BYTES: Final = 16 * 1024 * 1024
"""What :class:`SpareCopies` keeps encoded, at most."""

Heads = Mapping[str, MemberHead]
"""A document's member heads by name, in position order."""
Known = dict[str, Any]
"""A document's body, assembled (its members' values by name, in position order)."""
Entry = tuple[int, Heads, Known | None, int]
"""A head-cache entry: ``(revision, heads, known or None, size)``."""
Held = tuple[int, Heads | None, Known | None, int]
"""An entry as a write hands it to the cache (``Fresh.heads``) and the cache holds it: heads
None where it holds a whole-form document's body alone — its heads are the body's
(:func:`rows.whole_heads`), made when first asked (:meth:`HeadCache.get`, :meth:`HeadCache.entry`):
a record written once in whole form (a checkpoint) is mostly never asked for them, and its
next writer's ``Writes._known_body`` reads the body alone."""


class HeadCache:
    """Per document, what this store last read or wrote of it at one revision: its member heads
    (name, position, revision, size, outline — no body) and, where every member was known, the
    body assembled (the next write's starting point: ``Writes._known``) — one entry,
    filled once per write. Every write bumps the revision, so an entry is never stale; a hit
    saves the head query of a write or a partial read. Bounded by documents and by the encoded
    size of the bodies held (the members are shared with the member cache, so this bounds what
    stays alive after it lets go); past either bound everything goes (a miss costs one head
    query, or one assembly from the member cache). An entry may hold a whole-form document's
    body without its heads (:data:`Held`): they are made from it when first asked."""

    def __init__(
        self,
        max_docs: int = DEFAULT_HEAD_DOCS,
        max_bytes: int = DEFAULT_KNOWN_BYTES,
        largest: int | None = None,
    ) -> None:
        self.max_docs = max_docs
        self.max_bytes = max_bytes
        self.largest = max_bytes // 8 if largest is None else largest
        """bodies larger than this are not kept assembled"""
        self._entries: dict[int, Held] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, doc_id: int, revision: int) -> Heads | None:
        entry = self._entries.get(doc_id)
        if entry is None or entry[0] != revision:
            return None
        heads = entry[1]
        return heads if heads is not None else self._made(doc_id, entry)[1]

    def entry(self, doc_id: int, revision: int) -> Entry | None:
        """The whole entry — ``(revision, heads, known or None, size)`` — held at ``revision``."""
        entry = self._entries.get(doc_id)
        if entry is None or entry[0] != revision:
            return None
        if entry[1] is None:
            return self._made(doc_id, entry)
        return entry  # type: ignore[return-value]  # (heads not None: no cast's call, every write)

    def body(self, doc_id: int, revision: int) -> Known | None:
        """The body held assembled at ``revision``, if any — its heads not made where they are
        not (what a writer that reads only the body asks: ``Writes._known_body``)."""
        entry = self._entries.get(doc_id)
        return entry[2] if entry is not None and entry[0] == revision else None

    def _made(self, doc_id: int, entry: Held) -> Entry:
        """``entry`` (a body held without its heads) with its heads made from the body, held in
        its place unless another replaced it meanwhile."""
        revision, _, known, size = entry
        assert known is not None, "an entry without heads holds the body they are made from"
        made = (revision, whole_heads(doc_id, revision, known), known, size)
        with self._lock:
            if self._entries.get(doc_id) is entry:
                self._entries[doc_id] = made
        return made

    def put(
        self, doc_id: int, revision: int, heads: Heads | None, known: Known | None = None, size: int = 0
    ) -> None:
        """Hold ``heads`` (and ``known``, the body of ``size`` encoded bytes) at
        ``revision``, unless a newer revision is held; heads alone at the revision held keep
        what is assembled there (``heads`` None: the body's, made when first asked)."""
        self.hold(doc_id, (revision, heads, known, size))

    def hold(self, doc_id: int, entry: Held) -> None:
        """:meth:`put` of an entry as :meth:`entry` gives it back — ``(revision, heads, known
        or None, size)`` —, held as it is (a write's entry, made once by its plan); heads
        None: the body's, made when first asked, or now where the body is not held."""
        revision, _, known, size = entry
        entries, lock = self._entries, self._lock
        lock.acquire()  # (not ``with``: on every write, and its ``__exit__`` takes an argument tuple)
        try:
            current = entries.get(doc_id)
            if current is None:
                if len(entries) >= self.max_docs:
                    entries.clear()  # crude but bounded; a miss only costs one head query
                    self._bytes = 0
            else:
                # a lagging writer must not replace a newer entry with an older one
                if current[0] > revision or (
                    current[0] == revision and known is None and current[2] is not None
                ):
                    return
                self._bytes -= current[3]  # (0 where nothing is assembled)
            if known is None or size > self.largest:
                heads = entry[1]
                if heads is None:  # (the body not held: its heads made from it now)
                    assert known is not None, "an entry without heads holds the body they are made from"
                    heads = whole_heads(doc_id, revision, known)
                elif known is None and size == 0:
                    entries[doc_id] = entry
                    return
                entries[doc_id] = (revision, heads, None, 0)
                return
            held = self._bytes + size
            if held > self.max_bytes:
                entries.clear()  # (as above: a miss only assembles the body again)
                held = size
            self._bytes = held
            entries[doc_id] = entry
        finally:
            lock.release()

    def drop(self, doc_id: int, revision: int) -> Held | None:
        """Forget the entry held at ``revision``, if it still is (a newer one stays); the entry
        forgotten, or None."""
        with self._lock:
            entry = self._entries.get(doc_id)
            if entry is None or entry[0] != revision:
                return None
            del self._entries[doc_id]
            self._bytes -= entry[3]
            return entry

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0


RowFields = tuple[int, int, bool, int | None, int, int, int, int, str | None, bool, bool | None]
"""A :class:`DocRow`'s fields, in order."""
Spare = tuple[RowFields, tuple[tuple[str, MemberHead], ...] | None, bytes, int]
"""A let-go document as :class:`SpareCopies` holds it: its row's fields as this process last wrote it,
its member heads (None: whole form, made from the body again), its body encoded, and the size
its head-cache entry counted."""


def _row_fields(row: DocRow) -> RowFields:
    return (
        row.doc_id,
        row.revision,
        row.present,
        row.updated_seq,
        row.snapshot_revision,
        row.bytes_since_snapshot,
        row.body_size,
        row.next_position,
        row.at,
        row.whole,
        row.marked,
    )


class SpareCopies:
    """The documents the caches let go for the latest writes only (``Store.cache_recent``),
    each kept as its row, heads and body *encoded* — bytes and tuples of atoms, which the
    garbage collector does not walk — up to ``max_bytes`` (oldest out first). A writer that
    meets such a document again (a checkpoint's pending writes after a thousand other writes)
    takes its copy back instead of reading it: a decode, not a query (on PostgreSQL, a round
    trip). A copy may be stale — another process wrote the document since — as any cached row
    may: the write's commit checks the row did not move, and nothing is written if it did."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[str, str], Spare] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.holds: Callable[[object], bool] = self._entries.__contains__
        """whether a key has a copy here (the dict's own method: asked by every write of a key
        not held, with no Python call)"""

    def keep(self, key: DocKey, row: DocRow, entry: Held) -> None:
        """Keep ``key``'s head-cache ``entry`` just let go (at ``row``), if its body is held and
        encodes within the bound; else nothing (a miss reads it, as before)."""
        _, heads, known, size = entry
        if known is None:
            return
        try:
            # (copied to its length: orjson's result keeps the 1-4 KB buffer it wrote into)
            encoded = b"%b" % encode_trusted(known)
        except InvalidJSON:  # (never for a stored body: nothing kept rather than a wrong copy)
            return
        if len(encoded) > self.max_bytes // 8:
            return
        # (the row's fields, not the row: a tuple of atoms the collector stops tracking)
        spare = (_row_fields(row), None if heads is None else tuple(heads.items()), encoded, size)
        with self._lock:
            entries = self._entries
            self._pop(key)
            entries[(key.state, key.subject)] = spare  # (a plain tuple, which the collector stops tracking)
            self._bytes += len(encoded)
            while self._bytes > self.max_bytes:
                self._bytes -= len(entries.popitem(last=False)[1][2])

    def take(self, key: DocKey) -> Spare | None:
        """``key``'s copy, no longer kept here (the caches hold it again once it is installed)."""
        with self._lock:
            return self._pop(key)

    def drop(self, keys: Iterable[DocKey]) -> None:
        """Forget the copies of ``keys`` (documents moved to other subjects: a copy names its
        document by key, and an id moved keeps its revision, which the commit's check trusts)."""
        with self._lock:
            for key in keys:
                self._pop(key)

    def _pop(self, key: DocKey) -> Spare | None:
        """``key``'s copy taken out, its bytes uncounted (under ``_lock``)."""
        spare = self._entries.pop(key, None)
        if spare is not None:
            self._bytes -= len(spare[2])
        return spare

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class RevisionCache(Generic[K, V]):
    """One value per key — whatever was derived from it at one revision — bounded in bytes
    (least recently used first out). A newer revision replaces an older one, never the reverse
    (a lagging writer must not put back what a newer one replaced).

    Used for decoded member values (keyed by document and member; the revision is the one
    that last wrote the member) and PostgreSQL's whole bodies (keyed by document)."""

    def __init__(self, max_bytes: int, *, largest: int | None = None) -> None:
        self.max_bytes = max_bytes
        self.largest = max_bytes // 8 if largest is None else largest
        """values larger than this are not kept (one huge value must not flush everything)"""
        self._entries: OrderedDict[K, tuple[K, int, V, int]] = OrderedDict()
        """key → ``(key, revision, value, size)``: the tuple ``put_many`` was given, held as it is"""
        self._bytes = 0
        self._lock = threading.Lock()

    def lookup(self, key: K, revision: int) -> tuple[bool, V | None]:
        """``(True, value)`` when ``key`` is held at ``revision`` (the value may be None)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry[1] != revision:
                return False, None
            self._entries.move_to_end(key)
            return True, entry[2]

    def get(self, key: K, revision: int) -> V | None:
        return self.lookup(key, revision)[1]

    def lookup_all(self, keys: Iterable[tuple[K, int]]) -> list[V] | None:
        """The values of every ``(key, revision)``, in order, under one lock (each a hit, as
        :meth:`lookup` makes it); None as soon as one is not held (those before it count as
        hits). A document assembled from its members' entries asks for them all."""
        found = []
        entries = self._entries
        with self._lock:
            for key, revision in keys:
                entry = entries.get(key)
                if entry is None or entry[1] != revision:
                    return None
                entries.move_to_end(key)
                found.append(entry[2])
        return found

    def latest(self, key: K) -> tuple[int, V] | None:
        """The newest revision held for ``key`` and its value."""
        entry = self._entries.get(key)
        return None if entry is None else (entry[1], entry[2])

    def put(self, key: K, revision: int, value: V, size: int) -> None:
        """Hold ``value`` for ``key`` at ``revision`` (unless a newer revision is held, or the
        value is larger than ``largest``), evicting the least recently used past ``max_bytes``."""
        self.put_many(((key, revision, value, size),))

    def put_many(self, entries: Iterable[tuple[K, int, V, int]]) -> None:
        """:meth:`put` of each ``(key, revision, value, size)``, in order, under one lock (a
        write caches every member it wrote); the one place entries are added and evicted. Each
        tuple is held as it is (a write's member entry, made once by its plan)."""
        largest, held, lock = self.largest, self._entries, self._lock
        lock.acquire()  # (as ``HeadCache.hold``: not ``with``, on every write)
        try:
            for entry in entries:
                key, revision, _, size = entry
                if size > largest:
                    continue
                old = held.get(key)
                if old is not None:
                    if old[1] > revision:
                        continue
                    del held[key]
                    self._bytes -= old[3]
                held[key] = entry
                self._bytes += size
                while self._bytes > self.max_bytes:  # (entry by entry)
                    _, (_, _, _, dropped) = held.popitem(last=False)
                    self._bytes -= dropped
        finally:
            lock.release()

    def drop(self, key: K, revision: int) -> None:
        """Forget ``key``'s value if held at ``revision`` (a newer one stays)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[1] == revision:
                del self._entries[key]
                self._bytes -= entry[3]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0
