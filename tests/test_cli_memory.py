"""``stateflow tool``, ``context``, ``history``, ``session`` and ``mcp`` as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


def sf(
    *args: str, stdin: str | None = None, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["stateflow", *args], input=stdin, capture_output=True, text=True, timeout=60, cwd=cwd, env=env
    )


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "memory.db")


def test_tool_refuses_an_unknown_tool_as_the_dispatcher_does(db: str, tmp_path: Path) -> None:
    # the dispatcher's refusal, as over MCP: a script tells refusals apart by error[code] and exit 1
    # every tool the command takes is listed, whatever the name looks like (a name not starting
    # with state_ listed only the two memory tools), before any store is opened or created
    for name in ("nosuch_tool", "state_nosuch", "stat_read"):
        out = sf("--store", db, "tool", name, "{}", cwd=tmp_path)
        assert (out.returncode, out.stdout) == (1, ""), out.stderr
        assert out.stderr == (
            f"error[unknown-tool]: unknown tool {name!r}; available: read_state, patch_state, state_read, "
            "state_replace, state_merge, state_template_jq, state_apply\n"
        )
        assert not Path(db).exists()
    assert sf("--store", db, "migrate", cwd=tmp_path).returncode == 0
    out = sf("--store", db, "tool", "stat_read", "{}", cwd=tmp_path)
    assert out.stderr.endswith("state_template_jq, state_apply\n")  # (the list a host with the store gives)
    # memory off: no memory tools are offered, so none is listed (they were, as if served)
    out = sf("--store", db, "tool", "nosuch", "{}", "--mode", "off", cwd=tmp_path)
    assert (out.returncode, out.stderr) == (
        1,
        "error[unknown-tool]: unknown tool 'nosuch'; available: state_read, state_replace, state_merge, "
        "state_template_jq, state_apply\n",
    )


def test_tool_round_trip_prints_exactly_the_tool_result(db: str, tmp_path: Path) -> None:
    patch = sf(
        "--store",
        db,
        "tool",
        "patch_state",
        '{"cwd": {"lazy": {"memory": ["a", "b", "c"]}}, "session": {"tactics": {"next": "read"}}}',
        cwd=tmp_path,
    )
    assert patch.returncode == 0, patch.stderr
    ack, receipt = patch.stdout.rstrip("\n").split("\n")
    assert ack == "State materialized atomically at cwd+session scopes."
    assert json.loads(receipt)["state_updates"]["effective"] == [
        {"path": ["tactics"], "value": {"next": "read"}}
    ]
    read = sf("--store", db, "tool", "read_state", '{"path": "cwd.lazy.memory[0:2]"}', cwd=tmp_path)
    assert read.stdout == '{"value":["a","b"]}\n'
    keys = sf(
        "--store",
        db,
        "tool",
        "read_state",
        "-",
        stdin='{"path": "effective.lazy", "projection": "keys"}',
        cwd=tmp_path,
    )
    assert json.loads(keys.stdout) == {"meta": {"type": "object", "size": 1}, "keys": {"memory": "array"}}


def test_cwd_and_session_options_pick_the_scope_documents(db: str, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    sf("--store", db, "tool", "patch_state", '{"cwd": {"strategy": {"project": "a"}}}', "--cwd", str(a))
    env = dict(os.environ, STATEFLOW_SESSION="from-env")
    sf("--store", db, "tool", "patch_state", '{"session": {"tactics": {"s": 1}}}', "--cwd", str(a), env=env)

    def read(*extra: str) -> subprocess.CompletedProcess[str]:
        return sf("--store", db, "tool", "read_state", '{"path": "effective"}', *extra)

    assert json.loads(read("--cwd", str(a), "--session", "from-env").stdout)["value"] == {
        "strategy": {"project": "a"},
        "tactics": {"s": 1},
    }
    assert json.loads(read("--cwd", str(b)).stdout)["value"] == {}


def test_refusals_go_to_stderr_with_exit_1(db: str, tmp_path: Path) -> None:
    bad = sf("--store", db, "tool", "read_state", '{"path": "cwd.lazy.memory[-1]"}', cwd=tmp_path)
    assert bad.returncode == 1 and bad.stdout == ""
    assert bad.stderr.startswith("error[invalid-path]:")
    refused = sf("--store", db, "tool", "patch_state", '{"session": {"response": "x"}}', cwd=tmp_path)
    assert refused.returncode == 1 and "written by the runtime" in refused.stderr
    assert sf("--store", db, "tool", "read_state", "{not json").returncode == 1
    unknown = sf("--store", db, "tool", "nope", "{}")
    assert unknown.returncode == 1 and unknown.stderr.startswith("error[unknown-tool]: unknown tool 'nope'")


def test_single_owner_mode_from_the_cli(db: str, tmp_path: Path) -> None:
    out = sf(
        "--store", db, "tool", "patch_state", '{"tactics": {"n": 1}}', "--scopes", "session", cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    read = sf(
        "--store", db, "tool", "read_state", '{"path": "tactics.n"}', "--scopes", "session", cwd=tmp_path
    )
    assert read.stdout == '{"value":1}\n'


def test_context_history_respond_and_session_commands(db: str, tmp_path: Path) -> None:
    base = ["--store", db]
    sf(
        *base,
        "tool",
        "patch_state",
        '{"session": {"tactics": {"step": 1}, "lazy": {"big": "BODY"}}}',
        cwd=tmp_path,
    )
    sf(*base, "tool", "patch_state", '{"session": {"tactics": {"step": 2}}}', cwd=tmp_path)
    assert sf(*base, "respond", "the answer", cwd=tmp_path).returncode == 0
    context = sf(*base, "context", cwd=tmp_path).stdout
    assert "BODY" not in context and '"response":"the answer"' in context
    head = json.loads(sf(*base, "context", "--json", cwd=tmp_path).stdout)
    assert head["head"]["state"]["tactics"] == {"step": 2}
    listed = json.loads(sf(*base, "history", "list", cwd=tmp_path).stdout)
    assert [t["changes"]["session"] for t in listed][1:] == [
        {"tactics": {"step": 2}},
        {"tactics": {"step": 1}, "lazy": {"big": "BODY"}},
    ]
    assert json.loads(
        sf(*base, "history", "show", "2", "--path", "session.tactics", cwd=tmp_path).stdout
    ) == {"step": 1}
    assert json.loads(sf(*base, "history", "diff", "2", cwd=tmp_path).stdout) == {
        "tactics": {"step": 2},
        "response": "the answer",
    }
    assert sf(*base, "session", "fork", "child", "--at", "2", cwd=tmp_path).returncode == 0
    child = sf(
        *base, "tool", "read_state", '{"path": "session.tactics.step"}', "--session", "child", cwd=tmp_path
    )
    assert child.stdout == '{"value":1}\n'


def test_history_diff_and_show_include_lazy_planes_unless_a_path_is_given(db: str, tmp_path: Path) -> None:
    base = ["--store", db]
    patch = '{"session": {"lazy": {"plan": ["a", "b"]}, "tactics": {"n": 1}}}'
    assert sf(*base, "tool", "patch_state", patch, cwd=tmp_path).returncode == 0
    indexed = '{"session": {"lazy": {"plan": {"[0]": "A"}}}}'
    assert sf(*base, "tool", "patch_state", indexed, cwd=tmp_path).returncode == 0
    assert sf(*base, "history", "diff", "1", cwd=tmp_path).stdout == '{"lazy":{"plan":{"[0]":"A"}}}\n'
    hot = sf(*base, "history", "diff", "1", "--path", "effective", cwd=tmp_path)
    assert hot.stdout == "{}\n"  # an explicit path reads as read_state does: effective is the hot view
    shown = json.loads(sf(*base, "history", "show", "1", cwd=tmp_path).stdout)
    assert shown == {"tactics": {"n": 1}, "lazy": {"plan": ["a", "b"]}}


def test_respond_is_refused_by_a_view_without_the_session_scope(db: str, tmp_path: Path) -> None:
    base = ["--store", db]
    refused = sf(*base, "respond", "secret answer", "--scopes", "global,cwd", cwd=tmp_path)
    assert refused.returncode != 0
    assert refused.stderr == (
        "error[invalid-input]: responses are recorded in the session scope: this view selects global, cwd\n"
    )
    assert not Path(db).exists()  # refused for its arguments: not even the store is created
    assert sf(*base, "tool", "patch_state", '{"global": {"tactics": {"a": 1}}}', cwd=tmp_path).returncode == 0
    refused = sf(*base, "respond", "secret answer", "--scopes", "global,cwd", cwd=tmp_path)
    read = sf(*base, "tool", "read_state", '{"path": "session.response"}', cwd=tmp_path)
    assert refused.returncode == 1 and read.stdout == '{"value":null}\n'


def test_mcp_server_with_a_real_client(db: str, tmp_path: Path) -> None:
    async def session() -> dict[str, Any]:
        params = StdioServerParameters(
            command="stateflow",
            args=["--store", db, "mcp", "--session", "mcp-test", "--cwd", str(tmp_path)],
            env=dict(os.environ),  # the SDK passes only a few variables by default
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            tools = {t.name: t for t in (await client.list_tools()).tools}
            patched = await client.call_tool("patch_state", {"session": {"tactics": {"via": "mcp"}}})
            value = await client.call_tool("read_state", {"path": "session.tactics.via"})
            missing = await client.call_tool("read_state", {"path": "session.tactics.nope"})
            return {"tools": tools, "patched": patched, "value": value, "missing": missing}

    out = anyio.run(session)
    tools = out["tools"]
    assert list(tools) == ["read_state", "patch_state"]
    assert tools["read_state"].annotations.read_only_hint is True
    assert tools["patch_state"].annotations.destructive_hint is True
    assert out["patched"].content[0].text.startswith("State materialized atomically at session scope.")
    assert out["value"].content[0].text == '{"value":"mcp"}'
    assert out["missing"].is_error is True
    assert out["missing"].content[0].text.startswith("error[path-not-found]:")
    assert "does not exist" in out["missing"].content[0].text
    # the same store, seen from the CLI
    assert (
        sf(
            "--store",
            db,
            "tool",
            "read_state",
            '{"path": "tactics.via"}',
            "--session",
            "mcp-test",
            "--cwd",
            str(tmp_path),
        ).stdout
        == '{"value":"mcp"}\n'
    )


def test_tool_patch_state_refuses_a_reserved_index_key_on_both_backends(
    backend: str, open_migrated: Any, tmp_path: Path
) -> None:
    open_migrated()  # (migrated: a PostgreSQL store is not migrated by the CLI)
    set_steps = '{"session": {"tactics": {"steps": ["a", "b", "c"]}}}'
    assert sf("--store", backend, "tool", "patch_state", set_steps, cwd=tmp_path).returncode == 0
    for patch, message in (
        (
            '{"session": {"tactics": {"steps": {"[-1]": "z"}}}}',
            "'[-1]' at session.tactics.steps is not a valid",
        ),
        ('{"session": {"tactics": {"steps": {"[1]": "B", "note": "x"}}}}', "beside the object key 'note'"),
        (
            '{"session": {"tactics": {"new": {"[0]": "z"}}}}',
            "'[0]' at session.tactics.new: the value there is absent",
        ),
    ):
        out = sf("--store", backend, "tool", "patch_state", patch, cwd=tmp_path)
        assert (out.returncode, out.stdout) == (1, "")
        assert out.stderr.startswith("error[invalid-patch]: index key ") and message in out.stderr
    read = sf("--store", backend, "tool", "read_state", '{"path": "session.tactics"}', cwd=tmp_path)
    assert read.stdout == '{"value":{"steps":["a","b","c"]}}\n'


def test_history_show_and_diff_read_an_absent_plane_as_null_as_read_state_does(
    backend: str, open_migrated: Any, tmp_path: Path
) -> None:
    open_migrated()
    base = ["--store", backend]
    assert (
        sf(*base, "tool", "patch_state", '{"session": {"tactics": {"n": 1}}}', cwd=tmp_path).returncode == 0
    )
    assert sf(*base, "tool", "read_state", '{"path": "strategy"}', cwd=tmp_path).stdout == '{"value":null}\n'
    for args in (("show", "0", "--path", "strategy"), ("show", "0", "--path", "session.lazy"), ("show", "1")):
        shown = sf(*base, "history", *args, cwd=tmp_path)
        assert (shown.returncode, shown.stdout) == (0, "null\n" if "--path" in args else "{}\n"), shown.stderr
    # the diff from before the plane existed is its addition, not an error
    diffed = sf(*base, "history", "diff", "1", "--path", "tactics", cwd=tmp_path)
    assert (diffed.returncode, diffed.stdout) == (0, '{"n":1}\n'), diffed.stderr
    # passive mode reads a response path as null there too
    assert sf(*base, "respond", "done", cwd=tmp_path).returncode == 0
    passive = sf(*base, "history", "show", "0", "--path", "response", "--mode", "passive", cwd=tmp_path)
    assert (passive.returncode, passive.stdout) == (0, "null\n"), passive.stderr
    below = sf(*base, "history", "show", "0", "--path", "strategy.x", cwd=tmp_path)
    assert below.returncode == 1 and below.stderr.startswith("error[path-not-found]")


def test_history_list_in_passive_mode_leaves_a_response_out_as_every_passive_read_does(
    backend: str, open_migrated: Any, tmp_path: Path
) -> None:
    open_migrated()
    base = ["--store", backend]
    assert (
        sf(*base, "tool", "patch_state", '{"session": {"tactics": {"n": 1}}}', cwd=tmp_path).returncode == 0
    )
    assert sf(*base, "respond", "done", cwd=tmp_path).returncode == 0

    def listed(*mode: str) -> list[tuple[Any, Any]]:
        out = sf(*base, "history", "list", *mode, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        return [(t["origin"].get("action"), t["changes"]) for t in json.loads(out.stdout)]

    active = [("response", {"session": {"response": "done"}}), (None, {"session": {"tactics": {"n": 1}}})]
    assert listed() == active
    # passive: the response shows nowhere, so the transition shows no change (not an empty
    # session patch); it keeps its place, so a position is still the offset `history show` takes
    assert listed("--mode", "passive") == [("response", {}), active[1]]
    diffed = sf(*base, "history", "diff", "1", "--mode", "passive", cwd=tmp_path)
    assert (diffed.returncode, diffed.stdout) == (0, "{}\n"), diffed.stderr
    shown = sf(*base, "history", "show", "1", "--path", "tactics", "--mode", "passive", cwd=tmp_path)
    assert (shown.returncode, shown.stdout) == (0, '{"n":1}\n'), shown.stderr


def test_session_fork_and_restore_reach_beyond_the_model_history_window(
    backend: str, open_migrated: Any, tmp_path: Path
) -> None:
    open_migrated()
    base = ["--store", backend]
    for n in range(1, 11):  # ten transitions; the model's window (--history-limit) is 7
        patch = f'{{"session": {{"tactics": {{"n": {n}}}}}}}'
        assert sf(*base, "tool", "patch_state", patch, cwd=tmp_path).returncode == 0
    assert sf(*base, "history", "show", "9", "--path", "tactics.n", cwd=tmp_path).stdout == "1\n"
    forked = sf(*base, "session", "fork", "early", "--at", "9", cwd=tmp_path)
    assert forked.returncode == 0, forked.stderr
    early = sf(*base, "tool", "read_state", '{"path": "tactics.n"}', "--session", "early", cwd=tmp_path)
    assert early.stdout == '{"value":1}\n'
    restored = sf(*base, "session", "restore", "8", cwd=tmp_path)
    assert restored.returncode == 0, restored.stderr
    assert sf(*base, "tool", "read_state", '{"path": "tactics.n"}', cwd=tmp_path).stdout == '{"value":2}\n'
    too_deep = sf(*base, "session", "restore", "12", cwd=tmp_path)  # eleven transitions now
    assert too_deep.returncode == 1
    assert too_deep.stderr.startswith("error[not-found]: requested history offset 12 predates the retained")


def test_session_fork_of_a_session_without_memory_is_refused(
    backend: str, open_migrated: Any, tmp_path: Path
) -> None:
    open_migrated()
    base = ["--store", backend]
    assert (
        sf(*base, "tool", "patch_state", '{"session": {"tactics": {"n": 1}}}', cwd=tmp_path).returncode == 0
    )
    typo = sf(*base, "session", "fork", "copy", "--session", "defualt", cwd=tmp_path)
    assert (typo.returncode, typo.stderr) == (
        1,
        "error[invalid-input]: session 'defualt' has no memory: nothing to fork\n",
    )
    origin = sf(*base, "session", "fork", "copy", "--at", "1", cwd=tmp_path)
    assert (
        origin.stderr
        == "error[invalid-input]: session 'default' had no memory 1 transition(s) ago: nothing to fork\n"
    )
    assert (
        sf(*base, "history", "list", "--session", "copy", "--scopes", "session", cwd=tmp_path).stdout
        == "[]\n"
    )
    # an empty session id is refused as such, not taken for the default session
    empty = sf(*base, "session", "fork", "", cwd=tmp_path)
    assert empty.stderr.startswith("error[invalid-input]: session id '' must be 1-256 characters")
    same = sf(*base, "session", "fork", "default", cwd=tmp_path)
    assert (
        same.stderr
        == "error[invalid-input]: session 'default' already has memory; fork into a new session id\n"
    )


def test_respond_says_when_it_clears_and_refuses_text_that_is_not_unicode(db: str, tmp_path: Path) -> None:
    base = ["--store", db]
    assert sf(*base, "respond", "the answer", cwd=tmp_path).stderr == "response recorded\n"
    for encoding in ("", "utf-8"):  # the locale's stdin, and a strict UTF-8 one
        not_utf8 = subprocess.run(
            ["stateflow", *base, "respond", "-"],
            input=b"caf\xe9",
            capture_output=True,
            timeout=60,
            cwd=tmp_path,
            env={**os.environ, "PYTHONIOENCODING": encoding},
        )
        assert not_utf8.returncode == 1
        assert not_utf8.stderr.decode().startswith("error[invalid-input]: a response must be Unicode text")
    read = sf(*base, "tool", "read_state", '{"path": "response"}', cwd=tmp_path)
    assert read.stdout == '{"value":"the answer"}\n'
    assert sf(*base, "respond", "", cwd=tmp_path).stderr == "response cleared\n"
    assert sf(*base, "tool", "read_state", '{"path": "response"}', cwd=tmp_path).stdout == '{"value":null}\n'
    assert sf(*base, "respond", "", cwd=tmp_path).stderr == "response unchanged\n"


def test_respond_in_passive_mode_says_it_records_nothing(db: str, tmp_path: Path) -> None:
    base = ["--store", db]
    assert sf(*base, "respond", "first answer", cwd=tmp_path).returncode == 0
    passive = sf(*base, "respond", "second answer", "--mode", "passive", cwd=tmp_path)
    assert passive.returncode == 0
    assert passive.stderr == "response not recorded: passive mode records no responses\n"
    # a text that is not Unicode is refused in passive mode too, not passed over
    not_utf8 = subprocess.run(
        ["stateflow", *base, "respond", "-", "--mode", "passive"],
        input=b"caf\xe9",
        capture_output=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert not_utf8.returncode == 1
    assert not_utf8.stderr.decode().startswith("error[invalid-input]: a response must be Unicode text")
    read = sf(*base, "tool", "read_state", '{"path": "response"}', cwd=tmp_path)
    assert read.stdout == '{"value":"first answer"}\n'


def test_context_in_mode_off_shows_no_memory_as_text_or_json(db: str, tmp_path: Path) -> None:
    base = ["--store", db]
    assert (
        sf(
            *base, "tool", "patch_state", '{"session": {"tactics": {"secret": "kept"}}}', cwd=tmp_path
        ).returncode
        == 0
    )
    text = sf(*base, "context", "--mode", "off", cwd=tmp_path)
    assert text.stdout == "State Flow memory is off for this session: there are no memory tools.\n"
    shown = sf(*base, "context", "--mode", "off", "--json", cwd=tmp_path)
    assert shown.returncode == 0 and "kept" not in shown.stdout
    assert json.loads(shown.stdout)["head"] == {} and json.loads(shown.stdout)["hot_bytes"] == 0


def test_fork_restore_and_scan_refuse_a_missing_store_and_create_nothing(tmp_path: Path) -> None:
    missing = tmp_path.resolve() / "typo" / "memory.db"
    for args in (
        ("session", "fork", "copy"),
        ("session", "restore", "1"),
        ("knowledge", "scan", "--knowledge-root", str(tmp_path)),
    ):
        out = sf("--store", "typo/memory.db", *args, cwd=tmp_path)  # named by its absolute URL
        assert (out.returncode, out.stderr) == (
            1,
            f"error[store-not-found]: no store at sqlite:///{missing} (nothing was created; check --store)\n",
        )
        assert not missing.parent.exists()


def test_an_empty_entry_in_the_knowledge_roots_variable_names_no_root(db: str, tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    env = {**os.environ, "STATEFLOW_KNOWLEDGE_ROOTS": f"{notes}{os.pathsep}"}  # a stray separator
    out = sf(
        "--store", db, "tool", "patch_state", '{"session": {"tactics": {"a": 1}}}', cwd=tmp_path, env=env
    )
    assert out.returncode == 0, out.stderr
    status = sf("--store", db, "knowledge", "status", cwd=tmp_path, env=env)
    assert [r["root"] for r in json.loads(status.stdout)] == [str(notes)]  # not the working directory too
    only = sf(
        "--store", db, "knowledge", "status", cwd=tmp_path, env={**env, "STATEFLOW_KNOWLEDGE_ROOTS": ":"}
    )
    assert only.returncode == 1 and only.stderr.startswith(
        "error[invalid-input]: no knowledge root is configured"
    )


def test_tool_patch_projection_below_an_object_replaced_by_a_scalar_reads_null(
    backend: str, open_migrated: Any, tmp_path: Path
) -> None:
    open_migrated()
    base = ["--store", backend, "tool"]
    for patch in (
        '{"session": {"strategy": {"db": {"engine": "pg"}}}}',
        '{"session": {"strategy": {"db": "sqlite"}}}',
    ):
        assert sf(*base, "patch_state", patch, cwd=tmp_path).returncode == 0
    read = sf(
        *base, "read_state", '{"path": "session[0].strategy.db.engine", "projection": "patch"}', cwd=tmp_path
    )
    assert (read.returncode, read.stdout) == (0, '{"patch":null}\n'), read.stderr
    # a key there neither before nor after the transition is refused, as its value read is
    read = sf(
        *base, "read_state", '{"path": "effective[0].strategy.db.port", "projection": "patch"}', cwd=tmp_path
    )
    assert read.returncode == 1
    assert read.stderr == "error[path-not-found]: read path does not exist: effective[0].strategy.db.port\n"


def test_tool_hint_names_paths_read_state_reads(backend: str, open_migrated: Any, tmp_path: Path) -> None:
    open_migrated()
    base = ["--store", backend, "tool"]
    source = tmp_path / "notes.md"
    source.write_text("hi\n")
    patch = {"cwd": {"artifacts": {str(source): {"description": "details: see $cwd.lazy.gone."}}}}
    assert sf(*base, "patch_state", json.dumps(patch), cwd=tmp_path).returncode == 0
    read = sf(*base, "read_state", '{"path": "cwd.lazy.gone"}', cwd=tmp_path)
    assert read.returncode == 0, read.stderr
    assert json.loads(read.stdout)["hint"][0]["paths"] == ["cwd.artifacts"]
    owner = sf(*base, "read_state", '{"path": "cwd.artifacts"}', cwd=tmp_path)
    assert owner.returncode == 0 and str(source) in json.loads(owner.stdout)["value"], owner.stderr


def test_tool_read_state_refuses_an_index_with_a_leading_zero(db: str, tmp_path: Path) -> None:
    sf("--store", db, "tool", "patch_state", '{"session": {"lazy": {"m": ["a", "b"]}}}', cwd=tmp_path)
    read = sf("--store", db, "tool", "read_state", '{"path": "session.lazy.m[01]"}', cwd=tmp_path)
    assert (read.returncode, read.stdout) == (1, "")
    assert read.stderr.startswith("error[invalid-path]: ") and "'01' has a leading zero" in read.stderr


def test_tool_keys_of_an_absent_plane_in_a_batch_over_scopes(db: str, tmp_path: Path) -> None:
    sf("--store", db, "tool", "patch_state", '{"session": {"lazy": {"a": 1}}}', cwd=tmp_path)
    args = '{"paths": ["session.lazy", "global.lazy"], "projection": "keys"}'
    read = sf("--store", db, "tool", "read_state", args, cwd=tmp_path)
    assert (read.returncode, read.stderr) == (0, "")
    assert json.loads(read.stdout) == {
        "meta": [{"type": "object", "size": 1}, {"type": "null"}],
        "keys": [{"a": "number"}, []],
    }


def test_tool_patch_state_deletes_a_plane_by_null(backend: str, open_migrated: Any, tmp_path: Path) -> None:
    open_migrated()
    base = ["--store", backend, "tool"]
    assert sf(*base, "patch_state", '{"session": {"lazy": {"a": 1, "b": 2}}}', cwd=tmp_path).returncode == 0
    deleted = sf(*base, "patch_state", '{"session": {"lazy": null}}', cwd=tmp_path)
    assert deleted.returncode == 0 and deleted.stdout.startswith("State materialized"), deleted.stderr
    read = sf(*base, "read_state", '{"path": "session.lazy"}', cwd=tmp_path)
    assert read.stdout == '{"value":null}\n'
    replaced = sf(*base, "patch_state", '{"session": {"lazy": [1]}}', cwd=tmp_path)
    assert replaced.returncode == 1 and "or null to delete the plane" in replaced.stderr


def test_a_working_directory_whose_name_is_not_utf8_is_refused_for_the_cwd_scope_only(
    db: str, tmp_path: Path
) -> None:
    # Linux allows any bytes in a name: such a cwd can key no record (over HTTP, its header is
    # refused the same way), but a call that leaves the cwd scope out never needs it
    project = tmp_path / os.fsdecode(b"proj\xff")
    project.mkdir()
    refused = (
        f"error[invalid-input]: the working directory '{tmp_path}/proj\\xff' is not UTF-8: a cwd "
        "scope's key is Unicode text: work from a directory whose name is UTF-8, or leave the cwd "
        "scope out\n"
    )
    event = '{"session_id": "c0ffee", "hook_event_name": "SessionStart"}'
    for args, stdin in (
        (("tool", "patch_state", '{"cwd": {"tactics": {"next": "x"}}}'), None),
        (("context",), None),
        (("hook", "claude-code"), event),
        (("mcp",), ""),
    ):
        out = sf("--store", db, *args, stdin=stdin, cwd=project)
        assert (out.returncode, out.stdout, out.stderr) == (1, "", refused), args
        assert not Path(db).exists()  # refused before any store is opened
    patch = '{"session": {"tactics": {"next": "x"}}}'
    out = sf("--store", db, "tool", "patch_state", patch, "--scopes", "session", cwd=project)
    assert out.returncode == 0, out.stderr
    out = sf("--store", db, "context", "--scopes", "session", "--json", cwd=project)
    assert out.returncode == 0, out.stderr
    out = sf("--store", db, "hook", "claude-code", "--scopes", "global,session", stdin=event, cwd=project)
    assert out.returncode == 0, out.stderr
    assert "additionalContext" in json.loads(out.stdout)["hookSpecificOutput"]


def test_tool_refuses_nan_and_infinity_tokens_as_the_mcp_doors_do(db: str, tmp_path: Path) -> None:
    # the MCP doors' JSON-RPC parsers read NaN and Infinity as numbers, which the dispatcher
    # refuses naming their place; the CLI door reads ARGUMENTS so too, and prints that very text
    # (a literal past a double's range reaches the tool as written at every door: named so)
    from stateflow.doc.canonical import BeyondDouble
    from stateflow.memory import Identity, MemoryConfig, MemoryView
    from stateflow.store import open_store
    from stateflow.tools import ToolHost

    host = ToolHost(
        MemoryView(
            open_store(db), Identity.of("a", str(tmp_path), "s"), ("global", "cwd", "session"), MemoryConfig()
        )
    )
    for token, number in (
        ("NaN", float("nan")),
        ("-Infinity", float("-inf")),
        ("1e400", BeyondDouble("1e400")),
    ):
        text = '{"session": {"tactics": {"n": ' + token + "}}}"
        out = sf("--store", db, "tool", "patch_state", text, "--agent", "a", "--session", "s", cwd=tmp_path)
        refused = host.call("patch_state", {"session": {"tactics": {"n": number}}})
        assert refused.is_error and out.returncode == 1
        assert out.stderr == refused.error_text() + "\n"
        assert out.stderr.startswith("error[invalid-json]: session.tactics.n: ")
    assert out.stderr == (
        "error[invalid-json]: session.tactics.n: 1e400 is not a JSON number this store holds "
        "(beyond a double's range: it reads as Infinity)\n"
    )
    # other text that is not JSON is still refused as such, naming the argument
    out = sf("--store", db, "tool", "patch_state", '{"session": {"tactics": {"n": nan}}}', cwd=tmp_path)
    assert out.stderr.startswith("error[invalid-json]: ARGUMENTS: invalid JSON: "), out.stderr
    assert host.call("read_state", {"path": "session.tactics"}).text == '{"value":null}'


def test_tool_arguments_name_the_first_bad_number_in_document_order(db: str, tmp_path: Path) -> None:
    # a refusal named the last offending place of an object or array (the walk took its entries
    # from the end): NaN written before 1e400 was reported as the 1e400
    from stateflow.doc.canonical import read_as_sent
    from stateflow.memory import Identity, MemoryConfig, MemoryView
    from stateflow.store import open_store
    from stateflow.tools import ToolHost

    host = ToolHost(
        MemoryView(
            open_store(db), Identity.of("a", str(tmp_path), "s"), ("global", "cwd", "session"), MemoryConfig()
        )
    )
    nan = "is not a JSON number (NaN and Infinity are refused)"
    beyond = "1e400 is not a JSON number this store holds (beyond a double's range: it reads as Infinity)"
    for text, first in (
        ('{"session": {"tactics": {"a": NaN, "b": 1e400}}}', f"session.tactics.a: nan {nan}"),
        ('{"session": {"tactics": {"a": [1, NaN, 1e400]}}}', f"session.tactics.a[1]: nan {nan}"),
        (
            '{"session": {"tactics": {"a": {"c": [{"d": NaN}]}, "b": 1e400}}}',
            f"session.tactics.a.c[0].d: nan {nan}",
        ),
        ('{"session": {"tactics": {"a": 1e400, "b": NaN}}}', f"session.tactics.a: {beyond}"),
        ('{"session": {"tactics": {"a": [1e400, -Infinity]}}}', f"session.tactics.a[0]: {beyond}"),
    ):
        out = sf("--store", db, "tool", "patch_state", text, "--agent", "a", "--session", "s", cwd=tmp_path)
        assert (out.returncode, out.stderr) == (1, f"error[invalid-json]: {first}\n"), text
        # the MCP doors read the text so (read_as_sent) and hand it to the same dispatcher
        refused = host.call("patch_state", read_as_sent(text))
        assert refused.is_error and refused.error_text() == f"error[invalid-json]: {first}", text
    assert host.call("read_state", {"path": "session.tactics"}).text == '{"value":null}'
