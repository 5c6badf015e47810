"""Bearer tokens: who may call the API, read-only or not, and for which tenants.

A token spec is ``SECRET``, ``SECRET:read`` or ``SECRET:write``, optionally followed by
``@kind/name,kind/name`` to limit it to those targets (tenants). Specs come from ``--token``
(repeatable) or ``STATEFLOW_TOKENS`` (comma- or newline-separated). With none configured,
``stateflow serve`` creates one full-access token, prints it once and keeps it in the data
directory.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from stateflow.errors import Forbidden as Forbidden  # re-exported: the API's callers import it here
from stateflow.errors import InvalidInput, StateflowError

ENV_TOKENS = "STATEFLOW_TOKENS"


class Unauthorized(StateflowError):
    code = "unauthorized"
    http_status = 401


@dataclass(frozen=True)
class Token:
    secret: str
    read_only: bool = False
    targets: frozenset[tuple[str, str]] | None = None
    """None: every tenant; else only these ``(target_kind, target_name)`` pairs."""

    @property
    def principal(self) -> str:
        """Who wrote, as the audit trail shows it: a fingerprint, never the secret."""
        return "token:" + hashlib.sha256(self.secret.encode()).hexdigest()[:12]

    def allows_tenant(self, tenant: tuple[str, str]) -> bool:
        return self.targets is None or tenant in self.targets


def parse_token(spec: str) -> Token:
    spec = spec.strip()
    head, _, targets_part = spec.partition("@")
    secret, _, access = head.partition(":")
    if len(secret) < 16:
        raise InvalidInput("a token secret must be at least 16 characters")
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


def token_specs_from_env() -> list[str]:
    raw = os.environ.get(ENV_TOKENS, "")
    return [s for s in raw.replace("\n", ",").split(",") if s.strip()]


def default_token_file() -> Path:
    return Path(platformdirs.user_data_dir("stateflow", appauthor=False)) / "api-token"


def load_or_create_token(path: Path | None = None) -> tuple[Token, bool]:
    """The kept token, created (0600) when absent; returns (token, created)."""
    path = path or default_token_file()
    if path.exists():
        return parse_token(path.read_text().strip()), False
    path.parent.mkdir(parents=True, exist_ok=True)
    secret = "sf_" + secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(secret + "\n")
    return Token(secret), True


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
        raise Unauthorized("unknown token")
