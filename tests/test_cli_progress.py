"""Long operator commands (`check`, `dump`, `load`, `backup`, `states prune`) report progress on stderr — live
on a terminal, plain lines when asked — and never on stdout, which stays the command's answer."""

from __future__ import annotations

import json
import os
import pty
import subprocess
from pathlib import Path

import pytest


def sf(store: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, STATEFLOW_STORE=store)
    return subprocess.run(["stateflow", *args], capture_output=True, text=True, timeout=120, env=env)


def filled(tmp_path: Path) -> str:
    store = str(tmp_path / "s.db")
    for key in ("a", "b", "c"):
        assert sf(store, "doc", "put", "notes", key, '{"x": 1}').returncode == 0
    return store


def test_progress_when_asked_goes_to_stderr_and_stdout_stays_the_answer(tmp_path: Path) -> None:
    store = filled(tmp_path)
    checked = sf(store, "check", "--json", "--progress")
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)["ok"] is True
    last = checked.stderr.splitlines()[-1]
    assert last.startswith("check: the store: ") and ", 3 documents, " in last and last.endswith(" (done)")

    dump = tmp_path / "d.jsonl"
    dumped = sf(store, "dump", "--progress", str(dump))
    assert dumped.returncode == 0 and dumped.stdout == "", dumped.stderr
    end = json.loads(dump.read_text().splitlines()[-1])
    documents, transitions = end["documents"], end["transitions"]
    assert dumped.stderr.splitlines()[-2:] == [
        f"dump: {transitions} transitions, {documents} documents (done)",
        f"dumped {transitions} transitions, 0 op ids and {documents} documents to {dump}",
    ]
    loaded = sf(str(tmp_path / "copy.db"), "load", "--progress", str(dump))
    assert loaded.returncode == 0, loaded.stderr
    assert json.loads(loaded.stdout) == {"transitions": transitions, "documents": documents, "ops": 0}
    # (the documents compared with the dump after every line is in: the load's last step)
    assert loaded.stderr.splitlines()[-1] == f"load: loading: 100%, {documents} documents compared (done)"

    backed = sf(store, "backup", "--progress", str(tmp_path / "b.db"))
    assert backed.returncode == 0, backed.stderr
    progress, summary = backed.stderr.splitlines()[-2:]
    assert progress.startswith("backup: copying: ") and progress.endswith(" pages (done)"), progress
    assert summary.startswith("backed up ")


def test_no_progress_off_a_terminal_unless_asked(tmp_path: Path) -> None:
    store = filled(tmp_path)
    checked = sf(store, "check")
    assert checked.returncode == 0 and checked.stderr == ""
    loaded = sf(str(tmp_path / "copy.db"), "load", "--no-progress", str(_dump(store, tmp_path)))
    assert loaded.returncode == 0 and loaded.stderr == ""


def _dump(store: str, tmp_path: Path) -> Path:
    dump = tmp_path / "d.jsonl"
    assert sf(store, "dump", str(dump)).returncode == 0
    return dump


@pytest.mark.parametrize("command", [["check", "--json"], ["dump"], ["states", "prune"]])
def test_on_a_terminal_the_live_line_stays_off_stdout(tmp_path: Path, command: list[str]) -> None:
    """stderr a terminal, stdout a pipe (`stateflow dump | gzip`): the live line goes to the
    terminal only, and stdout is exactly the answer."""
    store = filled(tmp_path)
    main, side = pty.openpty()
    try:
        out = subprocess.run(
            ["stateflow", *command],
            stdout=subprocess.PIPE,
            stderr=side,
            timeout=120,
            env=dict(os.environ, STATEFLOW_STORE=store),
        )
    finally:
        os.close(side)
        os.close(main)
    assert out.returncode == 0
    answer = out.stdout.decode()
    if command[0] == "check":
        assert json.loads(answer)["ok"] is True
    elif command[0] == "states":  # (its answer was sent to the terminal, under the live line)
        assert json.loads(answer)["op_ids"] == 0
    else:
        items = [json.loads(line) for line in answer.splitlines()]
        assert items[0]["format"] == "stateflow-dump" and items[-1]["kind"] == "end"


def test_on_a_terminal_that_is_stdout_too_the_answer_follows_the_live_line(tmp_path: Path) -> None:
    """stdout and stderr one terminal (`stateflow states prune` typed at a prompt): the answer is
    printed once the live line is gone, not under it (its first line then followed the line's
    text, which stayed on the screen)."""
    store = filled(tmp_path)
    main, side = pty.openpty()
    try:
        proc = subprocess.Popen(
            ["stateflow", "states", "prune"],
            stdout=side,
            stderr=side,
            env=dict(os.environ, STATEFLOW_STORE=store),
        )
        os.close(side)
        shown = b""
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # (the terminal's other side closed: the command ended)
                break
            if not chunk:
                break
            shown += chunk
        proc.wait(timeout=120)
    finally:
        os.close(main)
    assert proc.returncode == 0, shown[-500:]
    removed = shown.rindex(b"\x1b[?25h")  # the live line removed: the cursor shown again
    answer = shown[removed:].decode()
    assert json.loads(answer[answer.index("{") :])["op_ids"] == 0, shown[-500:]


def test_the_dump_summary_counts_in_words(tmp_path: Path) -> None:
    """One of a thing is one thing (it said "1 documents")."""
    store = str(tmp_path / "one.db")
    assert sf(store, "doc", "put", "notes", "a", '{"x": 1}').returncode == 0
    dump = tmp_path / "d.jsonl"
    dumped = sf(store, "dump", str(dump))
    assert dumped.stderr == f"dumped 1 transition, 0 op ids and 1 document to {dump}\n"
