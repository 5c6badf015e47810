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


@app.put("/floor/records/{key}")
def put_floor(key: str, request: Request, body: dict[str, object]) -> Response:
    if not authorized(request):
        return _json(401, {"error": "unauthorized"})
    if not VALIDATOR.is_valid(body):
        return _json(422, {"error": "does not match the schema"})
    conn = connection()
    conn.execute("BEGIN IMMEDIATE")
    try:
        seq = conn.execute(
            "INSERT INTO audit (at, origin) VALUES (?, ?) RETURNING seq", (time.time(), ORIGIN)
        ).fetchone()[0]
        revision = conn.execute(
            "INSERT INTO heads VALUES (?, 1, ?) ON CONFLICT (key) "
            "DO UPDATE SET revision = revision + 1, seq = excluded.seq RETURNING revision",
            (key, seq),
        ).fetchone()[0]
        conn.execute("INSERT INTO changes VALUES (?, ?, ?, ?)", (key, revision, seq, orjson.dumps(body)))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return _json(200, {"data": body, "revision": revision})
