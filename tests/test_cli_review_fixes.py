"""What the CLI prints and how it exits, through the real command in a subprocess: a path or a
target holding a control character is shown escaped, a search's data shows in its table, a
backup refuses stdout, `serve --workers` ends a Ctrl-C as every command does, two exclusive
options are a usage error, a malformed memory variable is named, every listing takes --json and
--table, and a body that is not UTF-8 is refused saying so."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ESC = "\x1b[31m"
RLO = "\u202e"
RAW = ("\x1b", RLO)  # what must never reach the terminal raw


def env_for(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = dict(
        os.environ,
        XDG_DATA_HOME=str(tmp_path / "data"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        STATEFLOW_TOKENS="",
        COLUMNS="200",
    )
    for name in ("STATEFLOW_STORE", "STATEFLOW_URL", "STATEFLOW_HOT_BUDGET", "STATEFLOW_KNOWLEDGE_ROOTS"):
        env.pop(name, None)
    env.update(extra)
    return env


def sf(
    tmp_path: Path, *args: str, stdin: bytes | None = None, **extra: str
) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(
        [sys.executable, "-m", "stateflow", *args],
        input=stdin,
        capture_output=True,
        timeout=120,
        env=env_for(tmp_path, **extra),
        cwd=tmp_path,
    )
    decoded = (out.stdout.decode("utf-8", "replace"), out.stderr.decode("utf-8", "replace"))
    return subprocess.CompletedProcess(out.args, out.returncode, *decoded)


def shown_escaped(text: str, escape: str) -> None:
    assert escape in text, text
    assert not any(c in text for c in RAW), repr(text)


# ---------------------------------------------------------------- 1: escapes in summary lines


@pytest.mark.parametrize(("mark", "escape"), [(ESC, "\\x1b[31m"), (RLO, "\\u202e")])
def test_store_and_target_paths_are_shown_escaped_in_summary_lines(
    tmp_path: Path, mark: str, escape: str
) -> None:
    """check, migrate, backup and dump name the store and their target with each control or
    reordering character as its escape: raw, ESC would reach the terminal (and, piped, be
    stripped, naming a file that does not exist) and U+202E would reorder the line."""
    store = f"x{mark}red.db"
    assert sf(tmp_path, "--store", store, "doc", "put", "n", "k", "{}").returncode == 0

    checked = sf(tmp_path, "--store", store, "check")
    assert checked.returncode == 0, checked.stderr
    shown_escaped(checked.stdout, f"x{escape}red.db: checked")
    migrated = sf(tmp_path, "--store", store, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    shown_escaped(migrated.stdout, f"x{escape}red.db: schema is current")
    backed = sf(tmp_path, "--store", store, "backup", f"b{mark}.db")
    assert backed.returncode == 0 and (tmp_path / f"b{mark}.db").is_file(), backed.stderr
    shown_escaped(backed.stderr, f"x{escape}red.db to b{escape}.db (")
    dumped = sf(tmp_path, "--store", store, "dump", f"d{mark}.jsonl")
    assert dumped.returncode == 0 and (tmp_path / f"d{mark}.jsonl").is_file(), dumped.stderr
    shown_escaped(dumped.stderr, f"to d{escape}.jsonl")


def test_setup_names_the_files_it_writes_escaped(tmp_path: Path) -> None:
    project = tmp_path / f"p{ESC}"
    project.mkdir()
    out = sf(tmp_path, "--store", "s.db", "setup", "claude-code", "--project", str(project))
    assert out.returncode == 0, out.stderr
    assert (project / ".mcp.json").is_file()
    shown_escaped(out.stderr, "p\\x1b[31m/.mcp.json")
    dry = sf(tmp_path, "--store", "s.db", "setup", "claude-code", "--project", str(project), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    shown_escaped(dry.stdout, "# " + str(tmp_path) + "/p\\x1b[31m/.mcp.json")


def test_a_token_target_is_held_to_the_api_s_name_rule_and_shown_escaped(tmp_path: Path) -> None:
    """A target name may hold a control character (the API's target_name takes any text of 1 to
    256 characters), so such a token is made, and shown escaped; one the token file cannot keep
    (a line break would split its spec over two lines, leaving the file unreadable) or no record
    can have (too long) is refused, the file left as it was."""
    tokens = tmp_path / f"t{ESC}"
    made = sf(tmp_path, "token", "create", "--token-file", str(tokens), "--target", f"agent/a{ESC}b")
    assert made.returncode == 0, made.stderr
    shown_escaped(made.stderr, "agent/a\\x1b[31mb in ")
    assert "t\\x1b[31m;" in made.stderr
    kept = tokens.read_text()
    assert kept.endswith(f"@agent/a{ESC}b\n")
    listed = sf(tmp_path, "token", "show", "--token-file", str(tokens))
    assert listed.returncode == 0, listed.stderr
    shown_escaped(listed.stdout, "write  agent/a\\x1b[31mb")
    shown_escaped(listed.stderr, "# " + str(tmp_path) + "/t\\x1b[31m")

    for target, why in [
        ("agent/a\nb", "holds a line break"),
        ("agent/a\u2028b", "holds a line break"),
        ("agent/a ", "ends with white space"),
        ("agent/" + "x" * 257, "at most 256"),
    ]:
        out = sf(tmp_path, "token", "create", "--token-file", str(tokens), "--target", target)
        assert out.returncode == 1 and out.stderr.startswith("error[invalid-input]: --target"), out.stderr
        assert why in out.stderr, out.stderr
        assert tokens.read_text() == kept
    assert sf(tmp_path, "token", "show", "--token-file", str(tokens)).returncode == 0


# ---------------------------------------------------------------- 2: a search's data in its table


def _tickets(tmp_path: Path) -> None:
    declaration = {
        "subject_kinds": ["thread"],
        "default_subject_kind": "thread",
        "schema": {"type": "object", "properties": {"title": {"type": "string"}, "n": {"type": "integer"}}},
    }
    out = sf(tmp_path, "--store", "s.db", "states", "put", "tickets", "--data", json.dumps(declaration))
    assert out.returncode == 0, out.stderr
    body = json.dumps({"title": f"open{RLO}ed", "n": 1})
    out = sf(
        tmp_path, "--store", "s.db", "states", "replace", "tickets", "--target-name", "bot", "--key", "t-1",
        "--data", body,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr


def test_search_include_data_shows_the_data_in_the_table(tmp_path: Path) -> None:
    """The table (a terminal's default) showed no data for --include-data, which only --json had:
    it has a data column, compact JSON escaped as the table escapes any value."""
    _tickets(tmp_path)
    args = ["--store", "s.db", "states", "search", "tickets", "--filters", '{"n": 1}']
    table = sf(tmp_path, *args, "--include-data", "--table")
    assert table.returncode == 0, table.stderr
    header = table.stdout.splitlines()[1]
    assert "data" in header and "updated_at" in header, table.stdout
    shown_escaped(table.stdout, '{"title":"open\\u202eed","n":1}')
    plain = sf(tmp_path, *args, "--table")
    assert "data" not in plain.stdout.splitlines()[1] and "open" not in plain.stdout, plain.stdout


def test_a_long_document_is_cut_to_the_width_left(tmp_path: Path) -> None:
    _tickets(tmp_path)
    out = sf(
        tmp_path, "--store", "s.db", "states", "replace", "tickets", "--target-name", "bot", "--key", "t-1",
        "--data", json.dumps({"title": "word " * 200, "n": 1}),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    args = [
        "--store",
        "s.db",
        "states",
        "search",
        "tickets",
        "--filters",
        '{"n": 1}',
        "--include-data",
        "--table",
    ]
    table = sf(tmp_path, *args, COLUMNS="120")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert len(lines) == 5 and all(len(line) <= 120 for line in lines), table.stdout  # one row, one line
    assert "t-1" in lines[3] and '{"title":"word word' in lines[3] and "…" in lines[3], table.stdout


# ---------------------------------------------------------------- 3: backup to '-'


def test_backup_refuses_dash_rather_than_writing_a_file_named_dash(tmp_path: Path) -> None:
    assert sf(tmp_path, "--store", "s.db", "doc", "put", "n", "k", "{}").returncode == 0
    out = sf(tmp_path, "--store", "s.db", "backup", "-")
    assert out.returncode == 2, out.stderr
    assert "stdout" in out.stderr and "a backup is a SQLite file" in out.stderr, out.stderr
    assert not (tmp_path / "-").exists() and out.stdout == ""
    named = sf(tmp_path, "--store", "s.db", "backup", "./-")  # a file named '-', spelled as a path
    assert named.returncode == 0 and (tmp_path / "-").is_file(), named.stderr
    assert " to ./- (" in named.stderr


# ---------------------------------------------------------------- 4: Ctrl-C of serve --workers


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("to_group", [True, False], ids=["terminal-group", "parent"])
def test_serve_with_workers_ends_a_ctrl_c_as_every_command_does(tmp_path: Path, to_group: bool) -> None:
    """With one process a Ctrl-C printed `interrupted` and exited 130; with --workers 2 it
    exited 0, silently. A terminal sends it to the whole process group; a supervisor to the
    parent alone: both end the same way now, with every worker gone."""
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "stateflow",
            "--store",
            "s.db",
            "serve",
            "--port",
            str(port),
            "--workers",
            "2",
        ],
        env=env_for(tmp_path),
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=2):
                    break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "the server did not start"
                time.sleep(0.1)
        if to_group:
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
        assert proc.stderr is not None
        assert proc.stderr.read().splitlines()[-1] == "interrupted"
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=2)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# ---------------------------------------------------------------- 5: exit codes and messages


def test_revision_and_seq_together_are_a_usage_error_in_both_commands(tmp_path: Path) -> None:
    """`doc get` refused them as a usage error (exit 2), `states read` as invalid input (exit 1):
    both are usage errors now, found before any store is opened (a missing one is not named)."""
    _tickets(tmp_path)
    for args, usage in [
        (["doc", "get", "n", "k"], "stateflow doc get"),
        (["states", "read", "tickets", "--target-name", "bot", "--key", "t-1"], "stateflow states read"),
    ]:
        for store in ("s.db", "new.db"):
            out = sf(tmp_path, "--store", store, *args, "--revision", "1", "--seq", "3")
            assert out.returncode == 2, out.stderr
            assert f"Usage: {usage}" in out.stderr and "give --revision or --seq, not both" in out.stderr
        assert not (tmp_path / "new.db").exists()


@pytest.mark.parametrize("value", ["abc", "0", "١", " 5"])
def test_a_malformed_hot_budget_variable_is_invalid_config_naming_it(tmp_path: Path, value: str) -> None:
    assert sf(tmp_path, "--store", "s.db", "migrate").returncode == 0
    out = sf(tmp_path, "--store", "s.db", "context", STATEFLOW_HOT_BUDGET=value)
    assert out.returncode == 1, out.stderr
    assert out.stderr.startswith("error[invalid-config]: STATEFLOW_HOT_BUDGET: "), out.stderr
    assert "--hot-budget" not in out.stderr
    # the flag outranks the variable, and a good value is the budget
    flagged = sf(tmp_path, "--store", "s.db", "context", "--hot-budget", "100", STATEFLOW_HOT_BUDGET=value)
    assert flagged.returncode == 0 and flagged.stdout.endswith("of a 100-byte budget\n"), flagged.stderr
    good = sf(tmp_path, "--store", "s.db", "context", STATEFLOW_HOT_BUDGET="200")
    assert good.returncode == 0 and good.stdout.endswith("of a 200-byte budget\n"), good.stderr


def test_a_knowledge_root_variable_naming_a_file_is_invalid_config_naming_it(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("# x\n")
    for args in (["context"], ["import-state-flow", str(tmp_path / "none")]):
        out = sf(tmp_path, "--store", "s.db", *args, STATEFLOW_KNOWLEDGE_ROOTS="notes.md")
        assert out.returncode == 1, out.stderr
        assert out.stderr == "error[invalid-config]: STATEFLOW_KNOWLEDGE_ROOTS: notes.md is not a directory\n"
    flag = sf(tmp_path, "--store", "s.db", "context", "--knowledge-root", "notes.md")
    assert flag.returncode == 2 and "'--knowledge-root'" in flag.stderr  # the flag's own refusal


def test_a_config_variable_naming_a_directory_is_invalid_config_naming_it(tmp_path: Path) -> None:
    out = sf(tmp_path, "--store", "s.db", "doc", "get", "a", "b", STATEFLOW_CONFIG=str(tmp_path))
    assert out.returncode == 1, out.stderr
    assert (
        out.stderr
        == f"error[invalid-config]: configuration file {tmp_path} (STATEFLOW_CONFIG) is a directory\n"
    )


def test_attachments_and_consumers_take_json_and_table(tmp_path: Path) -> None:
    _tickets(tmp_path)
    template = {"schema": {"type": "object", "properties": {"size": {"type": "integer"}}}}
    put = sf(tmp_path, "--store", "s.db", "state-templates", "put", "box", "--data", json.dumps(template))
    assert put.returncode == 0, put.stderr
    attached = sf(
        tmp_path, "--store", "s.db", "states", "attach", "tickets", "box", "--data", '{"path": ["box"]}'
    )
    assert attached.returncode == 0, attached.stderr

    as_json = sf(tmp_path, "--store", "s.db", "states", "attachments", "tickets", "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert [a["template"] for a in json.loads(as_json.stdout)] == ["box"]
    table = sf(tmp_path, "--store", "s.db", "states", "attachments", "tickets", "--table")
    assert table.returncode == 0, table.stderr
    assert "template" in table.stdout.splitlines()[1] and '["box"]' in table.stdout, table.stdout

    as_json = sf(tmp_path, "--store", "s.db", "states", "consumers", "tickets", "--json")
    assert as_json.returncode == 0 and json.loads(as_json.stdout) == [], as_json.stderr
    table = sf(tmp_path, "--store", "s.db", "states", "consumers", "tickets", "--table")
    assert table.returncode == 0 and "kind" in table.stdout.splitlines()[1], table.stderr


# ---------------------------------------------------------------- 6: a body that is not UTF-8


def test_a_body_that_is_not_utf8_is_refused_naming_the_byte_and_its_offset(tmp_path: Path) -> None:
    body = b'{"a":"\xff"}'
    piped = sf(tmp_path, "--store", "s.db", "doc", "put", "n", "k", "-", stdin=body)
    assert piped.returncode == 1
    assert piped.stderr == (
        "error[invalid-json]: BODY (stdin): not UTF-8 text (byte 0xff at offset 6); JSON is read as UTF-8\n"
    )
    (tmp_path / "bad.json").write_bytes(b'{"title":"\xc3\xa9\xe2\x82"}')
    filed = sf(tmp_path, "--store", "s.db", "doc", "put", "n", "k", "--file", "bad.json")
    assert filed.returncode == 1 and "(byte 0xe2 at offset 12)" in filed.stderr, filed.stderr
    payload = sf(
        tmp_path, "--store", "s.db", "states", "replace", "tickets", "--target-name", "bot", "--key", "t",
        stdin=body,
    )  # fmt: skip
    assert (
        payload.returncode == 1 and "--data (stdin): not UTF-8 text (byte 0xff at offset 6)" in payload.stderr
    )
    assert "surrogates" not in piped.stderr + filed.stderr + payload.stderr
