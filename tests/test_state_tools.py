"""The builtin state tools through the one dispatcher: subject resolution and provenance."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from stateflow.memory import Identity, MemoryView
from stateflow.states import StatesService
from stateflow.store import SqlStore
from stateflow.tools import ToolHost

DECL = {
    "schema": {"type": "object", "properties": {"status": {"type": "string"}, "items": {"type": "array"}}},
    "subject_kinds": ["session", "thread"],
    "default_subject_kind": "session",
}


@pytest.fixture
def host(store: SqlStore) -> ToolHost:
    states = StatesService(store)
    states.install_builtins()
    states.declare("notes", DECL)
    return ToolHost(MemoryView(store, Identity.of("coder", "/tmp", "s-1")), states)


def call(host: ToolHost, name: str, args: object) -> Any:
    result = host.call(name, args)
    assert not result.is_error, result.text
    return json.loads(result.text)["result"]


def test_default_subject_comes_from_the_ambient_turn(host: ToolHost) -> None:
    record = call(host, "state_replace", {"state": "notes", "data": {"status": "open"}})
    assert record["subject"] == {
        "target_kind": "agent",
        "target_name": "coder",
        "kind": "session",
        "key": "s-1",
    }
    assert call(host, "state_read", {"state": "notes"})["data"] == {"status": "open"}
    assert host.states is not None
    writes = host.states.writes("notes", record["subject"])
    origin = writes["items"][0]["origin"]
    assert origin["door"] == "tool" and origin["consumer"] == "state_replace" and origin["run_id"] == "s-1"
    assert origin["actor"] == "agent:coder"


def test_kind_and_key_use_the_ambient_target_and_a_bare_key_the_default_kind(host: ToolHost) -> None:
    call(
        host,
        "state_merge",
        {"state": "notes", "subject": {"kind": "thread", "key": "t9"}, "patch": {"status": "x"}},
    )
    assert call(
        host,
        "state_read",
        {
            "state": "notes",
            "subject": {"target_kind": "agent", "target_name": "coder", "kind": "thread", "key": "t9"},
        },
    )["data"] == {"status": "x"}
    call(host, "state_merge", {"state": "notes", "subject": "other-session", "patch": {"status": "y"}})
    assert call(
        host, "state_read", {"state": "notes", "subject": {"kind": "session", "key": "other-session"}}
    )["data"] == {"status": "y"}


def test_apply_with_op_id_and_guards(host: ToolHost) -> None:
    ops = [{"op": "set_by_key", "path": ["items"], "key_field": "id", "value": [{"id": "a"}]}]
    first = call(host, "state_apply", {"state": "notes", "ops": ops, "op_id": "tool-1"})
    assert first["applied"] is True
    again = call(host, "state_apply", {"state": "notes", "ops": ops, "op_id": "tool-1"})
    # the published replay answer, plus what says it was a replay (of the first write's seq)
    assert again == {
        "applied": False,
        "data": None,
        "seq": None,
        "skipped": [],
        "replayed": True,
        "replayed_seq": first["seq"],
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            {"state": "notes", "subject": {"target_kind": "agent", "kind": "session", "key": "k"}},
            "both target_kind and target_name",
        ),
        ({"state": "nope"}, "no state declared"),
        ({"state": "notes", "subject": {"kind": "person", "key": "k"}}, "not declared by state"),
        ({"state": "notes", "extra": 1}, "does not accept extra"),
        # a subject of neither alternative's type: both named (a bare key is as good as an object)
        ({"state": "notes", "subject": 5}, 'subject: 5 is not of type "object" or "string"'),
        ({}, "needs an object with a 'state'"),
    ],
)
def test_refusals_are_tool_errors(host: ToolHost, args: object, message: str) -> None:
    result = host.call("state_read", args)
    assert result.is_error and message in result.text


def test_memory_is_readable_through_the_state_tools(host: ToolHost) -> None:
    host.call("patch_state", {"session": {"tactics": {"next": "x"}}, "cwd": {"strategy": {"y": 1}}})
    assert call(host, "state_read", {"state": "memory"})["data"] == {"tactics": {"next": "x"}}
    assert call(host, "state_read", {"state": "memory", "subject": {"kind": "cwd", "key": "/tmp"}})[
        "data"
    ] == {"strategy": {"y": 1}}


def test_definitions_carry_annotations(host: ToolHost) -> None:
    defs = {d.name: d for d in host.definitions()}
    assert defs["state_read"].read_only and not defs["state_read"].destructive
    assert defs["state_apply"].destructive and "op_id" in defs["state_apply"].input_schema["properties"]


def test_template_jq_through_the_tool(host: ToolHost) -> None:
    assert host.states is not None
    host.states.put_template(
        "counter",
        {
            "schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
            "template_jq": {
                "value": {
                    "purpose": "input",
                    "params": ["plus"],
                    "jq": {"content": "(.n // 0) + $params.plus"},
                },
                "bump": {
                    "purpose": "update",
                    "params": ["by"],
                    "jq": {"content": '[{"op": "set", "path": ["n"], "value": ((.n // 0) + $input.by)}]'},
                },
            },
        },
    )
    host.states.attach("notes", "counter", {"path": ["counter"]})
    applied = call(
        host, "state_template_jq", {"state": "notes", "program": "bump", "input": {"by": 2}, "op_id": "b1"}
    )
    assert applied["applied"] is True and applied["data"]["counter"] == {"n": 2}
    value = call(
        host, "state_template_jq", {"state": "notes", "program": "counter.value", "params": {"plus": 1}}
    )
    assert value == {"name": "counter.value", "purpose": "input", "value": 3}
    # an argument the program's purpose does not take was dropped, and the refusal that followed
    # said the values were missing: it is refused by name, nothing written
    for args, said in (
        (
            {"program": "counter.value", "input": {"plus": 1}},
            "is an input program: it takes params, not input",
        ),
        ({"program": "counter.value", "params": {"plus": 1}, "op_id": "v1"}, "takes params, not op_id"),
        ({"program": "bump", "params": {"by": 2}}, "is an update program: it takes input, not params"),
        ({"program": "bump", "input": {"by": 2}, "params": {"by": 5}}, "it takes input, not params"),
    ):
        result = host.call("state_template_jq", {"state": "notes", **args})
        assert result.is_error and said in result.text, result.text
    assert call(host, "state_read", {"state": "notes"})["data"]["counter"] == {"n": 2}
    host.states.close()


def test_argument_errors_name_the_argument_with_the_package_own_schema_library() -> None:
    # The SQLite-only install depends on jsonschema-rs alone: checking a tool's arguments must
    # not need the pure-Python jsonschema package (present here only through the MCP extra).
    code = (
        "import sys\n"
        "from stateflow.states.tools import check_tool_arguments\n"
        "from stateflow.errors import InvalidInput\n"
        "try:\n"
        "    check_tool_arguments('state_apply', {'state': 'notes', 'ops': 'not-a-list'})\n"
        "except InvalidInput as e:\n"
        "    print(e)\n"
        "print('jsonschema' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    message, imported = out.strip().splitlines()
    assert message.startswith("state_apply: ops: ") and "not-a-list" in message
    assert imported == "False"
