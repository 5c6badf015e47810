"""Subjects as the store sees them: one canonical string per ``(target_kind, target_name, kind, key)``.

The encoding is a compact JSON array, so it is unambiguous for any key (slashes, colons,
non-ASCII) and sorts by target first.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import orjson

from stateflow.errors import InvalidInput


def encode_subject(target_kind: str, target_name: str, kind: str, key: str) -> str:
    """The canonical string of a subject."""
    return orjson.dumps([target_kind, target_name, kind, key]).decode()


def subject_prefix(*parts: str) -> str:
    """The text the encoded subjects whose first elements are ``parts`` start with — theirs
    only: a string's closing quote ends it (``["agent","al",`` is not a prefix of alice's)."""
    return orjson.dumps(list(parts)).decode()[:-1] + ","


@dataclass(frozen=True, slots=True, order=True)
class Subject:
    target_kind: str
    target_name: str
    kind: str
    key: str

    def encode(self) -> str:
        return encode_subject(self.target_kind, self.target_name, self.kind, self.key)

    @staticmethod
    def decode(text: str) -> Subject:
        try:
            parts = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise InvalidInput(f"not an encoded subject: {text!r}") from exc
        if not (isinstance(parts, list) and len(parts) == 4 and all(isinstance(p, str) for p in parts)):
            raise InvalidInput(f"not an encoded subject: {text!r}")
        return Subject(*parts)


def record_name(state: str, subject: str) -> str:
    """How every message names the document ``(state, subject)``, whichever layer raises it: a
    record by its kind and key, its target and its state (``record thread/t-1 of agent bot in
    state 'tickets'``: two targets' records may share a kind and key, and an operator's message —
    a check, a conflict in a batch — has no request to say which), not by its storage key
    (``tickets/["agent","bot","thread","t-1"]``); anything else (a store's own document, a
    subject of another form) as ``state/subject``."""
    if subject.startswith('["'):
        named = _record_name(state, subject)
        if named is not None:
            return named
    return f"{state}/{subject}"


@functools.lru_cache(maxsize=4096)
def _record_name(state: str, subject: str) -> str | None:
    # (kept: reads name their documents eagerly, in case a stored value turns out corrupt)
    try:
        parts = orjson.loads(subject)
    except orjson.JSONDecodeError:
        return None
    if not (type(parts) is list and len(parts) == 4 and all(type(p) is str for p in parts)):
        return None
    return f"record {parts[2]}/{parts[3]} of {parts[0]} {parts[1]} in state {state!r}"
