"""Results are the caller's own: editing one changes no later read and no stored history.

The store caches decoded documents and hands the same objects to every reader; memory and
declared-state results must be detached from them (and accepted input from the caller's
objects), on both backends.
"""

from __future__ import annotations

from typing import Any

from stateflow.states import StatesService
from stateflow.store import SqlStore

from .conftest import StoreFactory
from .memory_helpers import view


def test_editing_a_read_result_changes_neither_later_reads_nor_history(
    store: SqlStore, open_migrated: StoreFactory
) -> None:
    m = view(store)
    m.patch_state({"session": {"tactics": {"a": {"b": 1}}}})
    m.read_state({"path": "session.tactics"})["value"]["a"]["b"] = 99
    assert m.read_state({"path": "session.tactics"}) == {"value": {"a": {"b": 1}}}
    m.patch_state({"session": {"tactics": {"c": 3}}})
    fresh = view(open_migrated())  # a new connection: what was stored, not what was cached
    assert fresh.read_state({"path": "session.tactics"}) == {"value": {"a": {"b": 1}, "c": 3}}
    assert fresh.read_state({"path": "session[1].tactics"}) == {"value": {"a": {"b": 1}}}
    assert fresh.read_state({"path": "session.patches[0]"}) == {"value": {"tactics": {"c": 3}}}


def test_every_memory_result_is_detached(store: SqlStore) -> None:
    m = view(store)
    m.patch_state({"session": {"tactics": {"a": {"b": 1}}, "lazy": {"notes": [{"n": 1}, {"n": 2}]}}})
    m.patch_state({"cwd": {"strategy": {"s": {"t": 1}}}})
    expected = {"value": {"tactics": {"a": {"b": 1}}, "strategy": {"s": {"t": 1}}}}

    def edit(node: Any) -> None:
        """Vandalize every object and array reachable from ``node``."""
        if type(node) is dict:
            for value in list(node.values()):
                edit(value)
            node["vandal"] = True
        elif type(node) is list:
            for value in node:
                edit(value)
            node.append("vandal")

    edit(m.read_state({"paths": ["effective", "session.lazy.notes[0:2]", "session.lazy.notes[1]"]}))
    edit(m.read_state({"path": "session[1].lazy.notes", "projection": "patch"}))
    edit(m.read_state({"path": "session.patches[0]"}))
    edit(m.context().head)
    edit(m.patch_state({"session": {"tactics": {"a": {"c": 2}}}}).state_updates)
    edit(m.as_of(1, "effective"))
    edit(m.transitions())
    expected["value"]["tactics"]["a"]["c"] = 2
    assert m.read_state({"path": "effective"}) == expected
    assert m.read_state({"path": "session.lazy.notes"}) == {"value": [{"n": 1}, {"n": 2}]}
    assert m.context().head["state"] == expected["value"]
    assert m.read_state({"path": "session.patches[1]"}) == {
        "value": {"tactics": {"a": {"b": 1}}, "lazy": {"notes": [{"n": 1}, {"n": 2}]}}
    }


DECL = {
    "schema": {"type": "object", "properties": {"a": {"type": "object"}, "n": {"type": "integer"}}},
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}
SUBJECT = {"target_kind": "agent", "target_name": "a", "kind": "thread", "key": "t1"}


def test_declared_state_results_and_inputs_are_detached(store: SqlStore, open_migrated: StoreFactory) -> None:
    states = StatesService(store)
    states.declare("notes", DECL)
    document = {"a": {"b": 1}}
    written = states.replace("notes", SUBJECT, document)
    assert written is not None
    document["a"]["b"] = -1  # the caller's input, edited after the write
    written["data"]["a"]["b"] = -2  # the write's result
    read = states.read("notes", SUBJECT)
    assert read is not None and read["data"] == {"a": {"b": 1}}
    read["data"]["a"]["b"] = -3
    read["subject"]["key"] = "other"
    value = {"b": 2}
    merged = states.merge("notes", SUBJECT, {"a": value})
    assert merged is not None
    value["b"] = -4
    merged["data"]["a"]["b"] = -5
    ops = [{"op": "set", "path": ["a", "c"], "value": {"d": 1}}]
    applied = states.apply("notes", SUBJECT, ops)
    ops[0]["value"]["d"] = -6  # type: ignore[index]
    assert applied.data is not None
    applied.data["a"]["c"]["d"] = -7
    [batched] = states.apply_batch(
        [{"state": "notes", "subject": SUBJECT, "ops": [{"op": "set", "path": ["n"], "value": 1}]}]
    )
    assert batched.data is not None
    batched.data["a"]["b"] = -8
    declaration = states.get_declaration("notes")
    declaration["schema"]["properties"]["a"]["type"] = "string"
    [listed] = [d for d in states.list_declarations() if d["name"] == "notes"]
    listed["schema"]["properties"]["n"]["type"] = "string"

    expected = {"a": {"b": 2, "c": {"d": 1}}, "n": 1}
    read = states.read("notes", SUBJECT)
    assert read is not None and read["data"] == expected and read["subject"] == SUBJECT
    assert states.get_declaration("notes")["schema"] == DECL["schema"]
    fresh = StatesService(open_migrated())  # what was stored, not what was cached
    again = fresh.read("notes", SUBJECT)
    assert again is not None and again["data"] == expected
    assert fresh.get_declaration("notes")["schema"] == DECL["schema"]
