"""Worker processes that run untrusted or unbounded work (jq programs, schema error reports) with
a wall-clock limit, a memory limit and a CPU-time backstop, speaking length-prefixed JSON on their
standard streams.

A worker that does not answer in time is killed (SIGKILL), never waited for: the work may hold the
GIL or run in native code, which nothing in its own process can interrupt. The parent side is
:class:`WorkerProcess`; the child's side is the functions at the end of this module.
"""

from __future__ import annotations

import ctypes
import math
import os
import resource
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time
from typing import Any, Final

import orjson

from stateflow.doc.canonical import encode_trusted

HEADER: Final = struct.Struct("!I")
START_SECONDS: Final = 60.0
"""How long a new worker may take to start (a Python start-up and its imports: ~0.1 s on a quiet
machine, seconds on a loaded one) before the call gives up on it; apart from the work's own time
limit, which a loaded machine's start-up would otherwise eat."""

_WORKER_ENV: Final = ("PATH", "PYTHONPATH", "LANG", "LC_ALL", "VIRTUAL_ENV")
"""The only environment a worker sees: jq's ``$ENV`` and ``env`` must not reveal the server's
secrets (tokens, database URLs)."""


def _worker_env() -> dict[str, str]:
    """The environment a worker starts with: :data:`_WORKER_ENV`, with ``PYTHONPATH``'s entries
    made absolute and its empty ones (each one names the working directory) left out."""
    env = {k: os.environ[k] for k in _WORKER_ENV if k in os.environ}
    if "PYTHONPATH" in env:
        entries = [os.path.abspath(p) for p in env["PYTHONPATH"].split(os.pathsep) if p]
        env["PYTHONPATH"] = os.pathsep.join(entries)
    return env


class WorkerProcess:
    """One child ``python -P -m <module> <memory> <cpu_seconds> <parent pid>``; it answers
    ``{"ready": true}`` once started, then one answer per request.

    ``-P``: the working directory (where the server or the CLI was started) is not on the
    worker's module path, so a file there named like a module it imports (``jq.py``,
    ``orjson.py``) is never imported in place of it."""

    def __init__(self, module: str, memory: int, cpu_seconds: int) -> None:
        # what the worker says before it dies (a start that fails: a module that will not
        # import), kept in a file, which no unread output can fill up as it would a pipe
        self.errors = tempfile.TemporaryFile()  # noqa: SIM115 (closed by last_words or with the object)
        self.proc = subprocess.Popen(
            [sys.executable, "-P", "-m", module, str(memory), str(cpu_seconds), str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.errors,
            env=_worker_env(),
        )

    def last_words(self) -> str:
        """The last line the worker wrote to its standard error (a dead worker's reason), or
        its exit status when it wrote none."""
        self.kill()
        with self.errors:
            self.errors.seek(max(0, self.errors.seek(0, os.SEEK_END) - 4096))
            lines = self.errors.read().decode(errors="replace").strip().splitlines()
        return lines[-1].strip() if lines else f"exit status {self.proc.returncode}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, payload: Any) -> None:
        assert self.proc.stdin is not None
        # (encode_trusted: a record as deep as a document may nest sits deeper in the request)
        data = encode_trusted(payload)
        self.proc.stdin.write(HEADER.pack(len(data)) + data)
        self.proc.stdin.flush()

    def receive(self, deadline: float) -> Any:
        """The answer, or None when the deadline passed; raises EOFError when the worker died."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        buffer = b""
        need = HEADER.size
        size = None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                return None
            chunk = os.read(fd, max(need - len(buffer), 65536) if size is None else need - len(buffer))
            if not chunk:
                raise EOFError
            buffer += chunk
            if size is None and len(buffer) >= HEADER.size:
                (size,) = HEADER.unpack(buffer[: HEADER.size])
                buffer = buffer[HEADER.size :]
                need = size
            if size is not None and len(buffer) >= size:
                return orjson.loads(buffer[:size])

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def cpu_backstop(timeout: float) -> int:
    """The CPU seconds a worker may spend on one request: a backstop for a worker whose parent is
    gone (the parent kills it at the wall-clock limit long before)."""
    return max(2, math.ceil(timeout * 2) + 1)


# ------------------------------------------------------------------------------ the child's side


def read_request(stream: Any) -> Any:
    """The next request, or None when the parent closed the stream."""
    header = stream.read(HEADER.size)
    if len(header) < HEADER.size:
        return None
    (size,) = HEADER.unpack(header)
    return orjson.loads(stream.read(size))


def write_answer(stream: Any, payload: Any) -> None:
    data = encode_trusted(payload)
    stream.write(HEADER.pack(len(data)) + data)
    stream.flush()


_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int, sig: int = signal.SIGKILL) -> None:
    """Have the kernel send ``sig`` to this process when its parent dies (Linux); exit now if
    the parent (when given) is already gone."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
    if parent and os.getppid() != parent:
        os._exit(0)


def start_child() -> tuple[int, Any, Any]:
    """A worker's set-up from its arguments (memory, CPU seconds, parent pid): dies with its parent,
    limits its address space; returns the CPU seconds per request and its standard streams."""
    memory = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    cpu_seconds = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    die_with_parent(int(sys.argv[3]) if len(sys.argv) > 3 else 0)
    if memory > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    return cpu_seconds, sys.stdin.buffer, sys.stdout.buffer


def limit_cpu(seconds: int) -> None:
    """Allow ``seconds`` more CPU time from now; past it the kernel stops the process (SIGXCPU)."""
    if seconds <= 0:
        return
    usage = resource.getrusage(resource.RUSAGE_SELF)
    used = math.ceil(usage.ru_utime + usage.ru_stime)
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = used + seconds if hard == resource.RLIM_INFINITY else min(used + seconds, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
