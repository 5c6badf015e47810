"""The baseline of bench_http.py: a minimal FastAPI app doing the same SQLite write by hand.

``PUT /records/{key}`` upserts the JSON body into one table and ``GET /records/{key}`` reads it
back, each answering ``{"data": …}`` after a bearer-token check — what a hand-written service
does, without versions, history, schemas or audit. SQLite in WAL mode at ``synchronous=FULL``
(every acknowledged write is fsynced), one connection per worker thread. Run by the benchmark
as ``uvicorn benchmarks.http_baseline:app`` with ``BENCH_HTTP_DB`` and ``BENCH_HTTP_TOKEN`` set.

``PUT /floor/records/{key}`` is the floor for our contract: the least durable, versioned and
audited write of a record, by hand — the body checked against the state's JSON Schema, then in
one transaction an audit row (when, by what door), the head's revision moved on (``RETURNING``
it), and a change row holding the revision's body; answered ``{"data": …, "revision": N}``.

``PUT /fair/records/{key}`` is the same write with the writers served in arrival order and
committed in groups by hand — the least fair server: the writer that finds no commit on its way
leads, committing in one transaction (one flush) every write queued when it begins; the writers
that arrive meanwhile queue, and the first of them leads the next group once that commit is
done, while the rest are answered by it (the leader/follower pattern). Each write keeps its own
audit row and revision, as on the floor.
"""

from __future__ import annotations

import hmac
import os
import sqlite3
import threading
import time
from typing import Any, cast

import jsonschema_rs
import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response

from benchmarks.bench_http import DECLARATION

DB = os.environ.get("BENCH_HTTP_DB", "baseline.db")
TOKEN = f"Bearer {os.environ.get('BENCH_HTTP_TOKEN', '')}"
_local = threading.local()

app = FastAPI()


def connection() -> sqlite3.Connection:
    conn: sqlite3.Connection | None = getattr(_local, "conn", None)
    if conn is None:
        conn = sqlite3.connect(DB, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA busy_timeout = 10000")
        conn.execute("CREATE TABLE IF NOT EXISTS records (key TEXT PRIMARY KEY, body BLOB NOT NULL)")
        conn.executescript(FLOOR_TABLES)
        _local.conn = conn
    return conn


FLOOR_TABLES = """
CREATE TABLE IF NOT EXISTS audit (seq INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, origin BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS heads (key TEXT PRIMARY KEY, revision INTEGER NOT NULL, seq INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS changes (key TEXT NOT NULL, revision INTEGER NOT NULL, seq INTEGER NOT NULL,
    body BLOB NOT NULL, PRIMARY KEY (key, revision)) WITHOUT ROWID;
"""
VALIDATOR = jsonschema_rs.validator_for(cast(dict[str, Any], DECLARATION["schema"]))
ORIGIN = orjson.dumps({"action": "replace", "door": "http"})


def authorized(request: Request) -> bool:
    return hmac.compare_digest(request.headers.get("authorization", ""), TOKEN)


def _json(status: int, payload: object) -> Response:
    return Response(orjson.dumps(payload), status_code=status, media_type="application/json")


@app.put("/records/{key}")
def put_record(key: str, request: Request, body: dict[str, object]) -> Response:
    if not authorized(request):
        return _json(401, {"error": "unauthorized"})
    connection().execute(
        "INSERT INTO records VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET body = excluded.body",
        (key, orjson.dumps(body)),
    )
    return _json(200, {"data": body})


@app.get("/records/{key}")
def get_record(key: str, request: Request) -> Response:
    if not authorized(request):
        return _json(401, {"error": "unauthorized"})
    row = connection().execute("SELECT body FROM records WHERE key = ?", (key,)).fetchone()
    if row is None:
        return _json(404, {"error": "not found"})
    return _json(200, {"data": orjson.loads(row[0])})


def floor_rows(conn: sqlite3.Connection, key: str, body: bytes) -> int:
    """The floor's write inside a transaction: an audit row, the record's head revision one up,
    its change row. Returns the revision."""
    seq = conn.execute(
        "INSERT INTO audit (at, origin) VALUES (?, ?) RETURNING seq", (time.time(), ORIGIN)
    ).fetchone()[0]
    revision: int = conn.execute(
        "INSERT INTO heads VALUES (?, 1, ?) ON CONFLICT (key) "
        "DO UPDATE SET revision = revision + 1, seq = excluded.seq RETURNING revision",
        (key, seq),
    ).fetchone()[0]
    conn.execute("INSERT INTO changes VALUES (?, ?, ?, ?)", (key, revision, seq, body))
    return revision


class _Fair:
    """One write queued for the fair route: its key and body, then its revision or error."""

    __slots__ = ("body", "done", "error", "key", "lead", "revision")

    def __init__(self, key: str, body: bytes) -> None:
        self.key, self.body = key, body
        self.revision = 0
        self.error: BaseException | None = None
        self.lead = False
        self.done = threading.Lock()  # held until answered or made the next leader
        self.done.acquire()


_fair_lock = threading.Lock()
_fair_queue: list[_Fair] = []
_fair_leading = False


def _fair_commit(group: list[_Fair]) -> None:
    """Every write of ``group`` in one transaction: one flush."""
    conn = connection()
    conn.execute("BEGIN IMMEDIATE")
    try:
        for write in group:
            write.revision = floor_rows(conn, write.key, write.body)
        conn.execute("COMMIT")
    except BaseException as exc:
        conn.execute("ROLLBACK")
        for write in group:
            write.error = exc


def fair_write(key: str, body: bytes) -> int:
    """Queue the write; lead a group if no commit is on its way (or when handed the lead), else
    wait for the answer. Returns the write's revision."""
    global _fair_leading
    me = _Fair(key, body)
    with _fair_lock:
        _fair_queue.append(me)
        lead = not _fair_leading
        _fair_leading = True
    if not lead:
        me.done.acquire()
    if lead or me.lead:
        with _fair_lock:
            group = _fair_queue[:]
            _fair_queue.clear()
        _fair_commit(group)
        with _fair_lock:  # the lead goes to the first writer queued during the commit
            following = _fair_queue[0] if _fair_queue else None
            if following is None:
                _fair_leading = False
            else:
                following.lead = True
        if following is not None:
            following.done.release()
        for write in group[1:]:  # (the first is this writer)
            write.done.release()
    if me.error is not None:
        raise me.error
    return me.revision


@app.put("/fair/records/{key}")
def put_fair(key: str, request: Request, body: dict[str, object]) -> Response:
    if not authorized(request):
        return _json(401, {"error": "unauthorized"})
    if not VALIDATOR.is_valid(body):
        return _json(422, {"error": "does not match the schema"})
    return _json(200, {"data": body, "revision": fair_write(key, orjson.dumps(body))})


@app.put("/floor/records/{key}")
def put_floor(key: str, request: Request, body: dict[str, object]) -> Response:
    if not authorized(request):
        return _json(401, {"error": "unauthorized"})
    if not VALIDATOR.is_valid(body):
        return _json(422, {"error": "does not match the schema"})
    conn = connection()
    conn.execute("BEGIN IMMEDIATE")
    try:
        revision = floor_rows(conn, key, orjson.dumps(body))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return _json(200, {"data": body, "revision": revision})
