"""Listings and search: present documents of a state in subject order, counts, containment."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stateflow.doc.canonical import check, json_contains
from stateflow.errors import InvalidInput
from stateflow.store.core import StoreCore
from stateflow.store.model import DocKey, Listed
from stateflow.store.tx import Tx


class Listing(StoreCore):
    """Scans, counts and containment search over one state's documents."""

    def scan(self, state: str, *, after: str | None = None, limit: int = 200) -> list[Listed]:
        """Present documents of ``state`` in subject order (bytewise), strictly after ``after``."""
        self.check_schema()
        with self._read_tx() as tx:
            return self._scan(tx, state, after, limit)

    def _scan(
        self, tx: Tx, state: str, after: str | None, limit: int, extra: str = "", params: Sequence[Any] = ()
    ) -> list[Listed]:
        rows = tx.all(
            "SELECT d.subject, d.revision, d.updated_seq, t.at FROM documents d "
            "LEFT JOIN transitions t ON t.seq = d.updated_seq "
            f"WHERE d.state = ? AND d.present = 1 AND d.subject > ? {extra} ORDER BY d.subject LIMIT ?",
            (state, after or "", *params, limit),
        )
        return [
            Listed(DocKey(state, r[0]), int(r[1]), None if r[2] is None else int(r[2]), r[3]) for r in rows
        ]

    def count(self, state: str) -> int:
        self.check_schema()
        with self._read_tx() as tx:
            row = tx.one("SELECT COUNT(*) FROM documents WHERE state = ? AND present = 1", (state,))
        return int(row[0]) if row else 0

    def member_counts(self, state: str) -> dict[str, int]:
        """How many present documents of ``state`` have each top-level member."""
        self.check_schema()
        with self._read_tx() as tx:
            rows = tx.all(
                "SELECT m.name, COUNT(*) FROM members m JOIN documents d ON d.doc_id = m.doc_id "
                "WHERE d.state = ? AND d.present = 1 GROUP BY m.name",
                (state,),
            )
        return {r[0]: int(r[1]) for r in rows}

    def kind_counts(self, state: str) -> dict[str | None, int]:
        """How many present documents of ``state`` have each subject kind (the third element of
        the encoded subject, see :func:`stateflow.subjects.encode_subject`), counted in SQL;
        subjects that are not encoded subjects count under None."""
        self.check_schema()
        with self._read_tx() as tx:
            rows = tx.all(
                f"SELECT {self._kind_sql()}, COUNT(*) FROM documents WHERE state = ? AND present = 1 "
                "GROUP BY 1",
                (state,),
            )
        return {r[0]: int(r[1]) for r in rows}

    def search(
        self, state: str, filters: dict[str, Any], *, after: str | None = None, limit: int = 200
    ) -> list[Listed]:
        """Present documents of ``state`` that contain ``filters`` (``jsonb @>`` semantics), in
        subject order after ``after``."""
        self.check_schema()
        if type(filters) is not dict or not filters:
            raise InvalidInput("search needs a non-empty filters object (a containment document)")
        check(filters, "filters")
        out: list[Listed] = []
        with self._read_tx() as tx:
            cursor = after
            while len(out) < limit:
                page = self._search_candidates(tx, state, filters, cursor, max(limit, 200))
                if not page:
                    break
                cursor = page[-1].key.subject
                out.extend(self._verify(tx, page, filters)[: limit - len(out)])
        return out

    def _search_candidates(
        self, tx: Tx, state: str, filters: dict[str, Any], after: str | None, limit: int
    ) -> list[Listed]:
        """Documents that may match (the default: every document; a backend may prefilter)."""
        return self._scan(tx, state, after, limit)

    def _verify(self, tx: Tx, page: list[Listed], filters: dict[str, Any]) -> list[Listed]:
        """Check containment in Python for members the backend could not check itself."""
        out = []
        for item in page:
            row = self._row(tx, item.key)
            if row is None:
                continue
            unchecked = self._unchecked(tx, row.doc_id, filters)
            members, _ = (
                self._fetch(tx, item.key, row.doc_id, row.revision, unchecked) if unchecked else ([], {})
            )
            body = {n: v for n, _, v, _ in members}
            if all(n in body and json_contains(body[n], filters[n]) for n in unchecked):
                out.append(item)
        return out

    def _unchecked(self, tx: Tx, doc_id: int, filters: dict[str, Any]) -> list[str]:
        """Filter members whose containment the candidate query did not establish."""
        return list(filters)
