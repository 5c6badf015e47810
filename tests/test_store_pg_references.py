"""PostgreSQL: what ``members``' and ``changes``' foreign keys guaranteed, kept without them.

Since the references step the commit function and the locked path write member and change rows
only for documents whose rows they hold locked, so the rows always point at a document, and a
statement trigger deletes a document's members and changes with it. A new document's kind is
told by string functions where its subject has no backslash, by the pattern otherwise: the same
answers as the pattern alone.
"""

from __future__ import annotations

import json
import random
import threading
from typing import Any

import psycopg

from stateflow.errors import WriteAborted
from stateflow.store import DocKey, Write, open_store

_PATTERN = '^\\["(?:[^"\\\\]|\\\\.)*","(?:[^"\\\\]|\\\\.)*","([^"\\\\]*)","(?:[^"\\\\]|\\\\.)*"\\]$'
"""The pattern the kind was told by before (version 13's ``stateflow_subject_kind``)."""


def _subjects() -> list[str]:
    """Encoded subjects, near-encoded ones and mangled ones, with quotes, backslashes, commas,
    brackets and non-ASCII letters."""
    rng = random.Random(7)
    alphabet = ['"', "\\", ",", "[", "]", "a", "k", "é", " ", "\n", "u"]

    def part() -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 4)))

    out = ['["a","b","k","d"]', '[","x","y","z"]', '[",","b","k","d"]', '["a","b","k",","]', '["]', '[""]']
    out += ["", '["","","",""]', '["a","b","k",",","]', '["a","b","\\\\","d"]', '["a\\"","b","k","d"]']
    for _ in range(4000):
        parts = [part() for _ in range(rng.choice([3, 4, 4, 5]))]
        roll = rng.random()
        if roll < 0.3:
            out.append(json.dumps(parts, ensure_ascii=rng.random() < 0.5, separators=(",", ":")))
        elif roll < 0.6:
            text = json.dumps(parts, ensure_ascii=False, separators=(",", ":"))
            i = rng.randrange(len(text) + 1)
            out.append(text[:i] + rng.choice([*alphabet, '","', ""]) + text[i + rng.randint(0, 2) :])
        else:
            out.append('["' + '","'.join(p.replace("\\", "") for p in parts) + '"]')
    return out


def test_a_subjects_kind_is_the_patterns(pg_schema_url: str) -> None:
    open_store(pg_schema_url, auto_migrate=True).close()
    subjects = _subjects()
    with psycopg.connect(pg_schema_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT s, stateflow_subject_kind(s), coalesce((regexp_match(s, %s))[1], '') "
            "FROM unnest(%s::text[]) AS s",
            (_PATTERN, subjects),
        ).fetchall()
    assert len(rows) == len(subjects)
    assert [r for r in rows if r[1] != r[2]] == []
    assert sum(1 for r in rows if r[1]) > 500  # many of them have a kind
    assert any("\\" in r[0] and r[1] for r in rows)  # some through the pattern


def _orphans(url: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(
            "SELECT 'members', doc_id FROM members m "
            "WHERE NOT EXISTS (SELECT 1 FROM documents d WHERE d.doc_id = m.doc_id) "
            "UNION ALL SELECT 'changes', doc_id FROM changes c "
            "WHERE NOT EXISTS (SELECT 1 FROM documents d WHERE d.doc_id = c.doc_id)"
        ).fetchall()


def test_writes_racing_purges_leave_no_rows_without_their_document(pg_schema_url: str) -> None:
    """Writers (new documents, optimistic and locked updates) while another store purges the
    state again and again: no member or change row is ever left pointing at no document."""
    writer = open_store(pg_schema_url, auto_migrate=True)
    purger = open_store(pg_schema_url, auto_migrate=True)
    stop = threading.Event()
    failures: list[BaseException] = []
    written: list[int] = []
    purged: list[int] = []

    def write(n: int) -> None:
        try:
            for i in range(60):
                key = DocKey("notes", f'["agent","x","k","n{(i + n) % 4}"]')

                def compute(
                    docs: dict[DocKey, Any], key: DocKey = key, i: int = i
                ) -> tuple[list[Write], None]:
                    return [Write.between(key, docs[key].body, {"i": i, "n": n})], None

                try:
                    writer.update([key], compute, optimistic=i % 2 == 0)
                    written.append(1)
                except WriteAborted:  # a purge and a write may deadlock: one of them ends, unwritten
                    pass
        except BaseException as exc:  # (reported below)
            failures.append(exc)

    def purge() -> None:
        try:
            while not stop.is_set():
                try:
                    purger.purge("notes")
                    purged.append(1)
                except WriteAborted:
                    pass
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(2)]
    purging = threading.Thread(target=purge)
    try:
        purging.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stop.set()
        purging.join()
        assert failures == []
        assert len(written) > 60 and purged
        assert _orphans(pg_schema_url) == []
    finally:
        stop.set()
        writer.close()
        purger.close()
