"""The maintained counters (``state_counts``) and the deltas writers keep beside them.

A counter is its ``state_counts`` row plus the sum of its unfolded deltas; readers sum both in
one statement (one snapshot: a fold removes its deltas from the sum and adds them to the rows in
one transaction, so a reader sees either, never both nor neither). On PostgreSQL every writer
keeps the deltas of what it writes in its own transaction: a fast statement (``pg_fast``) in
the transition row it writes anyway (``transitions.counted``, schema 46: the client's values, as
SQLite's writers keep theirs), the write functions and the delete triggers as rows of
``count_deltas`` (schema 36: counted from their rows on the server). A fold moves both into
``state_counts`` after every ``FOLD_EVERY``-th seq (``POSTGRES_FOLD``): the ``count_deltas`` rows,
and the transitions' deltas after ``stateflow_meta`` ``counts_folded`` up to the newest seq it
sees — seqs become visible in commit order (the seq lock), so none at or below that one commits
later. Readers sum the rows, the ``count_deltas`` rows and those transitions' deltas in Python
(:func:`summed`), from one statement (``COUNTER_ROWS``). On SQLite (schema 43) every writer counts its plans in Python
(:func:`count_plans`) and keeps the deltas in the transition row it writes anyway
(``transitions.counted``, :func:`encoded`; NULL when nothing moved), and the commit of every
``FOLD_EVERY``-th seq folds those after ``stateflow_meta`` ``counts_folded`` into the rows
(``SQLITE_FOLD``) in its own transaction: no counter page written by the other commits. Readers
sum the rows and those deltas in Python (:func:`summed`), from one statement.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final

import orjson

if TYPE_CHECKING:
    from stateflow.store.model import DocKey
    from stateflow.store.plan import WritePlan

FOLD_EVERY: Final = 250
"""A PostgreSQL commit whose seq is a multiple of this folds, after it commits: one commit in
every so many, whichever process and path wrote it (a read scans every unfolded delta, a
commit appends a few; a fold costs ~1.5 µs a delta and ~1 ms once)."""

_UNFOLDED_AFTER: Final = (
    "seq > (SELECT CAST(value AS BIGINT) FROM stateflow_meta WHERE key = 'counts_folded')"
)
"""The transitions whose deltas are not folded yet — a range of the ``transitions`` key after
``counts_folded``."""

COUNTER_ROWS: Final = (
    "SELECT state, counter, name, n, NULL FROM state_counts WHERE state = ? "
    "UNION ALL SELECT state, counter, name, delta, NULL FROM count_deltas WHERE state = ? "
    "UNION ALL SELECT NULL, NULL, NULL, NULL, counted FROM transitions "
    f"WHERE {_UNFOLDED_AFTER} AND counted IS NOT NULL AND position(? IN counted) > 0"
)
"""One state's counter rows and ``count_deltas`` rows (``?``: the state, twice), and the deltas
of the unfolded transitions that name it (``?``: the state as a JSON string, :func:`quoted`), in
one statement (one snapshot), summed by :func:`summed` (PostgreSQL's; SQLite, whose
``count_deltas`` stays empty, reads ``SQLITE_COUNTER_ROWS``)."""

ALL_COUNTER_ROWS: Final = (
    "SELECT state, counter, name, n, NULL FROM state_counts "
    "UNION ALL SELECT state, counter, name, delta, NULL FROM count_deltas "
    f"UNION ALL SELECT NULL, NULL, NULL, NULL, counted FROM transitions WHERE {_UNFOLDED_AFTER} "
    "AND counted IS NOT NULL"
)
"""``COUNTER_ROWS`` for every state."""

POSTGRES_FOLD: Final = (
    "WITH l AS MATERIALIZED (SELECT {held}), "
    # (locked: a fold that committed since this statement's snapshot was taken — while it waited
    # for the lock — is read as it left the row, so nothing is folded twice)
    "f AS MATERIALIZED (SELECT CAST(value AS BIGINT) AS folded FROM stateflow_meta "
    "WHERE key = 'counts_folded' AND (SELECT held FROM l) FOR UPDATE), "
    "u AS MATERIALIZED (SELECT max(seq) AS upto FROM transitions WHERE seq > (SELECT folded FROM f)), "
    "t AS (SELECT e ->> 0 AS state, e ->> 1 AS counter, e ->> 2 AS name, CAST(e ->> 3 AS BIGINT) AS delta "
    "FROM transitions, jsonb_array_elements(CAST(counted AS jsonb)) AS e "
    "WHERE seq > (SELECT folded FROM f) AND seq <= (SELECT upto FROM u) AND counted IS NOT NULL), "
    "m AS (UPDATE stateflow_meta SET value = CAST((SELECT upto FROM u) AS TEXT) "
    "WHERE key = 'counts_folded' AND (SELECT upto FROM u) IS NOT NULL), "
    "d AS (DELETE FROM count_deltas WHERE (SELECT held FROM l) RETURNING state, counter, name, delta) "
    "INSERT INTO state_counts (state, counter, name, n) "
    "SELECT state, counter, name, sum(delta) FROM (SELECT * FROM d UNION ALL SELECT * FROM t) AS x "
    "GROUP BY state, counter, name "
    # (rows upserted in key order, as any other folder would take them)
    "ORDER BY state, counter, name "
    "ON CONFLICT (state, counter, name) DO UPDATE SET n = state_counts.n + excluded.n"
)
"""PostgreSQL: the ``count_deltas`` rows and the unfolded transitions' deltas (up to the newest
seq this snapshot sees, then ``counts_folded``) summed into ``state_counts``, the rows deleted,
in one statement, where ``{held}`` (a column ``held``) holds the fold's advisory lock: tried
after a commit (a second folder skips instead of queueing on the rows, :func:`tried`); waited for
where the transitions it folds may be deleted after it (a skipped fold would lose their deltas,
:func:`waited`)."""


def tried(lock: str) -> str:
    """``POSTGRES_FOLD`` where ``lock`` (SQL: the fold's advisory lock id) is free, else nothing."""
    return POSTGRES_FOLD.format(held=f"pg_try_advisory_xact_lock({lock}) AS held")


def waited(lock: str) -> str:
    """``POSTGRES_FOLD`` once ``lock`` is taken (waiting for another fold to end)."""
    return POSTGRES_FOLD.format(held=f"true AS held FROM (SELECT pg_advisory_xact_lock({lock})) AS k")


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


# ------------------------------------------------------------------ SQLite (schema 43)

_UNFOLDED: Final = "seq > (SELECT CAST(value AS INTEGER) FROM stateflow_meta WHERE key = 'counts_folded')"
"""SQLite: the transitions whose deltas are not folded yet — a range of the ``transitions`` key
after ``counts_folded``, at most ``FOLD_EVERY`` seqs."""

SQLITE_COUNTER_ROWS: Final = (
    "SELECT state, counter, name, n, NULL FROM state_counts WHERE state = ? "
    "UNION ALL SELECT NULL, NULL, NULL, NULL, counted FROM transitions "
    f"WHERE {_UNFOLDED} AND counted IS NOT NULL AND instr(counted, ?) > 0"
)
"""SQLite: one state's counter rows (``?``: the state) and the deltas of the unfolded
transitions that name it (``?``: the state as a JSON string, :func:`quoted`), as JSON text, in
one statement (one snapshot), summed by :func:`summed`. The deltas are decoded here, not by SQLite's
``json_each``: its ``value`` of each element, a small array, costs ~25 µs (2,739 deltas of 249
saver puts read in 67 ms under load, 2 ms as the rows' texts)."""

SQLITE_ALL_COUNTER_ROWS: Final = (
    "SELECT state, counter, name, n, NULL FROM state_counts "
    f"UNION ALL SELECT NULL, NULL, NULL, NULL, counted FROM transitions WHERE {_UNFOLDED} AND counted IS NOT NULL"
)
"""``SQLITE_COUNTER_ROWS`` for every state."""

SQLITE_UNFOLDED: Final = (
    f"SELECT count(*), counted FROM transitions WHERE {_UNFOLDED} AND counted IS NOT NULL GROUP BY counted "
    f"UNION ALL SELECT max(seq), NULL FROM transitions WHERE {_UNFOLDED}"
)
"""SQLite: what a fold folds — each distinct text of deltas among the unfolded transitions
that moved a counter, with how many transitions hold it, then one row of ``counted`` NULL whose
first column is the newest unfolded seq (NULL: none), which is ``counts_folded`` after it. Only
those rows, each text once: most commits of a store ``put`` move nothing, and the commits of
one kind of write move the same counters (a LangGraph checkpoint: its kind and its one name),
where a row read into Python costs ~2,800 instructions and its text's decoding more."""

SQLITE_FOLD: Final = (
    "INSERT INTO state_counts (state, counter, name, n) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (state, counter, name) DO UPDATE SET n = n + excluded.n"
)
"""SQLite: a counter's folded deltas added to its row."""

SQLITE_FOLDED: Final = (
    "INSERT INTO stateflow_meta (key, value) VALUES ('counts_folded', ?) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)
"""SQLite: the newest seq folded, in the fold's transaction (so its deltas count once)."""

Moved = dict[tuple[str, str, str], int]
"""Counters' deltas by (state, counter, name)."""


def count_plans(
    plans: Sequence[WritePlan], keys: Callable[[], Iterable[tuple[int, DocKey]]], into: Moved | None = None
) -> Moved:
    """What ``plans`` move, added to ``into``: the kind of each document whose ``present``
    flips (+1 made present, -1 deleted), each top-level member name a present document gains
    (+1) or loses (-1) — a member row inserted or deleted, as SQLite's counting triggers
    counted until schema 43 (a member rewritten moves nothing; an absent document's plan lists
    every member it loses in ``deletes``), or for a document in whole form before or after the
    write its ``WritePlan.names_moved``. ``keys()``: the
    written documents' (doc_id, key) pairs, asked only where a counter moves and the plan does
    not create its document (a store item's rewrite asks nothing)."""
    moved: Moved = {} if into is None else into
    by_id: dict[int, DocKey] | None = None
    for plan in plans:
        flips = plan.present != plan.was_present
        # a document in whole form before or after the write moves the names it says it does
        # (a conversion writes or deletes every member's row and moves none); else its rows say
        names = plan.names_moved
        if names is None:
            if not (flips or plan.inserts or plan.deletes):
                continue
            added: Iterable[str] = [row[1] for row in plan.inserts]
            dropped: Iterable[str] = [name for _, name in plan.deletes]
        else:
            added, dropped = names
            if not (flips or added or dropped):
                continue
        key = plan.created
        if key is None:
            if by_id is None:
                by_id = dict(keys())
            key = by_id[plan.doc_id]
        state = key.state
        if flips:
            counter = (state, "kind", sqlite_subject_kind(key.subject))
            moved[counter] = moved.get(counter, 0) + (1 if plan.present else -1)
        for name in added:
            counter = (state, "member", name)
            moved[counter] = moved.get(counter, 0) + 1
        for name in dropped:
            counter = (state, "member", name)
            moved[counter] = moved.get(counter, 0) - 1
    return moved


_ONE: dict[tuple[Any, ...], str | None] = {}
"""``counted_one``'s texts by what decides them (cleared when large)."""
_ONE_MAX: Final = 1024


def counted_one(plan: WritePlan, locked: Sequence[tuple[DocKey, Any]]) -> str | None:
    """``encoded(count_plans([plan], …))`` for a commit of one document (most commits), whose
    key is the one it creates or, among ``locked`` (key, row) pairs, that of the row of its
    ``doc_id``: the same text, kept by what decides it — the state, the kind where ``present``
    flips and which way, the names added and dropped — so a commit that moves what an earlier
    one moved (a LangGraph checkpoint: its kind and its one name) builds no counters and
    encodes nothing, and one that moves nothing (a store item rewritten) looks up no key."""
    flips = plan.present != plan.was_present
    names = plan.names_moved
    if names is None:
        if not (flips or plan.inserts or plan.deletes):
            return None
        added: tuple[str, ...] = tuple([row[1] for row in plan.inserts])
        dropped: tuple[str, ...] = tuple([name for _, name in plan.deletes])
    else:
        if not (flips or names[0] or names[1]):
            return None
        added, dropped = tuple(names[0]), tuple(names[1])
    key = plan.created
    if key is None:
        doc_id = plan.doc_id
        key = next(k for k, row in locked if row.doc_id == doc_id)
    decided = (key.state, sqlite_subject_kind(key.subject) if flips else None, plan.present, added, dropped)
    try:
        return _ONE[decided]
    except KeyError:
        if len(_ONE) >= _ONE_MAX:
            _ONE.clear()
        text = _ONE[decided] = encoded(count_plans([plan], lambda: ((plan.doc_id, key),)))
        return text


def encoded(moved: Moved) -> str | None:
    """``transitions.counted``: ``[[state, counter, name, delta], …]`` as JSON text (text, not
    bytes: SQLite's JSON functions refuse a blob), None where nothing moved."""
    rows = [[*counter, n] for counter, n in moved.items() if n]
    if not rows:
        return None
    try:
        return orjson.dumps(rows).decode()
    except TypeError:  # (a kind decoded from an escaped lone surrogate: no UTF-8 for orjson)
        # (escaped where it must be, the state as ``quoted`` gives it: readers find it so)
        parts = [
            f"[{quoted(s)},{quoted(c)},{json.dumps(name)},{n}]" for (s, c, name), n in moved.items() if n
        ]
        return "[" + ",".join(parts) + "]"


def quoted(text: str) -> str:
    """``text`` as a JSON string, as :func:`encoded` writes a state: what a reader of one
    state's deltas looks for (``SQLITE_COUNTER_ROWS``)."""
    return orjson.dumps(text).decode()


def deltas_of(counted: str) -> list[list[Any]]:
    """A ``transitions.counted`` text decoded."""
    try:
        return orjson.loads(counted)  # type: ignore[no-any-return]
    except orjson.JSONDecodeError:  # (a kind with an escaped lone surrogate: ``encoded``)
        return json.loads(counted)  # type: ignore[no-any-return]


def folded(rows: Iterable[tuple[int, str]]) -> Moved:
    """The deltas of ``SQLITE_UNFOLDED``'s texts (each held by ``n`` transitions) summed by
    counter, none at zero."""
    moved: Moved = {}
    for n, counted in rows:
        for in_state, kind, name, delta in deltas_of(counted):
            counter = (in_state, kind, name)
            moved[counter] = moved.get(counter, 0) + n * delta
    return {counter: n for counter, n in moved.items() if n}


def summed(rows: Iterable[Sequence[Any]], state: str | None = None) -> Moved:
    """The rows of ``SQLITE_COUNTER_ROWS`` (``state``'s) or ``SQLITE_ALL_COUNTER_ROWS`` (None)
    summed by counter, none at zero."""
    moved: Moved = {}
    for row in rows:
        counted = row[4]
        if counted is None:
            counter = (row[0], row[1], row[2])
            moved[counter] = moved.get(counter, 0) + int(row[3])
            continue
        for in_state, kind, name, n in deltas_of(counted):
            if state is None or in_state == state:
                counter = (in_state, kind, name)
                moved[counter] = moved.get(counter, 0) + n
    return {counter: n for counter, n in moved.items() if n}


def _refused(constant: str) -> None:
    raise ValueError(constant)


def sqlite_subject_kind(subject: str) -> str:
    """``migrations.SQLITE_SUBJECT_KIND`` in Python: the third element of a subject that is a
    JSON array of four elements whose third is a string, decoded; else '' (pinned against
    SQLite's answers by a test). Not :func:`subject_kind`: SQLite decodes the subject, so an
    escaped character in a kind is counted under the kind it spells, and the other elements
    need not be strings."""
    if "\\" not in subject:  # (the common shape, ``encode_subject``'s: four plain strings)
        parts = subject.split('"')
        if (
            len(parts) == 9
            and parts[0] == "["
            and parts[8] == "]"
            and parts[2] == parts[4] == parts[6] == ","
        ):
            # (no control character: JSON refuses one raw in a string, and so does SQLite)
            if subject.isprintable() or not any(c < " " for c in subject):
                return parts[5]
            return ""
    try:
        value = json.loads(subject, parse_constant=_refused)
    except ValueError:
        return ""
    except RecursionError:  # (nested deeper than Python recurses, as SQLite's JSON allows)
        try:
            value = _top_level(subject)
        except ValueError:
            return ""
    if type(value) is list and len(value) == 4 and type(value[2]) is str:
        return value[2].split("\0", 1)[0]  # (SQLite's text of a decoded kind ends at a NUL)
    return ""


scanstring: Final[Callable[[str, int, bool], tuple[str, int]]] = json.decoder.scanstring  # type: ignore[attr-defined]
"""The JSON string at a position (after its opening quote) decoded, and the position after it."""

_JSON_MAX_DEPTH: Final = 2000
"""The deepest nesting SQLite's JSON functions take (``JSON_MAX_DEPTH``); deeper is not JSON to
them."""
_WS: Final = re.compile(r"[ \t\n\r]*")
_SCALAR: Final = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?|true|false|null")


def _top_level(text: str) -> list[object] | None:
    """The elements of a JSON text that is an array (its strings decoded, any other element
    None), parsed without recursion; None when the text is not valid JSON or not an array."""
    closers: list[str] = []  # (the brackets open, innermost last)
    top: list[object] = []
    pos = _WS.match(text).end()  # type: ignore[union-attr]
    array = text.startswith("[", pos)
    if not array:
        return None
    while True:
        # a value starts at ``pos``
        if len(closers) == 1:
            top.append(None)
        first = text[pos : pos + 1]
        if first == '"':
            found, pos = scanstring(text, pos + 1, True)
            if len(closers) == 1:
                top[-1] = found
        elif first in ("[", "{"):
            closers.append("]" if first == "[" else "}")
            if len(closers) > _JSON_MAX_DEPTH:
                return None
            pos = _WS.match(text, pos + 1).end()  # type: ignore[union-attr]
            if text.startswith(closers[-1], pos):
                pos += 1
                closers.pop()
            else:
                if first == "{":
                    pos = _key(text, pos)
                continue
        else:
            scalar = _SCALAR.match(text, pos)
            if scalar is None:
                return None
            pos = scalar.end()
        # the value ended: separators and closing brackets until the next value or the end
        while True:
            pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
            if not closers:
                return top if pos == len(text) else None
            at = text[pos : pos + 1]
            if at == ",":
                pos = _WS.match(text, pos + 1).end()  # type: ignore[union-attr]
                if closers[-1] == "}":
                    pos = _key(text, pos)
                break
            if at != closers[-1]:
                return None
            closers.pop()
            pos += 1


def _key(text: str, pos: int) -> int:
    """Past an object's key and its colon (``pos``: the key's quote), at the value."""
    if not text.startswith('"', pos):
        raise ValueError("a key")
    _, pos = scanstring(text, pos + 1, True)
    pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
    if not text.startswith(":", pos):
        raise ValueError("a colon")
    return _WS.match(text, pos + 1).end()  # type: ignore[union-attr]
