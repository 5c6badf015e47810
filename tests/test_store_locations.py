"""A SQLite store named by a path or by either URL form is one store under one name: the URL it
names itself by (in messages, and as the key of what it keeps per store, such as the views a
session was last shown) opens the same file and names it the same again."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

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


def test_a_relative_store_names_itself_by_a_url_that_opens_it_from_anywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path)
    wrote = subprocess.run(
        ["stateflow", "--store", "./team.db", "doc", "put", "notes", "a", '{"n": 1}'],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert wrote.returncode == 0, wrote.stderr
    checked = subprocess.run(
        ["stateflow", "--store", "./team.db", "check"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    named = checked.stdout.split(": checked")[0]
    assert checked.returncode == 0 and named == f"sqlite:///{tmp_path / 'team.db'}", checked.stdout
    monkeypatch.chdir(tmp_path / "elsewhere")
    again = open_store(named, create=False)
    try:
        assert again.url == named and again.get(DocKey("notes", "a")).value == {"n": 1}
    finally:
        again.close()
