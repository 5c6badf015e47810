"""Studio sign-in: a signed session cookie per signed-in browser, HTTP-only.

The token a person signs in with never goes back to the browser. The cookie names the token by
its fingerprint and carries when it was issued and a random nonce, signed (HMAC-SHA256) with a
key derived from that token's secret. So the server keeps nothing per session: a signed-in
browser stays signed in across a server restart and on every worker or server that accepts
the same token, and revoking the token ends all of its sessions at once. A session lasts
``LIFETIME_SECONDS`` from sign-in. Signing out deletes the cookie and remembers its nonce in
this process until it would have expired anyway.

Every form that changes something carries the session's CSRF secret (derived from the same key
and nonce, checked in constant time), and the cookie is ``SameSite=Strict``, so another site can
neither read the secret nor make the browser send the cookie along with its own form.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Final

from stateflow.doc.canonical import ascii_digits
from stateflow.errors import StateflowError
from stateflow.http.auth import Token, TokenSet

COOKIE: Final = "stateflow_studio"
LOGIN_COOKIE: Final = "stateflow_studio_login"
LIFETIME_SECONDS: Final = 12 * 3600
MAX_SIGNED_OUT: Final = 100_000
"""Signed-out nonces remembered (each only until its session would have expired)."""


class CsrfRefused(StateflowError):
    code = "csrf"
    http_status = 403


@dataclass(frozen=True)
class Session:
    token: Token
    csrf: str
    nonce: str
    expires: float

    def check_csrf(self, given: str | None) -> None:
        if not given or not hmac.compare_digest(given.encode(), self.csrf.encode()):
            raise CsrfRefused("the form is stale or came from another site; reload the page and retry")

    def stamp(self, text: str) -> str:
        """``text`` signed for this session only: a message a redirect carries (a save's
        confirmation) that no link from anyone else can make the page show."""
        return _mac(self.csrf.encode(), "message." + text)

    def stamped(self, text: str, given: str | None) -> bool:
        """Whether ``given`` is this session's :meth:`stamp` of ``text``."""
        return bool(given) and hmac.compare_digest(str(given).encode(), self.stamp(text).encode())


def _fingerprint(token: Token) -> str:
    return hashlib.sha256(token.secret.encode()).hexdigest()[:16]


def _key(token: Token) -> bytes:
    """The token's own signing key for studio sessions (never the secret itself)."""
    return hmac.new(token.secret.encode(), b"stateflow studio session v1", hashlib.sha256).digest()


def _mac(key: bytes, text: str) -> str:
    digest = hmac.new(key, text.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


class Sessions:
    """Signed sessions for the tokens of ``tokens``."""

    def __init__(self, tokens: TokenSet, lifetime_seconds: float = LIFETIME_SECONDS) -> None:
        self.lifetime_seconds = lifetime_seconds
        self._by_fingerprint: dict[str, list[Token]] = {}
        for token in tokens.tokens:
            self._by_fingerprint.setdefault(_fingerprint(token), []).append(token)
        self._signed_out: dict[str, float] = {}
        """nonce → when its session expires"""
        self._lock = threading.Lock()

    def open(self, token: Token) -> str:
        """A new session's cookie value."""
        issued = int(time.time())
        nonce = secrets.token_urlsafe(16)
        text = f"{_fingerprint(token)}.{issued}.{nonce}"
        return f"{text}.{_mac(_key(token), 'cookie.' + text)}"

    def get(self, cookie: str | None) -> Session | None:
        """The session a cookie names, or None: malformed, forged, expired, signed out, or its
        token is no longer accepted here."""
        parts = (cookie or "").split(".")
        if len(parts) != 4 or not ascii_digits(parts[1]):
            return None
        fingerprint, issued, nonce, mac = parts
        expires = int(issued) + self.lifetime_seconds
        if time.time() > expires:
            return None
        text = f"{fingerprint}.{issued}.{nonce}"
        for token in self._by_fingerprint.get(fingerprint, ()):
            key = _key(token)
            if hmac.compare_digest(mac.encode(), _mac(key, "cookie." + text).encode()):
                with self._lock:
                    if nonce in self._signed_out:
                        return None
                return Session(token, _mac(key, "csrf." + nonce), nonce, expires)
        return None

    def close(self, session: Session) -> None:
        """Sign out: this session's cookie is refused from now on (in this process)."""
        now = time.time()
        with self._lock:
            for nonce in [n for n, until in self._signed_out.items() if until < now]:
                del self._signed_out[nonce]
            if len(self._signed_out) >= MAX_SIGNED_OUT:  # bounded: the soonest to expire go first
                for nonce in sorted(self._signed_out, key=self._signed_out.__getitem__)[
                    : MAX_SIGNED_OUT // 10
                ]:
                    del self._signed_out[nonce]
            self._signed_out[session.nonce] = session.expires
