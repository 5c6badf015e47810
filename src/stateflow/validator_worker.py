"""The worker process that builds schema refusals' reports for :mod:`stateflow.validators`:
reads ``{"schema", "document"}`` requests on stdin, answers ``{"path", "message"}`` (or
``{"valid": true}``, or ``{"error": ...}`` past its memory limit) on stdout, length-prefixed.
jsonschema-rs holds the GIL while it builds a report, so the parent kills this process at its
time limit; the kernel stops it should the parent be gone (parent-death signal, CPU limit)."""

from __future__ import annotations

from stateflow.workers import limit_cpu, read_request, start_child, write_answer


def main() -> None:
    cpu_seconds, stdin, stdout = start_child()
    from stateflow.validators import compiled, report  # after the limit: compiling counts too

    write_answer(stdout, {"ready": True})
    while True:
        request = read_request(stdin)
        if request is None:
            return
        limit_cpu(cpu_seconds)
        try:
            found = report(compiled(request["schema"]), request["document"])
        except MemoryError:
            write_answer(stdout, {"error": "the report exceeded the worker's memory limit"})
            continue
        if found is None:
            write_answer(stdout, {"valid": True})
        else:
            write_answer(stdout, {"path": list(found.path), "message": found.message})


if __name__ == "__main__":
    main()
