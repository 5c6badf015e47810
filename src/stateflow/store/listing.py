"""Listings and search: present documents of a state in subject order, counts, containment."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any, Final

from stateflow.doc.canonical import check, json_contains
from stateflow.errors import InvalidInput
from stateflow.store.backend import Candidates, SortSql
from stateflow.store.clock import time_text
from stateflow.store.core import StoreCore
from stateflow.store.model import DocKey, Document, Listed, StateCounts, listed_row
from stateflow.store.rows import whole_members
from stateflow.store.tx import Tx

PROBE: Final = 4096
"""A search starts from the members holding a filter's value when fewer than this many do
(counted from the value index, stopping at this many); else it walks the state in subject
order, where a value that common fills a page soon."""
SQL_FILTER_MEMBERS: Final = 16
"""The most filter members a search's candidate query checks; the others are checked on its
candidates here. Each is one ``EXISTS`` in that query, whose planning grows much faster than
their number (PostgreSQL: 200 of them, minutes), and SQLite refuses an expression ~1,000 deep."""

Match = tuple[str, Sequence[Any]]
"""SQL over ``members m`` selecting the members that equal a filter's value, and its parameters."""

Via = tuple[str, Match]
"""The filter member a search starts from, and the :data:`Match` finding its holders."""

Bound = tuple[str, str, Any]
"""A range a top-level member's value may be in: (member name, ``$gt``/``$gte``/``$lt``/``$lte``,
a number or a string). A search narrows its candidates by bounds as SQL can (a superset: the
caller checks each bound exactly); the portable search does not narrow by them at all."""

SortKey = tuple[tuple[str, ...], bool]
"""A key of a sorted search (:meth:`Listing.search_sorted`): a path of object member names (its
first a top-level member) and whether it sorts descending."""

Sorted = tuple[Listed, tuple[Any, ...]]
"""A document a sorted search found and its values at the sort keys: a number, a string or a
boolean as it is, ``{}`` for any object or array, None for null or no member (the values the
order tells apart)."""

After = tuple[tuple[Any, ...], str]
"""Where a sorted search resumes: the values (as :data:`Sorted` has them) and subject of the
last document it returned."""


def listing_limit(limit: object, call: str) -> int:
    """A listing's ``limit`` checked before any SQL, one answer on every backend (unchecked, a
    negative one listed everything on SQLite and was a raw SQL error on PostgreSQL)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise InvalidInput(f"{call}: limit must be a whole number of documents (0 or more), got {limit!r}")
    return min(limit, 2**63 - 1)  # (SQL binds no larger integer)


class Listing(StoreCore):
    """Scans, counts and containment search over one state's documents."""

    def scan(
        self,
        state: str,
        *,
        after: str | None = None,
        limit: int = 200,
        within: str | None = None,
        descending: bool = False,
    ) -> list[Listed]:
        """Present documents of ``state`` in subject order (bytewise), strictly after ``after``
        (``within``: only those whose subject starts with it, read as a range of the index;
        ``descending``: in reverse order, strictly before ``after``)."""
        self.check_schema()
        limit = listing_limit(limit, "scan")
        with self._read_tx() as tx:
            return self._scan(tx, state, after, limit, within=within, descending=descending)

    def read_under(
        self, state: str, prefix: str, *, limit: int | None = None, descending: bool = False
    ) -> list[Document]:
        """The present documents of ``state`` whose subject starts with ``prefix``, whole, in
        subject order (``descending``: reverse order; the first ``limit`` of them). Each
        document is read as it was at some moment of the call (not all necessarily at one)."""
        keys = self._keys_under(state, prefix, limit, descending)
        docs: list[Document] = []
        for start in range(0, len(keys), 200):
            part = keys[start : start + 200]
            read = self.read(part)
            docs += [read[k] for k in part if read[k].body is not None]
        return docs if limit is None else docs[:limit]

    def _keys_under(self, state: str, prefix: str, limit: int | None, descending: bool) -> list[DocKey]:
        """The keys of :meth:`read_under`, one more than ``limit`` at most (a listed document
        may be gone by its read)."""
        if descending:
            keys: list[DocKey] = []
            after = None
            while limit is None or len(keys) <= limit:
                want = 200 if limit is None else min(200, limit + 1 - len(keys))
                page = self.scan(state, after=after, limit=want, within=prefix, descending=True)
                keys += [item.key for item in page]
                if len(page) < want:
                    break
                after = page[-1].key.subject
            return keys
        keys = [DocKey(state, prefix)] if prefix else []  # (the prefix itself: the scan starts after it)
        after = prefix
        while limit is None or len(keys) <= limit:
            page = self.scan(
                state, after=after, limit=200 if limit is None else min(200, limit + 1 - len(keys))
            )
            keys += [item.key for item in page if item.key.subject.startswith(prefix)]
            if len(page) < 200 or not page[-1].key.subject.startswith(prefix):
                break
            after = page[-1].key.subject
        return keys

    def read_first_under(
        self, state: str, prefixes: Sequence[str], *, descending: bool = False
    ) -> list[Document | None]:
        """For each of ``prefixes``, the first present document of ``state`` whose subject
        starts with it (subject order; ``descending``: the last), whole; None where there is none."""
        found = []
        for prefix in prefixes:
            first = self.read_under(state, prefix, limit=1, descending=descending)
            found.append(first[0] if first else None)
        return found

    def _scan(
        self,
        tx: Tx,
        state: str,
        after: str | None,
        limit: int,
        extra: str = "",
        params: Sequence[Any] = (),
        via: Via | None = None,
        within: str | None = None,
        descending: bool = False,
    ) -> list[Listed]:
        """Present documents of ``state`` after ``after`` where ``extra`` holds — all of them, or
        (``via``) only those with a member matching a selective filter, found by its index —
        whose subject starts with ``within`` (None: any); ``descending``: in reverse subject
        order, before ``after``."""
        if via is None:
            source, first = "documents d", ()
        else:  # the few members holding the value first, then their documents by key
            source = (
                f"(SELECT DISTINCT m.doc_id FROM members m WHERE {via[1][0]}) h "
                "JOIN documents d ON d.doc_id = h.doc_id"
            )
            first = tuple(via[1][1])
        where, bounds, order = subjects_sql(after, within, descending)
        # the page first, then the time of its rows only (not of every candidate sorted), each
        # by its key: as a join, PostgreSQL may hash the whole transitions table for one page
        rows = tx.all(
            "SELECT p.subject, p.revision, p.updated_seq, "
            "(SELECT t.at FROM transitions t WHERE t.seq = p.updated_seq) FROM ("
            f"SELECT d.subject, d.revision, d.updated_seq FROM {source} "
            f"WHERE d.state = ? AND d.present = 1 AND {where} {extra} ORDER BY d.subject{order} LIMIT ?"
            f") p ORDER BY p.subject{order}",
            (*first, state, *bounds, *params, limit),
        )
        return [
            listed_row(state, r[0], int(r[1]), None if r[2] is None else int(r[2]), time_text(r[3]))
            for r in rows
        ]

    def count(self, state: str) -> int:
        self.check_schema()
        with self._read_tx() as tx:
            row = tx.one("SELECT COUNT(*) FROM documents WHERE state = ? AND present = 1", (state,))
        return int(row[0]) if row else 0

    def missing_rows(self, state: str, beside: str) -> list[str]:
        """The subjects of ``beside``'s present documents for which ``state`` has no row — not
        even an absent document's, which a lock leaves (``update`` on a key makes its row). A
        service whose writers share a document of ``state`` beside each of ``beside``'s finds
        here those no lock can hold yet. One statement; subject order."""
        self.check_schema()
        with self._statement_tx() as tx:
            rows = tx.all(
                "SELECT d.subject FROM documents d WHERE d.state = ? AND d.present = 1 AND NOT EXISTS "
                "(SELECT 1 FROM documents r WHERE r.state = ? AND r.subject = d.subject) ORDER BY d.subject",
                (beside, state),
            )
        return [str(r[0]) for r in rows]

    def member_counts(self, state: str) -> dict[str, int]:
        """How many present documents of ``state`` have each top-level member."""
        return self.counts(state).members

    def kind_counts(self, state: str) -> dict[str | None, int]:
        """How many present documents of ``state`` have each subject kind."""
        return self.counts(state).kinds

    def counts(self, state: str) -> StateCounts:
        """``state``'s maintained counters (a read of a few rows, whatever the state's size):
        its members' and its subject kinds' (the third element of the encoded subject, see
        :func:`stateflow.subjects.encode_subject`; subjects that are not encoded subjects count
        under None)."""
        self.check_schema()
        with self._read_tx() as tx:
            rows = self._counter_rows(tx, state)
        counted = StateCounts({}, {})
        for _, counter, name, n in rows:
            if counter == "member":
                counted.members[name] = int(n)
            else:
                counted.kinds[name or None] = int(n)
        return counted

    def recount(self, tx: Tx) -> tuple[dict[tuple[str, str, str], int], dict[tuple[str, str, str], int]]:
        """The counters as stored and as counted from the rows now, keyed by (state, counter,
        name), zeros left out (``stateflow check`` compares them)."""
        stored = {(r[0], r[1], r[2]): r[3] for r in self._counter_rows(tx, None)}
        kinds = tx.all(
            f"SELECT state, {self._kind_sql()}, COUNT(*) FROM documents WHERE present = 1 GROUP BY 1, 2"
        )
        members = tx.all(
            "SELECT d.state, m.name, COUNT(*) FROM members m JOIN documents d ON d.doc_id = m.doc_id "
            "WHERE d.present = 1 GROUP BY 1, 2"
        )
        counted = {(r[0], "kind", r[1]): int(r[2]) for r in kinds}
        counted.update({(r[0], "member", r[1]): int(r[2]) for r in members})
        if self.whole_form:  # a whole-form document's names are its body's (it has no member rows)
            last = -1
            while True:  # (in batches by id: the bodies of a large store are not held at once)
                rows = tx.all(
                    "SELECT doc_id, state, revision, body FROM documents "
                    "WHERE doc_id > ? AND present = 1 AND body IS NOT NULL ORDER BY doc_id LIMIT 1000",
                    (last,),
                )
                for doc_id, state, revision, raw in rows:
                    heads, _ = whole_members(int(doc_id), int(revision), raw, f"document {doc_id} body")
                    for name in heads:
                        counter = (state, "member", name)
                        counted[counter] = counted.get(counter, 0) + 1
                if len(rows) < 1000:
                    break
                last = int(rows[-1][0])
        return stored, counted

    def search(
        self,
        state: str,
        filters: dict[str, Any],
        *,
        after: str | None = None,
        limit: int = 200,
        bounds: Sequence[Bound] = (),
        within: str | None = None,
    ) -> list[Listed]:
        """Present documents of ``state`` that contain ``filters`` (``jsonb @>`` semantics), in
        subject order after ``after`` (``within``: whose subject starts with it): ``limit`` of
        them, fewer only when no more match — among them, those outside a :data:`Bound` left
        out as far as SQL can tell (not all of them: the caller checks the bounds)."""
        self.check_schema()
        limit = listing_limit(limit, "search")
        if type(filters) is not dict or not (filters or bounds):
            raise InvalidInput("search needs a non-empty filters object (a containment document)")
        check(filters, "filters")
        if _unheld(filters, bounds):
            return []
        out: list[Listed] = []
        with self._read_tx() as tx:
            whole = self._may_hold_whole(tx, state)
            in_sql = self._in_sql(filters, whole)
            # (bounds only narrow the candidates: those past the statement's budget are left out)
            in_bounds = bounds[: max(0, SQL_FILTER_MEMBERS - len(in_sql))]
            cursor = after
            size = max(limit, 200)
            while len(out) < limit:
                page = self._search_candidates(tx, state, in_sql, cursor, size, in_bounds, within, whole)
                if not page:
                    break
                cursor = page[-1].key.subject
                candidates = len(page)
                if in_sql is not filters or not self._checked_in_sql(filters):
                    page = self._verify(tx, page, filters, in_sql)
                out.extend(page[: limit - len(out)])
                # a short page of candidates is their end; a page the check in Python shrank
                # is not (the caller reads a short answer as the last matches there are)
                if candidates < size:
                    break
        return out

    def search_sorted(
        self,
        state: str,
        filters: dict[str, Any],
        order: Sequence[SortKey],
        *,
        after: After | None = None,
        limit: int = 200,
        bounds: Sequence[Bound] = (),
        within: str | None = None,
    ) -> list[Sorted] | None:
        """The documents :meth:`search` finds (``filters`` may be empty: every document; with
        ``within``, only those whose subject starts with it), in
        the order of their values at ``order``'s paths, then by subject, strictly after
        ``after``: ``limit`` of them, fewer only when no more match. Per key: numbers by value,
        then strings by code point, then false, true, then objects and arrays, then null and
        no member; descending reverses numbers, strings and booleans (booleans first), objects
        and arrays and then null staying last. The database sorts, returning a page: only its
        documents leave it. None where it cannot sort these candidates exactly so (a number of
        magnitude 2**53 or more, a string SQL cannot hold, a path inside a member held as a
        tree, path names SQL cannot spell; the portable store: never) — the caller sorts them
        then. A value at a path is one reached through objects only (an array has no members)."""
        self.check_schema()
        if type(filters) is not dict:
            raise InvalidInput("search filters must be an object (a containment document)")
        check(filters, "filters")
        if _unheld(filters, bounds):
            return []
        if not order:
            return None
        out: list[Sorted] = []
        with self._read_tx() as tx:
            whole = self._may_hold_whole(tx, state)
            # (a top-level name holding U+0000 is every document's missing value: the caller sorts)
            sqls = [
                None
                if "\x00" in path[0]
                else self._sort_sql_whole(tuple(path))
                if whole
                else self._sort_sql(tuple(path[1:]))
                for path, _ in order
            ]
            if any(sql is None for sql in sqls):
                return None
            sql = [x for x in sqls if x is not None]
            in_sql = self._in_sql(filters, whole)
            in_bounds = bounds[: max(0, SQL_FILTER_MEMBERS - len(in_sql))]
            verify = bool(filters) and (in_sql is not filters or not self._checked_in_sql(filters))
            if whole:  # (no value index: whole-form documents have no member rows)
                where = self._candidate_sql(tx, in_sql, in_bounds, whole=True)
            else:
                # every candidate is sorted, not a page of them walked in subject order: start
                # from the value index whenever fewer members hold the value than the state has
                # documents (the index is not by state: a value common elsewhere is walked past)
                records = sum(n for _, counter, _, n in self._counter_rows(tx, state) if counter != "member")
                where = self._candidate_sql(tx, in_sql, in_bounds, max(PROBE, records))
            cursor = after
            # a page and one more when SQL decides every filter; else batches, as ``search``
            size = max(limit, 200) if verify else limit
            while len(out) < limit:
                page = self._scan_sorted(tx, state, order, sql, where, cursor, size, within)
                if page is None:
                    return None
                if not page:
                    break
                cursor = (page[-1][1], page[-1][0].key.subject)
                candidates = len(page)
                if verify:
                    kept = {x.key for x in self._verify(tx, [item for item, _ in page], filters, in_sql)}
                    page = [p for p in page if p[0].key in kept]
                out.extend(page[: limit - len(out)])
                if candidates < size:
                    break
        return out

    def _sorted_from(
        self, state: str, order: Sequence[SortKey], where: Candidates, within: str | None = None
    ) -> tuple[str, list[Any]]:
        """``FROM … WHERE …`` of a sorted search's candidates (``within``: whose subject starts
        with it), each sort key's member joined as ``s0``, ``s1``, … (one lookup by key per
        document), and its parameters."""
        extra, params, via = where
        if within is not None:
            extra, params = (
                f"AND d.subject >= ? AND d.subject < ? {extra}",
                [within, prefix_end(within), *params],
            )
        if via is None:
            source, first = "documents d", []
        else:
            source = (
                f"(SELECT DISTINCT m.doc_id FROM members m WHERE {via[1][0]}) h "
                "JOIN documents d ON d.doc_id = h.doc_id"
            )
            first = list(via[1][1])
        joins = " ".join(
            f"LEFT JOIN members s{i} ON s{i}.doc_id = d.doc_id AND s{i}.name = ?" for i in range(len(order))
        )
        return (
            f"FROM {source} {joins} WHERE d.state = ? AND d.present = 1 {extra}",
            [*first, *(path[0] for path, _ in order), state, *params],
        )

    def _scan_sorted(
        self,
        tx: Tx,
        state: str,
        order: Sequence[SortKey],
        sql: Sequence[SortSql],
        where: Candidates,
        after: After | None,
        limit: int,
        within: str | None = None,
    ) -> list[Sorted] | None:
        """One page of the candidates in sort order after ``after``: each key is three columns
        (its rank as the key's direction orders it, then the number and the text, in that
        direction; every value ties in the two it has no use for), then the subject. The
        position after ``after`` is their lexicographic comparison, nested so that each
        parameter appears twice. A candidate with a value SQL cannot order exactly sorts
        first, whatever the position: None then (found in the same pass as the sort)."""
        source, params = self._sorted_from(state, order, where, within)
        columns = []
        picked = []
        for i, (_, desc) in enumerate(order):
            s, key = f"s{i}", sql[i]
            rank = key.rank.format(s=s)
            picked += [
                f"{rank} AS r{i}",
                f"CASE WHEN {rank} = 0 THEN {key.number.format(s=s)} "
                f"WHEN {rank} = 2 THEN {key.boolean.format(s=s)} ELSE 0 END AS n{i}",
                f"CASE WHEN {rank} = 1 THEN {key.text.format(s=s)} ELSE '' END AS t{i}",
            ]
            columns += [
                (f"CASE WHEN q.r{i} < 3 THEN 3 - q.r{i} ELSE q.r{i} END" if desc else f"q.r{i}", False),
                (f"q.n{i}", desc),
                (f"q.t{i}{key.collate}", desc),
            ]
        unsure = " OR ".join(f"({key.unsure.format(s=f's{i}')})" for i, key in enumerate(sql))
        picked.append(f"CASE WHEN {unsure} THEN 1 ELSE 0 END AS u")
        columns.insert(0, ("q.u", True))
        columns.append(("q.subject", False))
        keyset, keyset_params = "", list[Any]()
        if after is not None:
            bound: list[Any] = []
            for (_, desc), value in zip(order, after[0], strict=True):
                bound += self._sort_params(value, desc)
            bound.append(after[1])
            condition = ""
            for (column, desc), value in reversed(list(zip(columns[1:], bound, strict=True))):
                head = f"{column} {'<' if desc else '>'} ?"
                if condition:
                    condition = f"{head} OR ({column} = ? AND ({condition}))"
                    keyset_params = [value, value, *keyset_params]
                else:
                    condition, keyset_params = head, [value]
            keyset = f"WHERE q.u = 1 OR {condition}"
        ordering = ", ".join(f"{c}{' DESC' if desc else ''}" for c, desc in columns)
        names = ", ".join(["q.u", *(f"q.r{i}, q.n{i}, q.t{i}" for i in range(len(order)))])
        rows = tx.all(
            f"SELECT q.subject, q.revision, q.updated_seq, "
            f"(SELECT t.at FROM transitions t WHERE t.seq = q.updated_seq), {names} FROM ("
            f"SELECT q.* FROM (SELECT d.subject, d.revision, d.updated_seq, {', '.join(picked)} {source}) q "
            f"{keyset} ORDER BY {ordering} LIMIT ?) q ORDER BY {ordering}",
            [*params, *keyset_params, limit],
        )
        if rows and rows[0][4]:
            return None
        out: list[Sorted] = []
        for r in rows:
            item = listed_row(state, r[0], int(r[1]), None if r[2] is None else int(r[2]), time_text(r[3]))
            values = tuple(_sort_value(r[5 + 3 * i], r[6 + 3 * i], r[7 + 3 * i]) for i in range(len(order)))
            out.append((item, values))
        return out

    def _sort_params(self, value: Any, desc: bool) -> list[Any]:
        """A value's three columns as :meth:`_scan_sorted` compares them."""
        if value is None:
            rank, number, text = 9, 0, ""
        elif value == {}:
            rank, number, text = 8, 0, ""
        elif type(value) is bool:
            rank, number, text = 2, int(value), ""
        elif type(value) is str:
            rank, number, text = 1, 0, value
        else:
            rank, number, text = 0, self._sort_number(value), ""
        return [3 - rank if desc and rank < 3 else rank, number, text]

    def _candidate_sql(
        self,
        tx: Tx,
        filters: dict[str, Any],
        bounds: Sequence[Bound] = (),
        probe: int = PROBE,
        whole: bool = False,
    ) -> Candidates:
        """SQL narrowing a search's candidates (the default: the selective member only, none
        where the state may hold whole-form documents; a backend may check more members in SQL)."""
        return "", [], None if whole else self._selective(tx, filters, probe)

    def _in_sql(self, filters: dict[str, Any], whole: bool) -> dict[str, Any]:
        """The filter members the candidate query checks (``filters`` itself where it checks
        all): at most :data:`SQL_FILTER_MEMBERS`, and over a state that may hold whole-form
        documents (``whole``) only those it checks in a body too (:meth:`_checks_in_body`).
        The others are checked in Python on every candidate (:meth:`_verify`)."""
        names = [name for name in filters if not whole or self._checks_in_body(name)]
        if len(names) == len(filters) and len(names) <= SQL_FILTER_MEMBERS:
            return filters
        return {name: filters[name] for name in names[:SQL_FILTER_MEMBERS]}

    def _checks_in_body(self, name: str) -> bool:
        """Whether the candidate query checks ``name`` in a whole-form body (portable: it
        checks nothing there)."""
        return False

    def _sort_sql_whole(self, path: tuple[str, ...]) -> SortSql | None:
        """How SQL orders documents of either form by the value at ``path`` (portable: it does not)."""
        return None

    def _search_candidates(
        self,
        tx: Tx,
        state: str,
        filters: dict[str, Any],
        after: str | None,
        limit: int,
        bounds: Sequence[Bound] = (),
        within: str | None = None,
        whole: bool = False,
    ) -> list[Listed]:
        """Documents that may match, in subject order (``whole``: the state may hold
        whole-form documents)."""
        extra, params, via = self._candidate_sql(tx, filters, bounds, whole=whole)
        return self._scan(tx, state, after, limit, extra, params, via, within)

    def _sort_sql(self, inner: tuple[str, ...]) -> SortSql | None:
        """How SQL orders documents by the value at ``inner`` in a member (portable: it does not)."""
        return None

    def _sort_number(self, value: int | float) -> Any:
        return value

    def _checked_in_sql(self, filters: dict[str, Any]) -> bool:
        """Whether the candidate query decides every filter member for any document, so the
        candidates need no check in Python (portable: never)."""
        return False

    def _selective(self, tx: Tx, filters: dict[str, Any], probe: int = PROBE) -> Via | None:
        """The filter member whose value the fewest members hold, and the :data:`Match`
        finding them, when fewer than :data:`PROBE` do; None when no filter is indexed or none
        is that rare."""
        best: tuple[int, Via] | None = None
        for name, pattern in filters.items():
            match = self._value_match(name, pattern)
            if match is None:
                continue
            row = tx.one(
                f"SELECT COUNT(*) FROM (SELECT 1 FROM members m WHERE {match[0]} LIMIT {probe}) x",
                match[1],
            )
            n = int(row[0]) if row else 0
            if n < probe and (best is None or n < best[0]):
                best = (n, (name, match))
        return None if best is None else best[1]

    def _value_match(self, name: str, pattern: Any) -> Match | None:
        """SQL finding the members named ``name`` equal to the scalar ``pattern`` by the value
        index, or None (the portable version: no index)."""
        return None

    def _verify(
        self, tx: Tx, page: list[Listed], filters: dict[str, Any], in_sql: dict[str, Any]
    ) -> list[Listed]:
        """Check containment in Python for members the backend could not check itself, and for
        those left out of the candidate query (``filters`` beyond ``in_sql``) — for the whole
        page at once: one query for the rows, one for what is unchecked, one fetch of the
        members to compare."""
        rows = self._rows(tx, [item.key for item in page])
        unchecked = self._unchecked_many(tx, [row.doc_id for row in rows.values()], in_sql)
        if in_sql is not filters:
            rest = [name for name in filters if name not in in_sql]
            unchecked = {row.doc_id: [*unchecked.get(row.doc_id, ()), *rest] for row in rows.values()}
        wanted = [
            (key, row.doc_id, row.revision, unchecked[row.doc_id])
            for key, row in rows.items()
            if unchecked.get(row.doc_id)
        ]
        fetched = self._fetch_many(tx, wanted) if wanted else {}
        out = []
        for item in page:
            row = rows.get(item.key)
            if row is None:
                continue
            names = unchecked.get(row.doc_id)
            body = {n: v for n, _, v, _ in fetched[row.doc_id][0]} if names else {}
            if all(n in body and json_contains(body[n], filters[n]) for n in names or ()):
                out.append(item)
        return out

    def _unchecked_many(
        self, tx: Tx, doc_ids: Sequence[int], filters: dict[str, Any]
    ) -> dict[int, list[str]]:
        """:meth:`_unchecked` for several documents (portable: one call each)."""
        return {doc_id: self._unchecked(tx, doc_id, filters) for doc_id in doc_ids}

    def _unchecked(self, tx: Tx, doc_id: int, filters: dict[str, Any]) -> list[str]:
        """Filter members whose containment the candidate query did not establish."""
        return list(filters)


def prefix_end(prefix: str) -> str:
    """The least text greater than every text starting with ``prefix`` (in code point order,
    the subjects' order): its last character the next one, past the surrogates no stored text
    holds. Those texts are then the range ``[prefix, prefix_end(prefix))`` of an index."""
    if not prefix or prefix[-1] == "\U0010ffff":
        raise ValueError(f"no text bounds those starting with {prefix!r}")
    following = ord(prefix[-1]) + 1
    return prefix[:-1] + chr(0xE000 if following == 0xD800 else following)


def subjects_sql(
    after: str | None, within: str | None, descending: bool = False
) -> tuple[str, tuple[str, ...], str]:
    """The condition on ``d.subject`` of a listing strictly past ``after`` in its order (after
    it ascending, before it ``descending``), limited to the subjects starting with ``within``
    (that range of the index read, nothing outside it), its parameters and its ``ORDER BY``
    direction: one text for every backend, each of which scans the index either way."""
    within = within or None  # (every subject starts with "")
    if not descending:
        if within is None:
            return "d.subject > ?", (after or "",), ""
        if after is not None and after >= within:
            return "d.subject > ? AND d.subject < ?", (after, prefix_end(within)), ""
        return "d.subject >= ? AND d.subject < ?", (within, prefix_end(within)), ""
    if within is None:
        return ("d.subject >= ?", ("",), " DESC") if after is None else ("d.subject < ?", (after,), " DESC")
    end = prefix_end(within)
    return "d.subject >= ? AND d.subject < ?", (within, end if after is None else min(after, end)), " DESC"


def _sort_value(rank: int, number: Any, text: Any) -> Any:
    """A sort key's value from its columns (:data:`Sorted`): a ``numeric`` as the int or float
    it reads as (below 2**53: exact either way)."""
    if rank == 0:
        if isinstance(number, Decimal):
            return int(number) if number == number.to_integral_value() else float(number)
        return number
    if rank == 1:
        return str(text)
    if rank == 2:
        return bool(number)
    return {} if rank == 8 else None


def _unheld(filters: dict[str, Any], bounds: Sequence[Bound]) -> bool:
    """Whether a filter or a bound names a top-level member holding U+0000: no document has one
    (writes refuse it, and a PostgreSQL text cannot hold it), so nothing matches — answered so
    on every backend before any SQL."""
    return any("\x00" in name for name in filters) or any("\x00" in name for name, _, _ in bounds)
