"""``Store``: what services may ask of a store (the public contract, whatever the backend).

Services (agent memory, declared states, the CLI and HTTP edges) type against this protocol,
not against :class:`~stateflow.store.base.SqlStore`, so they depend on what a store promises —
documents, cohorts, history, listings, retention — and never on how a backend keeps them.
``open_store`` returns an object that satisfies it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, Protocol, Self, TypeVar

from stateflow.doc.diff import Within
from stateflow.store.model import (
    Change,
    Commit,
    DocKey,
    Document,
    Listed,
    StateCounts,
    Transition,
    Whole,
    Write,
)
from stateflow.store.path_reads import Children, PathsRead
from stateflow.store.plan import WHOLE_ROW_MAX
from stateflow.store.served_patch import Served
from stateflow.store.trail import End, PathT

R = TypeVar("R")


class Store(Protocol):
    """Durable, versioned JSON documents with atomic cohorts (see ``docs/store.md``)."""

    url: str
    """Where the store lives, without secrets."""

    # ---------------------------------------------------------------- lifecycle and schema

    def schema_version(self) -> int | None:
        """The migrated schema version, or None when the store has no schema at all."""

    def migrate(self) -> tuple[int, int]:
        """Bring the schema to the version this code knows; return (from, to). Idempotent."""

    def check_schema(self) -> None:
        """Refuse to work on a store that is not migrated to exactly this code's version."""

    def when_migrated(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once, as soon as the store is found migrated (now if it is)."""

    def close(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...

    # ---------------------------------------------------------------- current documents

    def read(
        self,
        keys: Iterable[DocKey],
        members: Iterable[str] | Mapping[DocKey, Iterable[str] | None] | None = None,
        *,
        outlines: Iterable[str] = (),
    ) -> dict[DocKey, Document]:
        """Current documents, all from one consistent snapshot (optionally some members only)."""

    def get(
        self, key: DocKey, members: Iterable[str] | None = None, *, outlines: Iterable[str] = ()
    ) -> Document: ...

    def member_sizes(self, key: DocKey) -> dict[str, int]:
        """The top-level members, in order, with their stored sizes (no value read)."""

    def cached(self, key: Hashable, build: Callable[[], R]) -> R:
        """``build()``, or its earlier value where the store can tell nothing committed since."""

    # ---------------------------------------------------------------- writes

    def commit(
        self,
        writes: Sequence[Write],
        origin: dict[str, Any] | None = None,
        *,
        op_id: str | None = None,
        op_scope: str = "",
    ) -> Commit:
        """Commit a cohort atomically (compare-and-set per write; all or nothing)."""

    def update(
        self,
        keys: Iterable[DocKey],
        compute: Callable[[dict[DocKey, Document]], tuple[Sequence[Write], R]],
        origin: dict[str, Any] | None = None,
        *,
        members: Iterable[str] | None = None,
        outlines: Iterable[str] = (),
        shared: Iterable[DocKey] = (),
        op_id: str | None = None,
        op_scope: str = "",
        claims: Sequence[tuple[str, str]] = (),
        optimistic: bool = False,
        checked: bool = False,
        along: Mapping[DocKey, Mapping[str, Within]] | None = None,
    ) -> tuple[Commit, R | None]:
        """Read-modify-write: load ``keys`` locked, ``compute`` the writes, commit them
        (``along``: members ``compute`` reaches only along these paths, which may be handed to
        it as skeletons: see ``SqlStore.update``)."""

    def update_parts(
        self,
        parts: Sequence[Sequence[DocKey]],
        compute: Callable[[Sequence[DocKey], dict[DocKey, Document]], Sequence[Write]],
        origin: dict[str, Any] | None = None,
        *,
        shared: Sequence[DocKey] = (),
        beside: Callable[[Sequence[DocKey]], Sequence[DocKey]] | None = None,
    ) -> Commit:
        """Read-modify-writes of many documents as one transaction, a part at a time (what is
        held at once is a part's, not every document's)."""

    def write_whole(
        self,
        key: DocKey,
        build: Callable[[dict[DocKey, Any], dict[str, Any] | None], Whole],
        origin: dict[str, Any],
        *,
        shared: Sequence[DocKey] = (),
        also: DocKey | None = None,
        exists: bool = False,
    ) -> bool:
        """One document written whole on the documents as last seen here (one not seen:
        guessed new, or read first where the caller expects it ``exists``); False: not done so.
        ``also``: one more shared document, one that changes from write to write."""

    def body_as_seen(self, key: DocKey) -> tuple[int, dict[str, Any] | None] | None:
        """``key``'s revision and body (shared: never to be changed) as :meth:`write_whole`
        starts from them — held here, else read into the caches by one statement —; None where
        that write would not (a member held as a tree: :meth:`get` reads it)."""

    def contended(self, keys: Sequence[DocKey]) -> bool:
        """Whether another writer's commit beat one of this store's on ``keys`` a moment ago,
        so that :meth:`patch_on_server` would merge a memory patch of them (always False on a
        store that never merges one)."""

    def patch_on_server(
        self,
        keys: Sequence[DocKey],
        patches: Mapping[DocKey, bytes],
        members: Sequence[str],
        outlines: Sequence[str],
        origin: dict[str, Any],
    ) -> Served | None:
        """Memory patches (``memory.served``'s common case) merged and committed by the
        database itself; None: not done so, nothing written (the caller runs :meth:`update`)."""

    # ---------------------------------------------------------------- history

    def read_at(
        self,
        key: DocKey,
        *,
        revision: int | None = None,
        seq: int | None = None,
        members: Iterable[str] | None = None,
    ) -> Document:
        """The document as it was at ``revision``, or right after transition ``seq``."""

    def history(
        self,
        keys: Iterable[DocKey],
        *,
        limit: int = 100,
        before_seq: int | None = None,
        members: Iterable[str] | None = None,
        shallow: bool = False,
    ) -> list[Change]:
        """Changes of these documents, newest first (``shallow``: an edit's value kept as a
        tree is an empty container of its kind, read from the tree's root alone)."""

    def read_paths(
        self,
        paths: Mapping[DocKey, Sequence[PathT]],
        *,
        seq: int | None = None,
        revisions: Mapping[DocKey, int] | None = None,
        end: End | None = None,
        back: int = 0,
    ) -> dict[DocKey, PathsRead]:
        """What each path (a member name first) meets in each document, now, right after
        transition ``seq``, at given revisions or as the ``back``-th newest transition that
        changed any of them left them, reading only what the paths reach (with
        ``end``: the keys projection or a range of the value at each path's end)."""

    def children(self, key: DocKey, path: PathT, *, start: int = 0, limit: int = 200) -> Children | None:
        """A page of the children of the container at ``path`` in the current document, with
        their kinds and sizes, never reading a grandchild's subtree."""

    def transitions(self, *, after_seq: int = 0, limit: int = 100) -> list[Transition]:
        """Transitions after ``after_seq`` in seq order, each with all its changes."""

    # ---------------------------------------------------------------- listings and search

    def scan(
        self,
        state: str,
        *,
        after: str | None = None,
        limit: int = 200,
        within: str | None = None,
        descending: bool = False,
    ) -> list[Listed]:
        """Present documents in subject order after ``after``; ``within``: only those whose
        subject starts with it (a range of the index read, nothing outside it); ``descending``:
        in reverse subject order, before ``after``."""

    def read_under(
        self, state: str, prefix: str, *, limit: int | None = None, descending: bool = False
    ) -> list[Document]: ...

    def read_first_under(
        self, state: str, prefixes: Sequence[str], *, descending: bool = False
    ) -> list[Document | None]: ...

    def count(self, state: str) -> int: ...

    def missing_rows(self, state: str, beside: str) -> list[str]:
        """The subjects of ``beside``'s present documents for which ``state`` has no row (not
        even an absent document's): the documents no lock can hold until something makes it."""

    def member_counts(self, state: str) -> dict[str, int]: ...

    def kind_counts(self, state: str) -> dict[str | None, int]: ...

    def counts(self, state: str) -> StateCounts: ...

    def search(
        self,
        state: str,
        filters: dict[str, Any],
        *,
        after: str | None = None,
        limit: int = 200,
        bounds: Sequence[tuple[str, str, Any]] = (),
        within: str | None = None,
    ) -> list[Listed]: ...

    def search_sorted(
        self,
        state: str,
        filters: dict[str, Any],
        order: Sequence[tuple[tuple[str, ...], bool]],
        *,
        after: tuple[tuple[Any, ...], str] | None = None,
        limit: int = 200,
        bounds: Sequence[tuple[str, str, Any]] = (),
        within: str | None = None,
    ) -> list[tuple[Listed, tuple[Any, ...]]] | None:
        """What ``search`` finds, in the order of its values at paths then subject, a page
        after ``after`` — or None where SQL cannot sort exactly (``listing.Listing``)."""

    # ---------------------------------------------------------------- retention and ledger

    def prune_history(self, state: str, older_than: str) -> int: ...

    def purge(
        self, state: str, *, erase: Sequence[DocKey] = (), origin: dict[str, Any] | None = None
    ) -> int: ...

    def meta_value(self, key: str) -> str | None:
        """The store's ``stateflow_meta`` value under ``key`` (an adapter's format mark)."""

    def rename_subjects(
        self, state: str, renamed: Callable[[str], str | None], *, mark: tuple[str, str], batch: int = 500
    ) -> bool:
        """Move a state's documents to new subjects (ids, history and audit unmoved) in batches
        under the write lock, then record ``mark``; whether it is recorded."""

    def keep_whole(self, state: str, max_bytes: int = WHOLE_ROW_MAX) -> bool:
        """Keep ``state``'s small documents (encoded body at most ``max_bytes``) in whole form
        from their next write on (their body in their row, no member rows), recorded in the
        store; nothing written where already recorded. False where the backend keeps member
        form always (PostgreSQL)."""

    def cache_recent(self, state: str) -> None:
        """Hold what this store's caches keep of ``state``'s documents for the latest writes
        only (a state written in bursts and seldom read again: a checkpointer's); this process's
        choice, nothing recorded."""

    def applied_op(self, op_id: str, scope: str = "") -> int | bool | None: ...

    def claims_in(self, scope: str) -> bool: ...

    def prune_ops(self, older_than: str) -> int: ...
