"""Studio sign-in: a server-side session per signed-in browser, named by an HTTP-only cookie.

The token a person signs in with never goes back to the browser: the cookie holds a random
session id only. Every form that changes something carries the session's CSRF secret (checked
in constant time), and the cookie is ``SameSite=Strict``, so another site can neither read the
secret nor make the browser send the cookie along with its own form.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Final

from stateflow.errors import StateflowError
from stateflow.http.auth import Token

COOKIE: Final = "stateflow_studio"
LOGIN_COOKIE: Final = "stateflow_studio_login"
IDLE_SECONDS: Final = 12 * 3600
MAX_SESSIONS: Final = 10_000


class CsrfRefused(StateflowError):
    code = "csrf"
    http_status = 403


@dataclass
class Session:
    token: Token
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    seen: float = field(default_factory=time.monotonic)

    def check_csrf(self, given: str | None) -> None:
        if not given or not hmac.compare_digest(given.encode(), self.csrf.encode()):
            raise CsrfRefused("the form is stale or came from another site; reload the page and retry")


class Sessions:
    """Signed-in sessions, kept in memory: a restarted server signs everyone out."""

    def __init__(self, idle_seconds: float = IDLE_SECONDS) -> None:
        self.idle_seconds = idle_seconds
        self._by_id: dict[str, Session] = {}
        self._lock = threading.Lock()

    def open(self, token: Token) -> str:
        sid = secrets.token_urlsafe(32)
        with self._lock:
            self._expire()
            if len(self._by_id) >= MAX_SESSIONS:  # bounded: the oldest sign-in goes first
                oldest = min(self._by_id, key=lambda k: self._by_id[k].seen)
                del self._by_id[oldest]
            self._by_id[sid] = Session(token)
        return sid

    def get(self, sid: str | None) -> Session | None:
        if not sid:
            return None
        with self._lock:
            session = self._by_id.get(sid)
            if session is None:
                return None
            now = time.monotonic()
            if now - session.seen > self.idle_seconds:
                del self._by_id[sid]
                return None
            session.seen = now
            return session

    def close(self, sid: str | None) -> None:
        with self._lock:
            self._by_id.pop(sid or "", None)

    def _expire(self) -> None:
        now = time.monotonic()
        for sid in [k for k, s in self._by_id.items() if now - s.seen > self.idle_seconds]:
            del self._by_id[sid]
