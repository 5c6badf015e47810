"""The HTTP app in process, called with a bearer token: an admin's, a read-only one and one
limited to the tenant ``agent/alice`` (the states and tenant tests' client)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi.testclient import TestClient

from stateflow.http.app import create_app
from stateflow.http.auth import TokenSet, parse_token
from stateflow.states import StatesService
from stateflow.store import SqlStore

ADMIN = "admin-secret-0123456789"
READER = "reader-secret-0123456789"
ALICE = "alice-secret-0123456789"


class Api:
    def __init__(self, client: TestClient) -> None:
        self.client = client

    def __call__(
        self, method: str, path: str, body: Any = None, token: str | None = ADMIN, **kw: Any
    ) -> tuple[int, Any]:
        """``(status, JSON body)``; ``token`` None sends none, ``headers`` adds to it."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        headers.update(kw.pop("headers", {}))
        r = self.client.request(method, path, json=body, headers=headers, **kw)
        return r.status_code, r.json()


@contextmanager
def tenant_api(store: SqlStore) -> Iterator[Api]:
    """The app on ``store`` (its built-in states installed), taking the three tokens."""
    service = StatesService(store)
    service.install_builtins()
    tokens = TokenSet(
        [parse_token(ADMIN), parse_token(READER + ":read"), parse_token(ALICE + "@agent/alice")]
    )
    with TestClient(create_app(service, tokens)) as client:
        yield Api(client)
