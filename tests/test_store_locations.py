"""A SQLite store named by a path or by either URL form is one store under one name: the URL it
names itself by (in messages, and as the key of what it keeps per store, such as the views a
session was last shown) opens the same file and names it the same again."""

from __future__ import annotations

from pathlib import Path

from stateflow.store import DocKey, Write, open_store


def test_a_sqlite_store_names_itself_by_one_url_whichever_form_opened_it(tmp_path: Path) -> None:
    path = tmp_path / "one.db"
    store = open_store(str(path))
    try:
        store.commit([Write.between(DocKey("notes", "a"), None, {"n": 1})])
        named = store.url
    finally:
        store.close()
    assert named == f"sqlite:///{path}"
    for location in (str(path), f"sqlite://{path}", f"sqlite:///{path}", named):
        again = open_store(location, create=False)
        try:
            assert again.url == named, location
            assert again.get(DocKey("notes", "a")).value == {"n": 1}, location
        finally:
            again.close()
