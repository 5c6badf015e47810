"""Shared fixtures: a real SQLite file and a real PostgreSQL schema per test.

PostgreSQL comes from ``STATEFLOW_TEST_POSTGRES`` (``scripts/test-postgres.sh`` starts one on loopback).
Under CI (``CI`` set) a missing server is an error, never a skip.
"""

from __future__ import annotations

import atexit
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

import psycopg
import pytest
from hypothesis import HealthCheck, settings

from stateflow.store import SqlStore, open_store

ROOT = Path(__file__).resolve().parent.parent

# The suite never touches the user's own data folder (the default store file, the API token): a
# test that names no store of its own gets an empty folder of this run's, removed at exit.
_DATA_HOME = tempfile.mkdtemp(prefix="stateflow-test-data-")
os.environ["XDG_DATA_HOME"] = _DATA_HOME
atexit.register(shutil.rmtree, _DATA_HOME, True)


def _start_postgres() -> str | None:
    """Start (or reuse) the private loopback PostgreSQL of scripts/test-postgres.sh."""
    if not glob.glob("/usr/lib/postgresql/*/bin/initdb"):
        return None
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "test-postgres.sh")], capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        raise pytest.UsageError(f"could not start the test PostgreSQL server:\n{out.stderr}")
    url = out.stdout.strip().rsplit("=", 1)[-1]
    os.environ["STATEFLOW_TEST_POSTGRES"] = url
    return url


PG_URL = os.environ.get("STATEFLOW_TEST_POSTGRES") or _start_postgres()

# Shared CI machines are slow and noisy: judge properties, not generation speed.
settings.register_profile("stateflow", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("stateflow")


def run_benchmark(module: str, backend: str, *args: str) -> str:
    """``python -m benchmarks.<module> *args`` on ``backend`` (``postgres``: this run's server,
    skipped where none is configured), as a person runs it from the repository: its output."""
    if backend == "postgres" and not PG_URL:
        pytest.skip("PostgreSQL not configured (set STATEFLOW_TEST_POSTGRES or run .ci/postgres.sh)")
    repo = Path(__file__).resolve().parent.parent
    where = ("--backend", "postgres", "--postgres", str(PG_URL)) if backend == "postgres" else ()
    done = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{module}", *args, *where],
        cwd=repo,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(repo / "src"), str(repo)])},
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return done.stdout


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("CI") and not PG_URL:
        raise pytest.UsageError(
            "CI run without PostgreSQL: install Debian's postgresql (or set STATEFLOW_TEST_POSTGRES); "
            "the PostgreSQL contract tests must run in CI"
        )


def pytest_report_header(config: pytest.Config) -> str:
    return f"stateflow backends: sqlite, postgresql={'yes: ' + PG_URL if PG_URL else 'NOT CONFIGURED'}"


def _with_schema(url: str, schema: str) -> str:
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}options={quote(f'-csearch_path={schema}')}"


@contextmanager
def fresh_pg_schemas(count: int) -> Iterator[list[str]]:
    """``count`` fresh, empty PostgreSQL schemas (dropped afterwards), for tests that need their
    own or compare two stores side by side."""
    if not PG_URL:
        pytest.skip("PostgreSQL not configured (set STATEFLOW_TEST_POSTGRES or run .ci/postgres.sh)")
    names = [f"t_{uuid.uuid4().hex[:12]}" for _ in range(count)]
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        for name in names:
            conn.execute(f"CREATE SCHEMA {name}")
    try:
        yield names
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            for name in names:
                conn.execute(f"DROP SCHEMA {name} CASCADE")


@pytest.fixture
def pg_schema_url() -> Iterator[str]:
    """A PostgreSQL URL whose search_path is a fresh, empty schema (dropped afterwards)."""
    with fresh_pg_schemas(1) as (schema,):
        assert PG_URL
        yield _with_schema(PG_URL, schema)


@pytest.fixture
def two_pg_schema_urls() -> Iterator[tuple[str, str]]:
    """Two such URLs, each its own fresh schema (two stores on one server, compared)."""
    with fresh_pg_schemas(2) as (a, b):
        assert PG_URL
        yield _with_schema(PG_URL, a), _with_schema(PG_URL, b)


@pytest.fixture(autouse=True)
def _runtime_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test (and every CLI it runs) keeps last-shown views in its own directory."""
    monkeypatch.setenv("STATEFLOW_RUNTIME_DIR", str(tmp_path / "runtime"))


StoreFactory = Callable[[], SqlStore]


WHOLE_FORM: Final = "sqlite-whole"
"""A ``backend`` parameter: a SQLite file whose states named by the test module keep small
documents in whole form (``SqlStore.keep_whole``)."""


def store_location(request: pytest.FixtureRequest, tmp_path: Path, whole: Iterable[str] = ()) -> str:
    """The location of an empty store for ``request.param``: ``sqlite`` a file path, ``postgres``
    a URL, :data:`WHOLE_FORM` a file path whose states ``whole`` keep whole bodies (a module
    overrides ``backend`` with the three parameters to run its tests over both forms)."""
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_schema_url"))
    location = str(tmp_path / "store.db")
    if request.param == WHOLE_FORM:
        store = open_store(location, auto_migrate=True)
        try:
            for state in whole:
                assert store.keep_whole(state)
        finally:
            store.close()
    return location


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The location of an empty store of each backend (a file path or a URL)."""
    return store_location(request, tmp_path)


@pytest.fixture
def open_migrated(backend: str) -> Iterator[StoreFactory]:
    """Open (and migrate) stores on the backend; every opened store is closed afterwards."""
    opened: list[SqlStore] = []

    def factory() -> SqlStore:
        store = open_store(backend, auto_migrate=True)
        opened.append(store)
        return store

    yield factory
    for store in opened:
        store.close()


@pytest.fixture
def store(open_migrated: StoreFactory) -> SqlStore:
    return open_migrated()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        callspec = getattr(item, "callspec", None)
        param = callspec.params.get("backend") if callspec else None
        if param == "postgres" or (param is None and "pg_schema_url" in fixtures):
            item.user_properties.append(("backend", "postgres"))
        elif param in ("sqlite", WHOLE_FORM):
            item.user_properties.append(("backend", "sqlite"))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say how many tests ran against each backend, so a silent PostgreSQL skip cannot hide."""
    counts: dict[str, dict[str, int]] = {}
    for outcome in ("passed", "failed", "skipped", "error"):
        for report in terminalreporter.stats.get(outcome, []):
            if outcome == "passed" and report.when != "call":
                continue
            for key, name in getattr(report, "user_properties", ()):
                if key == "backend":
                    by = counts.setdefault(name, {})
                    by[outcome] = by.get(outcome, 0) + 1
    for name, by in sorted(counts.items()):
        parts = ", ".join(f"{n} {o}" for o, n in sorted(by.items()))
        terminalreporter.write_line(f"backend {name}: {parts}")


@pytest.fixture
def ctrl_c_raises() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt in the test's process, whatever handler the runner set
    (the tests that press Ctrl-C on a store's own calls)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)
