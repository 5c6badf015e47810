"""A user's program type-checks against the package as published: ``mypy --strict`` finds the
sync and async APIs' real signatures and results (not ``Any``), and the async docs' examples
check too. (``stateflow.aio`` wrapped every method in a ``__getattr__``: each call was untyped.)"""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

import stateflow
from stateflow.aio import AsyncMemoryView, AsyncStatesService, AsyncStore, AsyncUnit
from stateflow.memory import MemoryView
from stateflow.states import StatesService
from stateflow.states.unit import Unit
from stateflow.store import Store

SRC = Path(stateflow.__file__).resolve().parents[1]
DOCS = Path(__file__).resolve().parents[1] / "docs"

PROGRAM = """
from __future__ import annotations

import asyncio
import tempfile
from typing import Any, assert_type

import stateflow
import stateflow.aio
from stateflow.memory import Receipt
from stateflow.states.results import ApplyResult, Record, Stats
from stateflow.states.service import ApplyResult as ApplyResultOfService
from stateflow.store import Document, DocKey, Listed

DECLARATION: dict[str, Any] = {
    "schema": {"type": "object", "properties": {"status": {"type": "string"}}},
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}
SUBJECT = {"target_kind": "agent", "target_name": "bot", "kind": "thread", "key": "t-1"}


def sync_api(path: str) -> int:
    with stateflow.connect(path) as sf:
        states = sf.states()
        states.declare("tickets", DECLARATION)
        replaced = states.replace("tickets", SUBJECT, {"status": "open"})
        assert_type(replaced, Record)
        merged = states.merge("tickets", SUBJECT, {"status": "closed"})
        assert_type(merged, Record)
        applied = states.apply("tickets", SUBJECT, [{"op": "set", "path": ["status"], "value": "x"}])
        assert_type(applied, ApplyResult)
        old_home: ApplyResultOfService = applied
        assert_type(states.read("tickets", SUBJECT), Record | None)
        assert_type(states.revert("tickets", SUBJECT, 1), Record | None)
        return replaced["revision"] + merged["revision"] + (old_home.seq or 0)


async def async_api(path: str) -> int:
    async with await stateflow.aio.connect(path) as sf:
        await sf.states.declare("tickets", DECLARATION)
        replaced = await sf.states.replace("tickets", SUBJECT, {"status": "open"})
        assert_type(replaced, Record)
        merged = await sf.states().merge("tickets", SUBJECT, {"status": "closed"})
        assert_type(merged, Record)
        applied = await sf.states.apply("tickets", SUBJECT, [{"op": "set", "path": ["status"], "value": "x"}])
        assert_type(applied, ApplyResult)
        record = await sf.states.read("tickets", SUBJECT, revision=1)
        assert_type(record, Record | None)
        assert_type(await sf.states.stats("tickets"), Stats)

        memory = sf.memory(agent="docs", cwd=".", session="typed")
        assert_type(await memory.patch_state({"session": {"tactics": {"next": "ship"}}}), Receipt)
        assert_type(await memory.read_state({"path": "tactics.next"}), dict[str, Any])
        forked = await memory.fork("typed-2")
        assert_type(await forked.transitions(5), list[dict[str, Any]])

        assert_type(await sf.store.get(DocKey("tickets", "x")), Document)
        assert_type(await sf.store.scan("tickets", limit=3), list[Listed])
        async with await sf.states.unit() as unit:
            staged = await unit.apply("tickets", SUBJECT, [{"op": "set", "path": ["status"], "value": "y"}])
            assert_type(staged, ApplyResult)
            assert_type(await unit.read("tickets", SUBJECT), dict[str, Any] | None)
        assert_type(await sf.states.effective_schema(DECLARATION), dict[str, Any])
        declared = await stateflow.aio.call(sf.store.sync, sf.states.sync.get_declaration, "tickets")
        return replaced["revision"] + len(declared["name"])


print(sync_api(f"{tempfile.mkdtemp()}/sync.db"), asyncio.run(async_api(f"{tempfile.mkdtemp()}/async.db")))
"""

MISTAKES = """
from __future__ import annotations

import stateflow.aio


async def main() -> None:
    async with await stateflow.aio.connect("x.db") as sf:
        await sf.states.raed("tickets", {})
        await sf.states.read(7, {})
        await sf.states.replace("tickets", {}, {}, expect_revision="latest")
        record = await sf.states.read("tickets", {})
        print(record["data"])
        await sf.memory().read_state({}, "extra")
        await sf.store.get("not a key")
        await stateflow.aio.call(sf.store.sync, sf.states.sync.read, "tickets", {}, revision="1")
"""


ASYNC_EXAMPLES = re.findall(r"```python\n(.*?)```", (DOCS / "async.md").read_text(), re.DOTALL)


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """``mypy --strict`` over the user program, the mistakes and the async docs' examples, in
    one run (the package is analysed once): each file's error lines."""
    folder = tmp_path_factory.mktemp("typed")
    sources = {"user": PROGRAM, "mistakes": MISTAKES}
    sources.update({f"example_{n}": code for n, code in enumerate(ASYNC_EXAMPLES)})
    for name, code in sources.items():
        (folder / f"{name}.py").write_text(code)
    (folder / "mypy.ini").write_text("[mypy]\nstrict = True\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            "mypy.ini",
            "--no-error-summary",
            *(f"{n}.py" for n in sources),
        ],
        cwd=folder,
        env={**os.environ, "MYPYPATH": str(SRC)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr
    errors: dict[str, list[str]] = {name: [] for name in sources}
    for line in done.stdout.splitlines():
        if ": error: " in line:
            errors[line.split(".py:", 1)[0]].append(line)
    errors["_folder"] = [str(folder)]
    return errors


def test_a_user_program_type_checks_strictly_with_real_types(checked: dict[str, list[str]]) -> None:
    assert checked["user"] == []
    # and it runs as written
    folder = Path(checked["_folder"][0])
    ran = subprocess.run(
        [sys.executable, "user.py"],
        cwd=folder,
        env={**os.environ, "PYTHONPATH": str(SRC), "XDG_DATA_HOME": str(folder / "data")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr


def test_mistakes_in_async_calls_are_caught_by_the_type_checker(checked: dict[str, list[str]]) -> None:
    lines = [line.split(": error: ", 1)[1] for line in checked["mistakes"]]
    expected = [
        r'"AsyncStatesService" has no attribute "raed"',
        r'Argument 1 has incompatible type "int"; expected "str"',
        r'Argument "expect_revision" has incompatible type "Literal\[\'latest\'\]"',
        r'Value of type "Record \| None" is not indexable',
        r"Too many arguments",
        r'Argument 1 has incompatible type "str"; expected "DocKey"',
        r'Argument "revision" (to "call" )?has incompatible type "str"; expected "int \| None"',
    ]
    for pattern in expected:
        assert any(re.match(pattern, line) for line in lines), (pattern, lines)
    assert len(lines) == len(expected), lines


@pytest.mark.parametrize("number", range(len(ASYNC_EXAMPLES)))
def test_the_async_docs_examples_type_check_strictly(number: int, checked: dict[str, list[str]]) -> None:
    assert checked[f"example_{number}"] == []


@pytest.mark.parametrize(
    ("wrapper", "synchronous", "own"),
    [
        (AsyncStatesService, StatesService, {"unit"}),
        (AsyncMemoryView, MemoryView, {"fork"}),
        (AsyncStore, Store, {"close"}),
        (AsyncUnit, Unit, {"savepoint"}),
    ],
)
def test_every_synchronous_method_has_a_typed_coroutine(
    wrapper: type, synchronous: type, own: set[str]
) -> None:
    """Each public method of the synchronous object — its static ones too — is a coroutine
    method of its wrapper, with the same parameters (what ``help()`` shows), declared on the
    class — not found at run time. (A unit's ``savepoint`` reads nothing: it answers at once; its
    own coroutines, ``aapply``/``aread``, are the wrapper's ``apply``/``read``.)"""
    methods = {
        name
        for name in dir(synchronous)
        if not name.startswith("_")
        and isinstance(inspect.getattr_static(synchronous, name), staticmethod | types.FunctionType)
        and not inspect.iscoroutinefunction(getattr(synchronous, name))
    }
    declared = {name for name in vars(wrapper) if not name.startswith("_")}
    assert methods <= declared, methods - declared
    for name in methods - {"savepoint"}:
        coroutine = vars(wrapper)[name]
        assert inspect.iscoroutinefunction(coroutine), name
        if name not in own:
            assert inspect.signature(coroutine) == inspect.signature(getattr(synchronous, name)), name
