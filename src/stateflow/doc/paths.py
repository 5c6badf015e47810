"""The ``read_state`` path grammar, parsed once into a typed path.

::

    path          := root selector*
    root          := explicit-root | implicit-plane
    explicit-root := ("effective" | "global" | "cwd" | "session") ("[" DIGITS "]")?
                     -- followed by "." or the end of the path
    implicit-plane:= a plane name, an alias of ``effective.<plane>``
    selector      := "." KEY | "[" DIGITS "]" | "[" DIGITS ":" DIGITS "]" | "[" DIGITS ".." DIGITS "]"
    KEY           := [A-Za-z_$][A-Za-z0-9_$-]*          (ASCII only)
    patches-path  := ("global" | "cwd" | "session") ".patches" ("[" DIGITS "]")?
    DIGITS        := "0" | [1-9][0-9]*                  (a patch's "[N]" keys take the same)

Everything else (negative indices, leading zeros, open ranges, steps, wildcards, unions, quoted
members, non-ASCII keys, keys starting with a digit) is refused with :class:`InvalidPath`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from stateflow.errors import InvalidPath

ROOTS: Final = ("effective", "global", "cwd", "session")
SCOPES: Final = ("global", "cwd", "session")
PLANES: Final = ("intents", "strategy", "tactics", "artifacts", "response", "lazy")

KEY_PATTERN: Final = r"[A-Za-z_$][A-Za-z0-9_$-]*"
_KEY_RE: Final = re.compile(KEY_PATTERN + r"\Z", re.ASCII)
_TOKEN_RE: Final = re.compile(
    r"\.(?P<key>" + KEY_PATTERN + r")"
    r"|\[(?P<start>[0-9]+)(?:(?P<sep>:|\.\.)(?P<end>[0-9]+))?\]",
    re.ASCII,
)
_ROOT_RE: Final = re.compile(r"(?P<name>" + KEY_PATTERN + r")(?:\[(?P<offset>[0-9]+)\])?", re.ASCII)
_PATCHES_RE: Final = re.compile(
    r"(?P<scope>global|cwd|session)\.patches(?:\[(?P<index>[0-9]+)\])?\Z", re.ASCII
)

_PATCHES_WORD_RE: Final = re.compile(r"\.patches(?![A-Za-z0-9_$-])", re.ASCII)

_SELECTOR_HELP: Final = (
    "object keys must match [A-Za-z_$][A-Za-z0-9_$-]* (ASCII), "
    "array selectors use [N], [start:end] or [start..end] with non-negative integers"
)


def is_key(text: str) -> bool:
    """True when ``text`` is an addressable key of the read grammar."""
    return _KEY_RE.match(text) is not None


@dataclass(frozen=True, slots=True)
class Key:
    name: str

    def __str__(self) -> str:
        return f".{self.name}"


@dataclass(frozen=True, slots=True)
class Index:
    index: int

    def __str__(self) -> str:
        return f"[{self.index}]"


@dataclass(frozen=True, slots=True)
class Range:
    """Half-open ``start <= i < end``."""

    start: int
    end: int

    def __str__(self) -> str:
        return f"[{self.start}:{self.end}]"


Selector = Key | Index | Range


@dataclass(frozen=True, slots=True)
class ReadPath:
    """A parsed value path: a root (with its history offset) and the selectors below it."""

    root: str
    """``effective``, ``global``, ``cwd`` or ``session`` (implicit planes resolve to ``effective``)."""
    offset: int
    selectors: tuple[Selector, ...]
    text: str
    implicit: bool = False
    """True when the path started with a bare plane name (``lazy.x`` ≡ ``effective.lazy.x``)."""

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class PatchesPath:
    """``<scope>.patches[k]``: that scope's own k-th most recent change (``[0]`` = the latest)."""

    scope: str
    index: int
    text: str

    def __str__(self) -> str:
        return self.text


def parse(text: object, planes: tuple[str, ...] = PLANES) -> ReadPath | PatchesPath:
    """Parse one ``read_state`` path. ``planes`` are the names accepted as implicit roots."""
    if not isinstance(text, str):
        raise InvalidPath(f"a read path must be a string, got {type(text).__name__}")
    if not text:
        raise InvalidPath(
            "empty read path; a path starts with a plane or an effective, global, cwd or session root"
        )
    m = _PATCHES_RE.match(text)
    if m:
        return PatchesPath(m["scope"], _number(m["index"] or "0", text), text)
    root = _ROOT_RE.match(text)
    if root is None or (root["name"] not in ROOTS and root["name"] not in planes):
        raise InvalidPath(
            f"read path {text!r} must start with a plane ({', '.join(planes)}) "
            "or an effective, global, cwd or session root"
        )
    name, pos = root["name"], root.end()
    selectors: list[Selector] = []
    if name in ROOTS:
        offset = _number(root["offset"], text) if root["offset"] is not None else 0
        if pos < len(text) and text[pos] != ".":
            raise InvalidPath(f"read path {text!r}: a root may be followed only by '.' or the end")
        if _PATCHES_WORD_RE.match(text, pos):
            if name == "effective":
                raise InvalidPath(f"read path {text!r}: patch history requires an explicit scope")
            if root["offset"] is not None:
                raise InvalidPath(
                    f"read path {text!r}: index patches after .patches "
                    f"(e.g. {name}.patches[1]), not after the scope"
                )
            raise InvalidPath(f"read path {text!r}: a patch history path ends at .patches or .patches[k]")
        implicit = False
    else:
        if root["offset"] is not None:
            pos = len(root["name"])  # "lazy[3]" is an index selector on the plane, not an offset
        offset = 0
        selectors.append(Key(name))
        name, implicit = "effective", True
    while pos < len(text):
        tok = _TOKEN_RE.match(text, pos)
        if tok is None:
            raise InvalidPath(f"invalid selector in read path {text!r} at {text[pos:]!r}; {_SELECTOR_HELP}")
        if tok["key"] is not None:
            selectors.append(Key(tok["key"]))
        elif tok["end"] is None:
            selectors.append(Index(_number(tok["start"], text)))
        else:
            start, end = _number(tok["start"], text), _number(tok["end"], text)
            if start > end:
                raise InvalidPath(f"read path {text!r}: range [{start}:{end}] ends before it starts")
            selectors.append(Range(start, end))
        pos = tok.end()
    return ReadPath(name, offset, tuple(selectors), text, implicit)


def _number(digits: str, text: str) -> int:
    """An index, offset or range bound: canonical decimal, as a patch's ``"[N]"`` key must be
    (one grammar for reading and writing: ``[01]`` is refused on both sides, not read as 1)."""
    if len(digits) > 1 and digits[0] == "0":
        raise InvalidPath(
            f"read path {text!r}: {digits!r} has a leading zero; write a zero-based decimal without "
            f"leading zeros, such as [{int(digits)}]"
        )
    return int(digits)
