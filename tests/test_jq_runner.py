"""jq under hard limits: runaway programs are stopped, other evaluations carry on."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from stateflow.jq import JqBusy, JqError, JqLimitExceeded, JqRunner


def wait_until(condition: Callable[[], bool], timeout: float = 30) -> None:
    """Wait for the runner to reach a state (instead of a fixed sleep a loaded machine outlasts)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the runner never reached the state waited for"
        time.sleep(0.005)


@pytest.fixture
def runner() -> Iterator[JqRunner]:
    r = JqRunner(workers=2, timeout=1.5, memory=192 * 1024 * 1024, max_output=1024 * 1024)
    yield r
    r.close()


def test_programs_run_with_variables_and_every_output(runner: JqRunner) -> None:
    assert runner.run("[.[] | . * $k]", [1, 2, 3], {"k": 3}) == [[3, 6, 9]]
    assert runner.run(".[]", [1, "a", None]) == [1, "a", None]
    assert runner.first("$params.min <= (.items | length)", {"items": [1, 2]}, {"params": {"min": 1}}) is True


def test_compile_and_runtime_errors_are_clear(runner: JqRunner) -> None:
    with pytest.raises(JqError, match="syntax error") as info:
        runner.run("{", None)
    assert "$__sf" not in str(info.value)  # the wrapper never leaks into messages
    with pytest.raises(JqError, match="cannot be added"):
        runner.run('1 + "a"', None)
    with pytest.raises(JqError, match="non-empty"):
        runner.run("  ", None)


def test_an_infinite_loop_is_stopped_at_the_time_limit(runner: JqRunner) -> None:
    # A worker started first: the clock below measures the limit and the kill, not how long a
    # loaded machine takes to start a Python process (seconds at load 15).
    assert runner.run("1", None) == [1]
    start = time.monotonic()
    with pytest.raises(JqLimitExceeded, match=r"1\.5 s limit"):
        runner.run("def f: f; f", None)
    assert time.monotonic() - start < 3
    assert runner.run(". + 1", 1) == [2]  # the killed worker was replaced


def test_an_exploding_value_is_stopped_by_the_memory_limit() -> None:
    r = JqRunner(workers=1, timeout=30, memory=128 * 1024 * 1024)
    try:
        start = time.monotonic()
        with pytest.raises(JqLimitExceeded, match="memory"):
            r.run("[range(0; 100000000)] | length", None)
        assert time.monotonic() - start < 25  # memory, not the time limit, stopped it
        assert r.run("1", None) == [1]
    finally:
        r.close()


def test_an_exploding_output_is_refused() -> None:
    r = JqRunner(workers=1, timeout=30, max_output=1024 * 1024)  # a loaded machine is slow
    try:
        with pytest.raises(JqLimitExceeded, match="output exceeds"):
            r.run("[range(0; 200000)] | map(tostring)", None)
    finally:
        r.close()


def test_other_evaluations_proceed_while_one_loops() -> None:
    runner = JqRunner(workers=2, timeout=8)
    failures: list[BaseException] = []

    def loop() -> None:
        try:
            runner.run("def f: f; f", None)
        except JqLimitExceeded as exc:
            failures.append(exc)

    hostile = threading.Thread(target=loop)
    hostile.start()
    time.sleep(0.2)
    try:
        for i in range(20):
            assert runner.run(".n * 2", {"n": i}) == [i * 2]
        assert hostile.is_alive()  # served by the other worker while the loop still runs
        hostile.join()
        assert len(failures) == 1
    finally:
        runner.close()


def test_programs_cannot_read_the_servers_environment(
    runner: JqRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STATEFLOW_TOKENS", "secret-token-0123456789")
    fresh = JqRunner(workers=1)
    try:
        assert "STATEFLOW_TOKENS" not in fresh.first("$ENV | keys")
        assert fresh.first("env.STATEFLOW_TOKENS") is None
    finally:
        fresh.close()


def test_a_full_queue_refuses_at_once_and_a_waiter_gives_up_at_its_limit() -> None:
    r = JqRunner(workers=1, timeout=1.5, queue=1, wait=0.5)
    outcomes: list[BaseException] = []

    def loop() -> None:
        try:
            r.run("def f: f; f", None)
        except (JqLimitExceeded, JqBusy) as exc:
            outcomes.append(exc)

    try:
        # The worker started first, so the hostile program's limit runs from its call, not from a
        # Python start-up that takes seconds on a loaded machine.
        assert r.run("1", None) == [1]
        hostile = threading.Thread(target=loop)
        hostile.start()
        wait_until(lambda: not r._idle)  # the only worker is taken
        waiter = threading.Thread(target=loop)
        waiter.start()
        wait_until(lambda: r._waiting == 1)  # ... and the only queue place
        start = time.monotonic()
        with pytest.raises(JqBusy, match="already waiting") as full:
            r.run("1", None)
        assert time.monotonic() - start < 0.3
        assert full.value.retry_after == 2 and full.value.http_status == 503
        waiter.join()
        assert isinstance(outcomes[0], JqBusy) and "within 0.5 s" in str(outcomes[0])
        hostile.join()
        assert isinstance(outcomes[1], JqLimitExceeded)
        assert r.run(". + 1", 1) == [2]
    finally:
        r.close()


def test_close_stops_a_running_program_at_once() -> None:
    r = JqRunner(workers=1, timeout=60)
    outcome: list[BaseException] = []

    def loop() -> None:
        try:
            r.run("def f: f; f", None)
        except JqBusy as exc:
            outcome.append(exc)

    hostile = threading.Thread(target=loop)
    hostile.start()
    wait_until(lambda: bool(r._all))  # its worker started (seconds on a loaded machine) ...
    time.sleep(0.2)  # ... and runs the program
    start = time.monotonic()
    r.close()
    hostile.join(timeout=5)
    assert time.monotonic() - start < 3
    assert len(outcome) == 1 and "stopping" in str(outcome[0])
    with pytest.raises(JqBusy):
        r.run("1", None)
