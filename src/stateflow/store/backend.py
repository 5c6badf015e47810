"""The backend contract: every hook a SQL backend implements or may override, declared once.

The store algorithm (:class:`~stateflow.store.base.SqlStore`: reads, writes, history, listings,
retention) is written once against this class; a backend subclasses ``SqlStore`` and

- **must** supply transactions (:meth:`Backend._read_tx`, :meth:`Backend._write_tx`), its
  migration scripts, its table listing and :meth:`Backend.close`;
- **may** override the other hooks below. Each has a portable implementation in the algorithm
  (named in its docstring) that works on any database speaking the SQL the migrations create;
  a backend overrides one only to do the same work in fewer round trips, statements or
  fsyncs. An override must keep the portable version's meaning: both backends pass one
  contract suite (``tests/test_store_contract.py``).

The algorithm talks to the database only through :class:`~stateflow.store.tx.Tx` (``?``
parameters) and these hooks; what to write is decided before any hook emits it
(:mod:`stateflow.store.plan`).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar, NamedTuple, TypeVar

from stateflow.store.counting import ALL_COUNTER_ROWS, COUNTER_ROWS, quoted, summed
from stateflow.store.model import DocKey, Document
from stateflow.store.plan import Fresh, SeqRef, WritePlan
from stateflow.store.rows import DocRow
from stateflow.store.served_patch import Served
from stateflow.store.tx import Tx

R = TypeVar("R")

Candidates = tuple[str, Sequence[Any], Any]
"""A search's candidate SQL (``Backend._candidate_sql``): clauses on ``documents d`` to append to
its ``WHERE``, their parameters, and the ``listing.Via`` the search starts from (or None)."""


class SortSql(NamedTuple):
    """SQL ordering documents by a value in a top-level member as a sorted search orders them
    (``listing.Listing.search_sorted``): templates over the member's alias ``{s}``, a ``LEFT
    JOIN`` of ``members`` (``{s}.doc_id`` is NULL where the document has no such member)."""

    rank: str
    """0 a number, 1 a string, 2 a boolean, 8 an object or an array, 9 null or no value; any
    other where :attr:`unsure` holds."""
    number: str
    """A number's value (read for rank 0 only)."""
    boolean: str
    """A boolean's 0 or 1 (read for rank 2 only)."""
    text: str
    """A string's value (rank 1), else ''."""
    unsure: str
    """True where SQL cannot order the value exactly as Python does (the caller sorts then)."""
    collate: str
    """Appended to the text column where it is compared or ordered: code point order."""


class Backend(abc.ABC):
    """Hooks of a SQL backend (see the module documentation)."""

    url: str
    """Where the store lives, without secrets (used in messages)."""

    share_clause: ClassVar[str] = ""
    """Appended to the row query of documents a write transaction reads without writing
    (PostgreSQL: a shared row lock in key order; SQLite's write transaction excludes every
    other writer already)."""

    current_seq_sql: ClassVar[str | None] = None
    """SQL naming the seq just inserted by this transaction, where it can be used before its
    value is known (pipelined writes); None: the value is read back and sent as a parameter."""

    holds_sql: ClassVar[str | None] = None
    """SQL true when the bytes ``body`` contain the bytes parameter (SQLite ``instr``, PostgreSQL
    ``position``): a key's lookup in a large object then asks the database which leaves hold
    it instead of reading them all (``tree.Scan``); None: every leaf is read and searched here."""

    member_pairs_sql: ClassVar[str | None] = None
    """One statement reading a document's ``snapshot_members`` rows ``(name, revision, body,
    root)`` for any number of ``(name, revision)`` pairs, given as two arrays (names, revisions)
    then the doc_id (PostgreSQL: ``unnest``); None: a list of pairs a few hundred a statement,
    each pair a key lookup (``history.snapshot_member_rows``). Whatever the plan of one
    statement, it reads the document's rows at most once: PostgreSQL, seeing a new document's
    statistics, joined each list of pairs to all of them (n² for a snapshot of n members)."""

    times_as_micros: ClassVar[bool] = False
    """Whether ``transitions.at`` holds microseconds since the epoch (SQLite since schema 8: 8
    bytes a row instead of the clock's 27-byte text); readers see the text either way
    (``clock.time_text``)."""

    transition_keys: ClassVar[bool] = False
    """Whether a transition's row lists the ``(doc_id, revision)`` keys of its changes
    (``transitions.changed``, SQLite since schema 16, which has no index of changes by seq):
    readers go from a transition to its changes through them."""

    counts_in_transitions: ClassVar[bool] = False
    """Whether every writer keeps its counters' deltas in its transition's row
    (``transitions.counted``, SQLite since schema 43: ``counting.count_plans`` over the plans
    of each commit, folded by the commit of every ``counting.FOLD_EVERY``-th seq, and a purge
    counts what it deletes); False: the database counts (PostgreSQL: its fast statements keep
    the client's deltas in ``transitions.counted`` since schema 46, its write functions and
    delete triggers append ``count_deltas`` rows)."""

    change_row_max: ClassVar[int | None] = None
    """The most bytes of paths and inline edits a ``changes`` row holds (SQLite since schema 12,
    whose rows must not overflow their page: ``migrations.CHANGE_ROW_MAX``); longer paths go to
    ``change_paths``. None: no bound (edits inline up to ``INLINE_EDITS_MAX``)."""

    def contended(self, keys: Sequence[DocKey]) -> bool:
        """See :meth:`patch_on_server`: False by default (PostgreSQL overrides both)."""
        return False

    def patch_on_server(
        self,
        keys: Sequence[DocKey],
        patches: Mapping[DocKey, bytes],
        members: Sequence[str],
        outlines: Sequence[str],
        origin: dict[str, Any],
    ) -> Served | None:
        """Memory patches merged by the database itself: None by default, where the database has no
        such merge (the caller runs ``update``)."""
        return None

    whole_form: ClassVar[bool] = False
    """Whether this backend's writers keep a small document of a state that asks for it in
    whole form (its body in ``documents.body``, no member rows: ``plan.WHOLE_ROW_MAX``,
    ``SqlStore.keep_whole``; SQLite). Elsewhere the column is never set and every document keeps
    member rows; readers handle both forms on every backend."""

    keeps_bodies: ClassVar[bool] = False
    """Whether writes report whole bodies they leave behind to ``_remember`` (``Fresh.bodies``)."""

    statement_snapshots: ClassVar[bool] = False
    """Whether each statement costs a round trip and :meth:`_statement_tx` gives each one a
    snapshot of its own (PostgreSQL: no transaction, no BEGIN and COMMIT round trips), so a
    read that can take everything from one statement does (an as-of path read:
    ``path_reads.PathReads._back_in_one``); False: statements are calls in this process (SQLite,
    where the one statement's plan costs more than the separate ones) sharing one snapshot."""

    optimistic_documents_max: ClassVar[int | None] = None
    """The most documents an optimistic commit (``update(optimistic=True)``) may name, or None
    for any number; a write naming more takes the locked path from the start."""

    reads_before_locking: ClassVar[bool] = False
    """Whether an optimistic read-modify-write whose documents are not cached as they are reads
    them with no lock held and commits checking that none moved, retrying a few times, before
    it takes the row locks (where a write holds them across several round trips, as on
    PostgreSQL; SQLite's single writer lock is held by one short transaction anyway)."""

    # ------------------------------------------------------------------ required

    @abc.abstractmethod
    def _read_tx(self) -> AbstractContextManager[Tx]:
        """A read-only transaction over one consistent snapshot."""

    def snapshot(self) -> AbstractContextManager[Any]:
        """Inside it, every read this thread makes sees one consistent snapshot, whatever
        commits meanwhile (a dump's lines agree with each other). Portable: one read
        transaction, which the reads inside join (a backend whose reads do not join an open
        one overrides this)."""
        return self._read_tx()

    def _statement_tx(self) -> AbstractContextManager[Tx]:
        """Statements for a read whose first statement reads everything that must be consistent
        (see ``statement_snapshots``; portable: :meth:`_read_tx`)."""
        return self._read_tx()

    @abc.abstractmethod
    def _write_tx(self) -> AbstractContextManager[Tx]:
        """A write transaction that excludes concurrent writers of what it locks; rolls back
        on error, commits durably on exit."""

    @abc.abstractmethod
    def _migrations(self) -> dict[int, str]:
        """Migration scripts by schema version (``stateflow.store.migrations``)."""

    @abc.abstractmethod
    def _table_names(self, tx: Tx) -> set[str]:
        """The tables present (to tell an empty database from a foreign or damaged one)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections; the store is unusable afterwards."""

    def _subjects_moved(self, keys: Sequence[DocKey]) -> None:  # noqa: B027 - optional hook, no-op by default
        """Forget what the backend holds by document key for ``keys``, documents moved to other
        subjects or to these (``rename_subjects``; portable: nothing beyond the shared caches;
        PostgreSQL: its bodies, which name their keys)."""

    def _forgotten(self, key: DocKey, doc_id: int, revision: int) -> None:  # noqa: B027 - optional hook, no-op by default
        """Forget what the backend holds of document ``doc_id`` (``key``) at ``revision``, no
        longer among the latest writes of a state cached for those only (``cache_recent``;
        portable: nothing beyond the shared caches; PostgreSQL: its body as read)."""

    def _lock_migration(self, tx: Tx) -> None:  # noqa: B027 - optional hook, no-op by default
        """Called first in the migration transaction (serializes concurrent migrators)."""

    def unwritable(self) -> str | None:
        """Why this process cannot write the store, migrate it included (SQLite: a file opened
        read-only, one it or its directory's permissions keep it from writing), or None."""
        return None

    # ------------------------------------------------------------------ optional (portable version in the algorithm)

    @abc.abstractmethod
    def schema_version(self) -> int | None:
        """The migrated schema version, None when the store has no schema at all (portable:
        ``core.StoreCore.schema_version``; what a readiness probe asks, so SQLite first refuses a
        store whose file was replaced under the process)."""

    @abc.abstractmethod
    def read(
        self,
        keys: Iterable[DocKey],
        members: Iterable[str] | Mapping[DocKey, Iterable[str] | None] | None = None,
        *,
        outlines: Iterable[str] = (),
    ) -> dict[DocKey, Document]:
        """Current documents from one snapshot (portable: ``core.StoreCore.read``; SQLite
        serves whole documents from a commit-keyed cache, PostgreSQL assembles them in one
        statement)."""

    @abc.abstractmethod
    def cached(self, key: Hashable, build: Callable[[], R]) -> R:
        """``build()``, or its earlier value where nothing was committed since (portable:
        always ``build()``)."""

    @abc.abstractmethod
    def _lock(self, tx: Tx, key: DocKey) -> DocRow:
        """The document's row, created (revision 0, absent) if needed, locked for this
        transaction (portable: ``core.StoreCore._lock``, one upsert)."""

    @staticmethod
    @abc.abstractmethod
    def _lock_query(key: DocKey) -> tuple[str, tuple[str, ...]]:
        """The statement that ``_lock`` and ``_claim`` send for one document (portable:
        ``core.StoreCore._lock_query``, one upsert; PostgreSQL: a locking read, the upsert
        only for a key without a row)."""

    @abc.abstractmethod
    def _lock_many(self, tx: Tx, keys: Sequence[DocKey]) -> dict[DocKey, DocRow]:
        """``_lock`` for the sorted keys of a commit's new writes (portable:
        ``writes.Writes._lock_many``, pipelines of ``_claim``; PostgreSQL: one upsert)."""

    @abc.abstractmethod
    def _claim(
        self,
        tx: Tx,
        shared: Sequence[DocKey],
        locked: Sequence[DocKey],
        claims: Sequence[tuple[str, str]] = (),
    ) -> tuple[dict[DocKey, DocRow], dict[DocKey, DocRow]]:
        """Start a read-modify-write: refuse taken op ids (``OpIdTaken``), read the shared rows,
        lock the others (portable: ``writes.Writes._claim``, one pipeline)."""

    @abc.abstractmethod
    def _insert_transition(
        self, tx: Tx, at: str, origin: dict[str, Any], changed: str | None, counted: str | None = None
    ) -> Callable[[], int]:
        """Insert the transition row (``changed``: its changes' keys, see ``transition_keys``;
        ``counted``: its counters' deltas, see ``counts_in_transitions``);
        return how to get its seq, maybe only after the batch (portable:
        ``writes.Writes._insert_transition``)."""

    @abc.abstractmethod
    def _emit(self, tx: Tx, plans: Sequence[WritePlan], seq: SeqRef) -> None:
        """Send the rows of planned document writes, inside the commit's batch (portable:
        ``writes.Writes._emit``, one statement per row kind)."""

    @abc.abstractmethod
    def _commit_planned(
        self,
        locked: Sequence[tuple[DocKey, DocRow]],
        shared: Sequence[tuple[DocKey, DocRow]],
        claims: Sequence[tuple[str, str]],
        origin: dict[str, Any],
        plans: Sequence[WritePlan],
    ) -> tuple[int, str] | None:
        """Commit plans computed against known rows if none moved and no claim is taken:
        ``(seq, at)``, or None having written nothing (portable:
        ``writes.Writes._commit_planned``)."""

    @abc.abstractmethod
    def _absent_rows(self, keys: Sequence[DocKey]) -> dict[DocKey, DocRow] | None:
        """Absent rows (revision 0) for documents that have none, before an optimistic commit
        that names them; None to let the locked path create them (portable:
        ``writes.Writes._absent_rows``, None; PostgreSQL: rows with ids taken ahead, which the
        commit creates in its own transaction — one whose row existed after all fails its check;
        SQLite: ids reserved ahead, the row inserted whole by the commit's emit, ``WritePlan.created``)."""

    @abc.abstractmethod
    def read_under(
        self, state: str, prefix: str, *, limit: int | None = None, descending: bool = False
    ) -> list[Document]:
        """Present documents under a subject prefix, whole, in subject order or reverse (portable:
        ``listing.Listing.read_under``, scans then reads; PostgreSQL: one statement for the
        revisions, the bodies from memory)."""

    @abc.abstractmethod
    def read_first_under(
        self, state: str, prefixes: Sequence[str], *, descending: bool = False
    ) -> list[Document | None]:
        """The first (``descending``: last) present document under each of several subject
        prefixes, whole (portable:
        ``listing.Listing.read_first_under``, one ``read_under`` each; PostgreSQL: one statement
        for the revisions, the bodies from memory)."""

    @abc.abstractmethod
    def _erase_held(self, tx: Tx, held: dict[DocKey, DocRow], origin: dict[str, Any], fresh: Fresh) -> None:
        """Erase documents locked in ``tx`` as one transition, committing ``tx`` (portable:
        ``writes.Writes._erase_held``)."""

    @abc.abstractmethod
    def _remember(self, fresh: Fresh) -> None:
        """Feed the caches with what a transaction wrote, once it has committed (portable:
        ``writes.Writes._remember``)."""

    @abc.abstractmethod
    def _revisions_before(self, tx: Tx, tops: dict[int, int], before_seq: int) -> dict[int, int]:
        """Per document, the newest revision written before ``before_seq`` (portable:
        ``history.History._revisions_before``, a binary search of key lookups)."""

    @abc.abstractmethod
    def _candidate_sql(
        self,
        tx: Tx,
        filters: dict[str, Any],
        bounds: Sequence[tuple[str, str, Any]] = (),
        probe: int = 4096,
        whole: bool = False,
    ) -> Candidates:
        """SQL narrowing a search to the documents that may match its containment filters and
        bounds (``listing.Bound``; portable: only the selective member it starts from, in
        ``listing.Listing._candidate_sql``). ``whole``: the state may hold whole-form
        documents, which have no member rows — none starts from the value index, and each
        filter member :meth:`_checks_in_body` spells is checked in the body (SQLite)."""

    @abc.abstractmethod
    def _checks_in_body(self, name: str) -> bool:
        """Whether :meth:`_candidate_sql` checks the filter member ``name`` in a whole-form
        document's body as it does in a member row (portable: it checks nothing there — the
        search checks such members in Python; SQLite: a name its JSON paths spell)."""

    @abc.abstractmethod
    def _sort_sql_whole(self, path: tuple[str, ...]) -> SortSql | None:
        """:meth:`_sort_sql` for a state that may hold whole-form documents: the value at
        ``path`` (a top-level member, then names inside it) read from the member's row or from
        the document's body (``d.body``) (portable: None, the caller sorts; SQLite: by JSON
        path)."""

    @abc.abstractmethod
    def _sort_sql(self, inner: tuple[str, ...]) -> SortSql | None:
        """How SQL orders documents by the value at the path ``inner`` inside a member (``()``:
        the member's own value); None where it cannot spell that path (portable: it never
        sorts — a sorted search is sorted by the caller, ``listing.Listing._sort_sql``)."""

    @abc.abstractmethod
    def _sort_number(self, value: int | float) -> Any:
        """A number as a parameter compared with :attr:`SortSql.number` (portable: as it is)."""

    def _lock_state(self, tx: Tx, state: str) -> list[int]:
        """The ids of ``state``'s documents, held for a purge: no writer may write one of them,
        nor commit anything, until this transaction ends (portable: their ids — one writer at a
        time holds the database)."""
        return [int(r[0]) for r in tx.all("SELECT doc_id FROM documents WHERE state = ?", (state,))]

    def _counter_rows(self, tx: Tx, state: str | None) -> list[tuple[str, str, str, int]]:
        """``(state, counter, name, n)`` of each counter of ``state`` (None: of every state) not
        at zero: its row plus its unfolded deltas — ``count_deltas`` rows and the transitions'
        ``counted`` after ``counts_folded`` —, read in one statement and summed in Python
        (portable: ``counting.COUNTER_ROWS`` / ``ALL_COUNTER_ROWS``; SQLite, whose
        ``count_deltas`` stays empty, reads the rows and the transitions only)."""
        if state is None:
            moved = summed(tx.all(ALL_COUNTER_ROWS))
        else:
            moved = summed(tx.all(COUNTER_ROWS, (state, state, quoted(state))), state)
        return [(*counter, n) for counter, n in moved.items()]

    def _fold_counts(self, tx: Tx) -> None:  # noqa: B027 - optional hook, no-op by default
        """Fold the counters' deltas into their rows in ``tx`` (``counting``), unless another
        fold is under way (portable: nothing — a database whose counters are their rows)."""

    def _stale_scalars(self, tx: Tx, limit: int) -> list[tuple[int, str]]:
        """Up to ``limit`` members (doc id, name) whose kept ``scalar`` is not what their body
        makes it (PostgreSQL: the column the value indexes read, which every writer sets since
        schema 40; portable: nothing kept apart from the body)."""
        return []

    def _lock_nodes(self, tx: Tx) -> None:  # noqa: B027 - optional hook, no-op by default
        """Keep other writers from adding nodes until this transaction ends, so a garbage
        collection's mark sees every root a node could be shared by (portable: nothing — one
        writer at a time holds the database)."""

    @abc.abstractmethod
    def _checked_in_sql(self, filters: dict[str, Any]) -> bool:
        """Whether the candidate query decides every filter member, so no candidate needs a
        check in Python (portable: never, ``listing.Listing._checked_in_sql``; SQLite: every
        member a scalar; PostgreSQL: every member a scalar the value index holds)."""

    @abc.abstractmethod
    def _unchecked(self, tx: Tx, doc_id: int, filters: dict[str, Any]) -> list[str]:
        """Filter members whose containment the candidate query did not establish (portable:
        all of them)."""

    @abc.abstractmethod
    def _value_match(self, name: str, pattern: Any) -> tuple[str, Sequence[Any]] | None:
        """SQL over ``members m`` naming the members ``name`` equal to the scalar ``pattern``
        through the value index (``members_by_value``), with its parameters; None where the
        index cannot answer it (portable: never, ``listing.Listing._value_match``)."""

    @abc.abstractmethod
    def _unchecked_many(
        self, tx: Tx, doc_ids: Sequence[int], filters: dict[str, Any]
    ) -> dict[int, list[str]]:
        """``_unchecked`` for a page of candidates (portable: one call per document)."""

    @abc.abstractmethod
    def _kind_sql(self) -> str:
        """SQL naming the subject kind of a ``documents`` row — the third element of its
        encoded subject, '' for a subject that is not one; the rule the counters are kept by
        (``listing.Listing.recount``)."""
