"""The one cache of compiled JSON Schema validators (jsonschema-rs, draft 2020-12) in a process,
shared by the declared-states service and agent memory's extra roots: a schema is compiled
once, whichever service asks, by its canonical bytes (bounded, least recently used out).

It also tells where a document fails its schema (:func:`first_error`). Checking is cheap, but
jsonschema-rs builds a refusal's report by trying every branch of every ``anyOf``/``oneOf`` and
keeping each branch's errors; through a recursive ``$ref`` that grows exponentially with the
document's depth (a 300-byte schema and a document 17 levels deep: about a minute), holding the
interpreter lock all the while. So a schema that can recurse is explained in a worker process
that is killed at :data:`EXPLAIN_SECONDS`; the refusal then stands without its location.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Final

import orjson

SIZE: Final = 256
EXPLAIN_SECONDS: Final = 2.0
"""How long a refusal's report may take to build in the worker; normal schemas take microseconds
to milliseconds, so past this the schema's alternatives branch too widely to explain."""
UNEXPLAINED: Final = f"where was not found within {EXPLAIN_SECONDS:g} s: the schema's alternatives branch too widely to explain"
"""Said in a refusal's stead of its location when :func:`first_error` gave up."""
EXPLAIN_MEMORY: Final = 512 * 1024 * 1024
_WORKER_MODULE: Final = "stateflow.validator_worker"
_REFERENCES: Final = frozenset(("$ref", "$dynamicRef", "$recursiveRef"))

_items: OrderedDict[bytes, Any] = OrderedDict()
_lock = threading.Lock()


def compiled(schema: Any) -> Any:
    """The compiled validator of ``schema`` (a JSON object)."""
    key = orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)
    with _lock:
        found = _items.get(key)
        if found is not None:
            _items.move_to_end(key)
            return found
    import jsonschema_rs  # loaded by the first validation, not by reads

    validator = jsonschema_rs.Draft202012Validator(orjson.loads(key))
    with _lock:
        _items[key] = validator
        while len(_items) > SIZE:
            _items.popitem(last=False)
    return validator


def cached() -> int:
    """How many validators the cache holds (for tests and diagnostics)."""
    with _lock:
        return len(_items)


@dataclass(frozen=True, slots=True)
class SchemaError:
    """Where a document first fails its schema (by instance path) and why."""

    path: tuple[str | int, ...]
    message: str

    def at(self) -> str:
        """The path as ``.name[3].other`` (empty at the root)."""
        return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in self.path)


def first_error(schema: Any, document: Any) -> SchemaError | None:
    """Where ``document``, known to be invalid, first fails ``schema``; None when that could not
    be told within :data:`EXPLAIN_SECONDS` (or the document turned out valid)."""
    if not _may_recurse(schema):
        # Without references the report's work is bounded by the schema's size times the
        # document's, like the check itself: built here, without a process hop.
        return report(compiled(schema), document)
    return _explainer.explain(schema, document)


def report(validator: Any, document: Any) -> SchemaError | None:
    """The first error of ``document`` under ``validator`` by instance path, built in this process."""
    errors = sorted(validator.iter_errors(document), key=lambda e: [str(p) for p in e.instance_path])
    if not errors:
        return None
    return SchemaError(tuple(errors[0].instance_path), errors[0].message)


def _may_recurse(schema: Any) -> bool:
    """Whether ``schema`` holds a reference anywhere (over-approximated: a property named
    ``$ref`` counts too), which is what lets a report's branches multiply."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if not _REFERENCES.isdisjoint(node):
                return True
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


class _Explainer:
    """One worker process building refusal reports, one at a time, started on first use and
    killed (then replaced on the next use) when a report runs past its limit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._worker: Any = None
        self._spawner: Any = None

    def explain(self, schema: Any, document: Any) -> SchemaError | None:
        from stateflow.workers import START_SECONDS

        with self._lock:
            worker = self._worker
            try:
                if worker is None or not worker.alive():
                    worker = self._worker = self._spawn()
                    if worker.receive(time.monotonic() + START_SECONDS) is None:
                        raise EOFError  # not started in time: no report this time
                worker.send({"schema": schema, "document": document})
                answer = worker.receive(time.monotonic() + EXPLAIN_SECONDS)
            except (EOFError, BrokenPipeError):
                answer = None
            if answer is None:
                if worker is not None:
                    worker.kill()
                self._worker = None
                return None
        if "message" not in answer:
            return None
        return SchemaError(tuple(answer["path"]), answer["message"])

    def _spawn(self) -> Any:
        from concurrent.futures import ThreadPoolExecutor

        from stateflow.workers import WorkerProcess, cpu_backstop

        if self._spawner is None:
            # The parent-death signal follows the *thread* that forked the worker: one long-lived
            # thread starts it, so a request thread's exit does not kill it mid-report.
            self._spawner = ThreadPoolExecutor(1, thread_name_prefix="schema-explainer")
        cpu = cpu_backstop(EXPLAIN_SECONDS)
        return self._spawner.submit(WorkerProcess, _WORKER_MODULE, EXPLAIN_MEMORY, cpu).result()

    def forget(self) -> None:
        """In a forked child: the parent's worker, lock and thread are not this process's."""
        self.__init__()  # type: ignore[misc]


_explainer = _Explainer()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_explainer.forget)
