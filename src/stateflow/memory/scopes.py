"""Who a memory view belongs to and where its three scope documents live.

Memory scopes are records of the built-in declared state ``memory``: target ``("agent", <agent>)``,
subject kinds ``global`` (key ``global``), ``cwd`` (key: the absolute, resolved working directory)
and ``session`` (key: the session id). A cwd longer than a subject key may be (512 characters), or
one whose name is not UTF-8 (Linux allows any bytes), is refused where the cwd scope is used:
stored, it would be a record no door can name.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from stateflow.doc.canonical import utf8_text
from stateflow.errors import InvalidInput
from stateflow.store import DocKey
from stateflow.subjects import Subject

MEMORY_STATE: Final = "memory"
SCOPES: Final = ("global", "cwd", "session")
DEFAULT_AGENT: Final = "default"
DEFAULT_SESSION: Final = "default"
SESSION_ENV: Final = "STATEFLOW_SESSION"

_SESSION_RE: Final = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._:-]{0,254}[A-Za-z0-9])?\Z")
_AGENT_RE: Final = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,126}[A-Za-z0-9])?\Z")
CWD_MAX_CHARS: Final = 512
"""A cwd is the key of a ``cwd`` subject: at most as long as a declared state's subject key."""


@dataclass(frozen=True, slots=True)
class Identity:
    agent: str
    cwd: str
    session: str

    @staticmethod
    def of(
        agent: str | None = None, cwd: str | os.PathLike[str] | None = None, session: str | None = None
    ) -> Identity:
        """Validate and normalize: the cwd is made absolute and resolved (symlinks followed) on
        this machine — the caller's own directory."""
        resolved = str(Path(cwd if cwd is not None else os.getcwd()).expanduser().resolve())
        return Identity.claimed(agent, resolved, session)

    @staticmethod
    def claimed(agent: str | None, cwd: str, session: str | None) -> Identity:
        """Validate and normalize an identity a client claims about its own machine (the MCP HTTP
        headers): the cwd must be absolute and is normalized by its text alone (``.``, ``..`` and
        repeated slashes collapsed), never looked up here — it names no file of this machine."""
        # an empty name is refused, not taken for the default: `--agent "$AGENT"` with the
        # variable unset must not write into the default agent's memory
        agent = DEFAULT_AGENT if agent is None else agent
        if not _AGENT_RE.match(agent):
            raise InvalidInput(
                f"agent name {agent!r} must be 1-128 characters of letters, digits, '.', '_' or '-'"
            )
        session = DEFAULT_SESSION if session is None else session  # $STATEFLOW_SESSION: read by the edges
        if not _SESSION_RE.match(session):
            raise InvalidInput(
                f"session id {session!r} must be 1-256 characters of letters, digits, '.', '_', ':' "
                "or '-', starting and ending with a letter or digit"
            )
        if not cwd.startswith("/"):
            raise InvalidInput(f"the working directory {cwd[:80]!r} must be an absolute path")
        # POSIX keeps a leading "//" apart; a cwd key has one root
        return Identity(agent, "/" + posixpath.normpath(cwd).lstrip("/"), session)

    def subject(self, scope: str) -> Subject:
        # a cwd no key can hold is refused where the cwd scope is used: the global and session
        # scopes still serve
        if scope == "cwd" and len(self.cwd) > CWD_MAX_CHARS:
            raise InvalidInput(
                f"the working directory is {len(self.cwd)} characters long; a cwd scope's key is at "
                f"most {CWD_MAX_CHARS}: work from a shorter path, or leave the cwd scope out"
            )
        if scope == "cwd" and not utf8_text(self.cwd):  # (its bytes that are not UTF-8 come as
            # lone surrogates; over HTTP, the X-Stateflow-Cwd header is refused the same way)
            raise InvalidInput(
                f"the working directory '{path_text(self.cwd)}' is not UTF-8: a cwd scope's key is "
                "Unicode text: work from a directory whose name is UTF-8, or leave the cwd scope out"
            )
        key = {"global": "global", "cwd": self.cwd, "session": self.session}[scope]
        return Subject("agent", self.agent, scope, key)

    def key(self, scope: str) -> DocKey:
        return DocKey(MEMORY_STATE, self.subject(scope).encode())

    def keys(self, scopes: Sequence[str]) -> dict[str, DocKey]:
        """Each wanted scope's document key: a scope this identity cannot key is refused here,
        before a caller opens (or creates) a store for it."""
        return {scope: self.key(scope) for scope in scopes}


def path_text(path: str) -> str:
    """``path`` as text a message or an answer can carry: a byte of its name that is not UTF-8
    (a lone surrogate, as Python decodes it) shown as ``\\xff``."""
    if utf8_text(path):
        return path
    try:
        return os.fsencode(path).decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a lone surrogate that stands for no byte (a JSON ``\\ud800``)
        return ascii(path)[1:-1]


def parse_scopes(value: str | list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """The wanted scopes in canonical order (global, cwd, session); default all three."""
    if value is None:
        return SCOPES
    items = [s.strip() for s in value.split(",")] if isinstance(value, str) else list(value)
    return checked_scopes(items)


def checked_scopes(items: Sequence[str]) -> tuple[str, ...]:
    """``items`` in canonical order, refused — with one message at every door (Python, the CLI's
    ``--scopes``, the MCP ``X-Stateflow-Scopes`` header) — when empty, unknown or repeated: a
    repeat is a mistake to report, not a set to collapse silently."""
    unknown = [s for s in items if s not in SCOPES]
    if unknown or not items:
        raise InvalidInput(f"scopes must be a non-empty subset of global, cwd, session (got {list(items)})")
    if len(set(items)) != len(items):
        raise InvalidInput(
            f"scopes must be a non-empty subset of global, cwd, session without repeats (got {list(items)})"
        )
    return tuple(s for s in SCOPES if s in items)
