"""The backend contract is declared in one place and the backends keep to it."""

from __future__ import annotations

import ast
from pathlib import Path

from stateflow.store import SqlStore, Store
from stateflow.store.backend import Backend
from stateflow.store.postgres import PostgresStore
from stateflow.store.sqlite import SqliteStore

STORE_DIR = Path(__file__).resolve().parent.parent / "src" / "stateflow" / "store"


def test_every_hook_a_backend_overrides_is_declared_in_backend() -> None:
    declared = {name for name in vars(Backend) if not name.startswith("__")}
    shared = {name for name in dir(SqlStore) if not name.startswith("__")}
    for backend in (SqliteStore, PostgresStore):
        overridden = {name for name in vars(backend) if name in shared}
        assert overridden <= declared, (
            f"{backend.__name__} overrides undeclared hooks: {overridden - declared}"
        )


def test_the_backends_import_no_private_names_from_the_algorithm() -> None:
    for module in ("sqlite.py", "postgres.py"):
        tree = ast.parse((STORE_DIR / module).read_text())
        private = [
            f"{node.module}.{alias.name}"
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("stateflow.store")
            for alias in node.names
            if alias.name.startswith("_")
        ]
        assert private == [], f"{module} imports private names: {private}"


def test_both_backends_are_stores(tmp_path: Path) -> None:
    store: Store = SqliteStore(tmp_path / "s.db")  # typed against the protocol (mypy checks it)
    try:
        assert isinstance(store, SqlStore) and store.schema_version() is not None
    finally:
        store.close()
