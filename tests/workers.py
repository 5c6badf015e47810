"""Worker processes for the concurrency and crash tests (run as ``python -m tests.workers``)."""

from __future__ import annotations

import sys

from stateflow.store import DocKey, Document, Write, open_store

A = DocKey("counters", "a")
B = DocKey("counters", "b")


def bump(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
    """One read-modify-write cohort: increment both counters and append to a log."""
    writes = []
    for key in (A, B):
        doc = docs[key]
        body = doc.body or {"n": 0, "log": []}
        new = {"n": body["n"] + 1, "log": [*body["log"][-20:], body["n"] + 1]}
        writes.append(Write.between(key, doc.value, new, doc.revision))
    return writes, None


def increment(location: str, count: int) -> None:
    store = open_store(location, auto_migrate=True)
    try:
        for _ in range(count):
            store.update([A, B], bump, {"door": "test", "pid": "worker"})
    finally:
        store.close()


def forever(location: str) -> None:
    """Write cohorts until killed; print a line once the first one is durable."""
    store = open_store(location, auto_migrate=True)
    store.update([A, B], bump)
    print("ready", flush=True)
    while True:
        store.update([A, B], bump)


def patcher(location: str, index: int, count: int) -> None:
    """``patch_state`` of its own key in one shared session scope, ``count`` times; prints
    ``step:i`` once each is acknowledged, and ``served`` when the server merged any."""
    from stateflow.memory import Identity, MemoryView

    store = open_store(location, auto_migrate=True)
    view = MemoryView(store, Identity.of("bench", "/bench", "shared"))
    try:
        for i in range(count):
            view.patch_state({"session": {"tactics": {f"w{index}": f"step {i}"}}})
            print(f"step:{i}", flush=True)
        if getattr(store, "_served_revisions", None):
            print("served", flush=True)
    finally:
        store.close()


if __name__ == "__main__":
    command, location = sys.argv[1], sys.argv[2]
    if command == "increment":
        increment(location, int(sys.argv[3]))
    elif command == "forever":
        forever(location)
    elif command == "patcher":
        patcher(location, int(sys.argv[3]), int(sys.argv[4]))
    else:
        raise SystemExit(f"unknown command {command}")
