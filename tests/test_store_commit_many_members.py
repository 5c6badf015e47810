"""A commit naming many members of one document reads them together, not one by one."""

from __future__ import annotations

from stateflow.doc.diff import Edit
from stateflow.doc.select import MISSING
from stateflow.store import DocKey, Write
from stateflow.store.sqlite import SqliteStore
from tests.conftest import StoreFactory

KEY = DocKey("s", "wide")


def _commit_traced(open_migrated: StoreFactory, n: int) -> list[str]:
    """Commit ``n`` member edits of a document of ``n`` members (half rewritten, a quarter
    deleted, a quarter left alone) and ``n`` new members, on a store that has nothing of it in
    hand (as after a restart); the statements that read members (SQLite: traced; PostgreSQL:
    none counted). The document comes back as the edits make it."""
    store = open_migrated()
    store.commit([Write(KEY, [Edit((f"m{i:05}",), i) for i in range(n)])])
    store.close()
    fresh = open_migrated()
    edits = [Edit((f"m{i:05}",), {"v": i}) for i in range(0, n, 2)]
    edits += [Edit((f"m{i:05}",), MISSING) for i in range(1, n, 4)]
    edits += [Edit((f"n{i:05}",), i) for i in range(n)]
    statements: list[str] = []
    # (SQLite: the writer's connection, the one a commit reads and writes through)
    traced = [fresh._writer()] if isinstance(fresh, SqliteStore) else []
    for conn in traced:
        conn.set_trace_callback(statements.append)
    try:
        fresh.commit([Write(KEY, edits)])
    finally:
        for conn in traced:
            conn.set_trace_callback(None)
    body = fresh.get(KEY).body
    expected = {f"m{i:05}": {"v": i} if i % 2 == 0 else i for i in range(n) if i % 4 != 1}
    assert body == {**expected, **{f"n{i:05}": i for i in range(n)}}
    return [s for s in statements if s.startswith("SELECT") and "FROM members" in s]


def test_a_commit_of_many_member_edits_reads_the_members_in_a_few_statements(
    backend: str, open_migrated: StoreFactory
) -> None:
    reads = _commit_traced(open_migrated, 1000)
    if "://" not in backend:  # (SQLite's statements are traced)
        # the heads once, then the values a couple of hundred a statement — not a read per
        # member (1,000 of them, each walking every head of the document: quadratic)
        assert 2 <= len(reads) <= 2 + 1000 // 200, len(reads)
