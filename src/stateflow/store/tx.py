"""The transaction facade every backend implements: a few cursor calls over one open database
transaction, with ``?`` parameters. The algorithm speaks only this."""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Final


class Tx(abc.ABC):
    """A minimal cursor facade over one open database transaction. SQL uses ``?`` params."""

    @abc.abstractmethod
    def all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...

    @abc.abstractmethod
    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Execute; return the number of affected rows."""

    def one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        rows = self.all(sql, params)
        return rows[0] if rows else None

    def insert_one(self, sql: str, params: Sequence[Any], key: str) -> int | None:
        """Run ``sql``, an INSERT of one row or none into a table whose ``key`` column is an
        integer primary key; the inserted row's key, None when it inserted none."""
        row = self.one(f"{sql} RETURNING {key}", params)
        return None if row is None else int(row[0])

    def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Execute one statement for each parameter row."""
        for params in rows:
            self.run(sql, params)

    def batch(self, *, commit: bool = False) -> AbstractContextManager[Any]:
        """Statements whose results are not needed may be sent without waiting (PostgreSQL
        pipeline mode); a no-op elsewhere. ``commit``: the transaction may commit with the
        batch (the store's transaction then does not send its own COMMIT)."""
        return _NO_BATCH

    def all_of(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> list[list[tuple[Any, ...]]]:
        """Several queries whose answers are needed together (one round trip where possible)."""
        return [self.all(sql, params) for sql, params in statements]

    def later(self, sql: str, params: Sequence[Any] = ()) -> Callable[[], list[tuple[Any, ...]]]:
        """Execute; the rows may be read only once the enclosing batch is done."""
        rows = self.all(sql, params)
        return lambda: rows


_NO_BATCH: Final = nullcontext()
"""``Tx.batch`` where statements are sent one by one: one shared context manager (it holds no
state), not one made per commit."""


class Offline(Tx):
    """Staging a write computed optimistically needs no database: every member is in hand."""

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        raise AssertionError("no database access while staging an optimistic write")

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        raise AssertionError("no database access while staging an optimistic write")


OFFLINE: Final = Offline()
