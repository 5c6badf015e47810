"""A refused document's report (where it first fails its schema, and why) never holds a writer for
long: jsonschema-rs builds it by trying every branch of every ``anyOf``, which through a recursive
``$ref`` grows exponentially with the document's depth, so such a schema is explained in a worker
process stopped at ``EXPLAIN_SECONDS``."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

import stateflow
from stateflow.errors import PatchError
from stateflow.memory import ExtraRoot
from stateflow.states.schema import DocumentInvalid
from stateflow.store import SqlStore
from stateflow.validators import EXPLAIN_SECONDS, UNEXPLAINED, compiled, first_error, report

from .memory_helpers import view

# Three alternatives at every level, each failing at once on a required member but, in a report,
# also recursing into "a": a report's work triples with each level (is_valid stops at the first
# failure and stays fast).
BRANCHING: dict[str, Any] = {
    "$defs": {
        "n": {
            "anyOf": [
                {"type": "object", "properties": {"a": {"$ref": "#/$defs/n"}}, "required": ["x"]},
                {"type": "object", "properties": {"a": {"$ref": "#/$defs/n"}}, "required": ["y"]},
                {"type": "object", "properties": {"a": {"$ref": "#/$defs/n"}}, "maxProperties": 1},
            ]
        }
    },
    "$ref": "#/$defs/n",
}
JOB = {"target_kind": "tool", "target_name": "runner", "kind": "job", "key": "j-1"}


def nested(depth: int) -> dict[str, Any]:
    doc: dict[str, Any] = {"z": 1, "q": 2}
    for _ in range(depth):
        doc = {"a": doc, "w": 1}
    return doc


def declared(path: Path) -> Any:
    sf = stateflow.connect(str(path / "s.db"))
    states = sf.states()
    schema = {"type": "object", "properties": {"a": {}}, **BRANCHING}
    states.declare("deep", {"schema": schema, "subject_kinds": ["job"], "default_subject_kind": "job"})
    return sf, states


def test_a_report_that_would_take_minutes_is_given_up_at_its_limit_and_the_write_refused(
    tmp_path: Path,
) -> None:
    sf, states = declared(tmp_path)
    with sf:
        # depth 17 took ~55 s to explain in process, holding the interpreter lock all the while
        ticks = 0
        stop = threading.Event()

        def tick() -> None:
            nonlocal ticks
            while not stop.wait(0.01):
                ticks += 1

        ticker = threading.Thread(target=tick)
        ticker.start()
        began = time.monotonic()
        with pytest.raises(DocumentInvalid) as refused:
            states.replace("deep", JOB, nested(17))
        took = time.monotonic() - began
        stop.set()
        ticker.join()
        assert UNEXPLAINED in str(refused.value) and refused.value.code == "invalid-document"
        assert took < EXPLAIN_SECONDS + 20  # the worker's start-up on a loaded machine, not minutes
        assert ticks >= took * 10  # other threads ran meanwhile (at a 10 ms tick, 100 a second)
        assert states.read("deep", JOB) is None  # nothing written
        # the next write goes through at once: the writer was not left held, a new worker answers
        assert states.replace("deep", JOB, {"x": 1})["revision"] == 1
        with pytest.raises(DocumentInvalid, match=r"at \$: \{\"a\".* is not valid under any of the schemas"):
            states.replace("deep", JOB, {"x": 1, "a": {"z": 1, "q": 2}})


def test_a_schema_with_references_is_explained_as_in_process_and_one_without_never_leaves_it() -> None:
    shallow = nested(2)
    by_worker = first_error(BRANCHING, shallow)
    assert by_worker is not None and by_worker == report(compiled(BRANCHING), shallow)
    assert by_worker.at() == "" and "anyOf" in by_worker.message
    flat = {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "integer"}}}}
    found = first_error(flat, {"items": [1, "two"]})
    assert found is not None and found.path == ("items", 1) and found.at() == ".items[1]"


def test_memory_extra_roots_refuse_alike(store: SqlStore) -> None:
    m = view(store, extra_roots=(ExtraRoot("tree", {"type": "object", **BRANCHING}),))
    with pytest.raises(PatchError) as refused:
        m.patch_state({"session": {"tree": nested(17)}})
    assert UNEXPLAINED in str(refused.value) and "session.tree does not match its declared schema" in str(
        refused.value
    )
    assert m.read_state({"path": "session"}).get("value", {}) in ({}, None)
    with pytest.raises(PatchError, match=r"session\.tree does not match its declared schema: \{\"a\""):
        m.patch_state({"session": {"tree": {"x": 1, "a": {"z": 1, "q": 2}}}})
