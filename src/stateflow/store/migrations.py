"""Versioned schema migrations, one list per backend, same logical schema.

Tables:

- ``stateflow_meta``: ``schema_version`` and other store facts.
- ``documents``: one row per ``(state, subject)``: revision, presence, bookkeeping for snapshots.
- ``members``: the current body, one row per top-level member, so a reader loads only the
  members it needs and a small change never rewrites a large sibling. ``revision`` is the
  document revision that last wrote the member (the cache key); ``outline`` holds an object
  member's immediate keys and kinds, so navigation never reads the body.
- ``transitions``: one row per accepted write (store-wide ``seq``, time, origin).
- ``changes``: what a transition did to one document (touched paths); its net edits live in
  ``change_edits``, one row per top-level member ('' for whole-document edits), so history and
  as-of reads decode only the members they need (never a lazy body to show a hot change).
- ``snapshots``: full bodies every so often, so "as of revision r" replays a bounded chain.
- ``applied_ops``: the idempotency ledger (``op_id`` per scope).
"""

from __future__ import annotations

from typing import Final

SCHEMA_VERSION: Final = 1

_COMMON_V1: Final = """
CREATE TABLE stateflow_meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE documents (
    doc_id {doc_pk},
    state {text_c} NOT NULL,
    subject {text_c} NOT NULL,
    revision BIGINT NOT NULL DEFAULT 0,
    present SMALLINT NOT NULL DEFAULT 0,
    updated_seq BIGINT,
    snapshot_revision BIGINT NOT NULL DEFAULT 0,
    bytes_since_snapshot BIGINT NOT NULL DEFAULT 0,
    body_size BIGINT NOT NULL DEFAULT 0,
    next_position BIGINT NOT NULL DEFAULT 0,
    UNIQUE (state, subject)
);
CREATE TABLE members (
    doc_id BIGINT NOT NULL REFERENCES documents (doc_id) ON DELETE CASCADE,
    name {text_c} NOT NULL,
    position BIGINT NOT NULL,
    revision BIGINT NOT NULL,
    size BIGINT NOT NULL,
    outline {blob},
    body {blob} NOT NULL,
    PRIMARY KEY (doc_id, name)
);
CREATE TABLE transitions (
    seq {seq_pk},
    at TEXT NOT NULL,
    origin {blob} NOT NULL
);
CREATE TABLE changes (
    doc_id BIGINT NOT NULL REFERENCES documents (doc_id) ON DELETE CASCADE,
    revision BIGINT NOT NULL,
    seq BIGINT NOT NULL REFERENCES transitions (seq),
    paths {blob} NOT NULL,
    PRIMARY KEY (doc_id, revision)
);
CREATE INDEX changes_by_seq ON changes (seq);
CREATE TABLE change_edits (
    doc_id BIGINT NOT NULL,
    revision BIGINT NOT NULL,
    member TEXT NOT NULL,
    edits {blob} NOT NULL,
    PRIMARY KEY (doc_id, revision, member),
    FOREIGN KEY (doc_id, revision) REFERENCES changes (doc_id, revision) ON DELETE CASCADE
);
CREATE TABLE snapshots (
    doc_id BIGINT NOT NULL REFERENCES documents (doc_id) ON DELETE CASCADE,
    revision BIGINT NOT NULL,
    body {blob} NOT NULL,
    PRIMARY KEY (doc_id, revision)
);
CREATE TABLE applied_ops (
    scope TEXT NOT NULL,
    op_id TEXT NOT NULL,
    applied_at TEXT NOT NULL,
    seq BIGINT,
    PRIMARY KEY (scope, op_id)
);
CREATE INDEX applied_ops_by_time ON applied_ops (applied_at);
"""

SQLITE: Final[dict[int, str]] = {
    1: _COMMON_V1.format(
        doc_pk="INTEGER PRIMARY KEY AUTOINCREMENT",  # ids are never reused: they key the member cache
        seq_pk="INTEGER PRIMARY KEY AUTOINCREMENT",
        blob="BLOB",
        text_c="TEXT",  # SQLite compares text bytewise already
    )
    + "CREATE INDEX documents_by_state ON documents (state, present, subject);",
}

INDEXABLE: Final = "m.size <= 1048576 AND position('\\x5c7530303030'::bytea IN m.body) = 0"
"""Members in PostgreSQL's containment index: up to 1 MiB and without an escaped NUL (which
jsonb cannot hold). Search checks the others in Python, so it means the same on both backends."""

POSTGRES: Final[dict[int, str]] = {
    1: _COMMON_V1.format(
        doc_pk="BIGSERIAL PRIMARY KEY",
        seq_pk="BIGSERIAL PRIMARY KEY",
        blob="BYTEA",
        text_c='TEXT COLLATE "C"',  # bytewise order, the same keyset order as SQLite
    )
    + """
CREATE INDEX documents_by_state ON documents (state, present, subject);
CREATE FUNCTION stateflow_jsonb(body BYTEA) RETURNS JSONB
    LANGUAGE SQL IMMUTABLE PARALLEL SAFE
    RETURN convert_from(body, 'UTF8')::jsonb;
CREATE INDEX members_json ON members USING GIN (stateflow_jsonb(body) jsonb_path_ops)
    WHERE size <= 1048576 AND position('\\x5c7530303030'::bytea IN body) = 0;
""",
}


def statements(script: str) -> list[str]:
    """Split a migration script into statements (our scripts hold no ';' inside literals)."""
    return [s.strip() for s in script.split(";") if s.strip()]
