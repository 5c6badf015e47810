"""The maintained counters (``state_counts``) and the deltas writers append (``count_deltas``).

A counter is its ``state_counts`` row plus the sum of its unfolded deltas; readers sum both in
one statement (one snapshot: a fold deletes its deltas and adds them to the rows in one
transaction, so a reader sees either, never both nor neither). On PostgreSQL (schema 36) every
writer appends the deltas of what it writes in its own transaction — a fast statement from the
client's values (``pg_fast``), the write functions and the delete triggers from their rows —
and a fold moves them into ``state_counts`` after every ``FOLD_EVERY``-th seq (``FOLD``). SQLite's triggers still
update ``state_counts`` in place: its ``count_deltas`` stays empty, read by the same statements.
"""

from __future__ import annotations

import re
from typing import Final

COUNTERS: Final = (
    "SELECT counter, name, CAST(sum(n) AS BIGINT) FROM (SELECT counter, name, n FROM state_counts WHERE state = ? "
    "UNION ALL SELECT counter, name, delta FROM count_deltas WHERE state = ?) u "
    "GROUP BY counter, name HAVING sum(n) <> 0"
)
"""One state's counters, members' and kinds' together (``?``: the state, twice; a state's stats
read both: one statement, not two), none at zero (the sum cast: PostgreSQL's ``sum`` of
``bigint`` is a ``numeric``, a ``Decimal`` to the client)."""

ALL_COUNTERS: Final = (
    "SELECT state, counter, name, CAST(sum(n) AS BIGINT) FROM (SELECT state, counter, name, n FROM state_counts "
    "UNION ALL SELECT state, counter, name, delta FROM count_deltas) u "
    "GROUP BY state, counter, name HAVING sum(n) <> 0"
)
"""Every counter, none at zero."""

FOLD_EVERY: Final = 250
"""A PostgreSQL commit whose seq is a multiple of this folds, after it commits: one commit in
every so many, whichever process and path wrote it (a read scans every unfolded delta, a
commit appends a few; a fold costs ~1.5 µs a delta and ~1 ms once)."""

FOLD: Final = (
    "WITH l AS MATERIALIZED (SELECT pg_try_advisory_xact_lock({key}) AS held), "
    "d AS (DELETE FROM count_deltas WHERE (SELECT held FROM l) RETURNING state, counter, name, delta) "
    "INSERT INTO state_counts (state, counter, name, n) "
    "SELECT state, counter, name, sum(delta) FROM d GROUP BY state, counter, name "
    # (rows upserted in key order, as any other folder would take them)
    "ORDER BY state, counter, name "
    "ON CONFLICT (state, counter, name) DO UPDATE SET n = state_counts.n + excluded.n"
)
"""PostgreSQL: the deltas summed into ``state_counts`` and deleted, in one statement, where its
transaction takes the fold's advisory lock (``{key}``): a second folder skips instead of
queueing on the rows."""

_ESCAPED: Final = re.compile(r'\["(?:[^"\\]|\\.)*","(?:[^"\\]|\\.)*","([^"\\]*)","(?:[^"\\]|\\.)*"\]', re.S)


def subject_kind(subject: str) -> str:
    """``stateflow_subject_kind`` (PostgreSQL) in Python: the third of an encoded subject's four
    JSON strings where it needs no escape, else '' — the same answer for every text (pinned
    against the server's by a test), so a fast statement sends its documents' kinds."""
    if "\\" in subject:
        found = _ESCAPED.fullmatch(subject)
        return found.group(1) if found else ""
    # (no backslash: eight quotes, no other, as '["', three '","' and '"]' place them)
    parts = subject.split('"')
    if len(parts) == 9 and parts[0] == "[" and parts[8] == "]" and parts[2] == parts[4] == parts[6] == ",":
        return parts[5]
    return ""
