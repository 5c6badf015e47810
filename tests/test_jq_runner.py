"""jq under hard limits: runaway programs are stopped, other evaluations carry on."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from stateflow.jq import JqBusy, JqError, JqLimitExceeded, JqRunner, JqUnavailable
from stateflow.jq import runner as runner_module


def wait_until(condition: Callable[[], bool], timeout: float = 30) -> None:
    """Wait for the runner to reach a state (instead of a fixed sleep a loaded machine outlasts)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the runner never reached the state waited for"
        time.sleep(0.005)


@pytest.fixture
def runner() -> Iterator[JqRunner]:
    # a limit no quick program meets however loaded the machine: these tests are not about it
    r = JqRunner(workers=2, timeout=30, memory=192 * 1024 * 1024, max_output=1024 * 1024)
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


def test_programs_read_no_module_or_data_file(runner: JqRunner, tmp_path: Path) -> None:
    """jq's import/include/module would read .jq/.json files anywhere on this machine (and a
    module's syntax error quotes its line): refused before jq looks for any file."""
    (tmp_path / "secret.jq").write_text('def x: "PRIVATE LINE" \n')
    (tmp_path / "data.json").write_text('{"k": "PRIVATE VALUE"}')
    for program in (
        f'include "secret" {{search: "{tmp_path}"}}; x',
        f'import "{tmp_path}/data" as $d; $d',
        f'module {{}};\nimport "{tmp_path}/secret" as s; s::x',
    ):
        with pytest.raises(JqError, match="may not import modules or data files") as info:
            runner.run(program, None)
        assert "PRIVATE" not in str(info.value)
    with pytest.raises(JqError, match="at <top-level>, line 2, column") as info:
        runner.run(".a |\n  .b +", None)
    assert "$__sf" not in str(info.value) and "__sf_guard" not in str(info.value)


def test_an_infinite_loop_is_stopped_at_the_time_limit() -> None:
    runner = JqRunner(workers=1, timeout=1.5)
    try:
        start = time.monotonic()
        # (the message tells the wall-clock limit from the CPU-time backstop, which ends the
        # worker after 4 s of CPU and reads as the memory limit's EOF)
        with pytest.raises(JqLimitExceeded, match=r"1\.5 s limit"):
            runner.run("def f: f; f", None)
        # ran its limit, then stopped (a bound for the machine: the program never ends)
        assert 1.5 <= time.monotonic() - start < 60
        assert runner.run(". + 1", 1) == [2]  # the killed worker was replaced
    finally:
        runner.close()


def test_a_programs_time_limit_runs_from_its_started_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Workers that take 3 s to start (as on a loaded machine): a 2 s limit is the program's alone.
    (tmp_path / "sitecustomize.py").write_text("import time\ntime.sleep(3)\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    r = JqRunner(workers=1, timeout=2)
    try:
        assert r.run(". + 1", 1) == [2]
        # a worker not started within START_SECONDS: the call is refused busy, no limit blamed
        monkeypatch.setattr(runner_module, "START_SECONDS", 0.5)
        r._all[0].kill()  # (the next call starts another)
        with pytest.raises(JqBusy, match=r"did not start within 0\.5 s"):
            r.run("1", None)
        assert all(w.proc.poll() is not None for w in r._all)  # the unready one was killed too
        monkeypatch.undo()
        assert r.run(". * 2", 4) == [8]
    finally:
        r.close()


def test_an_exploding_value_is_stopped_by_the_memory_limit() -> None:
    # (a time limit far beyond a loaded machine's seconds: the message tells which limit stopped
    # it — memory, not time)
    r = JqRunner(workers=1, timeout=300, memory=128 * 1024 * 1024)
    try:
        with pytest.raises(JqLimitExceeded, match="memory"):
            r.run("[range(0; 100000000)] | length", None)
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


def test_the_output_limit_counts_bytes_not_characters() -> None:
    # 600 two-byte characters: 1,202 bytes of JSON text, 602 characters; the limit is in bytes
    r = JqRunner(workers=1, timeout=30, max_output=1000)
    try:
        with pytest.raises(JqLimitExceeded, match="output exceeds 1000 bytes"):
            r.run(".", "\u00e9" * 600)
        assert r.run(".", "e" * 600) == ["e" * 600]
    finally:
        r.close()


def test_a_program_ending_in_a_comment_runs() -> None:
    # a comment runs to the end of its line: on the program's last line it took the wrapper's
    # closing parenthesis with it, and the program was refused naming the wrapper's text
    r = JqRunner(workers=1, timeout=30)
    try:
        assert r.run(".a # the a", {"a": 1}) == [1]
        assert r.run(".a,\n.b # and b", {"a": 1, "b": 2}, {}) == [1, 2]
        r.compile("$x # x", ["x"])
        assert r.run("$x # x", None, {"x": 3}) == [3]
    finally:
        r.close()


def test_a_computed_infinity_fails_the_program_and_the_largest_double_passes() -> None:
    # jq writes an overflow (infinity) as the largest double: it was handed back as that number
    # (before, as null); a number no document holds fails the program, naming the output
    r = JqRunner(workers=1, timeout=30)
    try:
        for program in (".x * 10", "[1, {a: [-infinite]}]", "pow(10; 400)"):
            with pytest.raises(JqError, match=r"its output 1 .* past a double's range"):
                r.run(program, {"x": 1e308})
        with pytest.raises(JqError, match="its output 2 "):
            r.run("1, infinite", None)
        assert r.run(".x", {"x": 1.7976931348623157e308}) == [1.7976931348623157e308]
        assert r.run(".x | -.", {"x": 1.7976931348623157e308}) == [-1.7976931348623157e308]
        assert r.run('"e+308"', None) == ["e+308"]
    finally:
        r.close()


def test_other_evaluations_proceed_while_one_loops() -> None:
    # a limit the loop outlasts however slowly the others are served; close ends it
    runner = JqRunner(workers=2, timeout=300)
    failures: list[BaseException] = []

    def loop() -> None:
        try:
            runner.run("def f: f; f", None)
        except JqBusy as exc:
            failures.append(exc)

    hostile = threading.Thread(target=loop)
    hostile.start()
    try:
        wait_until(lambda: len(runner._idle) == 1)  # the loop holds a worker
        for i in range(20):
            assert runner.run(".n * 2", {"n": i}) == [i * 2]
        assert hostile.is_alive()  # served by the other worker while the loop still runs
    finally:
        runner.close()
    hostile.join(60)
    assert len(failures) == 1 and "stopping" in str(failures[0])


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
    # Limits far beyond a loaded machine's delays, so that the order below is the test's, not
    # the scheduler's: the loop holds the only worker until its limit, the waiter waits its own.
    r = JqRunner(workers=1, timeout=120, queue=1, wait=60)
    outcomes: list[BaseException] = []

    def loop() -> None:
        try:
            r.run("def f: f; f", None)
        except (JqLimitExceeded, JqBusy) as exc:
            outcomes.append(exc)

    try:
        hostile = threading.Thread(target=loop)
        hostile.start()
        wait_until(lambda: not r._idle)  # the only worker is taken
        waiter = threading.Thread(target=loop)
        waiter.start()
        wait_until(lambda: r._waiting == 1)  # ... and the only queue place
        start = time.monotonic()
        with pytest.raises(JqBusy, match="already waiting") as full:
            r.run("1", None)
        assert time.monotonic() - start < 30  # at once: not after the waiter's 60 s
        assert full.value.retry_after == 120 and full.value.http_status == 503
        # the waiter gives up at its limit, the loop still running: no worker became free
        r.wait = 0.5
        short = threading.Thread(target=loop)
        r.queue = 2
        start = time.monotonic()
        short.start()
        short.join(60)
        assert time.monotonic() - start >= 0.5
        assert len(outcomes) == 1 and isinstance(outcomes[0], JqBusy) and "within 0.5 s" in str(outcomes[0])
        assert hostile.is_alive() and waiter.is_alive()
    finally:
        r.close()
    hostile.join(60)
    waiter.join(60)
    assert [str(e) for e in outcomes[1:]] == [str(r._shutting_down())] * 2  # close ended both


def test_close_stops_a_running_program_at_once() -> None:
    r = JqRunner(workers=1, timeout=300)  # a stop that waited for the limit would take minutes
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
    hostile.join(timeout=60)
    assert time.monotonic() - start < 60  # at once, not at the limit (a bound for the machine)
    assert len(outcome) == 1 and "stopping" in str(outcome[0])
    with pytest.raises(JqBusy):
        r.run("1", None)


def test_a_jq_py_in_the_working_directory_is_never_imported_by_a_worker(tmp_path: Path) -> None:
    # the CLI started where an operator keeps a script named like a library the worker imports
    from stateflow.states import StatesService
    from stateflow.store import open_store

    store = tmp_path / "r.db"
    svc = StatesService(open_store(str(store), auto_migrate=True))
    svc.install_builtins()
    svc.put_template(
        "t",
        {
            "description": "d",
            "schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
            "template_jq": {"get": {"purpose": "input", "jq": {"content": ".n + 1"}}},
        },
    )
    svc.declare(
        "st",
        {
            "description": "d",
            "schema": {"type": "object", "properties": {"x": {"type": "integer"}}},
            "subject_kinds": ["k"],
            "default_subject_kind": "k",
        },
    )
    svc.attach("st", "t", {"path": ["t"]})
    svc.replace("st", {"target_kind": "agent", "target_name": "a", "kind": "k", "key": "1"}, {"t": {"n": 5}})
    svc.close()
    svc.store.close()
    for module in ("jq", "orjson"):
        (tmp_path / f"{module}.py").write_text(f"open({module!r} + '-imported', 'w').close()\n")
    done = subprocess.run(
        [
            *("stateflow", "--store", str(store), "states", "template-jq", "eval", "st", "t.get"),
            *("--target-name", "a", "--key", "1"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["value"] == 6
    assert not list(tmp_path.glob("*-imported"))


def test_a_worker_that_cannot_start_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # (a module path the operator set is kept: here it holds a jq that will not import)
    (tmp_path / "jq.py").write_text("raise ImportError('this jq is broken')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    r = JqRunner(workers=1, timeout=300)
    try:
        with pytest.raises(JqUnavailable, match="could not start: ImportError: this jq is broken"):
            r.run("1", None)
        assert not r._all  # the dead worker is not kept
    finally:
        r.close()
