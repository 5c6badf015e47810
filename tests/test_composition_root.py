"""The composition root: the environment is read at the edges (``stateflow.connect``, the CLI),
once — never by the store opener or the memory identity at call time; one function puts a
declared-states service together with its built-ins."""

from __future__ import annotations

from pathlib import Path

import pytest

import stateflow
from stateflow.api import states_service
from stateflow.memory import Identity
from stateflow.store import default_store_path, open_store, resolve_store_url
from stateflow.store.base import SqlStore

from .conftest import StoreFactory


def test_nothing_below_the_edges_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATEFLOW_STORE", "/nowhere/from-env.db")
    monkeypatch.setenv("STATEFLOW_SESSION", "from-env")
    assert resolve_store_url(None) == str(default_store_path())
    assert Identity.of("a", "/", None).session == "default"


def test_connect_reads_the_environment_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATEFLOW_STORE", str(tmp_path / "env.db"))
    monkeypatch.setenv("STATEFLOW_SESSION", "from-env")
    with stateflow.connect() as sf:
        monkeypatch.setenv("STATEFLOW_SESSION", "changed-later")
        assert sf.memory(agent="a", cwd=str(tmp_path)).identity.session == "from-env"
        assert sf.memory(agent="a", cwd=str(tmp_path), session="given").identity.session == "given"
        sf.memory(agent="a", cwd=str(tmp_path)).patch_state({"global": {"tactics": {"n": 1}}})
    assert (tmp_path / "env.db").exists()
    with stateflow.connect(str(tmp_path / "arg.db"), session="s2") as sf:
        assert sf.memory(agent="a", cwd=str(tmp_path)).identity.session == "s2"


def test_connect_opens_the_store_with_the_configs_store_settings(tmp_path: Path) -> None:
    """``stateflow.connect(store, config)`` opened its store with the built-in waits, ignoring
    ``[store] wait_seconds`` (and PostgreSQL's timeouts) that the CLI and the server pass: a
    write under another process's lock waited 10 s, not the 1 s configured. Both connects, sync
    and async, now open it as every door does."""
    import asyncio
    import sqlite3
    import time
    from collections.abc import Callable, Iterator
    from contextlib import contextmanager

    from stateflow import aio
    from stateflow.config import Config
    from stateflow.errors import StoreBusy

    path = tmp_path / "busy.db"
    config = Config.from_env({"STATEFLOW_STORE_WAIT_SECONDS": "1"})
    assert config.store.wait_seconds == 1

    @contextmanager
    def locked_elsewhere() -> Iterator[Callable[[], float]]:
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process's write lock, held
        began = time.monotonic()
        try:
            yield lambda: time.monotonic() - began
        finally:
            other.execute("ROLLBACK")
            other.close()

    with stateflow.connect(path, config) as sf:
        memory = sf.memory(agent="a", cwd=str(tmp_path))
        memory.patch_state({"global": {"tactics": {"n": 1}}})
        with locked_elsewhere() as waited, pytest.raises(StoreBusy):
            memory.patch_state({"global": {"tactics": {"n": 2}}})
        assert 0.9 < waited() < 5

    async def through_async() -> None:
        asf = await aio.connect(path, config)
        try:
            memory = asf.memory(agent="a", cwd=str(tmp_path))
            with locked_elsewhere() as waited, pytest.raises(StoreBusy):
                await memory.patch_state({"global": {"tactics": {"n": 3}}})
            assert 0.9 < waited() < 5
            assert await memory.read_state({"path": "global.tactics.n"}) == {"value": 1}
        finally:
            await asf.close()

    asyncio.run(through_async())


def test_a_pathlib_path_opens_the_store_at_that_file(tmp_path: Path) -> None:
    """A ``Path`` is as good as a ``str`` at every opener a user calls: the file is created
    there and holds what was written (a ``Path`` used to fail with AttributeError)."""
    import asyncio

    from stateflow import aio
    from stateflow.langgraph import StateflowStore
    from stateflow.store import open_store

    opened = open_store(tmp_path / "opened.db")
    opened.close()
    assert (tmp_path / "opened.db").exists()
    with stateflow.connect(tmp_path / "sync.db") as sf:
        sf.memory(agent="a", cwd=str(tmp_path)).patch_state({"global": {"tactics": {"n": 1}}})
    with stateflow.connect(str(tmp_path / "sync.db")) as sf:
        read = sf.memory(agent="a", cwd=str(tmp_path)).read_state({"path": "global.tactics.n"})
        assert read["value"] == 1

    async def through_async() -> None:
        sf = await aio.connect(tmp_path / "async.db")
        await sf.close()

    asyncio.run(through_async())
    assert (tmp_path / "async.db").exists()
    with StateflowStore.open(tmp_path / "lg.db") as lg:
        lg.put(("users", "u1"), "prefs", {"theme": "dark"})
        item = lg.get(("users", "u1"), "prefs")
        assert item is not None and item.value == {"theme": "dark"}


def test_states_service_installs_the_builtins(store: SqlStore) -> None:
    service = states_service(store)
    assert service.get_declaration("memory")["name"] == "memory"
    assert states_service(store).get_declaration("memory")["version"] >= 1  # idempotent


def test_built_ins_arrive_once_when_a_store_is_migrated_after_the_service_was_made(backend: str) -> None:
    """A server may start before ``stateflow migrate``: the composition root installs the
    built-ins when the store is first found migrated — the HTTP app never does it per request."""
    from fastapi.testclient import TestClient

    from stateflow.errors import StoreNotMigrated
    from stateflow.http.app import create_app
    from stateflow.http.auth import TokenSet, parse_token
    from stateflow.store import open_store

    token = "admin-secret-0123456789"
    store = open_store(backend, auto_migrate=False)
    migrator = open_store(backend, auto_migrate=False)  # another process: `stateflow migrate`
    try:
        reported: list[StoreNotMigrated] = []
        service = states_service(store, unmigrated=reported.append)
        assert len(reported) == 1
        app = create_app(service, TokenSet([parse_token(token)]))
        with TestClient(app, headers={"Authorization": f"Bearer {token}"}) as http:
            refused = http.get("/api/states/memory")
            assert (refused.status_code, refused.json()["code"]) == (501, "states-not-configured")
            migrator.migrate()
            answer = http.get("/api/states/memory")
            assert answer.status_code == 200, answer.text
            assert answer.json()["data"]["version"] == 1  # declared once
            assert http.get("/api/states").json()["data"][0]["name"] == "memory"
    finally:
        store.close()
        migrator.close()


def test_a_store_declared_by_an_earlier_version_gets_its_aliases_rows_when_opened(
    backend: str, open_migrated: StoreFactory
) -> None:
    """A state declared by an earlier version — ``memory`` too — has no row for its aliases
    until its first fold, and a write that finds none can miss a fold that makes it (PostgreSQL:
    ``tests/test_postgres_lock_order.py``). The composition root makes the missing rows when it
    opens the store for writing: once, writing no transition; a store opened read-only is left
    as it is and still serves its states."""
    decl = {
        "schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
        "subject_kinds": ["thread"],
        "default_subject_kind": "thread",
    }
    subject = {"target_kind": "agent", "target_name": "a", "kind": "thread", "key": "k1"}
    first = open_migrated()
    states_service(first).declare("s", decl)
    states_service(first).replace("s", subject, {"n": 1})
    with first._write_tx() as tx:  # as an earlier version left them
        tx.run("DELETE FROM documents WHERE state = '_aliases' AND present = 0")
    seq = first.transitions(limit=1000)[-1].seq

    def alias_rows() -> list[str]:
        with first._read_tx() as tx:
            return [r[0] for r in tx.all("SELECT subject FROM documents WHERE state = '_aliases' ORDER BY 1")]

    assert first.missing_rows("_aliases", "_states") == ["memory", "s"]
    read_only = open_store(f"{backend}&mode=ro" if "?" in backend else f"sqlite:///{backend}?mode=ro")
    try:
        assert states_service(read_only).read("s", subject)["data"] == {"n": 1}  # type: ignore[index]
    finally:
        read_only.close()
    assert alias_rows() == []

    service = states_service(open_migrated())
    assert alias_rows() == ["memory", "s"]
    assert first.missing_rows("_aliases", "_states") == []
    assert first.transitions(after_seq=seq) == []  # rows made, nothing written
    states_service(open_migrated())  # (nothing left to make)
    assert first.transitions(after_seq=seq) == []
    service.fold("s", subject, {**subject, "key": "k2"}, "switch")
    service.merge("s", subject, {"n": 2})
    assert service.read("s", {**subject, "key": "k2"})["data"] == {"n": 2}  # type: ignore[index]


async def _through_aio(location: str) -> None:
    from stateflow import aio

    async with await aio.connect(location) as sf:
        assert (await sf.states.get_declaration("s"))["name"] == "s"


async def _through_constructor(location: str) -> None:
    # a store given to the constructor, as before ``AsyncStateflow.on``: its service is made
    # there, and the built-ins installed by its first call (a constructor cannot wait)
    from stateflow import aio

    async with aio.AsyncStateflow(await aio.open_store_async(location, auto_migrate=True)) as sf:
        assert (await sf.states.get_declaration("s"))["name"] == "s"


async def _through_aopen(adapter: str, location: str) -> None:
    from stateflow.langgraph import StateflowSaver, StateflowStore

    opened = await (StateflowStore if adapter == "store" else StateflowSaver).aopen(location)
    await opened.aclose()


def _through_open(adapter: str, location: str) -> None:
    from stateflow.langgraph import StateflowSaver, StateflowStore

    (StateflowStore if adapter == "store" else StateflowSaver).open(location).close()


@pytest.mark.parametrize(
    "opener",
    [
        "aio.connect",
        "AsyncStateflow(store)",
        "StateflowStore.open",
        "StateflowStore.aopen",
        "StateflowSaver.open",
        "StateflowSaver.aopen",
    ],
)
def test_every_opener_gives_the_aliases_rows_of_states_an_earlier_version_declared(
    backend: str, open_migrated: StoreFactory, opener: str
) -> None:
    """The async API and the LangGraph adapters' openers put their service together where the
    synchronous ones do (``states_service``): a store opened through any of them for writing
    gets the aliases rows an earlier version left out, before the opener's first write."""
    import asyncio

    first = open_migrated()
    states_service(first).declare(
        "s",
        {
            "schema": {"type": "object", "properties": {"n": {}}},
            "subject_kinds": ["thread"],
            "default_subject_kind": "thread",
        },
    )
    with first._write_tx() as tx:  # as an earlier version left them
        tx.run("DELETE FROM documents WHERE state = '_aliases' AND present = 0")
    assert first.missing_rows("_aliases", "_states") == ["memory", "s"]

    if opener == "aio.connect":
        asyncio.run(_through_aio(backend))
    elif opener == "AsyncStateflow(store)":
        asyncio.run(_through_constructor(backend))
    elif opener.endswith(".aopen"):
        asyncio.run(_through_aopen("store" if opener.startswith("StateflowStore") else "saver", backend))
    else:
        _through_open("store" if opener.startswith("StateflowStore") else "saver", backend)
    assert first.missing_rows("_aliases", "_states") == []
