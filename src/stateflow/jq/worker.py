"""The jq worker process: reads requests on stdin, answers on stdout (length-prefixed JSON).

Started by :class:`stateflow.jq.runner.JqRunner`; compiled programs are cached here, so a program
is compiled once per worker. jq holds the GIL while it runs, so nothing in this process can watch
for the parent's death meanwhile: the kernel does it (parent-death signal, CPU-time limit).
"""

from __future__ import annotations

import itertools
import re
from collections import OrderedDict
from typing import Any, Final

import orjson

from stateflow.doc.canonical import decode
from stateflow.errors import InvalidJSON
from stateflow.workers import limit_cpu, read_request, start_child, write_answer

_GUARD: Final = "def __sf_guard: .;\n"
"""Put before a program compiled alone (for its own error messages): jq's ``import``,
``include`` and ``module`` directives are valid only at a program's start, and would read
``.jq``/``.json`` files anywhere on this machine (``import "/path" as $d``, ``{search: …}``) —
after a definition they are a syntax error, found before any file is looked for."""
_DIRECTIVE: Final = re.compile(r"syntax error, unexpected (import|include|module)\b")
_LINE: Final = re.compile(r"(at <top-level>, line )(\d+)")


def _wrapped(program: str, names: tuple[str, ...], then: str = "tojson") -> str:
    """Bind the variables from the input so one compiled program serves every call (inside
    parentheses, where no import/include/module directive parses); each output goes through
    ``then``."""
    binds = "".join(f"($__sf.vars[{orjson.dumps(n).decode()}]) as ${n} | " for n in names)
    # each output as JSON text: jq keeps a number's literal while no arithmetic touches it
    # (2**53+1, 1.0, -0.0), but the binding turns every number it hands back into a double
    # (integral ones into ints); the text is parsed exactly here instead
    # (the newline ends a comment on the program's last line, which would take the closing
    # parenthesis with it)
    return f". as $__sf | {binds}$__sf.input | ({program}\n) | {then}"


_HOLDS_INFINITY: Final = 'any(..; type == "number" and isinfinite)'


def _infinite(jq: Any, program: str, names: tuple[str, ...], request: dict[str, Any], number: int) -> bool:
    """Whether output ``number`` (from 1) of ``program`` holds a computed infinity (an overflow,
    ``. * 10`` on 1e308), which tojson writes as the largest double, a number a document may
    hold: asked only of an output whose text could be one, by running the program again."""
    checked = jq.compile(_wrapped(program, names, _HOLDS_INFINITY))
    outputs = checked.input_value({"input": request["input"], "vars": request["vars"]})
    return next(itertools.islice(outputs, number - 1, None), False) is True


def _compile(jq: Any, program: str, names: tuple[str, ...]) -> Any:
    """``program`` compiled to run, or ValueError naming the caller's program (its own lines)."""
    try:
        jq.compile(_GUARD + program, args=dict.fromkeys(names))
    except ValueError as exc:
        message = str(exc)
        if _DIRECTIVE.search(message):
            raise ValueError(
                "jq programs may not import modules or data files (import, include and module "
                "directives are refused)"
            ) from None
        # the guard is the first line: the program's own line numbers
        raise ValueError(_LINE.sub(lambda m: f"{m[1]}{max(1, int(m[2]) - 1)}", message)) from None
    return jq.compile(_wrapped(program, names))


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
        program, variables = request["program"], request["vars"]
        names = tuple(sorted(variables))
        limit_cpu(cpu_seconds)
        try:
            compiled = cache.get((program, names))
            if compiled is None:
                compiled = _compile(jq, program, names)
                cache[(program, names)] = compiled
                if len(cache) > 256:
                    cache.popitem(last=False)
            else:
                cache.move_to_end((program, names))
            if request.get("compile"):  # (a program checked, not run: when it is stored)
                write_answer(stdout, {"ok": []})
                continue
            value, limit = request["input"], request["max"]
            outputs = []
            size = 0
            for number, text in enumerate(compiled.input_value({"input": value, "vars": variables}), 1):
                # the limit is in bytes, the text's UTF-8 (a character may take four)
                size += len(text) if text.isascii() else len(text.encode())
                if size > limit:
                    raise OverflowError(f"the program's output exceeds {limit} bytes")
                if "e+308" in text and _infinite(jq, program, names, request, number):
                    raise ValueError(
                        f"its output {number} is not JSON the store holds: it holds a number past a "
                        "double's range (jq computed infinity)"
                    )
                try:
                    outputs.append(decode(text))
                except InvalidJSON as exc:  # a number no JSON store holds (jq computed 2**64)
                    raise ValueError(f"its output {number} is not JSON the store holds: {exc}") from None
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
