"""The HTTP app and its MCP endpoint over a store opened with the async API: on PostgreSQL's
async pool their store calls run on the event loop (no worker thread), while calls that wait on
jq keep a thread; on SQLite every call runs on a worker thread. The app as ``stateflow serve``
builds it, served by uvicorn on loopback, called by real HTTP and MCP clients."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
import uvicorn
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from stateflow.aio import open_store_async, runs_on_loop
from stateflow.config import Config
from stateflow.http.server import build_app, service_for
from stateflow.store.async_bridge import spawn

from . import servers

TOKEN = "async-edge-token-0123456789"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
STATE = {
    "schema": {"type": "object", "properties": {"n": {"type": "integer"}, "items": {"type": "array"}}},
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}
TEMPLATE = {
    "description": "counts items",
    "schema": {"type": "object", "properties": {"items": {"type": "array"}}},
    "template_jq": {"size": {"purpose": "input", "jq": {"content": "[.items[]?] | length"}}},
}
CALLERS = 12


def record(i: int) -> str:
    return f"/api/states/tickets/records/agent/bot/thread/t{i}"


WORKER_THREADS = ("AnyIO worker thread", "stateflow-offload")
"""anyio's (Starlette's thread pool, the MCP SDK's) and the edges' own (stateflow.offload)"""


def worker_threads() -> set[int]:
    """The worker threads alive in this process."""
    return {t.ident or 0 for t in threading.enumerate() if t.name in WORKER_THREADS}


@asynccontextmanager
async def served(backend: str) -> AsyncIterator[tuple[str, Any]]:
    """The app as ``stateflow serve`` builds it, on a store opened on this loop, under uvicorn."""
    store = await open_store_async(backend, auto_migrate=True)
    service = (
        await spawn(service_for, store, Config()) if runs_on_loop(store) else service_for(store, Config())
    )
    port = servers.free_port()
    server = uvicorn.Server(
        uvicorn.Config(build_app(service, Config(), [TOKEN]), host="127.0.0.1", port=port, log_level="error")
    )
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            assert not task.done(), "the server stopped"
            await asyncio.sleep(0.02)
        yield f"http://127.0.0.1:{port}", store
    finally:
        server.should_exit = True
        await task
        service.close()
        await (spawn(store.close) if runs_on_loop(store) else asyncio.to_thread(store.close))


@asynccontextmanager
async def mcp_client(url: str, session: str) -> AsyncIterator[ClientSession]:
    headers = {**HEADERS, "X-Stateflow-Agent": "bot", "X-Stateflow-Session": session}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        streamable_http_client(url + "/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        yield client


async def concurrently(n: int, call: Callable[[int], Awaitable[Any]]) -> list[Any]:
    return list(await asyncio.gather(*(call(i) for i in range(n))))


def test_record_routes_and_mcp_tools_run_on_the_loop_over_async_postgres(backend: str) -> None:
    async def main() -> tuple[bool, set[int], set[int]]:
        async with served(backend) as (url, store), httpx.AsyncClient(base_url=url, headers=HEADERS) as api:
            # the MCP SDK loads on a worker thread at start; wait for it, then count
            async with mcp_client(url, "warm") as client:
                assert not (await client.call_tool("read_state", {"path": "effective"})).is_error
            before = worker_threads()
            assert (await api.put("/api/states/tickets", json=STATE)).status_code == 200

            async def write_and_read(i: int) -> None:
                put = await api.put(record(i), json={"n": i})
                assert put.status_code == 200, put.text
                patched = await api.patch(
                    record(i), json={"items": [i]}, headers={"If-Match": put.headers["ETag"]}
                )
                assert patched.status_code == 200, patched.text
                applied = await api.post(
                    record(i) + "/deltas", json={"ops": [{"op": "set", "path": ["n"], "value": -i - 1}]}
                )
                assert applied.json()["data"]["applied"] is True
                got = (await api.get(record(i))).json()["data"]
                assert got["data"] == {"n": -i - 1, "items": [i]} and got["revision"] == 3
                found = await api.post("/api/states/tickets/records/search", json={"filters": {"n": -i - 1}})
                assert [r["subject"]["key"] for r in found.json()["data"]["matches"]] == [f"t{i}"]

            async def patch_memory(i: int) -> None:
                async with mcp_client(url, f"s{i}") as client:
                    patched = await client.call_tool("patch_state", {"session": {"tactics": {"step": i}}})
                    assert not patched.is_error, patched.content
                    read = await client.call_tool("read_state", {"path": "session.tactics.step"})
                    assert read.structured_content == {"value": i}

            await concurrently(CALLERS, write_and_read)
            await concurrently(CALLERS // 2, patch_memory)
            after_records = worker_threads()
            # jq waits on its workers: these routes keep a thread, and reach the store from it
            assert (await api.put("/api/state-templates/box", json=TEMPLATE)).status_code == 200
            attach = await api.put("/api/states/tickets/attachments/box", json={"path": ["box"]})
            assert attach.status_code == 200, attach.text
            await api.patch(record(0), json={"box": {"items": [1, 2, 3]}})
            size = await api.get(record(0) + "/template-jq/size")
            assert size.json()["data"]["value"] == 3, size.text
            ready = (await api.get("/api/ready")).json()
            assert ready["data"]["ready"] is True
            return runs_on_loop(store), before, after_records

    on_loop, before, after = asyncio.run(main())
    assert on_loop == backend.startswith("postgresql://")
    if on_loop:
        assert after == before, "a record route or an MCP tool took a worker thread"
    else:  # (the edges' pool outlives a test: its threads may predate this one)
        assert after - before or any(t.name == "stateflow-offload" for t in threading.enumerate()), (
            "on SQLite the store calls run on worker threads"
        )
