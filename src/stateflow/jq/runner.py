"""Run jq programs in worker processes with a wall-clock limit and a memory limit.

A worker that does not answer in time is killed (SIGKILL) and replaced: a runaway program stops
burning CPU the moment its limit passes. The limit runs from a started worker: a new one says when
it is ready, and its start-up (seconds on a loaded machine) is not counted against the program.
Workers run with an address-space limit, so a program that tries to build a huge value fails
there, inside its own process, instead of taking the server down. A pool of workers lets other
evaluations proceed meanwhile.

The queue in front of the pool is bounded: a call that cannot get a worker within the time limit,
or that finds the queue full, is refused with :class:`JqBusy` at once instead of holding a server
thread. Workers die with their parent (the kernel's parent-death signal; they are started from one
long-lived thread because that signal follows the *thread* that forked them) and carry a CPU-time
limit as a backstop; :meth:`JqRunner.close` kills running programs, so a server stops promptly.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

from stateflow.doc.canonical import JSON, check
from stateflow.errors import InvalidInput, StateflowError
from stateflow.workers import START_SECONDS, WorkerProcess, cpu_backstop

_MODULE: Final = "stateflow.jq.worker"

DEFAULT_TIMEOUT: Final = 10.0
DEFAULT_MEMORY: Final = 512 * 1024 * 1024
DEFAULT_MAX_OUTPUT: Final = 16 * 1024 * 1024


class JqError(InvalidInput):
    """The program does not compile or fails at run time."""

    code = "jq-error"


class JqLimitExceeded(StateflowError):
    """The program ran past its time, memory or output limit and was stopped."""

    code = "jq-limit-exceeded"
    http_status = 422


class JqBusy(StateflowError):
    """Every jq worker stayed busy for the whole time limit, or the queue is full: retry later."""

    code = "jq-busy"
    http_status = 503

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class JqUnavailable(StateflowError):
    """A jq worker process died before it was ready (its interpreter or the jq library would not
    start): the server cannot run jq until that is fixed."""

    code = "jq-unavailable"
    http_status = 503


def _checked(program: str, variables: dict[str, JSON]) -> dict[str, JSON]:
    if not isinstance(program, str) or not program.strip():
        raise JqError("a jq program must be a non-empty string")
    for name in variables:
        if not name.isidentifier():
            raise JqError(f"jq variable name {name!r} is not an identifier")
    return variables


class JqRunner:
    """A pool of jq worker processes. Thread-safe; workers start on first use.

    At most ``queue`` callers wait for a worker (default four per worker), each for at most
    ``wait`` seconds (default: the time limit); others are refused with :class:`JqBusy`.
    """

    def __init__(
        self,
        workers: int = 2,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        memory: int = DEFAULT_MEMORY,
        max_output: int = DEFAULT_MAX_OUTPUT,
        queue: int | None = None,
        wait: float | None = None,
    ) -> None:
        if workers < 1:
            raise InvalidInput("a jq runner needs at least one worker")
        self.timeout = timeout
        self.memory = memory
        self.max_output = max_output
        self.queue = 4 * workers if queue is None else queue
        self.wait = timeout if wait is None else wait
        self.retry_after = max(1, math.ceil(timeout))
        self._cond = threading.Condition()
        self._idle: list[WorkerProcess | None] = [None] * workers  # None: a slot whose worker starts lazily
        self._waiting = 0
        self._closed = False
        self._all: list[WorkerProcess] = []
        # The parent-death signal fires when the *thread* that started a worker exits, so every
        # worker is started from this one thread, which lives as long as the runner.
        self._spawner = ThreadPoolExecutor(1, thread_name_prefix="jq-spawner")

    def run(self, program: str, value: JSON = None, variables: dict[str, JSON] | None = None) -> list[JSON]:
        """Every output of ``program`` on ``value`` with ``$name`` variables bound."""
        variables = _checked(program, variables or {})
        check(value, "input")
        check(variables, "variables")
        return self._call({"program": program, "vars": variables, "input": value, "max": self.max_output})

    def compile(self, program: str, names: Sequence[str] = ()) -> None:
        """Refuse ``program`` (:class:`JqError`) unless it compiles with the ``$name`` variables
        bound — in a worker, under the limits of a run: jq's compiler takes time that grows
        much faster than a program's size (seconds for a few thousand nested definitions) and
        holds the interpreter's lock meanwhile, which in this process would stop every other
        request; and what it reads (``import``/``include``) is refused there."""
        self._call({"program": program, "vars": _checked(program, dict.fromkeys(names)), "compile": True})

    def _call(self, request: dict[str, Any]) -> list[JSON]:
        worker = self._acquire()
        try:
            fresh = False
            if worker is None or not worker.alive():
                worker, fresh = self._start(), True
            answer = None
            started = not fresh
            try:
                # a new worker's start-up is not the program's: its limit runs once it is ready
                started = started or worker.receive(time.monotonic() + START_SECONDS) is not None
                if started:
                    worker.send(request)
                    answer = worker.receive(time.monotonic() + self.timeout)
            except (EOFError, BrokenPipeError):
                # a new worker that died before it was ready ran no program: its start failed
                failed = None if started else worker.last_words()
                self._retire(worker)
                worker = None
                if self._closed:
                    raise self._shutting_down() from None
                if failed is not None:
                    raise JqUnavailable(f"a jq worker could not start: {failed}") from None
                raise JqLimitExceeded("the jq program exceeded its memory limit and was stopped") from None
            if not started:
                self._retire(worker)
                worker = None
                raise JqBusy(
                    f"a jq worker did not start within {START_SECONDS:g} s; retry later", self.retry_after
                )
            if answer is None:
                self._retire(worker)
                worker = None
                raise JqLimitExceeded(f"the jq program ran past its {self.timeout:g} s limit and was stopped")
        finally:
            self._release(worker)
        if "ok" in answer:
            outputs: list[JSON] = answer["ok"]
            return outputs
        if answer.get("kind") in ("memory", "output"):
            raise JqLimitExceeded(answer["error"])
        if request.get("compile"):
            raise JqError(answer["error"])
        raise JqError(f"jq program failed: {answer['error']}")

    def first(self, program: str, value: JSON = None, variables: dict[str, JSON] | None = None) -> JSON:
        outputs = self.run(program, value, variables)
        if not outputs:
            raise JqError("the jq program produced no output")
        return outputs[0]

    def _shutting_down(self) -> JqBusy:
        return JqBusy("jq is stopping with the server; the program was not run to its end", self.retry_after)

    def _acquire(self) -> WorkerProcess | None:
        deadline = time.monotonic() + self.wait
        with self._cond:
            if self._closed:
                raise self._shutting_down()
            if not self._idle and self._waiting >= self.queue:
                raise JqBusy(
                    f"every jq worker is busy and {self._waiting} calls are already waiting; retry later",
                    self.retry_after,
                )
            self._waiting += 1
            try:
                while not self._idle:
                    remaining = deadline - time.monotonic()
                    if self._closed:
                        raise self._shutting_down()
                    if remaining <= 0:
                        raise JqBusy(
                            f"no jq worker became free within {self.wait:g} s; retry later", self.retry_after
                        )
                    self._cond.wait(remaining)
                return self._idle.pop()
            finally:
                self._waiting -= 1

    def _release(self, worker: WorkerProcess | None) -> None:
        with self._cond:
            self._idle.append(worker)
            self._cond.notify()

    def _start(self) -> WorkerProcess:
        # The CPU limit is a backstop for a worker whose parent is gone: the parent kills it at the
        # wall-clock limit long before; the worker renews the limit before each program.
        cpu = cpu_backstop(self.timeout)
        with self._cond:
            if self._closed:
                raise self._shutting_down()
            worker = self._spawner.submit(WorkerProcess, _MODULE, self.memory, cpu).result()
            self._all.append(worker)
        return worker

    def _retire(self, worker: WorkerProcess) -> None:
        worker.kill()
        with self._cond:
            if worker in self._all:
                self._all.remove(worker)

    def close(self) -> None:
        """Kill every worker, running programs included; later calls are refused with JqBusy."""
        with self._cond:
            self._closed = True
            workers, self._all = self._all, []
            self._cond.notify_all()
        for worker in workers:
            worker.kill()
        self._spawner.shutdown(wait=False)
