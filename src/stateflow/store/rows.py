"""Row codecs: a document's row as read, the member heads, and the decoding of stored bytes.

Every decode of stored bytes goes through here, so a damaged value always surfaces as
``CorruptData`` naming what was being read — never as a wrong answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Final

import orjson

from stateflow.doc.canonical import decode_trusted, encode_trusted, kind
from stateflow.doc.diff import Edit
from stateflow.errors import CorruptData, InvalidInput, InvalidJSON
from stateflow.store.clock import time_text
from stateflow.store.model import DocKey


@dataclass(slots=True)
class DocRow:
    """A ``documents`` row: the document's id, revision, presence and bookkeeping."""

    doc_id: int
    revision: int
    present: bool
    updated_seq: int | None
    snapshot_revision: int
    bytes_since_snapshot: int
    body_size: int
    next_position: int
    at: str | None = None
    whole: bool = False
    """the body is the row's own (``documents.body``, "whole form"): the document has no member
    rows (:func:`whole_members` reads them from it)"""
    marked: bool | None = field(default=None, compare=False)
    """whether the change at this revision is the mark (:data:`CHANGE_MARK`): known where this
    process planned the revision, None where the row was read (the writer that moves the
    document past it then replaces a mark it finds). Not part of the row's equality: a row read
    back equals the row written."""


ROW_COLUMNS: Final = (
    "doc_id, revision, present, updated_seq, snapshot_revision, bytes_since_snapshot, "
    "body_size, next_position"
)
_ROW_FIELDS: Final = (
    ", ".join("d." + c.strip() for c in ROW_COLUMNS.split(","))
    + ", t.at, d.state, d.subject, d.body IS NOT NULL"
)
ROW_SELECT: Final = f"SELECT {_ROW_FIELDS} FROM documents d LEFT JOIN transitions t ON t.seq = d.updated_seq"
UNSEEN_SELECT: Final = (
    f"SELECT {_ROW_FIELDS}, d.body, m.name, m.position, m.revision, m.size, m.outline, "
    "CASE WHEN m.root IS NULL THEN m.body END "
    "FROM documents d LEFT JOIN transitions t ON t.seq = d.updated_seq "
    "LEFT JOIN members m ON m.doc_id = d.doc_id "
    "WHERE d.state = ? AND d.subject = ? ORDER BY m.position"
)
"""One document read whole in one statement, for a writer that has not seen it: its row (as
``ROW_SELECT``'s columns), its whole-form body (column 12) and, per member row, its head (13–17)
and its body (18) unless the member is a tree."""
NO_ROW: Final = DocRow(0, 0, False, None, 0, 0, 0, 0)
"""Known to have no row at all (never written)."""
CHANGE_MARK: Final = b"="
"""A change's stored edits meaning "the whole body, as the document's row holds it at this
revision": what the creating change of a whole-form document keeps instead of a copy of its
body (schema 44). Not JSON, so a reader that does not know it fails loudly (``CorruptData``)
instead of reading a wrong body; every reader here resolves it (``history.resolve_marks``)."""


MemberHead = tuple[int, str, int, int, int, Any]
"""A member row without its body: (doc_id, name, position, revision, size, outline)."""


Wanted = tuple[DocKey, int, int, Sequence[str] | None]
"""A document whose members are wanted: (key, doc_id, revision, names or None for all)."""


def lock_order(key: DocKey) -> tuple[bool, str, str]:
    """Where a document's row comes in the one order every writer locks rows in (shared or
    exclusive, in one ascending pass, all before the seq lock): documents of states named
    ``_…`` (catalogs: the services keep declarations and aliases there) before all others, then
    by key, bytewise. Catalogs come first because a writer may have to lock them before it can
    know which other documents it writes (a fold reads the aliases under their lock, then locks
    the records); by key alone a state named ``1x`` would put its records before them."""
    return (key.state[:1] != "_", key.state, key.subject)


LOCK_ORDER_SQL: Final = "starts_with(d.state, '_') DESC, d.state, d.subject"
"""``lock_order`` as an ``ORDER BY`` on ``documents d`` (PostgreSQL: states and subjects are
``COLLATE "C"``, so bytewise like Python's ``str`` order)."""


def key_filter(keys: Sequence[DocKey]) -> tuple[str, list[str]]:
    """A WHERE clause (on ``documents d``) matching exactly these keys, with its parameters."""
    return _key_where(len(keys)), [v for k in keys for v in k]


@lru_cache(maxsize=64)
def _key_where(count: int) -> str:
    return any_of("(d.state = ? AND d.subject = ?)", count)


FLAT_MAX: Final = 64
"""Terms ``any_of`` joins in one flat ``OR`` chain: the statements of everyday reads and writes
(a few keys) stay as they always were."""


def any_of(term: str, count: int) -> str:
    """``term OR term OR …`` (``count`` times): :func:`joined`."""
    return joined([term] * count, "OR")


def joined(terms: Sequence[str], op: str) -> str:
    """``terms`` joined by ``op`` (``OR``, ``AND``), nested as a balanced tree past
    ``FLAT_MAX`` of them: SQLite parses a flat chain as a tree as deep as it is long and
    refuses one deeper than 1000 ("Expression tree is too large"), so a statement naming a
    thousand documents failed; a balanced tree is as deep as the count's logarithm. (Both
    databases flatten nested ORs and ANDs again when they plan: the plan is the flat chain's.)"""
    if len(terms) <= FLAT_MAX:
        return f" {op} ".join(terms)
    half = len(terms) // 2
    return f"({joined(terms[:half], op)}) {op} ({joined(terms[half:], op)})"


def rows_by_key(rows: list[tuple[Any, ...]]) -> dict[DocKey, DocRow]:
    """Rows selected by ``ROW_SELECT``, by key."""
    # keys read back from the database were valid when written: no need to check them again
    return {DocKey._make((r[9], r[10])): to_row(r) for r in rows}


def to_row(r: tuple[Any, ...]) -> DocRow:
    seq = r[3]
    # positional: keywords cost a third of this call, which every read of a row makes
    return DocRow(
        int(r[0]),  # doc_id
        int(r[1]),  # revision
        bool(r[2]),  # present
        None if seq is None else int(seq),  # updated_seq
        int(r[4]),  # snapshot_revision
        int(r[5]),  # bytes_since_snapshot
        int(r[6]),  # body_size
        int(r[7]),  # next_position
        time_text(r[8]) if len(r) > 8 else None,  # at
        len(r) > 11 and bool(r[11]),  # whole (``ROW_SELECT``'s last column)
    )


def outline_of(value: dict[str, Any]) -> dict[str, str]:
    """An object member's outline: its immediate keys and their kinds (never their values)."""
    # every write of an object member outlines it: a comprehension with the kinds looked up by
    # type costs less than ``dict(zip(…, map(…)))`` in C (a pair made per key, and ``zip``'s
    # keyword a dict per call) and needs no scan for a kind not found; a type not in the table
    # goes through ``kind``, which names it or refuses it
    # (the table read as a global: a local the comprehension reads would be a cell made per call)
    try:
        return {k: _KINDS[type(v)] for k, v in value.items()}
    except KeyError:
        return {k: _KINDS.get(type(v)) or kind(v) for k, v in value.items()}


def encoded_outline(value: dict[str, Any]) -> bytes:
    """:func:`outline_of` encoded, as a member head holds it (in the head cache, for as long as
    its document stays there)."""
    # copied once (``%b`` makes bytes of the exact length): orjson's result keeps the buffer it
    # wrote into, 1-4 KB however small the outline, which 100,000 cached heads would hold as GBs
    return b"%b" % orjson.dumps(outline_of(value))


_KINDS: Final[dict[type, str]] = {
    dict: "object",
    list: "array",
    str: "string",
    bool: "boolean",
    int: "number",
    float: "number",
    type(None): "null",
}


def whole_members(
    doc_id: int, revision: int, raw: Any, what: str
) -> tuple[dict[str, MemberHead], dict[str, Any]]:
    """A whole-form document's body (``documents.body``) as member rows would give it: the
    heads by name in the body's order — position its place, revision the document's, size and
    outline computed here — and the body decoded. The one place a row's body becomes members."""
    body = decode_stored(raw, what)
    if type(body) is not dict:
        raise CorruptData(f"stored {what} is corrupt: a whole-form body is not an object")
    return whole_heads(doc_id, revision, body), body


def whole_heads(
    doc_id: int, revision: int, body: dict[str, Any], encoded: Mapping[str, bytes] | None = None
) -> dict[str, MemberHead]:
    """A whole-form document's member heads, made from its body: by name in the body's order,
    each member's position its place (from 0, whatever the row's ``next_position``: the body
    holds no positions), its revision the document's, its size and outline computed here. The
    one place they are made from a body, whether the row was read (:func:`whole_members`) or
    created here (a head-cache entry that holds the body alone makes them when first asked:
    ``HeadCache``). A whole-form document's positions only order its members: a rewrite's heads
    (``Writes._rewrite_whole``) keep each kept member's position and give an added one the
    row's ``next_position``, which a reader numbers by place instead — the same order, never a
    position at or past ``next_position``. ``encoded``: each member's encoding where the writer
    has it (its size then not encoded again)."""
    heads: dict[str, MemberHead] = {}
    for position, (name, value) in enumerate(body.items()):
        outline = encoded_outline(value) if type(value) is dict else None
        size = len(encode_trusted(value) if encoded is None else encoded[name])
        heads[name] = (doc_id, name, position, revision, size, outline)
    return heads


def decode_stored(raw: Any, what: str) -> Any:
    """Stored JSON bytes, or ``CorruptData`` naming ``what``."""
    try:
        return decode_trusted(bytes(raw))
    except (InvalidJSON, TypeError, ValueError) as exc:
        raise CorruptData(f"stored {what} is corrupt: {exc}") from exc


def directory_of(data: Any, key: DocKey, revision: int) -> list[tuple[str, int]]:
    """A snapshot's directory: ``(member, revision)`` pairs in member order (schema 4)."""
    if type(data) is not list or not all(
        type(e) is list and len(e) == 2 and type(e[0]) is str and type(e[1]) is int for e in data
    ):
        raise CorruptData(
            f"stored {key} snapshot at revision {revision} is corrupt: its directory is not [member, revision] pairs"
        )
    return [(e[0], e[1]) for e in data]


def decode_inline(raw: Any, what: str) -> list[tuple[str, Any]]:
    """A change row's inline edits: ``(member, edits as JSON)`` pairs."""
    data = decode_stored(raw, what)
    if type(data) is not list or not all(type(p) is list and len(p) == 2 and type(p[0]) is str for p in data):
        raise CorruptData(f"stored {what} is corrupt: inline edits are not [member, edits] pairs")
    return [(p[0], p[1]) for p in data]


def decode_edits(raw: Any, what: str, resolve: Callable[[bytes], Any] | None = None) -> list[Edit]:
    """Stored edits; ``[path, null, root]`` is a set whose value is the tree under ``root``
    (read by ``resolve``)."""
    data = raw if type(raw) is list else decode_stored(raw, what)
    try:
        if type(data) is not list:
            raise InvalidInput("not a list")
        out = []
        for e in data:
            if type(e) is list and len(e) == 3 and type(e[2]) is str and resolve is not None:
                try:
                    root = bytes.fromhex(e[2])
                except ValueError as exc:
                    raise InvalidInput(f"bad tree ref {e[2]!r}") from exc
                e = [e[0], resolve(root)]
            out.append(Edit.from_json(e))
        return out
    except InvalidInput as exc:
        raise CorruptData(f"stored {what} is corrupt: {exc}") from exc


def decode_origin(raw: Any, seq: Any) -> dict[str, Any]:
    data = decode_stored(raw, f"origin of transition {seq}")
    if type(data) is not dict:
        raise CorruptData(f"stored origin of transition {seq} is not an object")
    return data


def restrict_edit(edit: Edit, names: set[str]) -> Edit:
    """A whole-document edit seen through a member filter."""
    if edit.is_delete or type(edit.value) is not dict:
        return edit
    return Edit(edit.path, {k: v for k, v in edit.value.items() if k in names})
