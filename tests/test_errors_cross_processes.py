"""Every exception class the package exports survives pickling — so it crosses processes
(multiprocessing, ``concurrent.futures``) and copies — as the same type with the same message and
attributes. The classes are found by walking the package's public modules, so a new one is held
to this too: one whose constructor takes more than a message must be given realistic arguments
here."""

from __future__ import annotations

import concurrent.futures
import copy
import importlib
import multiprocessing
import pickle
import pkgutil
from collections.abc import Callable
from typing import Any

import pytest

import stateflow
from stateflow.errors import StateflowError
from stateflow.store import DocKey


def _exported_exceptions() -> list[type[BaseException]]:
    """Every exception class defined under a public name in a public module of the package."""
    found: list[type[BaseException]] = []
    for module_info in pkgutil.walk_packages(stateflow.__path__, "stateflow."):
        if any(part.startswith("_") for part in module_info.name.split(".")):
            continue
        module = importlib.import_module(module_info.name)
        for name, value in vars(module).items():
            if (
                isinstance(value, type)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
                and not name.startswith("_")
            ):
                found.append(value)
    return sorted(found, key=lambda c: (c.__module__, c.__qualname__))


def _made(cls: type[BaseException]) -> BaseException:
    """An instance of ``cls`` as the package raises it."""
    if cls.__qualname__ in ARGUMENTS:
        args, kwargs = ARGUMENTS[cls.__qualname__]
        return cls(*args, **kwargs)
    own = [k for k in cls.__mro__ if "__init__" in vars(k) and k.__module__.startswith("stateflow.")]
    assert own in ([], [StateflowError]), (
        f"{cls.__module__}.{cls.__qualname__} has a constructor of its own: give it realistic "
        "arguments in ARGUMENTS"
    )
    return cls(f"{cls.__qualname__}: the state 'tickets' refused it; nothing was changed")


ARGUMENTS: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {
    "RevisionNotFound": ((DocKey("tickets", '["agent","bot","thread","t-1"]'), 7, 3), {}),
    "ClientError": (("state 'tickets' is not declared", "state-not-found", 404), {}),
    "JqBusy": (("every jq worker stayed busy for 5 seconds: retry later", 5), {}),
    "ReconcileNeeded": (
        (
            "attaching 'checklist' leaves 2 records without their items: reconcile them first",
            [{"subject": {"kind": "thread", "key": "t-1"}, "paths": [["items", 0]]}],
        ),
        {},
    ),
    "StoreBusy": (("another writer kept the write lock for 10 s; nothing was written", 3), {}),
    "WriteAborted": (("deadlock detected; nothing was written, retry", 2), {}),
    "RequestTaken": (("the wait for the write turn ran out", 1), {}),
    "CorruptStore": (("the catalog declaration of 'tickets' lacks its schema",), {"advised": True}),
    "MethodNotAllowed": (("DELETE is not allowed on /api/states", ["GET", "PUT"]), {}),
    "Unauthorized": (("the bearer token is not known",), {"invalid": True}),
    "CallAbandoned": ((True,), {}),
    "PayloadTooLarge": ((1_048_576,), {}),
    "BodyTimeout": ((60.0,), {}),
    "OpIdTaken": (({("tickets@agent/bot", "op-1"), ("tickets@agent/bot", "op-2")},), {}),
    "Answered": ((b'{"seq": 12}',), {}),
}

EXCEPTIONS = _exported_exceptions()


def test_the_walk_finds_the_package_exceptions() -> None:
    names = {c.__qualname__ for c in EXCEPTIONS}
    assert {"StateflowError", "RevisionNotFound", "ClientError", "JqBusy", "ReconcileNeeded"} <= names
    assert len(EXCEPTIONS) >= 60
    assert set(ARGUMENTS) <= names, "ARGUMENTS names a class the walk does not find"


def _same(original: BaseException, restored: BaseException) -> None:
    assert type(restored) is type(original)
    assert str(restored) == str(original)
    assert restored.args == original.args
    assert vars(restored) == vars(original)
    if isinstance(original, StateflowError):
        assert isinstance(restored, StateflowError)
        assert (restored.message, restored.code, restored.http_status) == (
            original.message,
            original.code,
            original.http_status,
        )


@pytest.mark.parametrize("cls", EXCEPTIONS, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_every_exported_exception_pickles_and_copies(cls: type[BaseException]) -> None:
    original = _made(cls)
    original.add_note("raised while writing thread/t-1")
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        _same(original, pickle.loads(pickle.dumps(original, protocol)))
    _same(original, copy.copy(original))
    _same(original, copy.deepcopy(original))


def _raise(cls_name: str) -> None:
    cls = next(c for c in EXCEPTIONS if c.__qualname__ == cls_name)
    raise _made(cls)


def test_errors_raised_in_a_worker_process_reach_the_caller_whole() -> None:
    # (before: the pool could not unpickle such an error — the caller got a BrokenProcessPool
    # or a TypeError in place of the refusal)
    context = multiprocessing.get_context("spawn")
    call: Callable[[str], None] = _raise
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
        for cls_name in ("RevisionNotFound", "ClientError", "JqBusy", "ReconcileNeeded"):
            with pytest.raises(StateflowError) as raised:
                pool.submit(call, cls_name).result(timeout=120)
            cls = next(c for c in EXCEPTIONS if c.__qualname__ == cls_name)
            _same(_made(cls), raised.value)
