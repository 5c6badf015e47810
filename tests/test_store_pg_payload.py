"""PostgreSQL: a commit's rows travel as one ``json`` payload whose bytes the write functions read
back with ``::bytea`` — ASCII bytes in ``bytea``'s escape format (the text itself, half the
characters of hex for the server's JSON parser), other bytes in hex. Either way the server must
get the very bytes the client planned."""

from __future__ import annotations

import re
from typing import Any

import orjson
import psycopg

from stateflow.store import DocKey, Document, Write, open_store
from stateflow.store.plan import TREE_MIN, WritePlan
from stateflow.store.postgres import _COMMIT_FORMATS, _COMMIT_RAW, _bytea_array, _payload, _rows
from stateflow.store.rows import DocRow

from .pg_helpers import bytea_elements

_AWKWARD = [
    b"",
    b"plain",
    bytes(range(128)),  # every ASCII byte, NUL and control characters included
    b"\\",
    b"\\x41",  # what hex input starts with
    b"\\\\x41",
    b"\\000",  # what an escaped byte looks like
    b"\\123\\",
    b'{"s":"a\\"b\\\\c\\u0000"}',  # a JSON body with escapes, a NUL character among them
    b"\x00",
    b"\x00\x00\\",
    "\u00e9\U0001f600".encode(),  # not ASCII: hex
    b"\xff\x00\x5c",  # not UTF-8 either
    bytes(range(256)),
]


def test_bytes_in_a_payload_reach_the_write_functions_as_the_same_bytes(pg_schema_url: str) -> None:
    open_store(pg_schema_url, auto_migrate=True).close()
    # unpacked as stateflow_commit and stateflow_write_rows unpack it
    payload = _payload({"ins_rows": [(1, "m", 0, 1, 0, value, value, None) for value in _AWKWARD]})
    with psycopg.connect(pg_schema_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT w.ins_rows[i][6]::bytea, w.ins_rows[i][7]::bytea "
            "FROM json_populate_record(NULL::stateflow_rows, %s::json) AS w, "
            "generate_subscripts(w.ins_rows, 1) AS i ORDER BY i",
            (payload,),
        ).fetchall()
    assert [(bytes(a), bytes(b)) for a, b in rows] == [(v, v) for v in _AWKWARD]


def test_bytes_beside_a_payload_reach_the_server_as_the_same_bytes(pg_schema_url: str) -> None:
    """Schema 29: the bodies and edits a commit writes travel as binary ``bytea[]`` parameters,
    read by the server's ``array_recv`` as the very bytes (NULL elements kept; no elements: NULL)."""
    values: list[bytes | None] = [*_AWKWARD, None, b"last"]
    sent = _bytea_array(values)
    assert (
        bytea_elements(sent) == values
        and bytea_elements(_bytea_array([None])) == [None]
        and _bytea_array([]) is None
    )
    with psycopg.connect(pg_schema_url, autocommit=True) as conn:
        (got,) = conn.execute("SELECT %s::bytea[]", (sent,)).fetchone() or (None,)
        raw = psycopg.RawCursor(conn).execute("SELECT $1::bytea[]", [sent]).fetchone()
    assert got == values and raw == (values,)


def test_the_one_statement_commit_sends_each_parameter_in_the_format_its_place_takes() -> None:
    # _commit_alone sends its parameters by place, not by type: binary exactly where the
    # statement reads a bytea (the origin and the three arrays), text elsewhere
    types = re.findall(r"\$(\d+)::(\w+(?:\[\])?)", _COMMIT_RAW)
    assert [int(n) for n, _ in types] == list(range(1, len(_COMMIT_FORMATS) + 1))
    assert [1 if t.startswith("bytea") else 0 for _, t in types] == list(_COMMIT_FORMATS)


def test_an_ascii_body_travels_as_its_own_text_not_as_hex() -> None:
    body = b'{"text":"' + b"x" * 1000 + b'","n":[1,2,3]}'
    payload = _payload({"ins_rows": [(1, "m", 0, 1, len(body), None, body, None)]})
    assert orjson.loads(payload)["ins_rows"][0][6] == body.decode()
    assert len(payload) < len(body) + 100  # in hex, twice as long


def _set(key: DocKey, body: Any) -> Any:
    def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
        return [Write.between(key, docs[key].value, body, docs[key].revision)], None

    return compute


def test_awkward_bodies_are_stored_exactly_by_either_write_path(pg_schema_url: str) -> None:
    texts = [v.decode("utf-8", "replace") for v in _AWKWARD]
    big = "\\x" + "b\\" * (TREE_MIN // 2)  # held as a tree: node ids are binary (hex)
    bodies: list[dict[str, Any]] = [
        {"a": texts, "\\x41": "\\000", "n": 1},
        {"a": texts[::-1], "nested": {"\\": ["\u0000", "\\u0000", "\U0001f600"]}, "big": big},
        {"\\x41": "moved \\ on", "big": big + "\\"},
    ]
    keys = {path: DocKey("s", f"payload {path}") for path in ("one", "locked")}
    with open_store(pg_schema_url, auto_migrate=True) as store:
        for path, key in keys.items():
            for body in bodies:
                store.update([key], _set(key, body), optimistic=path == "one")
    with open_store(pg_schema_url) as fresh:  # nothing served from a cache
        for key in keys.values():
            assert fresh.get(key).body == bodies[-1]
            for revision, body in enumerate(bodies, 1):
                assert fresh.read_at(key, revision=revision).body == body, (key, revision)


def _new_document_plan(members: dict[str, bytes], inline: bytes | None = None) -> WritePlan:
    """A new document's plan as ``write_whole`` makes it: every member inserted, its change the
    whole body set (inline)."""
    plan = WritePlan(7, 1, True)
    plan.inserts = [
        (7, name, i, 1, len(body), None, body, None) for i, (name, body) in enumerate(members.items())
    ]
    parts = [orjson.dumps(name) + b":" + body for name, body in members.items()]
    plan.inline = b'[["",[[[],{' + b",".join(parts) + b"}]]]]" if inline is None else inline
    plan.document = DocRow(7, 1, True, None, 0, 0, 0, 1)
    return plan


def test_a_new_documents_body_travels_once_where_the_server_builds_its_change() -> None:
    """Schema 27: a document written whole where it had no body sends its body in its member
    rows only, its change marked to be built from them (column 11); where the server's build
    would not give the very bytes (a name ``to_json`` escapes, a member held as a tree, edits
    that are not the whole body), the edits travel as they are, unmarked."""
    body = b'{"k":"a \\"quoted\\" value \\u0000 \xc3\xbc"}'
    sent, (ins, upd, edits) = _rows([_new_document_plan({"saved": body, "\u00fcber": b"1"})])
    (row,) = sent["doc_rows"]
    assert row[3] is None and row[10] == 1
    # once: the member row's, beside the payload (schema 29), not in it
    assert bytea_elements(ins) == [body, b"1"] and upd is None and edits is None
    assert body.hex() not in _payload(sent) and [r[6] for r in sent["ins_rows"]] == [None, None]
    for plan in (
        _new_document_plan({'a"b': body}),
        _new_document_plan({"a\nb": body}),
        _new_document_plan({"saved": body}, inline=b'[["saved",[[["k"],"v"]]]]'),
    ):
        sent, (_, _, edits) = _rows([plan])
        (row,) = sent["doc_rows"]
        assert row[3] is None and bytea_elements(edits) == [plan.inline] and row[10] == 0
    # a name whose raw bytes happen to spell the inline edits: equal bytes here, but ``to_json``
    # on the server would escape its quotes (or control character) and store other bytes
    for name, inline in (
        ('a":1,"b', b'[["",[[[],{"a":1,"b":2}]]]]'),
        ("a\x01", b'[["",[[[],{"a\x01":2}]]]]'),
    ):
        sent, (_, _, edits) = _rows([_new_document_plan({name: b"2"}, inline=inline)])
        (row,) = sent["doc_rows"]
        assert bytea_elements(edits) == [inline] and row[10] == 0, name
    held = _new_document_plan({"saved": body})
    held.inserts = [(*held.inserts[0][:7], b"\x01" * 16)]  # its body a tree's root
    sent, (_, _, edits) = _rows([held])
    (row,) = sent["doc_rows"]
    assert bytea_elements(edits) == [held.inline] and row[10] == 0
