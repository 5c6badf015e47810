"""Prices ``stateflow_commit``'s common fields as typed arrays in place of its ``json`` payload,
on the live server and in the client, before building it.

    python3 -m benchmarks.profile_pg_typed_payload [--cases WORD ...] [--kinds binary text lean] [--calls 120] [--port N]

**Server.** ``profile_pg_commit_instructions`` replays statements with their parameters as
literals, which charges a tree the parsing of text a client's binary bind does not send. Here,
for each case of ``profile_pg_writes``, a private cluster (same binaries, a temporary directory)
records the commit statements of ``--calls`` calls after a warm-up and a dump, restores the dump
into one database per run, and then runs under ``valgrind --tool=callgrind`` (the postmaster
and every backend it forks): each run's backend executes the recorded statements as the client
sends them (prepared once, then bound through libpq in the formats ``_commit_alone`` uses) —
once the first third of them and once all, in two databases restored alike; the difference per
call is printed, so start-up and the first calls' planning are not counted. The kinds (``--kinds``
chooses among the variants; ``json`` is always counted):

- ``json``: this tree's function and statements, as recorded;
- ``binary``: a variant of this tree's ``stateflow_commit`` (its text, each common field's
  subscript and cast replaced by a typed parameter's element: :func:`variant_sql`) taking a
  document's numbers as a two-dimensional ``bigint[]``, names as ``text[]``, outlines, roots and
  paths as ``bytea[]``, each key kind's texts and ids apart — in PostgreSQL's binary format; the
  rarely sent fields stay in the ``json`` (NULL when there are none);
- ``text``: the same function, its ``bigint[]`` and ``text[]`` parameters as array literals
  made by ``orjson`` (in C) and the ``bytea[]`` in binary;
- ``lean``: three arrays for a whole commit — every number (a head of counts and offsets
  first) and every text as one literal each, every nullable byte string as one binary
  ``bytea[]`` — taken by :func:`lean_sql`'s variant, each element found by its kind's offset.

Each run's rows are compared (a digest per table) with the ``json`` run's: the variants write
exactly what this tree writes, or the run fails.

**Client.** The same calls' payload fields (``_rows`` and the keys, as ``_payload`` receives
them) packed by each kind, counted by callgrind in a child Python (``--per`` loops, less a
sixth as many): ``json`` is ``_payload`` and its encoding; each variant its packing from flat
lists made beforehand (which a gathering pass over the plans would make in place of the
payload's tuples), with the regrouping its arrays need (``text``'s rows, ``lean``'s three lists
and head).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import pickle
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import orjson
import psycopg
from psycopg import generators, pq

from benchmarks.profile_pg_commit_instructions import _as_pg, _bin, _dump
from benchmarks.profile_pg_writes import SCHEMA, case_store, store_url

CASES = ("store put", "saver put", "saver put_writes", "states apply", "patch_state")
PORT = 55493
RARE = ("claim_keys", "node_rows", "del_rows", "gone", "ed_rows", "snap_rows")
"""The payload's fields most commits leave out: they stay in the ``json`` (schema 34's flag)."""

# -- the variant function -------------------------------------------------------------------

_COLUMNS: dict[str, dict[int, str]] = {
    "absent_keys": {1: "p_absent[{i}][1]", 2: "p_absent[{i}][2]"},
    "share_keys": {
        1: "p_share[{i}][1]",
        2: "p_share[{i}][2]",
        3: "p_share_ids[{i}][1]",
        4: "p_share_ids[{i}][2]",
    },
    "new_keys": {1: "p_new[{i}][1]", 2: "p_new[{i}][2]", 3: "p_new_ids[{i}]"},
    "lock_keys": {1: "p_lock[{i}][1]", 2: "p_lock[{i}][2]", 3: "p_lock_ids[{i}][1]", 4: "p_lock_ids[{i}][2]"},
    "upd_rows": {
        2: "p_upd_n[{i}][1]",
        3: "p_upd_n[{i}][2]",
        4: "p_upd_o[{i}]",
        5: "p_upd_r[{i}]",
        6: "p_upd_n[{i}][3]",
        7: "p_upd_t[{i}]",
    },
    "ins_rows": {
        1: "p_ins_n[{i}][1]",
        2: "p_ins_t[{i}]",
        3: "p_ins_n[{i}][2]",
        4: "p_ins_n[{i}][3]",
        5: "p_ins_n[{i}][4]",
        6: "p_ins_o[{i}]",
        8: "p_ins_r[{i}]",
    },
    "doc_rows": {
        1: "p_docs[{i}][1]",
        2: "p_docs[{i}][2]",
        3: "p_paths[{i}]",
        5: "p_docs[{i}][3]",
        6: "p_docs[{i}][4]",
        7: "p_docs[{i}][5]",
        8: "p_docs[{i}][6]",
        9: "p_docs[{i}][7]",
        10: "p_docs[{i}][8]",
        11: "p_docs[{i}][9]",
    },
}
"""Where each common field's column goes: (field, column) → the typed parameter's element."""
_WHOLE: dict[str, str] = {
    "absent_keys": "p_absent",
    "share_keys": "p_share",
    "new_keys": "p_new",
    "lock_keys": "p_lock",
    "upd_rows": "p_upd_t",
    "ins_rows": "p_ins_t",
    "doc_rows": "p_docs",
}
"""A common field named whole (its bounds, ``generate_subscripts``, ``IS NOT NULL``)."""
_TYPES: tuple[tuple[str, str], ...] = (
    ("p_docs", "BIGINT[]"),  # doc_id, revision, the row's revision, present (-1: unmoved), …
    ("p_paths", "BYTEA[]"),
    ("p_ins_n", "BIGINT[]"),  # doc_id, position, revision, size
    ("p_ins_t", "TEXT[]"),
    ("p_ins_o", "BYTEA[]"),
    ("p_ins_r", "BYTEA[]"),
    ("p_upd_n", "BIGINT[]"),  # revision, size, doc_id
    ("p_upd_t", "TEXT[]"),
    ("p_upd_o", "BYTEA[]"),
    ("p_upd_r", "BYTEA[]"),
    ("p_absent", "TEXT[]"),
    ("p_share", "TEXT[]"),
    ("p_share_ids", "BIGINT[]"),
    ("p_new", "TEXT[]"),
    ("p_new_ids", "BIGINT[]"),
    ("p_lock", "TEXT[]"),
    ("p_lock_ids", "BIGINT[]"),
)
_OLD_SIGNATURE = (
    "CREATE OR REPLACE FUNCTION stateflow_commit(\n"
    "    p JSON, p_at TEXT, p_origin BYTEA, p_seq_lock BIGINT, p_ins BYTEA[], p_upd BYTEA[], p_edits BYTEA[]\n"
    ")\n"
)


def _typed_commit(params: str, head: str, columns: dict[str, dict[int, str]]) -> str:
    """Schema 34's ``stateflow_commit`` under the same name taking ``params`` after its seven:
    ``head`` declared first, the JSON payload parsed only when it carries rare fields, and
    every common field's element ``w.<field>[i][k]`` read from ``columns`` instead."""
    from stateflow.store.migrations import _FEWER_SET_UPS, _NO_ROWS, WRITE_FUNCTIONS, _replaced

    f = _FEWER_SET_UPS[: _FEWER_SET_UPS.index("CREATE OR REPLACE FUNCTION stateflow_count_documents(")]
    f = _replaced(
        f,
        _OLD_SIGNATURE,
        f"DROP FUNCTION {WRITE_FUNCTIONS[0]};\n" + _OLD_SIGNATURE.replace("[]\n)", f"[],\n    {params}\n)"),
    )
    f = f.replace("CREATE OR REPLACE FUNCTION stateflow_commit(", "CREATE FUNCTION stateflow_commit(")
    f = _replaced(
        f, f"    w stateflow_rows := json_populate_record({_NO_ROWS}, p);\n", "    w stateflow_rows;\n" + head
    )
    f = _replaced(
        f,
        "    rare BOOLEAN := w.claim_keys IS NOT NULL OR w.node_rows IS NOT NULL OR w.del_rows IS NOT NULL\n"
        "        OR w.gone IS NOT NULL OR w.ed_rows IS NOT NULL OR w.snap_rows IS NOT NULL;\nBEGIN\n",
        f"    rare BOOLEAN := p IS NOT NULL;\nBEGIN\n    IF rare THEN\n        w := json_populate_record({_NO_ROWS}, p);\n    END IF;\n",
    )

    def element(m: re.Match[str]) -> str:
        out = columns[m[1]][int(m[3])].format(i=m[2])
        return out + ("::smallint" if m[4] == "smallint" else "")

    return re.sub(r"\bw\.(" + "|".join(columns) + r")\[(\w+)\]\[(\d+)\](?:::(\w+))?", element, f)


def _finished(f: str, kinds: str) -> str:
    """The variant's text once no common field is left in it, with the function's setting
    (its added parameters' ``kinds``)."""
    from stateflow.store.migrations import WRITE_FUNCTIONS

    left = set(re.findall(r"\bw\.(\w+)", f)) - set(RARE)
    if left:
        raise RuntimeError(f"common fields left in the variant: {sorted(left)}")
    arguments = WRITE_FUNCTIONS[0][:-1] + ", " + kinds + ")"
    return f + f"ALTER FUNCTION {arguments} SET enable_seqscan = off;\n"


def variant_sql() -> str:
    """This tree's ``stateflow_commit`` (schema 34's text) taking the common fields as typed
    parameters (``_TYPES``, after its seven), under the same name."""
    from stateflow.store.migrations import _replaced

    f = _typed_commit(", ".join(f"{name} {kind}" for name, kind in _TYPES), "", _COLUMNS)
    f = re.sub(r"\bw\.(" + "|".join(_WHOLE) + r")\b", lambda m: _WHOLE[m[1]], f)
    f = _replaced(f, "IF p_docs[i][9] = '1' THEN", "IF p_docs[i][9] = 1 THEN")
    f = _replaced(f, "IF p_docs[i][4] IS NULL THEN", "IF p_docs[i][4] < 0 THEN")
    return _finished(f, ", ".join(kind for _, kind in _TYPES))


VARIANT_STATEMENT = (
    "SELECT stateflow_commit($1::json, $2::text, $3::bytea, $4, $5::bytea[], $6::bytea[], $7::bytea[], "
    + ", ".join(f"${n}::{kind.lower()}" for n, (_, kind) in enumerate(_TYPES, 8))
    + ")"
)

# -- the client's packing -------------------------------------------------------------------

_LENGTH = struct.Struct("!i").pack
_NULL = _LENGTH(-1)
_INT8, _TEXT, _BYTEA = 20, 25, 17
_HEADS: dict[tuple[int, int, int], bytes] = {}
_BODIES: dict[int, Callable[..., bytes]] = {}
_BRACES = bytes.maketrans(b"[]", b"{}")


def _head(oid: int, n: int, cols: int) -> bytes:
    head = _HEADS.get((oid, n, cols))
    if head is None:
        head = _HEADS[(oid, n, cols)] = (
            struct.pack("!iiIii", 1, 0, oid, n, 1)
            if not cols
            else struct.pack("!iiIiiii", 2, 0, oid, n // cols, 1, cols, 1)
        )
    return head


def int8_binary(values: list[int], cols: int = 0) -> bytes:
    """A ``bigint[]`` in binary (row-major ``values``; ``cols`` 0: one dimension)."""
    n = len(values)
    body = _BODIES.get(n)
    if body is None:
        body = _BODIES[n] = struct.Struct("!" + "iq" * n).pack
    args = [8] * (2 * n)
    args[1::2] = values
    return _head(_INT8, n, cols) + body(*args)


def text_binary(values: list[str], cols: int = 0) -> bytes:
    encoded = list(map(str.encode, values))
    parts = [b""] * (2 * len(encoded))
    parts[::2] = map(_LENGTH, map(len, encoded))
    parts[1::2] = encoded
    return _head(_TEXT, len(encoded), cols) + b"".join(parts)


def bytea_binary(values: list[bytes | None]) -> bytes | None:
    """A one-dimensional ``bytea[]`` in binary; None where every element is NULL."""
    if values.count(None) == len(values):
        return None
    return struct.pack("!iiIii", 1, 1, _BYTEA, len(values), 1) + b"".join(
        [_NULL if v is None else _LENGTH(len(v)) + v for v in values]
    )


def ints_literal(rows: list[Any]) -> bytes:
    """A ``bigint[]`` literal (of rows: two dimensions) made by ``orjson``."""
    return orjson.dumps(rows).translate(_BRACES)


def texts_literal(values: list[Any]) -> bytes:
    """A ``text[]`` literal made by ``orjson`` (of rows: two dimensions). JSON's escapes of
    quotes and backslashes are the literal's; those of control characters are not (none in
    these cases' texts: a client would fall back for them)."""
    if values and type(values[0]) is list:
        return b"{" + b",".join([b"{" + orjson.dumps(r)[1:-1] + b"}" for r in values]) + b"}"
    return b"{" + orjson.dumps(values)[1:-1] + b"}"


_Arrays = list[tuple[str, list[Any], int]]
"""A commit's typed parameters before packing: (kind, values, columns) in ``_TYPES``' order."""


def arrays_of(fields: dict[str, Any]) -> _Arrays:
    """The flat lists a gathering pass over the plans would make (in place of the payload's
    tuples), from the payload's fields."""
    docs = fields["doc_rows"]
    out: _Arrays = [
        ("i", [x for d in docs for x in (d[0], d[1], *d[4:5], -1 if d[5] is None else d[5], *d[6:11])], 9),
        ("b", [d[2] for d in docs], 0),
    ]
    for name, ints, text, outline, root in (
        ("ins_rows", (0, 2, 3, 4), 1, 5, 7),
        ("upd_rows", (1, 2, 5), 6, 3, 4),
    ):
        rows = fields.get(name) or []
        out += [
            ("i", [r[c] for r in rows for c in ints], len(ints)),
            ("t", [r[text] for r in rows], 0),
            ("b", [r[outline] for r in rows], 0),
            ("b", [r[root] for r in rows], 0),
        ]
    out.append(("t", [x for k in fields.get("absent_keys") or [] for x in k], 2))
    for name, cols in (("share_keys", 2), ("new_keys", 0), ("lock_keys", 2)):
        keys = fields.get(name) or []
        out += [("t", [x for k in keys for x in k[:2]], 2), ("i", [x for k in keys for x in k[2:]], cols)]
    return out


def pack_binary(arrays: _Arrays) -> list[bytes | None]:
    out: list[bytes | None] = []
    for kind, values, cols in arrays:
        if not values:
            out.append(None)
        elif kind == "i":
            out.append(int8_binary(values, cols))
        elif kind == "t":
            out.append(text_binary(values, cols))
        else:
            out.append(bytea_binary(values))
    return out


def pack_text(arrays: _Arrays) -> list[bytes | None]:
    out: list[bytes | None] = []
    for kind, values, cols in arrays:
        if not values:
            out.append(None)
        elif kind == "b":
            out.append(bytea_binary(values))
        else:
            rows = [values[i : i + cols] for i in range(0, len(values), cols)] if cols else values
            out.append(ints_literal(rows) if kind == "i" else texts_literal(rows))
    return out


_LEAN_HEAD = 21
"""The numbers ``pack_lean`` puts first: the rows of each kind (documents, inserted members,
rewritten members, absent, shared, new and locked keys), then where each kind's numbers, texts
and byte strings start in their array (see :func:`lean_sql`)."""


def pack_lean(arrays: _Arrays) -> list[bytes | None]:
    """Three arrays: every number (a head of counts and offsets first) and every text as one
    literal each, every nullable byte string as one binary ``bytea[]``."""
    (_, docs, _), _, (_, _ins_n, _), (_, ins_t, _), _, _, (_, _upd_n, _), (_, upd_t, _), _, _ = arrays[:10]
    (_, absent, _), (_, share, _), (_, _share_ids, _), (_, new, _), (_, _new_ids, _), (_, lock, _) = arrays[
        10:16
    ]
    nd, ni, nu = len(docs) // 9, len(ins_t), len(upd_t)
    ns, nw = len(share) // 2, len(new) // 2
    o_ins = _LEAN_HEAD + 9 * nd
    o_upd = o_ins + 4 * ni
    o_share = o_upd + 3 * nu
    o_new = o_share + 2 * ns
    t_absent = ni + nu
    t_share = t_absent + len(absent)
    t_new = t_share + 2 * ns
    head = [nd, ni, nu, len(absent) // 2, ns, nw, len(lock) // 2, o_ins, o_upd, o_share, o_new, o_new + nw]
    head += [ni, t_absent, t_share, t_new, t_new + 2 * nw, nd, nd + ni, nd + 2 * ni, nd + 2 * ni + nu]
    ints = head + [x for kind, values, _ in arrays if kind == "i" for x in values]
    texts = [x for kind, values, _ in arrays if kind == "t" for x in values]
    blobs = [x for kind, values, _ in arrays if kind == "b" for x in values]
    return [
        b"{" + orjson.dumps(ints)[1:-1] + b"}",
        b"{" + orjson.dumps(texts)[1:-1] + b"}",
        bytea_binary(blobs),
    ]


_LEAN_NAMES = [
    "nd",
    "ni",
    "nu",
    "na",
    "ns",
    "nw",
    "nl",
    "o_ins",
    "o_upd",
    "o_share",
    "o_new",
    "o_lock",
    "t_upd",
    "t_absent",
    "t_share",
    "t_new",
    "t_lock",
    "b_ins_o",
    "b_ins_r",
    "b_upd_o",
    "b_upd_r",
]
_LEAN_COLUMNS: dict[str, dict[int, str]] = {
    "absent_keys": {1: "p_t[t_absent + 2 * {i} - 1]", 2: "p_t[t_absent + 2 * {i}]"},
    "share_keys": {
        1: "p_t[t_share + 2 * {i} - 1]",
        2: "p_t[t_share + 2 * {i}]",
        3: "p_n[o_share + 2 * {i} - 1]",
        4: "p_n[o_share + 2 * {i}]",
    },
    "new_keys": {1: "p_t[t_new + 2 * {i} - 1]", 2: "p_t[t_new + 2 * {i}]", 3: "p_n[o_new + {i}]"},
    "lock_keys": {
        1: "p_t[t_lock + 2 * {i} - 1]",
        2: "p_t[t_lock + 2 * {i}]",
        3: "p_n[o_lock + 2 * {i} - 1]",
        4: "p_n[o_lock + 2 * {i}]",
    },
    "upd_rows": {
        2: "p_n[o_upd + 3 * {i} - 2]",
        3: "p_n[o_upd + 3 * {i} - 1]",
        4: "p_b[b_upd_o + {i}]",
        5: "p_b[b_upd_r + {i}]",
        6: "p_n[o_upd + 3 * {i}]",
        7: "p_t[t_upd + {i}]",
    },
    "ins_rows": {
        1: "p_n[o_ins + 4 * {i} - 3]",
        2: "p_t[{i}]",
        3: "p_n[o_ins + 4 * {i} - 2]",
        4: "p_n[o_ins + 4 * {i} - 1]",
        5: "p_n[o_ins + 4 * {i}]",
        6: "p_b[b_ins_o + {i}]",
        8: "p_b[b_ins_r + {i}]",
    },
    "doc_rows": {
        1: "p_n[9 * {i} + 13]",
        2: "p_n[9 * {i} + 14]",
        3: "p_b[{i}]",
        5: "p_n[9 * {i} + 15]",
        6: "p_n[9 * {i} + 16]",
        7: "p_n[9 * {i} + 17]",
        8: "p_n[9 * {i} + 18]",
        9: "p_n[9 * {i} + 19]",
        10: "p_n[9 * {i} + 20]",
        11: "p_n[9 * {i} + 21]",
    },
}
"""``_COLUMNS`` for :func:`pack_lean`'s three arrays (a document's numbers start after the head:
its n-th row's first at ``9 * n + 13``)."""
_LEAN_COUNTS = {
    "absent_keys": "na",
    "share_keys": "ns",
    "new_keys": "nw",
    "lock_keys": "nl",
    "upd_rows": "nu",
    "ins_rows": "ni",
    "doc_rows": "nd",
}


def lean_sql() -> str:
    """:func:`variant_sql` for :func:`pack_lean`'s three arrays: each element found by its
    kind's offset (read once from the head into a variable), bounds by the head's counts."""
    from stateflow.store.migrations import _replaced

    head = "".join(f"    {name} INT := p_n[{k}];\n" for k, name in enumerate(_LEAN_NAMES, 1))
    f = _typed_commit("p_n BIGINT[], p_t TEXT[], p_b BYTEA[]", head, _LEAN_COLUMNS)
    for field, count in _LEAN_COUNTS.items():
        f = f.replace(f"coalesce(array_length(w.{field}, 1), 0)", count)
        f = f.replace(f"array_length(w.{field}, 1)", count)
        f = f.replace(f"generate_subscripts(w.{field}, 1)", f"generate_series(1, {count})")
        f = f.replace(f"w.{field} IS NOT NULL", f"{count} > 0")
    f = _replaced(f, "IF p_n[9 * i + 21] = '1' THEN", "IF p_n[9 * i + 21] = 1 THEN")
    f = _replaced(f, "IF p_n[9 * i + 16] IS NULL THEN", "IF p_n[9 * i + 16] < 0 THEN")
    return _finished(f, "BIGINT[], TEXT[], BYTEA[]")


LEAN_STATEMENT = (
    "SELECT stateflow_commit($1::json, $2::text, $3::bytea, $4, $5::bytea[], $6::bytea[], $7::bytea[], "
    "$8::bigint[], $9::text[], $10::bytea[])"
)


_TEXT_FORMATS = [0 if kind != "BYTEA[]" else 1 for _, kind in _TYPES]

# -- the server's count ---------------------------------------------------------------------


def _fields_of(payload: str) -> dict[str, Any]:
    """The payload's fields as ``_payload`` received them (its bytes decoded back)."""

    def raw(s: str | None) -> bytes | None:
        if s is None:
            return None
        if s.startswith("\\x"):
            return bytes.fromhex(s[2:])
        return s.replace("\\000", "\x00").replace("\\\\", "\\").encode()

    f: dict[str, Any] = orjson.loads(payload)
    for d in f["doc_rows"]:
        d[2] = raw(d[2])
    for r in f.get("ins_rows", []):
        r[5], r[7] = raw(r[5]), raw(r[7])
    for r in f.get("upd_rows", []):
        r[3], r[4] = raw(r[3]), raw(r[4])
    return f


def _variant(params: Sequence[Any], pack: Callable[[_Arrays], list[bytes | None]]) -> list[Any]:
    payload, at, origin, lock, *beside = params
    f = orjson.loads(payload)
    rare = {k: f[k] for k in RARE if k in f}
    return [
        orjson.dumps(rare) if rare else None,
        at,
        origin,
        lock,
        *beside,
        *pack(arrays_of(_fields_of(payload))),
    ]


def _wire(value: Any) -> bytes | None:
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, int):
        return str(value).encode()
    return bytes(value) if value is not None else None


def _send(conn: psycopg.Connection[Any], sql: str, formats: Sequence[int], calls: list[list[Any]]) -> None:
    """``calls`` through libpq as ``_commit_alone`` sends them: prepared once, then bound."""
    pgconn = conn.pgconn
    pgconn.send_prepare(b"commit", sql.encode(), None)
    results = conn.wait(generators.execute(pgconn))
    if results[-1].status != pq.ExecStatus.COMMAND_OK:
        raise RuntimeError(results[-1].get_error_message())
    for params in calls:
        pgconn.send_query_prepared(b"commit", [_wire(v) for v in params], list(formats))
        results = conn.wait(generators.execute(pgconn))
        if results[-1].status != pq.ExecStatus.TUPLES_OK or results[-1].get_value(0, 0) is None:
            raise RuntimeError(f"a replayed commit did not write: {results[-1].get_error_message()}")


_TABLES = ("documents", "members", "changes", "transitions", "state_counts", "change_edits", "snapshots")


def _digest(conn: psycopg.Connection[Any]) -> str:
    """Every row of the tables a commit writes, in a stable order, hashed."""
    h = hashlib.sha256()
    for table in _TABLES:
        for row in conn.execute(f"SELECT t::text FROM {table} t ORDER BY t::text"):
            h.update(row[0].encode())
    return h.hexdigest()


def _total(path: str) -> int:
    with open(path) as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise RuntimeError(f"no totals in {path}")


def server(
    cases: Sequence[str], only: Sequence[str], warm: int, calls: int, root: str, port: int
) -> dict[str, list[list[Any]]]:
    """Print each case's server instructions per commit statement by kind; return each case's
    recorded parameters (for the client's count)."""
    import stateflow.store.postgres as pg
    from stateflow.store import open_store

    bindir, data = _bin(), f"{root}/data"
    _as_pg([f"{bindir}/initdb", "-D", data, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8"])

    def ctl(*extra: str) -> None:
        opts = f"-h 127.0.0.1 -p {port} -k {root}"
        _as_pg(
            [
                f"{bindir}/pg_ctl",
                "-D",
                data,
                "-l",
                f"{root}/log",
                "-w",
                "-t",
                "600",
                *extra,
                "-o",
                opts,
                "start",
            ]
        )

    def stop() -> None:
        _as_pg([f"{bindir}/pg_ctl", "-D", data, "-w", "-t", "600", "-m", "fast", "stop"])

    base = f"postgresql://postgres@127.0.0.1:{port}"
    variants = {"binary": variant_sql(), "text": variant_sql(), "lean": lean_sql()}
    kinds: dict[str, tuple[str, Sequence[int], Callable[[Sequence[Any]], list[Any]] | None]] = {
        "json": (pg._COMMIT_RAW, pg._COMMIT_FORMATS, None),
        "binary": (
            VARIANT_STATEMENT,
            [*pg._COMMIT_FORMATS, *[1] * len(_TYPES)],
            lambda p: _variant(p, pack_binary),
        ),
        "text": (VARIANT_STATEMENT, [*pg._COMMIT_FORMATS, *_TEXT_FORMATS], lambda p: _variant(p, pack_text)),
        "lean": (LEAN_STATEMENT, [*pg._COMMIT_FORMATS, 0, 0, 1], lambda p: _variant(p, pack_lean)),
    }
    kinds = {k: v for k, v in kinds.items() if k == "json" or k in only}
    recorded: dict[str, list[list[Any]]] = {}
    runs: list[tuple[str, str, int, str]] = []
    ctl()
    try:
        with psycopg.connect(f"{base}/postgres", autocommit=True) as admin:
            for n, name in enumerate(cases):
                db = f"case{n}"
                admin.execute(f"CREATE DATABASE {db}")
                url = f"{base}/{db}"
                with psycopg.connect(url, autocommit=True) as conn:
                    conn.execute(f"CREATE SCHEMA {SCHEMA}")
                open_store(store_url(url), auto_migrate=True).close()
                rec: list[list[Any]] = []
                real = pg._commit_alone

                def recording(conn: Any, params: Any, rec: list[list[Any]] = rec, real: Any = real) -> Any:
                    rec.append(list(params))
                    return real(conn, params)

                with case_store(url, name) as call:
                    for i in range(warm):
                        call(i)
                    _dump(url, f"{root}/{db}.dump", port)
                    pg._commit_alone = recording
                    try:
                        for i in range(warm, warm + calls):
                            call(i)
                    finally:
                        pg._commit_alone = real
                if len(rec) != calls:
                    raise RuntimeError(f"{name}: {len(rec)} commits recorded for {calls} calls")
                recorded[name] = rec
                for kind in kinds:
                    for k in (calls // 3, calls):
                        copy = f"{db}_{kind}_{k}"
                        admin.execute(f"CREATE DATABASE {copy}")
                        _as_pg(
                            [
                                f"{bindir}/pg_restore",
                                "-h",
                                "127.0.0.1",
                                "-p",
                                str(port),
                                "-U",
                                "postgres",
                                "-d",
                                copy,
                                f"{root}/{db}.dump",
                            ]
                        )
                        with psycopg.connect(f"{base}/{copy}", autocommit=True) as conn:
                            conn.execute("ANALYZE")  # as autovacuum leaves a live store
                            if kind != "json":
                                conn.execute(f"SET search_path = {SCHEMA}")
                                conn.execute(variants[kind].encode())
                        runs.append((name, kind, k, copy))
    finally:
        stop()
    wrapper = f"{root}/postgres-under-callgrind"
    with open(wrapper, "w") as f:
        f.write(
            "#!/bin/sh\nexec valgrind --tool=callgrind --trace-children=yes "
            f'--callgrind-out-file={root}/cg/cg.%p {bindir}/postgres "$@"\n'
        )
    os.chmod(wrapper, 0o755)
    os.makedirs(f"{root}/cg")
    os.chmod(f"{root}/cg", 0o777)
    ctl("-p", wrapper)
    pids: dict[tuple[str, str, int], int] = {}
    digests: dict[tuple[str, str], str] = {}
    try:
        for name, kind, k, copy in runs:
            sql, formats, convert = kinds[kind]
            todo = [convert(p) if convert else p for p in recorded[name][:k]]
            with psycopg.connect(f"{base}/{copy}?options=-csearch_path%3D{SCHEMA}", autocommit=True) as conn:
                row = conn.execute("SELECT pg_backend_pid()").fetchone()
                assert row is not None
                pids[(name, kind, k)] = row[0]
                _send(conn, sql, formats, todo)
            if k == calls:
                with psycopg.connect(f"{base}/{copy}?options=-csearch_path%3D{SCHEMA}") as conn:
                    digests[(name, kind)] = _digest(conn)
        time.sleep(2)
    finally:
        stop()
    for name in cases:
        per = {}
        for kind in kinds:
            if digests[(name, kind)] != digests[(name, "json")]:
                raise RuntimeError(f"{name}: the {kind} variant wrote other rows than this tree")
            a, b = (_total(f"{root}/cg/cg.{pids[(name, kind, k)]}") for k in (calls // 3, calls))
            per[kind] = (b - a) / (calls - calls // 3)
        line = "  ".join(f"{k} {v:,.0f} ({v / per['json']:.3f}×)" for k, v in per.items())
        print(f"== {name}: server instructions per commit statement: {line}", flush=True)
    return recorded


# -- the client's count ---------------------------------------------------------------------

PACKERS: dict[str, Callable[[_Arrays], list[bytes | None]]] = {
    "binary": pack_binary,
    "text": pack_text,
    "lean": pack_lean,
}


def _client_loop(path: str, kind: str, n: int) -> None:
    """The child's loop: ``n`` packings of the recorded fields by ``kind``."""
    import stateflow.store.postgres as pg

    with open(path, "rb") as f:
        fields = pickle.load(f)
    if kind == "json":
        for _ in range(n):
            pg._payload(fields).encode()
        return
    arrays, pack = arrays_of(fields), PACKERS[kind]
    for _ in range(n):
        pack(arrays)


def client(recorded: dict[str, list[list[Any]]], only: Sequence[str], per: int, root: str) -> None:
    for name, calls in recorded.items():
        path = f"{root}/{name.replace(' ', '_')}.fields"
        with open(path, "wb") as f:
            pickle.dump(_fields_of(calls[-1][0]), f)
        counts = {}
        for kind in ("json", *only):
            totals = []
            for n in (per // 6, per):
                out = f"{root}/client.cg"
                subprocess.run(
                    [
                        "valgrind",
                        "--tool=callgrind",
                        f"--callgrind-out-file={out}",
                        sys.executable,
                        "-m",
                        "benchmarks.profile_pg_typed_payload",
                        "--child",
                        path,
                        kind,
                        str(n),
                    ],
                    check=True,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                totals.append(_total(out))
            counts[kind] = (totals[1] - totals[0]) / (per - per // 6)
        line = "  ".join(f"{k} {v:,.0f} ({v - counts['json']:+,.0f})" for k, v in counts.items())
        print(f"== {name}: client instructions per commit's parameters: {line}", flush=True)


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        _client_loop(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--cases", nargs="*", help="only the cases whose names contain one of these words")
    parser.add_argument("--warm", type=int, default=30)
    parser.add_argument("--calls", type=int, default=120)
    parser.add_argument("--port", type=int, default=PORT, help="the private cluster's port")
    parser.add_argument("--kinds", nargs="*", default=list(PACKERS), help="the variants to count beside json")
    parser.add_argument("--per", type=int, default=1200, help="the client's packings counted per kind")
    args = parser.parse_args()
    cases = [c for c in CASES if not args.cases or any(word in c for word in args.cases)]
    root = tempfile.mkdtemp(prefix="sf-pg-typed-")
    os.chmod(root, 0o777)
    try:
        recorded = server(cases, args.kinds, args.warm, args.calls, root, args.port)
        client(recorded, args.kinds, args.per, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
