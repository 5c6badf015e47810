"""Python bytecodes and calls per op by function, own and with callees, traced on the calling
thread (``sys.settrace`` with opcode events): where a profiler's instructions go in Python.
Shared by the ``profile_*_instructions`` scripts' ``--bytecodes`` option."""

from __future__ import annotations

import collections
import sys
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any


def _name(frame: FrameType) -> str:
    code = frame.f_code
    where = code.co_filename.split("site-packages/")[-1].split("/src/")[-1]
    return f"{where}:{code.co_name}:{code.co_firstlineno}"


def _outers(frame: FrameType) -> set[str]:
    """The functions on ``frame``'s stack, each once however deep it recurses."""
    seen: set[str] = set()
    outer: FrameType | None = frame
    while outer is not None:
        seen.add(_name(outer))
        outer = outer.f_back
    return seen


def print_bytecodes(
    case: str, run: Callable[[range], None], ops: int, warm: int, top: int, skip: Sequence[str] = ()
) -> None:
    """``run(range(warm))`` untraced, then ``ops`` ops traced; print the ``top`` functions by
    bytecodes with callees, leaving out those whose name holds one of ``skip`` (the profiler's
    own frames, an event loop's)."""
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()
    total_calls: collections.Counter[str] = collections.Counter()

    def trace(frame: FrameType, event: str, arg: object) -> Any:
        if event == "call":
            frame.f_trace_opcodes = True
            calls[_name(frame)] += 1
            total_calls.update(_outers(frame))
        elif event == "opcode":
            own[_name(frame)] += 1
            total.update(_outers(frame))
        return trace

    run(range(warm))
    sys.settrace(trace)
    try:
        run(range(10_000, 10_000 + ops))
    finally:
        sys.settrace(None)
    left_out = (*skip, "benchmarks/bytecodes.py", "benchmarks/record_workloads.py", "contextlib", "runpy")
    print(
        f"== {case}: {sum(own.values()) / ops:,.0f} bytecodes, {sum(calls.values()) / ops:,.0f} calls per op"
    )
    print(f"{'with callees':>12} {'own':>7} {'calls':>6} {'calls in':>8}  function")
    shown = [f for f, _ in total.most_common() if not any(part in f for part in left_out)][:top]
    for function in shown:
        print(
            f"{total[function] / ops:12,.0f} {own[function] / ops:7,.0f} {calls[function] / ops:6.1f}"
            f" {total_calls[function] / ops:8.1f}  {function}"
        )
