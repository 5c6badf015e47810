"""Subjects as the store sees them: one canonical string per ``(target_kind, target_name, kind, key)``.

The encoding is a compact JSON array, so it is unambiguous for any key (slashes, colons,
non-ASCII) and sorts by target first.
"""

from __future__ import annotations

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
