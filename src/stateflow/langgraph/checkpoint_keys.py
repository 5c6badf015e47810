"""How the saver spells a checkpoint id as the last part of its records' subject keys.

A key is ``<thread_id>/<checkpoint_ns>/<id>``, the id as the hex digits of its UTF-8 bytes: in
bytewise order exactly as the ids are (LangGraph's are time-ordered), so a thread's new
checkpoint lands at the end of its run of the documents' key, and a backward scan lists it
first. Stores written before kept the id inverted (``records.invert``: complemented hex digits,
then ``g``, newest first in subject order); the saver renames those subjects once, at its open
(:func:`renamed_subject`), and records :func:`mark` last. Every id part here decodes from
either form: the two differ by the ``g``, which no hex digit is.
"""

from __future__ import annotations

import re
from typing import Final

import orjson

from stateflow.langgraph.records import uninvert
from stateflow.subjects import encode_subject

KINDS: Final = frozenset(("checkpoint", "writes"))
"""The subject kinds whose keys name a checkpoint."""
ASCENDING: Final = "ascending"
"""The mark's value once a state's checkpoint subjects are all in the ascending form."""
RENAME_BATCH = 500
"""Subjects a rename reads (and moves) a transaction at a time."""
_INVERTED: Final = re.compile(r"(?:[0-9a-f]{2})*g")


def mark(state: str) -> tuple[str, str]:
    """The store's meta key and value saying ``state``'s checkpoint keys are all ascending."""
    return f"langgraph_checkpoint_keys:{state}", ASCENDING


def ascending(checkpoint_id: str) -> str:
    """The key part of ``checkpoint_id`` (UnicodeEncodeError for a lone surrogate)."""
    return checkpoint_id.encode().hex()


def id_of(part: str) -> str:
    """The checkpoint id a key's last part spells, in either form."""
    if part.endswith("g"):
        return uninvert(part)
    return bytes.fromhex(part).decode()


def renamed_subject(subject: str) -> str | None:
    """The subject a saver's record under ``subject`` moves to (its id ascending), or None
    where it is not one of the saver's records with an inverted id."""
    if not subject.endswith('g"]'):  # (most subjects: no decode)
        return None
    try:
        parts = orjson.loads(subject)
    except orjson.JSONDecodeError:
        return None
    if type(parts) is not list or len(parts) != 4 or not all(type(p) is str for p in parts):
        return None
    target_kind, target_name, kind, key = parts
    thread, sep, last = key.rpartition("/")
    if kind not in KINDS or not sep or thread.count("/") != 1 or not _INVERTED.fullmatch(last):
        return None
    try:
        checkpoint_id = uninvert(last)
    except UnicodeDecodeError:  # (not an inverted id after all)
        return None
    return encode_subject(target_kind, target_name, kind, f"{thread}/{ascending(checkpoint_id)}")
