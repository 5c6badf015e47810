"""A memory patch merged by the PostgreSQL server inside the commit statement (schema 11).

With several writers on one document, the locked path holds the row lock while the client
reads, computes and sends the commit: on a small machine the lock holder waits for a core
between those steps while the other writers' processes run. ``stateflow_patch_commit`` locks
the documents, merges the patch, writes what the locked path writes for it and returns the
basis it merged into, in one statement: the lock is held only inside the server. The caller
then computes the same write from that basis (for its receipt) and checks that it agrees.

Only the common case is merged there (``memory.served``); anything else the function meets —
a document without a row, a member held as a tree, a key that encoding would escape — raises
``SF422`` before anything is written, and the caller takes the locked path. Since schema 21 the
patch is sent walked (:func:`arrays`), so the function walks no patch text under the row locks;
a patch whose own names or keys encoding would escape is not sent at all (the locked path).
Since schema 23 the statement's commit does not wait for its WAL flush (the next writer takes
the locks meanwhile); the store answers its caller once a later commit has flushed past it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from stateflow.doc.canonical import decode_trusted, encode_trusted
from stateflow.errors import InvalidJSON
from stateflow.store.model import Commit, DocKey, Document
from stateflow.store.rows import decode_stored

NOT_COVERED: Final = "SF422"
"""Raised by ``stateflow_patch_commit`` for what it does not merge: nothing was written."""


@dataclass(frozen=True, slots=True)
class Served:
    """A patch the server merged and committed (or found already current)."""

    commit: Commit
    docs: dict[DocKey, Document]
    """Every document of the call as the server merged into it (the basis, under its locks)."""
    paths: dict[DocKey, bytes]
    """The touched paths written per document written, encoded as the store encodes them."""


def statement(seq_lock_key: str) -> str:
    """The call, with the store's seq-lock key expression (``%s`` placeholders)."""
    return (
        "SELECT r_doc, r_name, r_a, r_b, r_c, r_outline, r_body FROM stateflow_patch_commit("
        "%s::text[], %s::text[], %s::int[], %s::text[], %s::int[], %s::text[], %s::text[], "
        f"%s::text[], %s::text[], %s::text, %s::bytea, {seq_lock_key})"
    )


def served(rows: Sequence[tuple[Any, ...]], keys: Sequence[DocKey], outlines: Sequence[str]) -> Served:
    """The function's rows as a :class:`Served` (see ``stateflow_patch_commit`` for their form)."""
    heads: dict[int, tuple[Any, ...]] = {}
    members: dict[int, list[tuple[Any, ...]]] = {}
    seq: int | None = None
    at: str | None = None
    for row in rows:
        if row[0] == 0:
            at, seq = row[1], int(row[3])
        elif row[1] is None:
            heads[row[0]] = row
        else:
            members.setdefault(row[0], []).append(row)
    docs: dict[DocKey, Document] = {}
    paths: dict[DocKey, bytes] = {}
    revisions: dict[DocKey, int] = {}
    wanted = set(outlines)
    for index, key in enumerate(keys, 1):
        _, _, present, revision, updated_seq, written, _ = heads[index]
        body: dict[str, Any] | None = None
        shapes: dict[str, Any] = {}
        if present:
            body = {}
            for _, name, _, _, _, outline, raw in sorted(members.get(index, ()), key=lambda m: m[2]):
                if raw is not None:
                    body[name] = decode_stored(raw, f"{key} member {name!r}")
                if name in wanted:
                    shapes[name] = (
                        None if outline is None else decode_stored(outline, f"{key} outline of {name!r}")
                    )
        docs[key] = Document(
            key, int(revision), body, None if updated_seq is None else int(updated_seq), shapes
        )
        if written is not None:
            paths[key] = bytes(written)
            revisions[key] = int(revision) + 1
    commit = (
        Commit(applied=True, seq=seq, at=at, revisions=revisions) if seq is not None else Commit(applied=True)
    )
    return Served(commit, docs, paths)


def arrays(keys: Sequence[DocKey], patches: Mapping[DocKey, bytes]) -> list[list[Any]] | None:
    """The function's arguments for the documents ``keys`` (in the lock order) and their patches:
    the states and subjects, then the patches walked here — per member patched, its document's
    position (from 1), its name and the position of its last key, and each key with its value's
    JSON text (schema 21: the server walks no patch text under the locks). None where a patch is
    not this merge's case (a document's or a member's patch that is not an object of one key or
    more, a name or key that encoding escapes): nothing to send, the locked path writes it."""
    docs: list[int] = []
    names: list[str] = []
    lasts: list[int] = []
    walked: list[str] = []
    values: list[str] = []
    for position, key in enumerate(keys, 1):
        raw = patches.get(key)
        if raw is None:
            continue
        try:
            patch = decode_trusted(raw)
        except InvalidJSON:
            return None
        # each value's text is its encoding: the same bytes as its slice of the patch (checked)
        if type(patch) is not dict or not patch or encode_trusted(patch) != bytes(raw):
            return None
        for name, member in patch.items():
            if type(member) is not dict or not member or _escaped(name):
                return None
            for sub, value in member.items():
                if _escaped(sub):
                    return None
                walked.append(sub)
                values.append(encode_trusted(value).decode())
            docs.append(position)
            names.append(name)
            lasts.append(len(walked))
    return [[k.state for k in keys], [k.subject for k in keys], docs, names, lasts, walked, values]


def _escaped(name: str) -> bool:
    """Whether encoding escapes a character of ``name`` (a control character, a quote or a
    backslash): the server merge writes names as they are, so it does not take such a patch."""
    return _ESCAPED.search(name) is not None


_ESCAPED: Final = re.compile(r'[\x00-\x1f"\\]')
