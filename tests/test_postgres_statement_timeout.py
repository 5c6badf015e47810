"""PostgreSQL's statement timeout: a statement that runs past it (here: one waiting behind a table
lock another session holds) is cancelled by the server and answered ``store-timeout`` — a typed
error in Python, 503 over HTTP — with nothing of it written; the limit comes from the store's
options, the configuration and its environment variable."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest

from stateflow.errors import StoreTimeout
from stateflow.store import DocKey, Write, open_store

from . import servers


@contextmanager
def documents_locked(url: str) -> Iterator[None]:
    """Another session holds the documents table locked against every reader and writer (a
    long transaction's lock): any statement of the store touching it waits."""
    with psycopg.connect(url) as conn:
        conn.execute("LOCK TABLE documents IN ACCESS EXCLUSIVE MODE")
        try:
            yield
        finally:
            conn.rollback()


def test_a_statement_past_the_timeout_is_cancelled_and_nothing_is_written(pg_schema_url: str) -> None:
    store = open_store(pg_schema_url, auto_migrate=True, statement_timeout=0.5)
    key = DocKey("counters", "c")
    try:
        store.commit([Write.between(key, None, {"n": 1}, 0)], {"door": "test"})
        head = store.get(key)
        with documents_locked(pg_schema_url):
            with pytest.raises(StoreTimeout) as refused:
                store.commit([Write.between(key, head.value, {"n": 2}, head.revision)], {"door": "test"})
            assert refused.value.code == "store-timeout" and refused.value.http_status == 503
            assert "statement timeout" in refused.value.message
            with pytest.raises(StoreTimeout):
                store.read([DocKey("counters", "other")])
        assert store.get(key).body == {"n": 1}  # the same store works on, nothing half-written
        store.commit([Write.between(key, head.value, {"n": 3}, head.revision)], {"door": "test"})
    finally:
        store.close()
    with psycopg.connect(pg_schema_url) as conn:
        assert conn.execute("SELECT max(revision), count(*) FROM documents").fetchone() == (2, 1)


def test_a_zero_timeout_is_none_and_the_default_is_set(pg_schema_url: str) -> None:
    for given, shown in ((None, "1min"), (0, "0")):
        store = open_store(pg_schema_url, auto_migrate=True, statement_timeout=given)
        try:
            with store._connection() as conn:  # type: ignore[attr-defined]
                assert conn.execute("SHOW statement_timeout").fetchone() == (shown,)
        finally:
            store.close()


def test_the_server_answers_503_store_timeout_from_its_configured_limit(
    pg_schema_url: str, tmp_path: Path
) -> None:
    open_store(pg_schema_url, auto_migrate=True).close()
    env = servers.base_env(tmp_path, pg_schema_url, STATEFLOW_STORE_STATEMENT_TIMEOUT_SECONDS="0.5")
    server = servers.start(env)
    try:
        state = {
            "schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
            "subject_kinds": ["thread"],
            "default_subject_kind": "thread",
        }
        assert server.call("PUT", "/api/states/c", state)[0] == 200
        record = "/api/states/c/records/agent/a/thread/x"
        assert server.call("PUT", record, {"n": 1})[0] == 200
        with documents_locked(pg_schema_url):
            status, body, _ = server.call("PUT", record, {"n": 2})
            assert (status, body["code"]) == (503, "store-timeout"), body
            status, body, _ = server.call("GET", "/api/states/c/records/agent/a/thread/y")
            assert (status, body["code"]) == (503, "store-timeout"), body
        assert server.call("GET", record)[1]["data"]["data"] == {"n": 1}
    finally:
        server.stop()


def test_a_whole_store_pass_has_no_limit_unless_one_is_configured(
    pg_schema_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # check, dump and load open the store so: a statement of theirs may rightly outlast a call's
    from stateflow.cli.common import Context

    open_store(pg_schema_url, auto_migrate=True).close()
    monkeypatch.chdir(tmp_path)  # (no stateflow.toml of the working directory's)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("STATEFLOW_STORE_STATEMENT_TIMEOUT_SECONDS", raising=False)
    for whole, configured, shown in ((True, None, "0"), (False, None, "1min"), (True, "5", "5s")):
        if configured is not None:
            monkeypatch.setenv("STATEFLOW_STORE_STATEMENT_TIMEOUT_SECONDS", configured)
        ctx = Context(pg_schema_url)
        store = ctx.reader(whole=whole)
        try:
            with store._connection() as conn:  # type: ignore[attr-defined]
                assert conn.execute("SHOW statement_timeout").fetchone() == (shown,), (whole, configured)
        finally:
            ctx.close()


def test_a_urls_own_statement_timeout_wins_over_the_given_and_the_configured_one(
    pg_schema_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the rule connect_timeout follows: the URL is the one place that names a store's server,
    # while the CLI and the server always pass their setting (a whole-store pass its 0)
    from stateflow.cli.common import Context

    open_store(pg_schema_url, auto_migrate=True).close()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("STATEFLOW_STORE_STATEMENT_TIMEOUT_SECONDS", "30")
    # (each spelling the server reads: ``-c name=``, ``-cname=``, ``--name=``, dashes for _)
    for option, shown in (
        ("-c statement_timeout=7s", "7s"),
        ("-cstatement_timeout=8000", "8s"),
        ("--statement-timeout=9s", "9s"),
        ("-c Statement_Timeout=0", "0"),
    ):
        url = f"{pg_schema_url}{quote(' ' + option)}"
        store = open_store(url, statement_timeout=0.5)
        try:
            with store._connection() as conn:  # type: ignore[attr-defined]
                assert conn.execute("SHOW statement_timeout").fetchone() == (shown,), option
        finally:
            store.close()
        for whole in (False, True):
            ctx = Context(url)
            try:
                with ctx.reader(whole=whole)._connection() as conn:  # type: ignore[attr-defined]
                    assert conn.execute("SHOW statement_timeout").fetchone() == (shown,), (option, whole)
            finally:
                ctx.close()
    # without one in the URL, the given and the configured limits apply
    store = open_store(pg_schema_url, statement_timeout=0.5)
    try:
        with store._connection() as conn:  # type: ignore[attr-defined]
            assert conn.execute("SHOW statement_timeout").fetchone() == ("500ms",)
    finally:
        store.close()
