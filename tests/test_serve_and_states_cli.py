"""`stateflow serve` and `stateflow states …` as a user runs them (real processes, real HTTP)."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stateflow.client import ClientError, StatesClient

from . import servers
from .threads import run_threads

DECL = '{"schema": {"type": "object", "properties": {"status": {"type": "string"}}}, "subject_kinds": ["thread"], "default_subject_kind": "thread"}'


def sf(*args: str, env: dict[str, str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["stateflow", *args], capture_output=True, text=True, timeout=60, env=env, input=stdin
    )


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return dict(
        os.environ,
        STATEFLOW_STORE=str(tmp_path / "serve.db"),
        XDG_DATA_HOME=str(tmp_path / "data"),  # where the kept API token goes
        STATEFLOW_TOKENS="",
        STATEFLOW_URL="",
        STATEFLOW_TOKEN="",
        # a jq limit a loaded machine's slow requests stay well inside (the looping program's test)
        STATEFLOW_JQ_TIMEOUT_SECONDS="20",
    )


@pytest.fixture
def server(env: dict[str, str]) -> Iterator[tuple[str, str, subprocess.Popen[str]]]:
    port = servers.free_port()
    proc = subprocess.Popen(
        ["stateflow", "serve", "--port", str(port)],
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()
    assert "created an API token" in line, line
    token = line.rsplit(" ", 1)[-1].strip()
    url = f"http://127.0.0.1:{port}"
    # Until it answers, not a fixed 10 s: a loaded machine can take long to import the server.
    servers.wait_ready(servers.Server(url, proc), timeout=120)
    yield url, token, proc
    proc.terminate()
    proc.wait(timeout=60)


def test_serve_creates_a_token_once_and_the_cli_talks_to_it(
    server: tuple[str, str, subprocess.Popen[str]], env: dict[str, str], tmp_path: Path
) -> None:
    url, token, _ = server
    kept = tmp_path / "data" / "stateflow" / "api-token"
    assert kept.read_text().strip() == token and oct(kept.stat().st_mode)[-3:] == "600"
    remote = ["states", "--url", url, "--token", token]
    assert sf(*remote, "put", "tickets", "--data", DECL, env=env).returncode == 0
    key = "bridge:web:acme.example.com/+15550001111/u-42"
    put = sf(
        *remote,
        "replace",
        "tickets",
        "--target-name",
        "bot",
        "--key",
        key,
        "--data",
        '{"status": "open"}',
        env=env,
    )
    assert put.returncode == 0, put.stderr
    read = json.loads(sf(*remote, "read", "tickets", "--target-name", "bot", "--key", key, env=env).stdout)
    assert read["data"] == {"status": "open"} and read["subject"]["key"] == key
    applied = sf(
        *remote,
        "apply",
        "tickets",
        "--target-name",
        "bot",
        "--key",
        key,
        env=env,
        stdin='{"ops": [{"op": "set", "path": ["status"], "value": "closed"}], "op_id": "cli-1"}',
    )
    assert json.loads(applied.stdout)["applied"] is True
    writes = json.loads(
        sf(*remote, "writes", "tickets", "--target-name", "bot", "--key", key, env=env).stdout
    )
    assert [w["origin"]["op_id"] for w in writes["items"]] == ["cli-1", None]
    assert writes["items"][0]["origin"]["door"] == "api"
    refused = sf(
        *remote,
        "replace",
        "tickets",
        "--target-name",
        "bot",
        "--key",
        key,
        "--data",
        '{"status": 1}',
        env=env,
    )
    assert refused.returncode == 1 and refused.stderr.startswith("error[invalid-document]")
    bad_token = sf("states", "--url", url, "--token", "nope-nope-nope-nope", "list", env=env)
    assert bad_token.returncode == 1 and "error[unauthorized]" in bad_token.stderr
    # the studio's address (the banner prints it too) is named as not the API, not parsed as JSON
    studio = sf("states", "--url", f"{url}/studio", "--token", token, "list", env=env)
    assert studio.returncode == 1 and studio.stderr.startswith(
        f"error[http-error]: {url}/studio is not a stateflow API ({url}/studio/api/states answered 303 "
        "with a redirect to /studio/login"
    )
    assert "give the server's base URL" in studio.stderr
    # … and so is a write through it, which the studio's own routes refuse 405
    with pytest.raises(ClientError, match=r"/studio is not a stateflow API .* answered 405"):
        StatesClient(f"{url}/studio", token=token).declare("notes", {"schema": {"type": "object"}})
    # … as is its /api/states address: the server's 404 for the doubled path is not a missing record
    api = sf("states", "--url", f"{url}/api/states", "--token", token, "get", "tickets", env=env)
    assert api.returncode == 1 and api.stderr.startswith(
        f"error[http-error]: {url}/api/states is not a stateflow API ({url}/api/states/api/states/tickets "
        "answered 404"
    )
    assert "give the server's base URL" in api.stderr
    # the same store, read locally (operator door) — the server's writes are there
    local = json.loads(sf("states", "read", "tickets", "--target-name", "bot", "--key", key, env=env).stdout)
    assert local["data"] == {"status": "closed"}
    # --url/--token after the subcommand too, as --store: the server's door, not the operator's
    after = sf(
        *("states", "merge", "tickets", "--target-name", "bot", "--key", key),
        *("--data", '{"status": "reopened"}', "--url", url, "--token", token),
        env=env,
    )
    assert after.returncode == 0, after.stderr
    trail = json.loads(sf(*remote, "writes", "tickets", "--target-name", "bot", "--key", key, env=env).stdout)
    assert trail["items"][0]["origin"]["door"] == "api"
    # … and override the group's: a wrong token after the subcommand is refused
    overridden = sf(*remote, "list", "--token", "nope-nope-nope-nope", env=env)
    assert overridden.returncode == 1 and "error[unauthorized]" in overridden.stderr


def test_a_store_on_the_command_line_outranks_the_environments_server(
    server: tuple[str, str, subprocess.Popen[str]], env: dict[str, str], tmp_path: Path
) -> None:
    url, token, _ = server
    exported = dict(env, STATEFLOW_URL=url, STATEFLOW_TOKEN=token)
    local = str(tmp_path / "local.db")
    # flags before the environment: a typed --store (before or after the subcommand) is the store
    # written, whatever server STATEFLOW_URL names
    assert sf("--store", local, "states", "put", "tickets", "--data", DECL, env=exported).returncode == 0
    subject = ["--target-name", "bot", "--key", "t-1"]
    written = sf(
        "states",
        "replace",
        "tickets",
        *subject,
        "--data",
        '{"status": "local"}',
        "--store",
        local,
        env=exported,
    )
    assert written.returncode == 0, written.stderr
    read = sf("--store", local, "states", "read", "tickets", *subject, env=exported)
    assert json.loads(read.stdout)["data"] == {"status": "local"}
    # without a typed --store, STATEFLOW_URL still names the server (it outranks STATEFLOW_STORE):
    # the server never saw the declaration
    assert [d["name"] for d in json.loads(sf("states", "list", env=exported).stdout)] == ["memory"]
    # --url and --store on one command line: ambiguous, refused as a usage error
    for both in (
        ["--store", local, "states", "--url", url, "list"],
        ["states", "list", "--url", url, "--store", local],
    ):
        refused = sf(*both, env=env)
        assert refused.returncode == 2 and "give --url (a running server) or --store" in refused.stderr


def test_the_kept_token_is_reused_and_not_printed_again(
    server: tuple[str, str, subprocess.Popen[str]], env: dict[str, str]
) -> None:
    _url, token, proc = server
    proc.terminate()
    proc.wait(timeout=60)
    port = servers.free_port()
    again = subprocess.Popen(
        ["stateflow", "serve", "--port", str(port)], env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        assert again.stderr is not None
        line = again.stderr.readline()
        assert token not in line and "kept in your data directory" in line
    finally:
        again.terminate()
        again.wait(timeout=60)


def test_states_cli_locally(env: dict[str, str]) -> None:
    assert sf("states", "put", "tickets", "--data", DECL, env=env).returncode == 0
    names = [d["name"] for d in json.loads(sf("states", "list", env=env).stdout)]
    assert names == ["memory", "tickets"]
    subj = ["--target-name", "bot", "--key", "t1"]
    assert sf("states", "merge", "tickets", *subj, "--data", '{"status": "new"}', env=env).returncode == 0
    assert (
        json.loads(sf("states", "search", "tickets", "--filters", '{"status": "new"}', env=env).stdout)[
            "matches"
        ][0]["subject"]["key"]
        == "t1"
    )
    by_data = sf("states", "search", "tickets", "--data", '{"status": "gone"}', env=env)  # --data works too
    assert json.loads(by_data.stdout)["matches"] == []
    assert (
        json.loads(sf("states", "subjects", "tickets", env=env).stdout)["subjects"][0]["subject"]["key"]
        == "t1"
    )
    assert json.loads(sf("states", "stats", "tickets", env=env).stdout)["records"] == 1
    writes = json.loads(sf("states", "writes", "tickets", *subj, env=env).stdout)
    assert writes["items"][0]["origin"]["door"] == "operator"
    assert json.loads(sf("states", "erase", "tickets", *subj, env=env).stdout) == {"erased": True}
    assert json.loads(sf("states", "prune", env=env).stdout)["pruned"] == {}
    assert sf("states", "delete", "tickets", env=env).returncode == 2  # needs --yes
    assert sf("states", "delete", "tickets", "--yes", env=env).returncode == 0
    missing = sf("states", "get", "tickets", env=env)
    assert missing.returncode == 1 and "error[state-not-found]" in missing.stderr


def _http(method: str, url: str, token: str, body: object = None) -> tuple[int, object]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_looping_jq_program_is_stopped_while_the_server_keeps_answering(
    server: tuple[str, str, subprocess.Popen[str]],
) -> None:
    import threading

    url, token, proc = server
    template = {
        "schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
        "template_jq": {"spin": {"purpose": "input", "jq": {"content": "def f: f; f"}}},
    }
    assert _http("PUT", url + "/api/state-templates/spinner", token, template)[0] == 200
    assert _http("PUT", url + "/api/states/s", token, json.loads(DECL))[0] == 200
    assert _http("PUT", url + "/api/states/s/attachments/spinner", token, {"path": ["spin"]})[0] == 200
    outcome: dict[str, Any] = {}

    def hostile() -> None:
        start = time.monotonic()
        outcome["result"] = _http(
            "GET", url + "/api/states/s/records/agent/x/thread/k/template-jq/spin", token
        )
        outcome["seconds"] = time.monotonic() - start

    thread = threading.Thread(target=hostile)
    thread.start()
    servers.wait_running_jq(proc.pid, thread.is_alive, 60)  # the program runs
    for _ in range(10):  # the server answers other requests while the program spins
        start = time.monotonic()
        status, _body = _http("GET", url + "/api/states", token)
        # not behind the program: each well inside its 20 s limit, and before its answer
        assert status == 200 and time.monotonic() - start < 10 and "result" not in outcome
    thread.join(timeout=120)
    status, body = outcome["result"]
    assert status == 422 and body["code"] == "jq-limit-exceeded"
    assert "ran past its 20 s limit" in body["error"]  # the wall-clock limit, not the CPU backstop
    assert 20 <= outcome["seconds"] < 100
    assert _http("GET", url + "/api/states/s/records/agent/x/thread/k", token) == (200, {"data": None})


def test_concurrent_applies_to_one_record_through_the_server_all_land(
    server: tuple[str, str, subprocess.Popen[str]],
) -> None:
    """Writers on the server's threads share commits; each apply still lands exactly once."""
    url, token, _ = server
    assert _http("PUT", url + "/api/states/s", token, json.loads(DECL))[0] == 200
    record = url + "/api/states/s/records/agent/x/thread/k"
    failures: list[object] = []

    def client(c: int) -> None:
        for i in range(15):
            ops = [{"op": "set_by_key", "path": ["seen"], "key_field": "id", "value": {"id": f"{c}-{i}"}}]
            status, body = _http("POST", record + "/deltas", token, {"ops": ops, "op_id": f"{c}-{i}"})
            if status != 200:
                failures.append(body)

    assert run_threads(client, 8) == []
    assert failures == []
    status, body = _http("GET", record, token)
    seen = {item["id"] for item in body["data"]["data"]["seen"]}  # type: ignore[index]
    assert status == 200 and seen == {f"{c}-{i}" for c in range(8) for i in range(15)}
    status, writes = _http("GET", record + "/writes?limit=500", token)
    assert len(writes["data"]["items"]) == 120  # type: ignore[index]


def test_table_cells_cut_long_descriptions_at_a_word() -> None:
    from stateflow.cli.states import _short

    assert _short("short enough") == "short enough"
    text = "Agent memory scopes (State Flow): one record per agent and scope — global, cwd, session"
    cut = _short(text)
    assert len(cut) <= 60 and cut.endswith("…") and text.startswith(cut[:-1])
    assert cut == "Agent memory scopes (State Flow): one record per agent and…"
    assert _short("x" * 80) == "x" * 59 + "…"  # one long word: cut where it must be


def test_putting_an_existing_template_names_the_clis_replace_flag(env: dict[str, str]) -> None:
    template = '{"schema": {"type": "object", "properties": {"items": {"type": "array"}}}}'
    assert sf("state-templates", "put", "checklist", "--data", template, env=env).returncode == 0
    again = sf("state-templates", "put", "checklist", "--data", template, env=env)
    assert again.returncode == 1
    assert again.stderr.startswith("error[conflict]: template 'checklist' already exists")
    assert "stateflow state-templates put --replace" in again.stderr
    assert sf("state-templates", "put", "checklist", "--data", template, "--replace", env=env).returncode == 0


def test_a_template_or_state_naming_another_is_refused_by_the_cli(env: dict[str, str]) -> None:
    schema = '"schema": {"type": "object", "properties": {"items": {"type": "array"}}}'
    template = '{"name": "crate", ' + schema + "}"
    refused = sf("state-templates", "put", "checklist", "--data", template, env=env)
    assert refused.returncode == 1
    assert refused.stderr.startswith("error[invalid-template]: the document's name 'crate' differs")
    assert "'checklist'" in refused.stderr
    listed = sf("state-templates", "list", "--json", env=env)  # refused for its argument: no store
    assert listed.returncode == 1 and listed.stderr.startswith("error[store-not-found]"), listed.stderr
    same = '{"name": "checklist", ' + schema + "}"
    assert sf("state-templates", "put", "checklist", "--data", same, env=env).returncode == 0
    # a state's declaration, the same way
    refused = sf("states", "put", "tickets", "--data", DECL[:-1] + ', "name": "queues"}', env=env)
    assert refused.returncode == 1
    assert refused.stderr.startswith("error[invalid-input]: the document's name 'queues' differs")
    assert "tickets" not in [s["name"] for s in json.loads(sf("states", "list", "--json", env=env).stdout)]


def test_a_paged_table_says_how_to_get_the_next_page(env: dict[str, str]) -> None:
    assert sf("states", "put", "tickets", "--data", DECL, env=env).returncode == 0
    for key in ("a", "b"):
        data = ["--data", '{"status": "open"}']
        assert (
            sf("states", "merge", "tickets", "--target-name", "bot", "--key", key, *data, env=env).returncode
            == 0
        )
    subject = ["--target-name", "bot", "--key", "a"]
    assert sf("states", "merge", "tickets", *subject, "--data", '{"status": "x"}', env=env).returncode == 0
    for listing in (
        ["subjects", "tickets"],
        ["search", "tickets", "--filters", '{"status": {"$exists": true}}'],
        ["writes", "tickets", *subject],
    ):
        page = json.loads(sf("states", *listing, "--limit", "1", env=env).stdout)
        table = sf("states", *listing, "--limit", "1", "--table", env=env)
        assert table.returncode == 0 and table.stderr == f"more: --cursor {page['next_cursor']}\n", listing
        last = sf("states", *listing, "--cursor", page["next_cursor"], "--table", env=env)
        assert last.returncode == 0 and last.stderr == "", listing
        # a limit over the most a page holds (500) answers such a page, as from Python and HTTP
        large = sf("states", *listing, "--limit", "501", env=env)
        assert large.returncode == 0 and json.loads(large.stdout)["next_cursor"] is None, (
            listing,
            large.stderr,
        )


def test_tables_and_refusals_show_controls_escaped_and_json_keeps_them(env: dict[str, str]) -> None:
    """A subject key is anyone's text: in a table or a refusal its terminal controls and
    reordering marks are shown as escapes (and markup as written); JSON output is exact."""
    wide = {**env, "COLUMNS": "400"}
    assert sf("states", "put", "tickets", "--data", DECL, env=env).returncode == 0
    keys = ["\x1b[2J\x1b[31mred\x1b[0m", "invoice\u202efdp.exe", "[bold]b[/bold] [/x]"]
    for key in keys:
        done = sf(
            "states", "replace", "tickets", "--target-name", "bot", "--key", key, "--data", "{}", env=env
        )
        assert done.returncode == 0, done.stderr
    table = sf("states", "subjects", "tickets", "--table", env=wide)
    assert table.returncode == 0, table.stderr
    assert "\x1b" not in table.stdout and "\u202e" not in table.stdout
    for shown in ("\\x1b[2J\\x1b[31mred\\x1b[0m", "invoice\\u202efdp.exe", "[bold]b[/bold] [/x]"):
        assert shown in table.stdout, table.stdout
    listed = json.loads(sf("states", "subjects", "tickets", "--json", env=env).stdout)
    assert sorted(s["subject"]["key"] for s in listed["subjects"]) == sorted(keys)
    stale = ["--target-name", "bot", "--key", keys[0], "--data", "{}", "--expect-revision", "7"]
    refused = sf("states", "replace", "tickets", *stale, env=env)
    assert refused.returncode == 1 and "\x1b" not in refused.stderr
    assert refused.stderr.startswith("error[revision-mismatch]: record thread/\\x1b[2J\\x1b[31mred"), (
        refused.stderr
    )


def test_a_malformed_json_option_is_named_in_the_refusal(env: dict[str, str]) -> None:
    assert sf("states", "put", "tickets", "--data", DECL, env=env).returncode == 0
    subject = ["--target-name", "bot", "--key", "a"]
    good = '{"status": "x"}'
    for option, call in {
        "--data": ["merge", "tickets", *subject, "--data", "{status: 'x'}", "--meta", '{"k": 1}'],
        "--meta": ["merge", "tickets", *subject, "--data", good, "--meta", "{k: 1}"],
        "--filters": ["search", "tickets", "--filters", "{status: x}", "--sort", "[]"],
        "--sort": ["search", "tickets", "--filters", good, "--sort", "[{path: 1}]"],
        "--into": ["fold", "tickets", *subject, "--into", "{kind: thread}", "--mode", "merge"],
        "--data (stdin)": ["replace", "tickets", *subject],
    }.items():
        out = sf("states", *call, env=env, stdin="{status")
        assert out.returncode == 1 and out.stderr.startswith(
            f"error[invalid-json]: {option}: invalid JSON: "
        ), (
            option,
            out.stderr,
        )
