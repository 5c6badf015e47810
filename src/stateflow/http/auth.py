"""Bearer tokens: who may call the API, read-only or not, and for which tenants.

A token spec is ``SECRET``, ``SECRET:read`` or ``SECRET:write``, optionally followed by
``@kind/name,kind/name`` to limit it to those targets (tenants); a secret has at least 16
characters. Specs come from ``--token`` (repeatable), a token file (``--token-file``: one spec per
line, ``#`` comments) or ``STATEFLOW_TOKENS`` (one spec per line). With none configured,
``stateflow serve`` creates one full-access token, prints it once and keeps it in the data
directory (``stateflow token show|create|revoke`` manage that file).
"""

from __future__ import annotations

import errno
import functools
import hashlib
import hmac
import locale
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import platformdirs

from stateflow.errors import Forbidden as Forbidden  # re-exported: the API's callers import it here
from stateflow.errors import InvalidInput, StateflowError, StorePermissionDenied, TargetUnwritable
from stateflow.files import make_private_dirs, replace_private

if TYPE_CHECKING:
    from stateflow.config import Config


class Unauthorized(StateflowError):
    code = "unauthorized"
    http_status = 401

    def __init__(self, message: str, *, invalid: bool = False) -> None:
        super().__init__(message)
        # the WWW-Authenticate challenge every 401 carries (RFC 9110 §11.6.1, RFC 6750 §3)
        self.challenge = 'Bearer realm="stateflow"' + (', error="invalid_token"' if invalid else "")


@dataclass(frozen=True)
class Token:
    secret: str
    read_only: bool = False
    targets: frozenset[tuple[str, str]] | None = None
    """None: every tenant; else only these ``(target_kind, target_name)`` pairs."""

    @functools.cached_property  # (asked on every request: hashed once per token)
    def principal(self) -> str:
        """Who wrote, as the audit trail shows it: a fingerprint, never the secret."""
        return "token:" + hashlib.sha256(self.secret.encode()).hexdigest()[:12]

    @property
    def spec(self) -> str:
        """The spec that parses back into this token (what a token file holds)."""
        access = ":read" if self.read_only else ""
        targets = "" if self.targets is None else "@" + ",".join(f"{k}/{n}" for k, n in sorted(self.targets))
        return f"{self.secret}{access}{targets}"

    def describe(self) -> str:
        """One line without the secret: fingerprint, access, targets."""
        targets = (
            "every target" if self.targets is None else ", ".join(f"{k}/{n}" for k, n in sorted(self.targets))
        )
        return f"{self.principal}  {'read' if self.read_only else 'write'}  {targets}"

    def allows_tenant(self, tenant: tuple[str, str]) -> bool:
        return self.targets is None or tenant in self.targets


def parse_token(spec: str) -> Token:
    spec = spec.strip()
    head, _, targets_part = spec.partition("@")
    secret, _, access = head.partition(":")
    if len(secret) < MIN_SECRET:
        raise InvalidInput(f"a token secret must be at least {MIN_SECRET} characters")
    if access not in ("", "read", "write"):
        raise InvalidInput(f"token access must be read or write, got {access!r}")
    targets = None
    if targets_part:
        pairs = set()
        for item in targets_part.split(","):
            kind, _, name = item.partition("/")
            if kind not in ("agent", "tool") or not name:
                raise InvalidInput(f"token target {item!r} must look like agent/<name> or tool/<name>")
            pairs.add((kind, name))
        targets = frozenset(pairs)
    return Token(secret, access == "read", targets)


MIN_SECRET = 16


def token_specs(text: str) -> list[str]:
    """The specs in ``text``: one per line; blank lines and ``#`` comments are skipped.

    A line without ``@`` may still hold several comma-separated specs (the older form); a line
    with ``@`` is one spec, so a multi-target spec (``SECRET@agent/alice,tool/crm``) stays whole.
    """
    return [spec for _, spec in numbered_specs(text)]


def numbered_specs(text: str) -> list[tuple[int, str]]:
    """:func:`token_specs` with the line (from 1) each spec is on, for refusals naming it."""
    specs: list[tuple[int, str]] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "@" in line:
            specs.append((number, line))
        else:
            specs.extend((number, part.strip()) for part in line.split(",") if part.strip())
    return specs


def parse_tokens(specs: list[tuple[str, str]]) -> list[Token]:
    """Parse ``(where, spec)`` pairs; a bad spec is refused naming where it is (a file and its
    line, a variable, a flag): among many, the operator must be told which one is wrong."""
    tokens = []
    for where, spec in specs:
        try:
            tokens.append(parse_token(spec))
        except InvalidInput as exc:
            raise InvalidInput(f"{where}: {exc.message}") from None
    return tokens


def read_token_file(path: Path, source: str | None = None) -> list[Token]:
    """Every token of a token file; a missing, unreadable or empty file is refused, and a bad
    line named by its number. ``source``: the setting that named the file, for refusals."""
    given = f" (given by {source})" if source else ""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise InvalidInput(
            f"token file {path} does not exist{given} (stateflow token create makes one)"
        ) from None
    except PermissionError:
        raise InvalidInput(f"permission denied: cannot read token file {path}{given}") from None
    except IsADirectoryError:
        raise InvalidInput(f"token file {path} is a directory{given}") from None
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InvalidInput(f"cannot read token file {path}{given}: {why}") from None
    tokens = parse_tokens([(f"token file {path} line {n}", spec) for n, spec in numbered_specs(text)])
    if not tokens:
        raise InvalidInput(f"token file {path} holds no token{given}")
    return tokens


def new_secret() -> str:
    return "sf_" + secrets.token_urlsafe(32)


def write_token_file(path: Path, specs: list[str]) -> None:
    """Replace the token file (0600; each folder it creates 0700) atomically; a file or folder
    the operating system will not let us make is refused as a store's is (``permission-denied``)."""
    # (in the encoding ``read_token_file``'s ``read_text`` reads, as text mode wrote it)
    text = "".join(spec + "\n" for spec in specs)
    with _writing(path):
        make_private_dirs(path.parent)
        replace_private(path, [text.encode(locale.getpreferredencoding(False))])


@contextmanager
def _writing(path: Path) -> Iterator[None]:
    """An operating-system refusal to make or replace the token file ``path`` as one clean
    refusal naming it: permission as for a store file (``permission-denied: permission denied:
    cannot create …``), anything else (a missing or read-only folder, a full disk) as an output
    file that cannot be written."""
    verb = "write" if os.path.lexists(path) else "create"
    try:
        yield
    except PermissionError:
        raise StorePermissionDenied(f"permission denied: cannot {verb} token file {path}") from None
    except OSError as exc:
        # (a folder on the way that is a file: make_private_dirs lets mkdir's "exists" through)
        why = os.strerror(errno.ENOTDIR) if isinstance(exc, FileExistsError) else exc.strerror or exc
        raise TargetUnwritable(f"cannot {verb} token file {path}: {why}") from None


def default_token_file() -> Path:
    return Path(platformdirs.user_data_dir("stateflow", appauthor=False)) / "api-token"


def token_file_in_effect(config: Config) -> tuple[Path, str | None]:
    """The token file ``stateflow serve`` reads and ``stateflow token`` manages: the configured
    one (``--token-file`` > ``STATEFLOW_TOKEN_FILE`` > ``[server] token_file``) and the setting
    that named it, else the kept file in the data directory (no setting: None)."""
    if config.server.token_file:
        return Path(config.server.token_file), config.sources.get("server.token_file", "the configuration")
    return default_token_file(), None


def load_or_create_token(path: Path | None = None) -> tuple[list[Token], bool]:
    """The kept tokens, one full-access token created (0600) when the file is absent; returns
    (tokens, created)."""
    path = path or default_token_file()
    if os.path.exists(path):  # (never raises: a folder we may not look into fails at the write)
        return read_token_file(path), False
    secret = new_secret()
    write_token_file(path, [secret])
    return [Token(secret)], True


class TokenSet:
    def __init__(self, tokens: list[Token]) -> None:
        if not tokens:
            raise InvalidInput("the API needs at least one token")
        self.tokens = tokens

    def authenticate(self, header: str | None) -> Token:
        if not header or not header.lower().startswith("bearer "):
            raise Unauthorized("missing bearer token: send Authorization: Bearer <token>")
        given = header[7:].strip()
        for token in self.tokens:
            if hmac.compare_digest(given.encode(), token.secret.encode()):
                return token
        raise Unauthorized("unknown token", invalid=True)
