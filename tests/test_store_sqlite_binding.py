"""The embedded store binds blobs and NULLs as they are, without the sqlite3 module's failed
``__adapt__`` lookup per value, and never replaces an adapter the process registered itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from stateflow.store import DocKey, Write, open_store

CHECK = """
import sqlite3
{before}
import stateflow.store.sqlite
adapters = sqlite3.adapters
blob_adapter = adapters[(bytes, sqlite3.PrepareProtocol)]
null_adapter = adapters[(type(None), sqlite3.PrepareProtocol)]
blob = b"\\x00blob\\xff"
print(blob_adapter(blob) is blob, null_adapter(None) is None, getattr(blob_adapter, "__name__", ""))
"""


def _run(before: str = "") -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", CHECK.format(before=before)],
        check=True,
        timeout=60,
        capture_output=True,
        text=True,
    )
    return out.stdout.split()


def test_blobs_and_nulls_are_bound_as_the_very_values_given() -> None:
    blob_same, null_same, _ = _run()
    assert blob_same == "True"
    assert null_same == "True"


def test_an_adapter_the_process_registered_first_is_kept() -> None:
    before = (
        "def mine(value): return value\n"
        "sqlite3.register_adapter(bytes, mine)\n"
        "sqlite3.register_adapter(type(None), mine)\n"
    )
    blob_same, null_same, name = _run(before)
    assert (blob_same, null_same, name) == ("True", "True", "mine")


def test_blobs_and_nulls_round_trip_through_a_store(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "bind.db"))
    key = DocKey("notes", "k")
    body = {"text": "x", "obj": {"a": [1, None, "\x00"]}, "empty": {}}
    store.commit([Write.between(key, None, body)])
    store.close()
    again = open_store(str(tmp_path / "bind.db"))
    assert again.get(key).body == body
    again.close()
