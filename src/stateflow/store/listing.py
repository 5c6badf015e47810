"""Listings and search: present documents of a state in subject order, counts, containment."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from stateflow.doc.canonical import check, json_contains
from stateflow.errors import InvalidInput
from stateflow.store.clock import time_text
from stateflow.store.core import StoreCore
from stateflow.store.counting import ALL_COUNTERS, COUNTERS
from stateflow.store.model import DocKey, Document, Listed, StateCounts, listed_row
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


class Listing(StoreCore):
    """Scans, counts and containment search over one state's documents."""

    def scan(self, state: str, *, after: str | None = None, limit: int = 200) -> list[Listed]:
        """Present documents of ``state`` in subject order (bytewise), strictly after ``after``."""
        self.check_schema()
        with self._read_tx() as tx:
            return self._scan(tx, state, after, limit)

    def read_under(self, state: str, prefix: str, *, limit: int | None = None) -> list[Document]:
        """The present documents of ``state`` whose subject starts with ``prefix``, whole, in
        subject order (the first ``limit`` of them). Each document is read as it was at some
        moment of the call (not all necessarily at one)."""
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
        docs: list[Document] = []
        for start in range(0, len(keys), 200):
            part = keys[start : start + 200]
            read = self.read(part)
            docs += [read[k] for k in part if read[k].body is not None]
        return docs if limit is None else docs[:limit]

    def read_first_under(self, state: str, prefixes: Sequence[str]) -> list[Document | None]:
        """For each of ``prefixes``, the first present document of ``state`` whose subject
        starts with it (subject order), whole; None where there is none."""
        found = []
        for prefix in prefixes:
            first = self.read_under(state, prefix, limit=1)
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
    ) -> list[Listed]:
        """Present documents of ``state`` after ``after`` where ``extra`` holds — all of them, or
        (``via``) only those with a member matching a selective filter, found by its index."""
        if via is None:
            source, first = "documents d", ()
        else:  # the few members holding the value first, then their documents by key
            source = (
                f"(SELECT DISTINCT m.doc_id FROM members m WHERE {via[1][0]}) h "
                "JOIN documents d ON d.doc_id = h.doc_id"
            )
            first = tuple(via[1][1])
        # the page first, then the time of its rows only (not of every candidate sorted), each
        # by its key: as a join, PostgreSQL may hash the whole transitions table for one page
        rows = tx.all(
            "SELECT p.subject, p.revision, p.updated_seq, "
            "(SELECT t.at FROM transitions t WHERE t.seq = p.updated_seq) FROM ("
            f"SELECT d.subject, d.revision, d.updated_seq FROM {source} "
            f"WHERE d.state = ? AND d.present = 1 AND d.subject > ? {extra} ORDER BY d.subject LIMIT ?"
            ") p ORDER BY p.subject",
            (*first, state, after or "", *params, limit),
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
            rows = tx.all(COUNTERS, (state, state))
        counted = StateCounts({}, {})
        for counter, name, n in rows:
            if counter == "member":
                counted.members[name] = int(n)
            else:
                counted.kinds[name or None] = int(n)
        return counted

    def recount(self, tx: Tx) -> tuple[dict[tuple[str, str, str], int], dict[tuple[str, str, str], int]]:
        """The counters as stored and as counted from the rows now, keyed by (state, counter,
        name), zeros left out (``stateflow check`` compares them)."""
        stored = {(r[0], r[1], r[2]): int(r[3]) for r in tx.all(ALL_COUNTERS)}
        kinds = tx.all(
            f"SELECT state, {self._kind_sql()}, COUNT(*) FROM documents WHERE present = 1 GROUP BY 1, 2"
        )
        members = tx.all(
            "SELECT d.state, m.name, COUNT(*) FROM members m JOIN documents d ON d.doc_id = m.doc_id "
            "WHERE d.present = 1 GROUP BY 1, 2"
        )
        counted = {(r[0], "kind", r[1]): int(r[2]) for r in kinds}
        counted.update({(r[0], "member", r[1]): int(r[2]) for r in members})
        return stored, counted

    def search(
        self,
        state: str,
        filters: dict[str, Any],
        *,
        after: str | None = None,
        limit: int = 200,
        bounds: Sequence[Bound] = (),
    ) -> list[Listed]:
        """Present documents of ``state`` that contain ``filters`` (``jsonb @>`` semantics), in
        subject order after ``after``: ``limit`` of them, fewer only when no more match —
        among them, those outside a :data:`Bound` left out as far as SQL can tell (not all
        of them: the caller checks the bounds)."""
        self.check_schema()
        if type(filters) is not dict or not (filters or bounds):
            raise InvalidInput("search needs a non-empty filters object (a containment document)")
        check(filters, "filters")
        in_sql = (
            filters
            if len(filters) <= SQL_FILTER_MEMBERS
            else dict(list(filters.items())[:SQL_FILTER_MEMBERS])
        )
        # (bounds only narrow the candidates: those past the statement's budget are left out)
        in_bounds = bounds[: max(0, SQL_FILTER_MEMBERS - len(in_sql))]
        out: list[Listed] = []
        with self._read_tx() as tx:
            cursor = after
            size = max(limit, 200)
            while len(out) < limit:
                page = self._search_candidates(tx, state, in_sql, cursor, size, in_bounds)
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

    def _search_candidates(
        self,
        tx: Tx,
        state: str,
        filters: dict[str, Any],
        after: str | None,
        limit: int,
        bounds: Sequence[Bound] = (),
    ) -> list[Listed]:
        """Documents that may match (the default: every document; a backend may prefilter)."""
        return self._scan(tx, state, after, limit, via=self._selective(tx, filters))

    def _checked_in_sql(self, filters: dict[str, Any]) -> bool:
        """Whether the candidate query decides every filter member for any document, so the
        candidates need no check in Python (portable: never)."""
        return False

    def _selective(self, tx: Tx, filters: dict[str, Any]) -> Via | None:
        """The filter member whose value the fewest members hold, and the :data:`Match`
        finding them, when fewer than :data:`PROBE` do; None when no filter is indexed or none
        is that rare."""
        best: tuple[int, Via] | None = None
        for name, pattern in filters.items():
            match = self._value_match(name, pattern)
            if match is None:
                continue
            row = tx.one(
                f"SELECT COUNT(*) FROM (SELECT 1 FROM members m WHERE {match[0]} LIMIT {PROBE}) x",
                match[1],
            )
            n = int(row[0]) if row else 0
            if n < PROBE and (best is None or n < best[0]):
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
