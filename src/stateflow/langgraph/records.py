"""How LangGraph's names map onto stateflow records, shared by the store and the saver.

A record's subject key is made of percent-encoded parts joined by ``/`` (a part never contains
``/`` once encoded, and never starts or ends with a space, so keys survive the subject rules
unchanged and split back unambiguously). Subjects are stored in bytewise order, so every record
under a key prefix is one keyset scan.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Self

from stateflow.aio import call, open_store_async, runs_on_loop
from stateflow.aio import close as close_store  # (``close`` is the adapters' own method)
from stateflow.api import states_service
from stateflow.errors import StoreReadOnly
from stateflow.states import StatesService
from stateflow.states.models import DoorContext, WriteOrigin
from stateflow.states.pipeline import ALIASES, CATALOG
from stateflow.states.service import StateNotFound, subject_of
from stateflow.store import DocKey, Document, StoreLocation, Whole, Write, open_store
from stateflow.store.core import WHOLE_PREFIX
from stateflow.subjects import encode_subject

SCAN_PAGE = 500
DOC_KEYS_KEPT = 16384
"""Document keys ``Records.doc_key`` keeps built, at most."""


def invert(text: str) -> str:
    """An encoding of ``text`` whose bytewise order is the reverse of ``text``'s order: the
    hex digits of its UTF-8 bytes, each complemented, then ``g`` (above every hex digit, so a
    longer string sorts first, as it should in descending order)."""
    # (each byte flipped, then written in hex: the hex digits complemented, in one C pass each)
    return text.encode().translate(_FLIP).hex() + "g"


def uninvert(text: str) -> str:
    return bytes.fromhex(text[:-1]).translate(_FLIP).decode()


_FLIP = bytes(range(255, -1, -1))
"""Each byte to 255 minus it: its hex digits are the complements of the byte's."""


def widened(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``new`` as an additive change of ``old``: ``new``'s properties plus ``old``'s (``old``'s
    kept where both name one), with ``old``'s other keywords (a re-declare keeps those as they are)."""
    properties = {**new.get("properties", {}), **old.get("properties", {})}
    return {**{k: v for k, v in old.items() if k != "properties"}, "properties": properties}


class OwnsStore:
    """Opening and closing shared by the store and the saver, whose constructors take a
    :class:`~stateflow.states.StatesService` first: :meth:`open`/:meth:`aopen` open (and
    migrate) a store that :meth:`close`/:meth:`aclose` then close, its service put together
    where every opener's is (``stateflow.api.states_service``: the built-ins installed); one
    built on a service you pass leaves that service open."""

    states: StatesService
    _owned: bool = False
    _closing: asyncio.Task[None] | None = None

    if TYPE_CHECKING:

        def __init__(self, states: StatesService, **options: Any) -> None: ...

    @classmethod
    def open(cls, location: StoreLocation, **options: Any) -> Self:
        """An instance on the store at ``location`` (a file path or ``postgresql://`` URL),
        closed by :meth:`close`."""
        store = open_store(location, auto_migrate=True)
        try:
            made = cls(states_service(store), **options)
        except BaseException:  # (options refused: the store opened here is closed again)
            store.close()
            raise
        made._owned = True
        return made

    @classmethod
    async def aopen(cls, location: StoreLocation, **options: Any) -> Self:
        """:meth:`open` for async code: a PostgreSQL store runs on psycopg's async pool (the
        async methods never leave the event loop's thread); closed by :meth:`aclose`."""
        opened = await open_store_async(location, auto_migrate=True)
        try:
            made = await call(opened, lambda: cls(states_service(opened), **options))
        except BaseException:  # (options refused: the store opened here is closed again)
            await close_store(opened)
            raise
        made._owned = True
        return made

    def close(self) -> None:
        if self._owned:
            self.states.close()
            self.states.store.close()

    async def aclose(self) -> None:
        """:meth:`close` once the calls in flight on the store are done (``stateflow.aio.close``)."""
        if self._owned:
            await close_store(self.states.store, self.close)

    def __enter__(self) -> Self:
        if self._owned and runs_on_loop(self.states.store):
            from stateflow.store.async_bridge import would_block  # (psycopg's: only with it)

            if would_block():  # (its close at the block's end could not run on this thread)
                # closed all the same, on the loop once this task yields: no pool left open
                self._closing = asyncio.get_running_loop().create_task(self.aclose())
                name = type(self).__name__
                raise TypeError(
                    f"a {name} opened by aopen() is closed by aclose() on its event loop: "
                    f"use `async with await {name}.aopen(...)`, not `with`"
                )
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


Build = Callable[[dict[str, Any] | None], Whole]
"""``current body or None → the new body whole`` (with the paths it wrote, and its members'
encodings or its edits against ``current`` where the adapter has them); may run more than once, keeps no state, never mutates
``current`` (the store's cached object)."""


class Stale(Exception):
    """A write's ``guard`` found the document it depends on other than its writer last saw it
    (changed by another process): nothing was written."""


class _NotLean(Exception):
    """A lean write met what only the general path checks (a re-declared schema, an attachment,
    a folded subject, an undeclared state): nothing was written, the general path decides."""


class Records:
    """One declared state's records of one tenant, addressed by subject kind and key."""

    def __init__(self, states: StatesService, state: str, target_name: str) -> None:
        self.states = states
        self.store = states.store
        self.state = state
        self.target_name = target_name
        self.schema: dict[str, Any] | None = None  # the adapter's own (set by ensure_declared)
        # by subject kind, the stored declaration last found to be the adapter's own
        self._trusted: dict[str, object] = {}
        self._refused: object = None  # the stored declaration last found not to be
        self._catalog_key = DocKey(CATALOG, state)
        self._doc_keys: dict[tuple[str, str], DocKey] = {}
        self._alias_key = DocKey(ALIASES, state)
        self._shared = (self._alias_key, self._catalog_key)
        """the documents a lean write checks did not move (the store only reads them)"""

    def subject(self, kind: str, key: str) -> dict[str, str]:
        return {"target_kind": "agent", "target_name": self.target_name, "kind": kind, "key": key}

    def doc_key(self, kind: str, key: str) -> DocKey:
        # the same keys come again and again (an item written, its parent checkpoint): kept
        # built, bounded; a key made of a declared state and an encoded subject needs no check
        made = self._doc_keys.get((kind, key))
        if made is None:
            doc_keys = self._doc_keys
            if len(doc_keys) >= DOC_KEYS_KEPT:
                doc_keys.clear()
            # (the tuple made at once: a declared state and an encoded subject need no check)
            made = doc_keys[(kind, key)] = tuple.__new__(
                DocKey, (self.state, encode_subject("agent", self.target_name, kind, key))
            )
        return made

    def subject_head(self, kind: str, prefix: str) -> str:
        """The subject of a record of ``kind`` whose key is ``prefix`` followed by text that
        JSON needs not escape, up to that text: the subject is the head, that text and ``"]``."""
        return encode_subject("agent", self.target_name, kind, prefix)[:-2]

    def key_of(self, doc_key: DocKey) -> str:
        """The subject key of a stored subject of this tenant."""
        import orjson

        key: str = orjson.loads(doc_key.subject)[3]
        return key

    def scan(
        self,
        kind: str,
        prefix: str,
        *,
        after_key: str | None = None,
        page: int = SCAN_PAGE,
        descending: bool = False,
    ) -> Iterator[DocKey]:
        """Every present record of ``kind`` whose key starts with ``prefix``, in key order
        (strictly after ``after_key`` when given; ``descending``: in reverse order, strictly
        before it), read ``page`` subjects at a time."""
        start = encode_subject("agent", self.target_name, kind, prefix)[:-2]  # drop the closing '"]'
        if descending:  # (a range of the index read backwards)
            before = None if after_key is None else encode_subject("agent", self.target_name, kind, after_key)
            while True:
                listed = self.store.scan(self.state, after=before, limit=page, within=start, descending=True)
                for item in listed:
                    yield item.key
                if len(listed) < page:
                    return
                before = listed[-1].key.subject
        after = start if after_key is None else encode_subject("agent", self.target_name, kind, after_key)
        while True:
            listed = self.store.scan(self.state, after=after, limit=page)
            for item in listed:
                if not item.key.subject.startswith(start):
                    return
                yield item.key
            if len(listed) < page:
                return
            after = listed[-1].key.subject

    def documents(self, kind: str, prefix: str, *, limit: int | None = None) -> list[Document]:
        """The present records of ``kind`` whose key starts with ``prefix``, whole, in key order."""
        start = encode_subject("agent", self.target_name, kind, prefix)[:-2]  # drop the closing '"]'
        return self.store.read_under(self.state, start, limit=limit)

    def first_under(
        self, prefixes: Sequence[tuple[str, str]], *, descending: bool = False
    ) -> list[Document | None]:
        """For each ``(kind, prefix)``, the first present record of ``kind`` whose key starts
        with ``prefix`` (key order; ``descending``: the last), whole; None where there is none."""
        starts = [encode_subject("agent", self.target_name, kind, prefix)[:-2] for kind, prefix in prefixes]
        return self.store.read_first_under(self.state, starts, descending=descending)

    def write(
        self,
        kind: str,
        key: str,
        build: Build | Whole,
        *,
        origin: WriteOrigin,
        context: DoorContext,
        action: str,
        general: Callable[..., object],
        args: tuple[Any, ...] = (),
        guard: tuple[DocKey, Callable[[Any], bool]] | None = None,
        doc_key: DocKey | None = None,
        exists: bool = False,
    ) -> DocKey:
        """Write one record of a shape the adapter builds itself, through the store's writes of
        a whole document (``Store.write_whole`` on the documents as last seen here, else
        ``Store.update``: the revision check, the change and history rows, the transition with
        ``origin`` stamped as the states service stamps it, the caches) without the states
        pipeline's general checks, which hold here by construction:

        - the subject: ``kind`` is declared, the target is the adapter's (checked at the
          first write), ``key`` is percent-encoded parts (no spaces, at most ``MAX_KEY``
          characters), non-blank checked below;
        - the schema: ``build`` makes documents of the adapter's own declared schema (see each
          caller), so while the stored declaration is that schema with no attachment (no
          ``effective`` schema, regime or ``_trace`` stamp) the record is valid — checked once
          per stored declaration object, the commit then checks that it did not move;
        - aliases: a folded subject goes the general way (the commit checks the aliases did not
          move either).

        Anything else (another declaration, a folded subject, an undeclared state) runs
        ``general(*args)`` instead, which checks and refuses as every write does. ``build``: a
        :class:`Whole` where the new body does not depend on the current one (no function
        made per write). ``guard``: ``(key, holds)``, a document the new body depends on, which
        ``holds(body)`` must accept (as last seen here, then as the commit finds it: the commit
        checks it did not move), else :class:`Stale` and nothing written. ``doc_key``: the
        record's document key where the caller made it (``doc_key(kind, key)``'s, uncached: a
        key written once). ``exists``: the caller expects a record under ``key`` (read first
        where not seen here, rather than guessed new: ``Store.write_whole``). Returns the record's
        document key."""
        if doc_key is None:
            doc_key = self.doc_key(kind, key)
        if not key.strip() or self.schema is None:
            general(*args)
            return doc_key
        if self._refused is not None:  # the declaration was found not the adapter's own
            if self.store.get(self._catalog_key).body is self._refused:  # (a cached read)
                general(*args)
                return doc_key
            self._refused = None
        # (the checks and the fallback as partials of methods, not closures: a closure made
        # per write makes a cell for each name it shares with this frame)
        checked = functools.partial(self._checked, kind, doc_key, build, guard)
        stamped = self.states._origin(origin, context, action)
        try:
            # the documents as last seen here, else the store's general read-modify-write
            if guard is None:
                written = self.store.write_whole(
                    doc_key, checked, stamped, shared=self._shared, exists=exists
                )
            else:
                written = self.store.write_whole(
                    doc_key, checked, stamped, shared=self._shared, also=guard[0], exists=exists
                )
            if not written:
                shared = self._shared if guard is None else (*self._shared, guard[0])
                self.store.update(
                    [doc_key],
                    functools.partial(self._compute, doc_key, checked, shared),
                    stamped,
                    shared=shared,
                    optimistic=True,
                )
        except _NotLean as refused:
            if refused.args:  # (until the declaration changes: no lean attempt first)
                self._refused = refused.args[0]
            general(*args)
        return doc_key

    def _checked(
        self,
        kind: str,
        doc_key: DocKey,
        build: Build | Whole,
        guard: tuple[DocKey, Callable[[Any], bool]] | None,
        shared: dict[DocKey, Any],
        current: Any,
    ) -> Whole:
        """``build``'s body for :meth:`write`, once the shared documents say a lean write holds:
        the declaration is the adapter's own (checked once per stored declaration object) and
        the subject is not folded (else :class:`_NotLean`)."""
        declared = shared[self._catalog_key]
        if self._trusted.get(kind) is not declared:
            if not self._is_own(declared, kind):
                raise _NotLean(declared)
            self._trusted[kind] = declared
        aliases = shared[self._alias_key]
        if aliases and doc_key.subject in aliases:
            raise _NotLean
        if guard is not None and not guard[1](shared[guard[0]]):
            raise Stale
        return build if isinstance(build, Whole) else build(current)

    def _compute(
        self,
        doc_key: DocKey,
        checked: Callable[[dict[DocKey, Any], Any], Whole],
        shared: Sequence[DocKey],
        docs: dict[DocKey, Document],
    ) -> tuple[list[Write], None]:
        """:meth:`write`'s general read-modify-write (``Store.update``'s ``compute``)."""
        current = docs[doc_key]
        whole = checked({k: docs[k].body for k in shared}, current.body)
        body, paths = whole.body, whole.paths
        return [
            Write.between(doc_key, current.body, body, current.revision, changed=paths, paths=paths)
        ], None

    def _is_own(self, declared: Any, kind: str) -> bool:
        """Whether a stored declaration is the adapter's own schema, unchanged and unextended."""
        if type(declared) is not dict or declared.get("effective") or declared.get("schema") != self.schema:
            return False
        if kind not in (declared.get("subject_kinds") or ()):
            return False
        # the tenant: validated as a subject once (the general path refuses a bad one)
        subject_of(self.subject(kind, "x"))
        return True

    def keep_whole(self) -> None:
        """Keep the state's small records in whole form (``Store.keep_whole``: a record's body
        in its document's row, no member rows — where the backend has that form, SQLite; a
        record already written converts on its next write) unless the store records a choice
        for the state already (an operator's ``keep_whole(state, 0)`` keeps member form). A
        read-only store not recording it yet is read as it is (either form reads alike)."""
        if self.store.meta_value(WHOLE_PREFIX + self.state) is not None:
            return
        with contextlib.suppress(StoreReadOnly):
            self.store.keep_whole(self.state)

    def ensure_declared(self, declaration: dict[str, Any], earlier: Sequence[dict[str, Any]] = ()) -> None:
        """Declare the state unless it already is, with this schema (a re-declare writes).

        ``earlier``: the schemas earlier versions of the adapter declared. Over one of those,
        the schema declared keeps what that one had beside its own properties: the records it
        allowed may still be there, and a re-declare that drops or changes anything is refused
        while records exist (the adapter still reads those records, and builds its own valid
        under either)."""
        try:
            current = self.states.get_declaration(self.state)
        except StateNotFound:
            current = None
        if current is not None:
            for before in earlier:  # (the stored one is that schema, or was widened over it)
                over = widened(before, declaration["schema"])
                if current.get("schema") in (before, over):
                    declaration = {**declaration, "schema": over}
                    break
        self.schema = declaration["schema"]
        if current is not None and all(current.get(k) == v for k, v in declaration.items()):
            return
        self.states.declare(
            self.state, declaration, context=DoorContext(door="operator", actor="stateflow.langgraph")
        )
