"""The jq worker process: reads requests on stdin, answers on stdout (length-prefixed JSON).

Started by :class:`stateflow.jq.runner.JqRunner`; compiled programs are cached here, so a program
is compiled once per worker. jq holds the GIL while it runs, so nothing in this process can watch
for the parent's death meanwhile: the kernel does it (parent-death signal, CPU-time limit).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import orjson

from stateflow.workers import limit_cpu, read_request, start_child, write_answer


def _wrapped(program: str, names: tuple[str, ...]) -> str:
    """Bind the variables from the input so one compiled program serves every call."""
    binds = "".join(f"($__sf.vars[{orjson.dumps(n).decode()}]) as ${n} | " for n in names)
    return f". as $__sf | {binds}$__sf.input | ({program})"


def main() -> None:
    cpu_seconds, stdin, stdout = start_child()
    import jq  # after the limit: the library's allocations count too

    cache: OrderedDict[tuple[str, tuple[str, ...]], Any] = OrderedDict()
    # Started: a program's time limit runs from here, not from the interpreter's start-up.
    write_answer(stdout, {"ready": True})
    while True:
        request = read_request(stdin)
        if request is None:
            return
        program, variables, value, limit = (
            request["program"],
            request["vars"],
            request["input"],
            request["max"],
        )
        names = tuple(sorted(variables))
        limit_cpu(cpu_seconds)
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
            write_answer(stdout, {"ok": outputs})
        except MemoryError:
            write_answer(stdout, {"error": "the program exceeded its memory limit", "kind": "memory"})
        except OverflowError as exc:
            write_answer(stdout, {"error": str(exc), "kind": "output"})
        except ValueError as exc:  # jq compile and runtime errors
            message = str(exc).removeprefix("jq: error: ").strip()
            write_answer(stdout, {"error": message, "kind": "jq"})


if __name__ == "__main__":
    main()
