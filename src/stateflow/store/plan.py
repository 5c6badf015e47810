"""The write plan: what a commit will write, decided before any statement is sent.

A cohort's write goes through three steps, each with its own structure:

1. **load** (:class:`Loaded`): a document's row and the members read inside the transaction
   (or, on the optimistic path, as last seen here);
2. **stage** (:class:`Stage`): the write's edits applied to those members — nothing written;
3. **plan** (:class:`WritePlan`): the rows that follow — member deletes, updates and inserts,
   the change and its edits, a snapshot when due, and the document's new row (a
   :class:`DocRow` whose ``updated_seq`` and ``at`` the commit stamps: :func:`stamp_row`).

A backend emits the plans of one commit in whatever form is cheapest for it (SQLite:
statements; PostgreSQL: one call of its write function, one array per column). What a
transaction wrote reaches the caches only once it has committed (:class:`Fresh`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, NamedTuple

from stateflow.doc.canonical import JSON, check
from stateflow.doc.diff import Edit
from stateflow.doc.select import MISSING
from stateflow.errors import InvalidInput, InvalidJSON
from stateflow.store.cache import Known
from stateflow.store.model import DocKey, Write
from stateflow.store.rows import DocRow, MemberHead
from stateflow.store.tree_skeleton import Skeleton
from stateflow.store.tree_update import Updated

SNAPSHOT_MAX_CHAIN: Final = 256
"""Take a snapshot at least every this many revisions, so an as-of read replays a bounded chain."""
SNAPSHOT_MIN_BYTES: Final = 4096
"""…or as soon as the changes since the last snapshot outweigh the body (and this floor)."""
SNAPSHOT_LARGE_CHAIN: Final = 16
"""…and, in a document of at least ``TREE_MIN`` bytes, every this many revisions: its snapshot
copies only the members changed since the last one (a member held as a tree: its root), never
the body, so the body's weight would let an as-of read of it replay up to
``SNAPSHOT_MAX_CHAIN`` changes for nothing."""
NONE: Final[Mapping[Any, Any]] = MappingProxyType({})
"""What a plan or a ``Fresh`` holds where a write leaves a table or cache empty: one shared
read-only mapping, not a container made and freed per write (a one-document write fills few)."""

TREE_MIN: Final = 1 << 20
"""A member whose encoding exceeds this many bytes is stored as a tree of nodes (``tree.py``):
a change inside it writes the nodes that differ, not the value. Smaller members stay one row
each, as before (a tree costs more to read whole). The bound is also PostgreSQL's containment
index bound, so no tree member is ever indexed."""
INLINE_EDITS_MAX: Final = 512
"""A change whose encoded edits fit in this many bytes keeps them in its own row (one row, one
page touched, per change); larger ones get a ``change_edits`` row per member, so that reading
some members' history never decodes another member's large edit."""
WHOLE_ROW_MAX: Final = 3584
"""A document of a state that keeps whole bodies (``SqlStore.keep_whole``) is stored in whole
form — its body in its own ``documents`` row, no member rows — while its encoded body is at
most this many bytes (and the state's own bound): the row then stays within one 4 KiB page of
the table (whose largest local payload is ~4,061 bytes; the key takes the rest), and far below
``TREE_MIN``, so a whole-form document never holds a tree."""
WHOLE_INLINE_MAX: Final = 4096
"""…and so does a change that only sets the whole document (a new record's first revision)
up to this many bytes: its one edit is decoded whole wherever it is kept, so a row of its own
would only add a row and an index entry."""


@dataclass(slots=True)
class Loaded:
    """Members of one document loaded inside a write transaction (reused by the commit)."""

    row: DocRow
    members: dict[str, tuple[JSON, int, int]] = field(default_factory=dict)
    """name → (value, position, encoded size)"""
    complete: bool = False
    by_path: dict[str, ByPath] | None = None
    """members held as their skeletons (``Store.update``'s ``along``), by name"""


@dataclass(slots=True, init=False)
class Stage:
    """A write's edits applied to the loaded members; nothing is written yet."""

    present: bool
    values: dict[str, JSON] = field(default_factory=dict)
    touched: dict[str, None] = field(default_factory=dict)
    """Member names to write, in first-touched order (new members get positions in it)."""
    trees: dict[str, Updated] = field(default_factory=dict)
    """Members held as trees, as their update left them (the nodes to write, the new root)."""
    changed: dict[str, list[tuple[tuple[str | int, ...], bool]]] = field(default_factory=dict)
    """(path inside the member, is a delete) of each edit, in order (a member set whole has an
    empty path)."""
    reborn: set[str] | None = None
    """Members the document had that the write deletes and then writes again: they go last,
    as a replay of the change's edits puts them (None: none)."""
    by_path: dict[str, ByPath] | None = None
    """Members held as trees and not in memory, staged on their skeletons (None: none)."""

    def __init__(self, present: bool) -> None:
        # (by hand, as ``Fresh``: every document written builds one)
        self.present = present
        self.values = {}
        self.touched = {}
        self.trees = {}
        self.changed = {}
        self.reborn = None
        self.by_path = None


class ByPath(NamedTuple):
    """A member staged by path: the skeleton its edits were applied to, its tree's root and
    its outline before the write (encoded; None: not an object)."""

    skeleton: Skeleton
    root: bytes
    outline: bytes | None


class SeqRef(NamedTuple):
    """How a statement names the transaction's seq: SQL and the parameters it takes."""

    sql: str
    params: tuple[int, ...]


@dataclass(slots=True, init=False)
class WritePlan:
    """One document's write as rows (see ``Writes._plan_doc``), emitted by ``Backend._emit``."""

    doc_id: int
    revision: int
    present: bool
    """whether the document exists after the write (if not, every member row goes)"""
    was_present: bool
    deletes: Sequence[tuple[int, str]]
    """member rows to delete: (doc_id, name)"""
    updates: Sequence[tuple[Any, ...]]
    """member rows to rewrite: (body, revision, size, outline, root, doc_id, name)"""
    inserts: Sequence[tuple[Any, ...]]
    """member rows to add: (doc_id, name, position, revision, size, outline, body, root)"""
    nodes: Mapping[bytes, bytes]
    """tree nodes the members' new roots need (id → body; some may be stored already)"""
    paths: bytes
    """the change's touched paths, encoded"""
    paths_apart: bool
    """the paths go to ``change_paths``, not the change row (``Backend.change_row_max``)"""
    edits: Sequence[tuple[int, int, str, bytes, bytes | None, int]]
    """change_edits rows: (doc_id, revision, member, edits, roots: the tree ids its edits
    refer to, 16 bytes each, ord: the member's place among the change's, see ``inline``)"""
    inline: bytes | None
    """the edits in the change row instead, as ``[[member, edits], …]`` (small changes); in
    either form whole-document edits first, then each member's in the order the write first
    touched it — the order its new members take in the document, which a replay keeps"""
    snapshot: bool
    """take a snapshot of the body as written"""
    document: DocRow | None
    """the document's row after the write (set last, once the sizes are known); its
    ``updated_seq`` and ``at`` are the commit's, stamped on it once known (:func:`stamp_row`):
    the same object then goes to the caches"""
    created: DocKey | None
    """set by a backend whose commit creates the document's row (inserted whole, before its
    members, instead of updated): the key it is created under"""
    body: bytes | None
    """the document's form after the write: its encoded body where it is in whole form (no
    member rows: ``deletes``, ``updates`` and ``inserts`` are empty), ``b""`` where it leaves
    whole form (``inserts`` then holds every member), None where it stays in member form"""
    was_whole: bool
    """the document was in whole form before the write (it has no member rows)"""
    names_moved: tuple[Sequence[str], Sequence[str]] | None
    """the top-level member names the write adds and drops, where its member rows do not say
    so (a document in whole form before or after it: a conversion writes or deletes every
    member's row and moves no name); None: as its rows say"""
    copies_mark: int | None
    """where the write moves a whole-form document past a revision whose change may keep the
    mark (``rows.CHANGE_MARK``), replaced first by the body it stands for: the size of that body
    (its members' encodings, ``DocRow.body_size``) where the mark is known to be there, -1 where
    the row was read and whether it is is not known; None: no mark to replace"""

    def __init__(self, doc_id: int, revision: int, present: bool, was_present: bool = False) -> None:
        # (by hand, as ``Fresh``: every document written builds one, and the generated
        # ``__init__`` tests each of the thirteen fields for a given value first). The rows
        # start as shared empties: the planner sets the lists it fills (a store ``put``
        # updates one member: one list, not five containers)
        self.doc_id = doc_id
        self.revision = revision
        self.present = present
        self.was_present = was_present
        self.deletes = ()
        self.updates = ()
        self.inserts = ()
        self.nodes = NONE
        self.paths = b"[]"
        self.paths_apart = False
        self.edits = ()
        self.inline = None
        self.snapshot = False
        self.document = None
        self.created = None
        self.body = None
        self.was_whole = False
        self.names_moved = None
        self.copies_mark = None

    @property
    def row(self) -> DocRow:
        assert self.document is not None, "a plan's document row is set when it is planned"
        return self.document


@dataclass(slots=True, init=False)
class Fresh:
    """What a transaction wrote, for the caches once it has committed (never before)."""

    members: list[tuple[tuple[int, str], int, Any, int]]
    """((doc_id, name), revision, value, size) of each member value written: the member
    cache's entries (``RevisionCache.put_many``)"""
    heads: dict[int, tuple[int, dict[str, MemberHead] | None, Known | None, int]]
    """doc_id → (revision, member heads by name in position order, and the body assembled with
    its encoded size where every member was known — ``None, 0`` where not)
    after the write, where the heads before it were known: one entry of ``StoreCore._heads``;
    heads None where the write leaves a whole-form document's body alone, its heads the body's,
    made when first asked (``cache.Held``)"""
    bodies: Mapping[int, tuple[int, dict[str, Any] | None, int]]
    """doc_id → (revision, body, encoded size) after the write, where every member was known
    (only for stores that keep whole bodies: ``keeps_bodies``; :meth:`keep_body`); their time
    is :attr:`at` once the commit is stamped (the commit's: not kept per body, so a body planned
    before that time was known is not made again with it)"""
    rows: dict[DocKey, DocRow]
    """document rows as this transaction read or left them (for writes computed optimistically)"""
    nodes: Mapping[bytes, bytes]
    """tree nodes written by a tree update (id → bytes), for the node cache (:meth:`keep_nodes`)"""
    roots: Mapping[int, tuple[int, dict[str, bytes]]]
    """doc_id → (revision, tree roots of members held as trees) after the write, as far as
    they are known (a member not named: not known; :meth:`keep_roots`)"""
    at: str
    """The transaction's time."""
    seq: int | None
    """The transaction's seq, once known."""
    once: Collection[DocKey]
    """documents of :attr:`rows` only read (``Writes._read_unseen``): no spare copy is kept of
    them once the caches let them go (``Writes._forget_older``); a write that follows is counted
    with its own row"""

    def __init__(self) -> None:
        # (by hand: every write builds one, and the generated ``__init__`` tests each field
        # for a given value first; what most writes leave empty starts as the shared ``NONE``)
        self.members = []
        self.heads = {}
        self.bodies = NONE
        self.rows = {}
        self.nodes = NONE
        self.roots = NONE
        self.at = ""
        self.seq = None
        self.once = ()

    def keep_body(self, doc_id: int, entry: tuple[int, dict[str, Any] | None, int]) -> None:
        """``bodies[doc_id] = entry``."""
        bodies = self.bodies
        if isinstance(bodies, dict):
            bodies[doc_id] = entry
        else:
            self.bodies = {doc_id: entry}

    def keep_roots(self, doc_id: int, entry: tuple[int, dict[str, bytes]]) -> None:
        """``roots[doc_id] = entry``."""
        roots = self.roots
        if isinstance(roots, dict):
            roots[doc_id] = entry
        else:
            self.roots = {doc_id: entry}

    def keep_nodes(self, nodes: Mapping[bytes, bytes]) -> None:
        """``nodes.update(nodes)``."""
        held = self.nodes
        if isinstance(held, dict):
            held.update(nodes)
        else:
            self.nodes = dict(nodes)

    def clear(self) -> None:
        """Back to empty: a plan given up before its commit leaves nothing for the caches."""
        self.members.clear()
        self.heads.clear()
        self.bodies = NONE
        self.rows.clear()
        self.nodes = NONE
        self.roots = NONE


def stamp_row(plan: WritePlan, seq: int, at: str) -> DocRow:
    """A document's row as a committed plan left it: the plan's own, stamped with the commit's
    seq and time (no second row made)."""
    d = plan.document  # (the field, not ``row``'s call: every write's rows pass here)
    assert d is not None, "a plan's document row is set when it is planned"
    d.updated_seq = seq
    d.at = at
    return d


def effective_edits(edits: Sequence[Edit]) -> Sequence[Edit]:
    """Edits before the last whole-document edit are overwritten by it: drop them, so storing
    whole-document edits first (then per member) replays exactly."""
    for i in range(len(edits) - 1, 0, -1):  # (from the end, no generator: most writes hold one edit)
        if not edits[i].path:
            return edits[i:]
    return edits


def _nul_member(key: DocKey, name: str) -> InvalidJSON:
    """A top-level member name is a row's text, which PostgreSQL cannot hold with U+0000: refused
    on every backend alike (deeper names live in the member's JSON and may hold it)."""
    return InvalidJSON(
        f"{key}: the top-level member name {name!r} holds U+0000, which a document's top-level "
        "member names may not (deeper names may); rename it"
    )


MEMBER_NAME_MAX_BYTES: Final = 2048
"""A top-level member name is a row's key beside its document's (a PostgreSQL index entry is at
most 2,704 bytes): bounded, in UTF-8 bytes, alike on every backend."""


def _member_name_problem(key: DocKey, name: str) -> InvalidJSON | None:
    """Why ``name`` cannot be a document's top-level member name, or None."""
    if "\x00" in name:
        return _nul_member(key, name)
    # (at most 4 bytes a character: only a long name is encoded)
    if 4 * len(name) > MEMBER_NAME_MAX_BYTES:
        size = len(name.encode("utf-8", "surrogatepass"))
        if size > MEMBER_NAME_MAX_BYTES:
            return InvalidJSON(
                f"{key}: a top-level member name is {size} bytes (UTF-8); the limit is "
                f"{MEMBER_NAME_MAX_BYTES} (deeper names have none): shorten it, or nest it in an object"
            )
    return None


KEY_MAX_BYTES: Final = 2528
"""A document's state name and subject together, in UTF-8 bytes: one entry of the unique index
on both (a PostgreSQL index entry is at most 2,704 bytes). What the states layer allows — a state
name of at most 128 characters beside a subject's encoding of at most 2,400 bytes — fits; a
document written by ``doc put`` or the store's API is held to the same bound on every backend."""


def key_problem(key: DocKey) -> InvalidInput | None:
    """Why a document cannot be written under ``key`` (longer than ``KEY_MAX_BYTES``), or None."""
    if 4 * (len(key[0]) + len(key[1])) <= KEY_MAX_BYTES:  # (at most 4 bytes a character)
        return None
    state, subject = key
    size = len(state.encode("utf-8", "surrogatepass")) + len(subject.encode("utf-8", "surrogatepass"))
    if size <= KEY_MAX_BYTES:
        return None
    shown = state if len(state) <= 64 else state[:64] + "…"
    return InvalidInput(
        f"a document key of state {shown!r} is {size} bytes (state name and subject together, "
        f"UTF-8); the limit is {KEY_MAX_BYTES}: shorten its subject"
    )


def validate_writes(writes: Sequence[Write], origin: dict[str, Any] | None, *, values: bool = True) -> None:
    """Refuse malformed writes before any database work; ``values=False`` when the caller
    vouches that every value set is plain JSON already (``update(checked=True)``)."""
    seen: set[DocKey] = set()
    for write in writes:
        if not isinstance(write, Write):
            raise InvalidInput(f"a cohort holds Write objects, got {type(write).__name__}")
        if write.key in seen:
            raise InvalidInput(f"{write.key} appears twice in one cohort; combine its edits")
        seen.add(write.key)
        if write.expect is not None and (type(write.expect) is not int or write.expect < 0):
            raise InvalidInput(f"{write.key}: expected revision must be an integer ≥ 0")
        # (a delete is let through: a document stored under a longer key before the bound, as
        # SQLite held one, can still be removed)
        if (problem := key_problem(write.key)) and any(e.value is not MISSING for e in write.edits):
            raise problem
        for edit in write.edits:
            if not edit.path:
                if edit.value is not MISSING:
                    if type(edit.value) is not dict:
                        raise InvalidInput(f"{write.key}: a document must be a JSON object")
                    for name in edit.value:  # (the common case inline: no call per name)
                        if type(name) is str and ("\x00" in name or 4 * len(name) > MEMBER_NAME_MAX_BYTES):
                            problem = _member_name_problem(write.key, name)
                            if problem is not None:
                                raise problem
            elif type(edit.path[0]) is not str:
                raise InvalidInput(f"{write.key}: a document's top level is an object, not an array")
            elif problem := _member_name_problem(write.key, edit.path[0]):
                raise problem
            if values and edit.value is not MISSING:  # (not a delete)
                try:
                    check(edit.value)
                except InvalidJSON:  # named again, the document's name made only now
                    check(edit.value, str(write.key))
                    raise
    if origin is not None:
        if type(origin) is not dict:
            raise InvalidInput("origin must be a JSON object")
        check(origin, "origin")
