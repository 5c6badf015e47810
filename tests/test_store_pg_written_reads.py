"""PostgreSQL: a document this store wrote is read back from memory — its body as the write left
it in the head cache, its seq and time those of the row the write stamped — in one round trip
(the current revisions), exactly as another store reads it from the server."""

from __future__ import annotations

from collections.abc import Callable

from stateflow.store import DocKey, Document, Write, open_store
from stateflow.store.postgres import PostgresStore
from tests.pg_helpers import connections_taken

KEY = DocKey("k", "doc")
OTHER = DocKey("k", "other")


def _set(body: dict[str, object]) -> Callable[[dict[DocKey, Document]], tuple[list[Write], None]]:
    def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
        ((key, doc),) = docs.items()
        return [Write.between(key, doc.value, body, doc.revision)], None

    return compute


def test_documents_written_here_are_read_back_from_memory_as_the_server_has_them(pg_schema_url: str) -> None:
    store = PostgresStore(pg_schema_url, auto_migrate=True)
    other = open_store(pg_schema_url)
    try:
        store.commit([Write.between(KEY, None, {"n": 0, "tags": ["a"]})])  # created
        assert store.get(KEY) == other.get(KEY)
        for n in range(1, 4):  # replaced by the optimistic commit, each read back after it
            store.update([KEY], _set({"n": n, "tags": ["a", str(n)]}), optimistic=True)
            with connections_taken(store) as taken:
                mine = store.get(KEY)
            assert len(taken) == 1  # (the revisions only: the body came from memory)
            theirs = other.get(KEY)
            assert mine == theirs and mine.body == {"n": n, "tags": ["a", str(n)]}
            assert mine.seq is not None and mine.at is not None and mine.revision == n + 1
        # listed and read under a prefix: the same documents
        store.commit([Write.between(OTHER, None, {"m": 1})])
        assert store.read_under("k", "") == other.read_under("k", "")
        assert store.read_first_under("k", ["d", "o"]) == other.read_first_under("k", ["d", "o"])
        # deleted here: absent, at the delete's revision, seq and time, still one round trip
        store.update([KEY], lambda docs: ([Write.between(KEY, docs[KEY].value, None, 4)], None))
        with connections_taken(store) as taken:
            gone = store.get(KEY)
        assert len(taken) == 1
        assert gone == other.get(KEY) and gone.body is None and gone.revision == 5
        # written by another store since: read from the server, not from memory
        other.commit([Write.between(OTHER, {"m": 1}, {"m": 2}, 1)])
        assert store.get(OTHER) == other.get(OTHER) and store.get(OTHER).body == {"m": 2}
    finally:
        store.close()
        other.close()
