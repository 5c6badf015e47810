"""The backend contract is declared in one place and the backends keep to it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from stateflow.store import SqlStore, Store
from stateflow.store.backend import Backend
from stateflow.store.postgres import PostgresStore
from stateflow.store.postgres_async import AsyncPostgresStore
from stateflow.store.sqlite import SqliteStore

STORE_DIR = Path(__file__).resolve().parent.parent / "src" / "stateflow" / "store"


def test_every_hook_a_backend_overrides_is_declared_in_backend() -> None:
    declared = {name for name in vars(Backend) if not name.startswith("__")}
    shared = {name for name in dir(SqlStore) if not name.startswith("__")}
    for backend in (SqliteStore, PostgresStore, AsyncPostgresStore):
        overridden = {name for name in vars(backend) if name in shared}
        assert overridden <= declared, (
            f"{backend.__name__} overrides undeclared hooks: {overridden - declared}"
        )


def test_the_backends_import_no_private_names_from_the_algorithm() -> None:
    for module in ("sqlite.py", "postgres.py", "postgres_async.py"):
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


def test_path_reads_are_a_collaborator_typed_by_what_they_use(tmp_path: Path) -> None:
    """Path reads hold the store through their declared source, not as a base class casting
    ``self``; the store answers ``read_paths`` and ``children`` through them."""
    from stateflow.store.model import DocKey, Write
    from stateflow.store.path_reads import PathReads, PathSource

    assert PathReads not in SqlStore.__mro__
    assert not any(issubclass(base, PathReads) for base in SqlStore.__mro__)
    declared = {name for name in PathSource.__dict__ if name.startswith("_") and not name.startswith("__")}
    used = set(re.findall(r"self\._store\.(\w+)", (STORE_DIR / "path_reads.py").read_text()))
    annotated = set(PathSource.__annotations__)
    assert used <= declared | annotated | {"check_schema"}, used - declared - annotated
    store = SqliteStore(tmp_path / "s.db")
    try:
        store.migrate()
        key = DocKey("notes", "a")
        store.commit([Write.between(key, None, {"plane": {"list": [1, 2, 3]}})])
        [trail] = store.read_paths({key: [("plane", "list", 1)]})[key].trails
        assert trail.value == 2
        page = store.children(key, ("plane", "list"))
        assert page is not None and (page.kind, page.size) == ("array", 3)
        assert PathReads(store).read_paths({key: [("plane", "list", 2)]})[key].trails[0].value == 3
    finally:
        store.close()


SQL_ONLY = {"cli/ops.py"}
"""check, dump and backup walk a SQL store's own tables: the one edge that needs the algorithm."""


def test_services_and_edges_type_against_the_store_protocol() -> None:
    """Outside the store package only the SQL maintenance commands name the concrete
    ``SqlStore``; every service and edge asks for a ``Store``."""
    package = STORE_DIR.parent
    naming = sorted(
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if "store" not in path.relative_to(package).parts[:1]
        and str(path.relative_to(package)) not in SQL_ONLY
        and re.search(r"\bSqlStore\b", path.read_text())
    )
    assert naming == [], f"typed against the concrete store: {naming}"
