"""The record writes the instruction profilers count through the states service: ``bench_http``'s
small record ``replace`` and ``bench_commit_floor``'s op batch ``apply``. Each helper declares
its state on ``service`` and returns the loop that makes the writes for a range of indexes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def replaces(service: Any) -> Callable[[range], None]:
    """``bench_http``'s record ``replace``: 200 subjects written in turn, as its one client does."""
    from benchmarks.bench_http import DECLARATION
    from stateflow.http.app import _api_context
    from stateflow.states.models import StateSubject

    service.declare("bench", DECLARATION)
    context = _api_context("token:bench")
    subjects = [
        StateSubject(target_kind="agent", target_name="bench", kind="thread", key=f"c0-{i}")
        for i in range(200)
    ]

    def run(indexes: range) -> None:
        for i in indexes:
            document = {"count": i, "text": f"client 0 write {i}"}
            service.replace("bench", subjects[i % 200], document, context=context)

    return run


def applies(service: Any) -> Callable[[range], None]:
    """``bench_commit_floor``'s op batch (two ``set`` and a ``set_by_key``) through ``apply``."""
    from benchmarks.bench_states_vs_langgraph import DECL, ops_for, subject

    service.declare("bench", DECL)

    def run(indexes: range) -> None:
        for i in indexes:
            service.apply("bench", subject(i), ops_for(i))

    return run
