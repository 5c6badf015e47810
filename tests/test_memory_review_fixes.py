"""The agent-memory contract where a review found it broken: empty patches, patch reads of paths
that do not exist, ownership wording, the batch shape of a scope-patch path, range spellings in
the dangling-reference hint, ``python -m`` entry points and repeated scopes at every door.
Through real parts: a SQLite store file via the public API, the CLI in a subprocess, the MCP
server over HTTP."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import stateflow
from stateflow.doc.merge import merge_patch
from stateflow.errors import InvalidInput, SelectionError
from stateflow.memory import MemoryView
from stateflow.tools import PATCH_STATE_DESCRIPTION

from .test_mcp import FULL, http_client, served  # noqa: F401 (the served fixture)

CURRENT = "State already current."
IDENTITY = ("--agent", "a", "--cwd", "/tmp", "--session", "s")


@pytest.fixture
def sf(tmp_path: Path) -> Iterator[stateflow.Stateflow]:
    with stateflow.connect(str(tmp_path / "m.db")) as opened:
        yield opened


def memory(sf: stateflow.Stateflow, **kw: Any) -> MemoryView:
    return sf.memory(agent="a", cwd="/tmp", session="s", **kw)


# ------------------------------------------------------------------ 1. an empty object patch


def test_an_empty_object_patch_is_a_no_op_over_any_value(sf: stateflow.Stateflow) -> None:
    """Seed: empty supplied semantic patches are invalid no-ops, while null is deletion syntax.
    ``{}`` (or an object that sets nothing) onto a text, a number, an array, an object or an
    array element changes nothing and records nothing."""
    m = memory(sf)
    tactics = {"next": "ship it", "n": 3, "steps": ["a", "b"], "o": {"k": 1}}
    m.patch_state({"session": {"tactics": tactics, "lazy": {"arr": ["s", 1, {"x": 1}]}}})
    latest = m.read_state({"path": "session.patches[0]"})
    empties: list[dict[str, Any]] = [
        {"tactics": {"o": {}}},
        {"tactics": {"next": {}}},
        {"tactics": {"n": {}}},
        {"tactics": {"steps": {}}},
        {"tactics": {"o": {"k": {}}}},  # (a number emptied would have emptied o, then tactics)
        {"tactics": {"steps": {"x": {}}}},
        {"lazy": {"arr": {"[0]": {}}}},
        {"lazy": {"arr": {"[1]": {}, "[2]": {}}}},
        {"lazy": {"arr": {"[0]": {"y": {}}}}},
    ]
    for patch in empties:
        receipt = m.patch_state({"session": patch})
        assert (receipt.message, receipt.state_updates) == (CURRENT, None), patch
    # a deletion below a scalar deletes nothing: the scalar stays, the hint names it
    receipt = m.patch_state({"session": {"tactics": {"next": {"b": None}}}})
    assert (receipt.message, receipt.state_updates) == (CURRENT, None)
    assert receipt.hints == [
        {
            "type": "missing-deletion",
            "target": "/session/tactics/next/b",
            "unavailable": "/session/tactics/next",
        }
    ]
    assert m.read_state({"path": "session.tactics"}) == {"value": tactics}
    assert m.read_state({"path": "session.lazy.arr"}) == {"value": ["s", 1, {"x": 1}]}
    assert m.read_state({"path": "session.patches[0]"}) == latest  # no transition recorded

    # beside a real change, the empty part stays a no-op: only the change is written
    receipt = m.patch_state({"session": {"tactics": {"next": {}, "steps": {}, "o": {"k": 2}}}})
    assert receipt.state_updates is not None
    # (every authored path is listed with its accepted value: the ones {} touched are intact)
    assert receipt.state_updates["effective"] == [
        {"path": ["tactics", "next"], "value": "ship it"},
        {"path": ["tactics", "steps"], "value": ["a", "b"]},
        {"path": ["tactics", "o", "k"], "value": 2},
    ]
    assert m.read_state({"path": "session.patches[0]"}) == {"value": {"tactics": {"o": {"k": 2}}}}
    assert m.read_state({"path": "session.tactics"}) == {"value": {**tactics, "o": {"k": 2}}}


def test_an_empty_patch_onto_an_owned_intent_cascades_nothing(sf: stateflow.Stateflow) -> None:
    m = memory(sf)
    m.patch_state(
        {
            "session": {
                "intents": {"release": {"why": "ship", "plan": {"$ref": "session.lazy.plan"}}},
                "lazy": {"plan": [1]},
            }
        }
    )
    receipt = m.patch_state({"session": {"intents": {"release": {"why": {}, "plan": {}}}}})
    assert (receipt.message, receipt.state_updates) == (CURRENT, None)
    assert m.read_state({"path": "session.lazy.plan"}) == {"value": [1]}


def test_the_memory_merge_keeps_a_value_an_empty_object_lands_on() -> None:
    for value in ("x", 3, True, ["a"]):
        assert merge_patch({"k": value}, {"k": {}}, prune=True) == {"k": value}
        assert merge_patch({"k": value}, {"k": {"z": None}}, prune=True) == {"k": value}
        assert merge_patch([value], {"[0]": {}}, prune=True) == [value]
        # a plain (non-memory) merge keeps its documented rule: an object starts from {}
        assert merge_patch({"k": value}, {"k": {}}) == {"k": {}}
    assert merge_patch({"k": {"a": 1}}, {"k": {"a": None}}, prune=True) == {}  # null still deletes


# ------------------------------------------------------------------ 2. patch reads of missing paths


def _error(m: MemoryView, path: str, projection: str) -> str | None:
    try:
        m.read_state({"path": path, "projection": projection})
    except SelectionError as exc:
        return str(exc)
    return None


def test_the_patch_projection_refuses_what_the_value_projection_refuses(sf: stateflow.Stateflow) -> None:
    """Seed: a nonexistent path, wrong target kind or out-of-bounds index/range is a tool error —
    in every projection; ``{}`` and ``null`` describe a path that exists on one side."""
    m = memory(sf)
    m.patch_state({"session": {"lazy": {"arr": [1, 2, 3], "o": {"a": "x"}}, "tactics": {"t": 1}}})
    m.patch_state({"session": {"lazy": {"arr": [1, 2]}, "tactics": {"t": 2}}})
    m.patch_state({"cwd": {"tactics": {"u": 1}}})
    missing = [
        "session[1].lazy.arr[99]",
        "session[1].lazy.arr[5:9]",
        "session[1].lazy.arr[3]",
        "session[1].lazy.nosuchkey.deep",
        "session[1].lazy.arr[1].x",
        "session[1].tactics.t.x",
        "session[0].lazy.arr[99]",  # a transition that did not touch the scope
        "session[0].lazy.o.a.b",
        "effective[1].lazy.arr[99]",
        "effective[1].lazy.arr[2:4]",
        "effective[1].tactics.nope",
        "effective[2].lazy.arr[7]",
        "session[3].lazy.arr",  # the origin holds nothing
    ]
    for path in missing:
        refusal = _error(m, path, "value")
        assert refusal is not None, path
        assert _error(m, path, "patch") == refusal, path
    # paths there on one side keep their answers
    assert m.read_state({"path": "session[1].lazy.arr[2]", "projection": "patch"}) == {"patch": None}
    assert m.read_state({"path": "session[1].lazy.arr[1:3]", "projection": "patch"}) == {"patch": None}
    assert m.read_state({"path": "session[1].lazy.arr[0:2]", "projection": "patch"}) == {"patch": {}}
    assert m.read_state({"path": "session[1].lazy.o.a", "projection": "patch"}) == {"patch": {}}
    assert m.read_state({"path": "effective[2].lazy.arr[2]", "projection": "patch"}) == {"patch": 3}
    assert m.read_state({"path": "session[1].tactics.t", "projection": "patch"}) == {"patch": 2}
    assert m.read_state({"path": "session[0].lazy", "projection": "patch"}) == {"patch": {}}  # a plane
    with pytest.raises(SelectionError):  # a batch fails as a whole
        m.read_state({"paths": ["session[1].lazy.arr", "session[1].lazy.arr[99]"], "projection": "patch"})


# ------------------------------------------------------------------ 3. ownership wording


def test_the_texts_say_an_intent_owns_only_keys_of_its_own_scope(sf: stateflow.Stateflow) -> None:
    m = memory(sf)
    assert "same scope" in PATCH_STATE_DESCRIPTION and "other scopes never own" in PATCH_STATE_DESCRIPTION
    protocol = " ".join(m.protocol().split())
    assert "the intent's own scope" in protocol and "a ref into another scope never owns" in protocol
    # which is what happens: a cross-scope ref is left alone when its intent goes
    m.patch_state(
        {
            "session": {"intents": {"release": {"plan": {"$ref": "cwd.lazy.plan"}}}},
            "cwd": {"lazy": {"plan": ["a"]}},
        }
    )
    receipt = m.patch_state({"session": {"intents": {"release": None}}})
    assert "cascaded" not in (receipt.state_updates or {})
    assert m.read_state({"path": "cwd.lazy.plan"}) == {"value": ["a"]}


# ------------------------------------------------------------------ 4. batch shape of patches[k]


def test_a_paths_list_of_one_scope_patch_path_answers_positionally(sf: stateflow.Stateflow) -> None:
    m = memory(sf)
    m.patch_state({"session": {"tactics": {"t": 1}}})
    change = {"tactics": {"t": 1}}
    assert m.read_state({"paths": ["session.patches[0]"]}) == {"value": [change]}
    assert m.read_state({"paths": ["session.patches[0]"], "projection": "patch"}) == {"patch": [change]}
    assert m.read_state({"paths": ["session.patches[0]"], "projection": "keys"}) == {
        "meta": [{"type": "object", "size": 1}],
        "keys": [{"tactics": "object"}],
    }
    # the single path form keeps its bare payload
    assert m.read_state({"path": "session.patches[0]"}) == {"value": change}
    assert m.read_state({"path": "session.patches[0]", "projection": "keys"}) == {
        "meta": {"type": "object", "size": 1},
        "keys": {"tactics": "object"},
    }


# ------------------------------------------------------------------ 5. range spellings in the hint


@pytest.mark.parametrize(("written", "read"), [("[0..3]", "[0:3]"), ("[0:3]", "[0..3]")])
def test_the_dangling_hint_finds_a_range_in_either_spelling(
    sf: stateflow.Stateflow, written: str, read: str
) -> None:
    m = memory(sf)
    m.patch_state(
        {
            "session": {
                "lazy": {"arr": [1]},
                "tactics": {
                    "r": {"$ref": f"session.lazy.arr{written}"},
                    "n": f"see $session.lazy.arr{written}.",
                },
            }
        }
    )
    answer = m.read_state({"path": f"session.lazy.arr{read}"})
    assert answer["value"] is None
    assert answer["hint"][0]["paths"] == ["session.tactics.r", "session.tactics.n"]
    with pytest.raises(SelectionError):  # another range is another address
        m.read_state({"path": "session.lazy.arr[0:4]"})


# ------------------------------------------------------------------ 6. python -m


@pytest.mark.parametrize("module", ["stateflow", "stateflow.cli.main"])
def test_python_m_runs_the_cli(tmp_path: Path, module: str) -> None:
    db = str(tmp_path / "m.db")
    with stateflow.connect(db) as opened:
        memory(opened).patch_state({"session": {"tactics": {"next": "ship"}}})
    done = subprocess.run(
        [sys.executable, "-m", module, "--store", db, "tool", "read_state", '{"path": "tactics"}', *IDENTITY],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stdout.strip()) == (0, '{"value":{"next":"ship"}}'), done.stderr
    helped = subprocess.run(
        [sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=120
    )
    assert helped.returncode == 0 and helped.stdout.startswith("Usage: stateflow"), helped


# ------------------------------------------------------------------ 7. repeated scopes


REPEATS = (
    "scopes must be a non-empty subset of global, cwd, session without repeats (got ['session', 'session'])"
)


def test_repeated_scopes_are_refused_alike_from_python_and_the_cli(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    stateflow.connect(db).close()  # (the store exists: the refusal is the scopes')
    patch = json.dumps({"session": {"tactics": {"a": 1}}})
    cli = ("-c", "from stateflow.cli.main import main; main()", "--store", db, "tool", "patch_state", patch)
    done = subprocess.run(
        [sys.executable, *cli, *IDENTITY, "--scopes", "session,session"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and done.stderr.strip() == f"error[invalid-input]: {REPEATS}", done
    with stateflow.connect(db) as opened:
        assert memory(opened).read_state({"path": "session.tactics"}) == {"value": None}  # nothing written
        with pytest.raises(InvalidInput) as refused:
            memory(opened, scopes=("session", "session"))
    assert str(refused.value) == REPEATS


def test_repeated_scopes_are_refused_over_mcp_http(served: str) -> None:  # noqa: F811
    async def run() -> tuple[bool, str]:
        async with http_client(served, FULL, agent="a", session="s", scopes="session,session") as client:
            result = await client.call_tool("patch_state", {"session": {"tactics": {"a": 1}}})
            return result.is_error, result.content[0].text  # type: ignore[union-attr]

    is_error, text = anyio.run(run)
    assert is_error and text == f"error[invalid-input]: {REPEATS}", text
