"""The jq worker process: reads requests on stdin, answers on stdout (length-prefixed JSON).

Started by :class:`stateflow.jq.runner.JqRunner`; compiled programs are cached here, so a program
is compiled once per worker. jq holds the GIL while it runs, so nothing in this process can watch
for the parent's death meanwhile: the kernel does it (parent-death signal, CPU-time limit).
"""

from __future__ import annotations

import ctypes
import math
import os
import resource
import signal
import struct
import sys
from collections import OrderedDict
from typing import Any

import orjson

_HEADER = struct.Struct("!I")


def _read(stream: Any) -> Any:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    return orjson.loads(stream.read(size))


def _write(stream: Any, payload: Any) -> None:
    data = orjson.dumps(payload)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _wrapped(program: str, names: tuple[str, ...]) -> str:
    """Bind the variables from the input so one compiled program serves every call."""
    binds = "".join(f"($__sf.vars[{orjson.dumps(n).decode()}]) as ${n} | " for n in names)
    return f". as $__sf | {binds}$__sf.input | ({program})"


_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int, sig: int = signal.SIGKILL) -> None:
    """Have the kernel send ``sig`` to this process when its parent dies (Linux); exit now if
    the parent (when given) is already gone."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
    if parent and os.getppid() != parent:
        os._exit(0)


def _limit_cpu(seconds: int) -> None:
    """Allow ``seconds`` more CPU time from now; past it the kernel stops the process (SIGXCPU)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    used = math.ceil(usage.ru_utime + usage.ru_stime)
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = used + seconds if hard == resource.RLIM_INFINITY else min(used + seconds, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def main() -> None:
    memory = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    cpu_seconds = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    die_with_parent(int(sys.argv[3]) if len(sys.argv) > 3 else 0)
    if memory > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    import jq  # after the limit: the library's allocations count too

    cache: OrderedDict[tuple[str, tuple[str, ...]], Any] = OrderedDict()
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    # Started: a program's time limit runs from here, not from the interpreter's start-up.
    _write(stdout, {"ready": True})
    while True:
        request = _read(stdin)
        if request is None:
            return
        program, variables, value, limit = (
            request["program"],
            request["vars"],
            request["input"],
            request["max"],
        )
        names = tuple(sorted(variables))
        if cpu_seconds > 0:
            _limit_cpu(cpu_seconds)
        try:
            compiled = cache.get((program, names))
            if compiled is None:
                jq.compile(
                    program, args=dict.fromkeys(names)
                )  # errors name the caller's program, not the wrapper
                compiled = jq.compile(_wrapped(program, names))
                cache[(program, names)] = compiled
                if len(cache) > 256:
                    cache.popitem(last=False)
            else:
                cache.move_to_end((program, names))
            outputs = []
            size = 0
            for out in compiled.input_value({"input": value, "vars": variables}):
                size += len(orjson.dumps(out))
                if size > limit:
                    raise OverflowError(f"the program's output exceeds {limit} bytes")
                outputs.append(out)
            _write(stdout, {"ok": outputs})
        except MemoryError:
            _write(stdout, {"error": "the program exceeded its memory limit", "kind": "memory"})
        except OverflowError as exc:
            _write(stdout, {"error": str(exc), "kind": "output"})
        except ValueError as exc:  # jq compile and runtime errors
            message = str(exc).removeprefix("jq: error: ").strip()
            _write(stdout, {"error": message, "kind": "jq"})


if __name__ == "__main__":
    main()
