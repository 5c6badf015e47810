"""``stateflow setup claude-code`` writes files Claude Code can use, keeps what was there, and the
hook and server it configures work as Claude Code would run them."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


def sf(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["stateflow", *args], capture_output=True, text=True, timeout=60, cwd=cwd)


def test_setup_merges_is_idempotent_and_its_hook_and_server_work(tmp_path: Path) -> None:
    project, db = tmp_path / "project", str(tmp_path / "m.db")
    (project / ".claude").mkdir(parents=True)
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"other": {"command": "other-server"}}}))
    (project / ".claude" / "settings.json").write_text(
        json.dumps(
            {
                "model": "x",
                "hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": "echo hi"}]}]},
            }
        )
    )
    typo = tmp_path / "projekt"
    out = sf("--store", db, "setup", "claude-code", "--project", str(typo), cwd=tmp_path)
    assert out.returncode == 2 and "does not exist" in out.stderr and not typo.exists()
    dry = sf("--store", db, "setup", "claude-code", "--project", str(project), "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert '"other"' in dry.stdout and json.loads((project / ".mcp.json").read_text()) == {
        "mcpServers": {"other": {"command": "other-server"}}
    }
    for _ in range(2):
        out = sf("--store", db, "setup", "claude-code", "--project", str(project), cwd=tmp_path)
        assert out.returncode == 0, out.stderr
    servers = json.loads((project / ".mcp.json").read_text())["mcpServers"]
    assert set(servers) == {"other", "stateflow"}
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    assert settings["model"] == "x"
    start, prompt = settings["hooks"]["SessionStart"], settings["hooks"]["UserPromptSubmit"]
    assert start[0] == {"hooks": [{"type": "command", "command": "echo hi"}]} and len(start) == 2
    assert len(prompt) == 1
    command = prompt[0]["hooks"][0]["command"]

    entry = servers["stateflow"]
    assert "--follow-hook-session" in entry["args"]

    def run_hook(event: str, session: str) -> dict[str, Any]:
        """The hook as Claude Code runs it: its event as JSON on stdin, JSON context on stdout."""
        hook = subprocess.run(
            ["bash", "-c", command],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=project,
            env=dict(os.environ, CLAUDE_PROJECT_DIR=str(project)),
            input=json.dumps(
                {"session_id": session, "cwd": str(project), "hook_event_name": event, "prompt": "hi"}
            ),
        )
        assert hook.returncode == 0, hook.stderr
        output: dict[str, Any] = json.loads(hook.stdout)["hookSpecificOutput"]
        assert output["hookEventName"] == event
        return output

    started = run_hook("SessionStart", "conv-1")
    assert '"state":{}' in started["additionalContext"]

    async def use_the_server() -> Any:
        params = StdioServerParameters(
            command=entry["command"], args=entry["args"], env=dict(os.environ), cwd=str(project)
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            return await client.call_tool("patch_state", {"session": {"tactics": {"from": "claude code"}}})

    assert not anyio.run(use_the_server).is_error
    # the server wrote the conversation the hook named, and the next prompt's context shows it
    prompt_context = run_hook("UserPromptSubmit", "conv-1")["additionalContext"]
    assert '"state":{"tactics":{"from":"claude code"}}' in prompt_context
    read = sf(
        "--store",
        db,
        "tool",
        "read_state",
        '{"path": "session.tactics"}',
        "--session",
        "conv-1",
        "--agent",
        "claude-code",
        cwd=project,
    )
    assert read.stdout == '{"value":{"from":"claude code"}}\n', read.stderr
    # another conversation has its own session memory
    assert '"state":{}' in run_hook("SessionStart", "conv-2")["additionalContext"]


def test_the_hook_refuses_an_event_that_cannot_add_context(tmp_path: Path) -> None:
    out = subprocess.run(
        ["stateflow", "--store", str(tmp_path / "m.db"), "hook", "claude-code"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        input='{"session_id": "s", "hook_event_name": "Stop"}',
    )
    assert out.returncode == 1
    assert out.stderr.startswith("error[invalid-input]: hook event 'Stop' cannot add context")
    assert not (tmp_path / "m.db").exists()


def test_the_hook_refuses_input_that_is_not_utf8_whatever_the_locale(tmp_path: Path) -> None:
    for encoding in ("", "utf-8"):  # the locale's stdin, and a strict UTF-8 one
        out = subprocess.run(
            ["stateflow", "--store", str(tmp_path / "m.db"), "hook", "claude-code"],
            capture_output=True,
            timeout=60,
            cwd=tmp_path,
            input=b'{"session_id": "caf\xe9", "hook_event_name": "SessionStart"}',
            env={**os.environ, "PYTHONIOENCODING": encoding},
        )
        assert out.returncode == 1
        assert out.stderr.decode().startswith("error[invalid-input]: the hook input on stdin is not JSON (")
        assert b"Traceback" not in out.stderr


def test_the_hook_still_gives_the_context_when_it_cannot_record_the_session(tmp_path: Path) -> None:
    """A runtime directory that cannot be made (a file in its way) costs only the record the
    server follows: the turn still gets its memory, and stderr says why in one line."""
    db = str(tmp_path / "m.db")
    wrote = sf(
        "--store",
        db,
        "tool",
        "patch_state",
        '{"session": {"tactics": {"n": 1}}}',
        "--session",
        "c1",
        cwd=tmp_path,
    )
    assert wrote.returncode == 0, wrote.stderr
    (tmp_path / "a-file").touch()
    out = subprocess.run(
        ["stateflow", "--store", db, "hook", "claude-code"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=dict(os.environ, STATEFLOW_RUNTIME_DIR=str(tmp_path / "a-file" / "runtime")),
        input='{"session_id": "c1", "hook_event_name": "UserPromptSubmit"}',
    )
    assert out.returncode == 0, out.stderr
    assert '"tactics":{"n":1}' in json.loads(out.stdout)["hookSpecificOutput"]["additionalContext"]
    assert out.stderr.startswith("warning: cannot record the session in ") and out.stderr.count("\n") == 1


def test_setup_refuses_a_broken_settings_file(tmp_path: Path) -> None:
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "settings.json").write_text("{broken")
    out = sf("setup", "claude-code", "--project", str(tmp_path), cwd=tmp_path)
    assert out.returncode == 1 and out.stderr.startswith("error[invalid-input]:")
    assert (tmp_path / ".claude" / "settings.json").read_text() == "{broken"
    assert not (tmp_path / ".mcp.json").exists()


def test_setup_refuses_a_malformed_hook_group_naming_it(tmp_path: Path) -> None:
    # Claude Code refuses such a file as a whole: hooks added beside the group would never run
    (tmp_path / ".claude").mkdir()
    settings = tmp_path / ".claude" / "settings.json"
    for groups, where in (
        ([{"hooks": [{"type": "command", "command": "true"}]}, {"hooks": "x"}], "hooks.SessionStart[1]"),
        ([5], "hooks.SessionStart[0]"),
        ([{"matcher": "x"}], "hooks.SessionStart[0]"),
        ([{"hooks": ["true"]}], "hooks.SessionStart[0]"),
    ):
        text = json.dumps({"hooks": {"SessionStart": groups}})
        settings.write_text(text)
        out = sf("setup", "claude-code", "--project", str(tmp_path), cwd=tmp_path)
        assert out.returncode == 1, out.stderr
        assert out.stderr == (
            f'error[invalid-input]: {settings}: {where} must be an object with a "hooks" list of objects\n'
        )
        assert settings.read_text() == text
        assert not (tmp_path / ".mcp.json").exists()


def test_setup_gives_the_server_and_hooks_a_hot_budget(tmp_path: Path) -> None:
    """Claude Code cuts a hook's context at 10,000 characters: the budget keeps the hot state small."""
    db = str(tmp_path / "m.db")
    out = sf("--store", db, "setup", "claude-code", "--hot-budget", "3000", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    entry = json.loads((tmp_path / ".mcp.json").read_text())["mcpServers"]["stateflow"]
    assert entry["args"][-3:] == ["--hot-budget", "3000", "--follow-hook-session"]
    settings = json.loads((tmp_path / ".claude" / "settings.json").read_text())
    command = settings["hooks"]["SessionStart"][0]["hooks"][0]["command"]

    async def patch(value: str) -> Any:
        params = StdioServerParameters(
            command=entry["command"], args=entry["args"], env=dict(os.environ), cwd=str(tmp_path)
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            return await client.call_tool("patch_state", {"session": {"tactics": {"notes": value}}})

    refused = anyio.run(patch, "x" * 4000)
    assert refused.is_error and refused.content[0].text.startswith("error[hot-budget]:")
    assert "move large values to lazy" in refused.content[0].text
    assert not anyio.run(patch, "short").is_error
    hook = subprocess.run(
        ["bash", "-c", command],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=dict(os.environ, CLAUDE_PROJECT_DIR=str(tmp_path)),
        input='{"session_id": "claude-code", "hook_event_name": "SessionStart"}',
    )
    context = json.loads(hook.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "bytes of a 3000-byte budget" in context and len(context) < 10_000


def test_a_relative_store_is_written_as_the_store_it_names_here(tmp_path: Path) -> None:
    """Claude Code starts the server and the hooks in the project: a relative --store given to
    setup elsewhere is written as the absolute path of the store it named there."""
    project = tmp_path / "proj"
    project.mkdir()
    wrote = sf(
        "--store", "./team.db", "tool", "patch_state", '{"cwd": {"tactics": {"next": "from-user"}}}',
        "--agent", "claude-code", "--cwd", str(project), cwd=tmp_path,
    )  # fmt: skip
    assert wrote.returncode == 0, wrote.stderr
    out = sf("--store", "./team.db", "setup", "claude-code", "--project", "proj", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    entry = json.loads((project / ".mcp.json").read_text())["mcpServers"]["stateflow"]
    assert entry["args"][:2] == ["--store", str(tmp_path / "team.db")]
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    hook = subprocess.run(
        ["bash", "-c", settings["hooks"]["SessionStart"][0]["hooks"][0]["command"]],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=project,
        env=dict(os.environ, CLAUDE_PROJECT_DIR=str(project)),
        input='{"session_id": "s", "hook_event_name": "SessionStart"}',
    )
    assert hook.returncode == 0, hook.stderr
    assert "from-user" in json.loads(hook.stdout)["hookSpecificOutput"]["additionalContext"]
    assert not (project / "team.db").exists()


def test_the_hook_stays_under_claude_codes_cap_with_the_documented_budget(tmp_path: Path) -> None:
    """Claude Code replaces a hook context over 10,000 characters by a preview: with the hot
    state within the documented 5,000-byte budget, the recent transitions (which repeat its
    values) are trimmed, oldest first, until the context fits; a hot state too large alone is
    shown whole, with a warning."""
    db = str(tmp_path / "m.db")

    def patch(session: str, value: dict[str, str], *budget: str) -> None:
        args = ("tool", "patch_state", json.dumps({"session": {"tactics": value}}), "--agent", "claude-code")
        out = sf("--store", db, *args, "--session", session, *budget, cwd=tmp_path)
        assert out.returncode == 0, out.stderr

    def hook(session: str, *budget: str) -> tuple[str, str]:
        out = subprocess.run(
            ["stateflow", "--store", db, "hook", "claude-code", "--agent", "claude-code", *budget],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            input=json.dumps({"session_id": session, "hook_event_name": "UserPromptSubmit"}),
        )
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)["hookSpecificOutput"]["additionalContext"], out.stderr

    for i in range(7):
        patch("conv-1", {f"k{i}": "x" * 640}, "--hot-budget", "5000")
    context, warned = hook("conv-1", "--hot-budget", "5000")
    assert len(context) <= 10_000 and warned == ""
    assert "bytes of a 5000-byte budget" in context and '"recent_transitions_omitted":' in context
    state = json.loads(context.split("\n")[-4])["state"]  # the runtime context line: the state is whole
    assert state == {"tactics": {f"k{i}": "x" * 640 for i in range(7)}}

    for i in range(4):
        patch("conv-2", {f"z{i}": "y" * 3000})
    context, warned = hook("conv-2")
    assert len(context) > 10_000 and "y" * 3000 in context
    assert warned.startswith("warning: the memory context is") and "cap for hook output" in warned


def test_setup_keeps_the_users_own_hooks_that_share_a_group_with_ours(tmp_path: Path) -> None:
    """A hook group may hold several hooks and a matcher: setup takes out only its own hooks
    (this version's, or an earlier one's `stateflow context`), keeps the user's ones and the
    group's matcher, and drops a group only when nothing of the user's is left in it."""
    ours = 'stateflow hook claude-code --agent claude-code --session claude-code --cwd "$CLAUDE_PROJECT_DIR"'
    audit = {"type": "command", "command": "/usr/local/bin/my-own-audit-hook"}
    keep = {"type": "command", "command": "echo keep-me", "timeout": 5}
    earlier = {"type": "command", "command": "stateflow context --agent old"}
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "settings.json").write_text(
        json.dumps(
            {
                "hooks": {
                    "UserPromptSubmit": [{"hooks": [{"type": "command", "command": ours}, audit]}],
                    "SessionStart": [
                        {"matcher": "startup", "hooks": [earlier, keep]},
                        {"matcher": "resume", "hooks": [earlier]},
                    ],
                }
            }
        )
    )
    for _ in range(2):
        out = sf("setup", "claude-code", cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        hooks = json.loads((tmp_path / ".claude" / "settings.json").read_text())["hooks"]
        own = {"hooks": [{"type": "command", "command": ours}]}
        assert hooks["UserPromptSubmit"] == [{"hooks": [audit]}, own]
        assert hooks["SessionStart"] == [{"matcher": "startup", "hooks": [keep]}, own]


def test_setup_checks_both_files_can_be_written_before_writing_either(tmp_path: Path) -> None:
    """`.claude` a file (or settings.json a directory): one error line, and `.mcp.json` is not
    written — the server is never wired without the hooks."""
    claude_is_a_file, settings_is_a_dir = tmp_path / "a", tmp_path / "b"
    claude_is_a_file.mkdir()
    (claude_is_a_file / ".claude").touch()
    (settings_is_a_dir / ".claude" / "settings.json").mkdir(parents=True)
    for project in (claude_is_a_file, settings_is_a_dir):
        out = sf("setup", "claude-code", "--project", str(project), cwd=tmp_path)
        assert out.returncode == 1 and out.stderr.startswith("error[target-unwritable]: cannot write "), out
        assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
        assert not (project / ".mcp.json").exists()


def test_setup_never_writes_a_store_password_into_the_files(tmp_path: Path) -> None:
    """Both files are meant to be committed: a store URL holding a password (from stateflow.toml,
    STATEFLOW_STORE or --store; `user:PASSWORD@` or `?sslpassword=`) is refused, masked, dry run
    included, naming the safer ways; with --no-store the server and hooks name no store and read
    the configured one when Claude Code runs them."""
    project = tmp_path / "p"
    project.mkdir()
    (project / "stateflow.toml").write_text('[store]\nurl = "postgresql://app:s3cret@127.0.0.1:1/x"\n')
    for args in ((), ("--dry-run",)):
        out = sf("setup", "claude-code", *args, cwd=project)
        assert out.returncode == 1 and out.stdout == "", out
        assert out.stderr.startswith(
            "error[invalid-input]: the store postgresql://app:***@127.0.0.1:1/x holds a"
        )
        assert "~/.pgpass" in out.stderr and "PGPASSWORD" in out.stderr and "--no-store" in out.stderr
        assert "s3cret" not in out.stderr
    out = sf("--store", "postgresql://app@127.0.0.1:1/x?sslpassword=k3y", "setup", "claude-code", cwd=project)
    assert out.returncode == 1 and "?sslpassword=***" in out.stderr and "k3y" not in out.stderr
    assert not (project / ".mcp.json").exists() and not (project / ".claude").exists()
    dry = sf("setup", "claude-code", "--no-store", "--dry-run", cwd=project)
    assert dry.returncode == 0 and "s3cret" not in dry.stdout and "--store" not in dry.stdout, dry

    (project / "stateflow.toml").write_text(f'[store]\nurl = "{tmp_path / "m.db"}"\n')
    patch = '{"cwd": {"tactics": {"next": "from-config"}}}'
    wrote = sf("tool", "patch_state", patch, "--agent", "claude-code", "--cwd", str(project), cwd=project)
    assert wrote.returncode == 0, wrote.stderr
    assert sf("setup", "claude-code", "--no-store", cwd=project).returncode == 0
    assert "--store" not in (project / ".mcp.json").read_text()
    command = json.loads((project / ".claude" / "settings.json").read_text())["hooks"]["SessionStart"][0]
    hook = subprocess.run(
        ["bash", "-c", command["hooks"][0]["command"]],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=project,
        env=dict(os.environ, CLAUDE_PROJECT_DIR=str(project)),
        input='{"session_id": "s", "hook_event_name": "SessionStart"}',
    )
    assert hook.returncode == 0, hook.stderr
    assert "from-config" in json.loads(hook.stdout)["hookSpecificOutput"]["additionalContext"]


def test_setup_never_writes_through_a_link_out_of_the_project(tmp_path: Path) -> None:
    """A project (a cloned repository, say) whose `.mcp.json` or `.claude` is a symbolic link
    out of it — dangling or not — is refused with one error line, and nothing is written
    anywhere; a link that stays inside the project is followed."""
    outside = tmp_path / "outside"
    outside.mkdir()
    for name, target in ((".mcp.json", outside / "victim.json"), (".claude", outside)):
        project = tmp_path / name.strip(".")
        project.mkdir()
        (project / name).symlink_to(target)
        out = sf(
            "--store", str(tmp_path / "s.db"), "setup", "claude-code", "--project", str(project), cwd=tmp_path
        )
        assert out.returncode == 1, out
        assert (
            out.stderr.startswith("error[target-unwritable]: cannot write ") and "symbolic link" in out.stderr
        )
        assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
        assert list(outside.iterdir()) == [] and not (project / ".mcp.json").is_file()
    project = tmp_path / "inside"
    (project / "config" / "claude").mkdir(parents=True)
    (project / ".claude").symlink_to(project / "config" / "claude")
    out = sf(
        "--store", str(tmp_path / "s.db"), "setup", "claude-code", "--project", str(project), cwd=tmp_path
    )
    assert out.returncode == 0, out
    assert "hooks" in json.loads((project / "config" / "claude" / "settings.json").read_text())


def test_setup_refuses_a_store_path_that_is_not_utf8_and_writes_nothing(tmp_path: Path) -> None:
    # a folder named in Latin-1: JSON can hold its name only escaped (\udce9), which no reader
    # turns back into the folder's bytes — the server and hooks would open another, new store
    folder = Path(os.fsdecode(bytes(tmp_path) + b"/caf\xe9"))
    folder.mkdir()
    out = sf("--store", "team.db", "setup", "claude-code", cwd=folder)
    assert out.returncode == 1
    assert out.stderr.startswith(
        f"error[invalid-input]: the store path '{tmp_path}/caf\\xe9/team.db' is not UTF-8 text, "
        "which .mcp.json and settings.json (JSON) can hold only escaped, naming nothing that exists; "
        "nothing was written."
    ), out.stderr
    assert "--no-store" in out.stderr
    agent = sf("setup", "claude-code", "--agent", os.fsdecode(b"bot\xff"), cwd=folder)
    assert agent.returncode == 1 and "error[invalid-input]: --agent 'bot\\xff' is not UTF-8" in agent.stderr
    assert list(folder.iterdir()) == []
    # without the store's path, nothing in the files names the folder: setup works there
    assert sf("setup", "claude-code", "--no-store", cwd=folder).returncode == 0
    assert sorted(p.name for p in folder.iterdir()) == [".claude", ".mcp.json"]


def test_setup_warns_of_a_stateflow_not_on_path_and_keeps_the_full_path_a_user_gives(tmp_path: Path) -> None:
    """Run from a virtual environment that is not on PATH, setup says the bare command may not
    start; once the user names the executable's full path, setup keeps it and recognises its own
    hooks by it: no hook twice (the context shown twice), no bare command put back."""
    executable = shutil.which("stateflow")
    assert executable is not None
    env = {**os.environ, "PATH": str(tmp_path / "nothing-here")}  # (as Claude Code's may lack it)

    def setup(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [executable, "setup", "claude-code", *args],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            env=env,
        )

    first = setup()
    assert first.returncode == 0, first.stderr
    assert "warning: stateflow is not on PATH here" in first.stderr, first.stderr
    mcp_file, settings_file = tmp_path / ".mcp.json", tmp_path / ".claude" / "settings.json"
    mcp = json.loads(mcp_file.read_text())
    mcp["mcpServers"]["stateflow"]["command"] = executable  # the user's fix, in .mcp.json only
    mcp_file.write_text(json.dumps(mcp))
    own = {"type": "command", "command": f"{executable} respond done"}  # the user's, not setup's
    settings = json.loads(settings_file.read_text())
    settings["hooks"]["SessionStart"].append({"hooks": [own]})
    settings_file.write_text(json.dumps(settings))
    for _ in range(2):
        again = setup("--hot-budget", "5000")
        assert again.returncode == 0 and "warning" not in again.stderr, again.stderr
        assert json.loads(mcp_file.read_text())["mcpServers"]["stateflow"]["command"] == executable
        hooks = json.loads(settings_file.read_text())["hooks"]
        ours = shlex.join(
            [executable, "hook", "claude-code", "--agent", "claude-code", "--session", "claude-code"]
        )
        hook = {
            "hooks": [{"type": "command", "command": f'{ours} --hot-budget 5000 --cwd "$CLAUDE_PROJECT_DIR"'}]
        }
        assert hooks["SessionStart"] == [{"hooks": [own]}, hook]
        assert hooks["UserPromptSubmit"] == [hook]


def test_the_hook_says_when_it_creates_the_store_it_names(tmp_path: Path) -> None:
    """The first hook of a project creates its store, as the server's first patch would; a
    mistyped --store then shows as a new, empty store, so the hook names the file it created."""
    db = tmp_path / "typo" / "sub" / "m.db"

    def hook() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["stateflow", "--store", str(db), "hook", "claude-code"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            env=dict(os.environ, STATEFLOW_RUNTIME_DIR=str(tmp_path / "runtime")),
            input='{"session_id": "c1", "hook_event_name": "SessionStart"}',
        )

    first = hook()
    assert first.returncode == 0 and db.exists(), first.stderr
    assert first.stderr == (
        f"warning: no store was at {db}: this hook created it, empty. If the server and hooks should "
        "use another, fix the store they name (--store in .claude/settings.json and .mcp.json, or "
        "STATEFLOW_STORE)\n"
    )
    assert (
        "State Flow memory is active" in json.loads(first.stdout)["hookSpecificOutput"]["additionalContext"]
    )
    again = hook()
    assert again.returncode == 0 and again.stderr == "", again.stderr


def test_the_mcp_server_says_when_it_creates_the_store_it_names(tmp_path: Path) -> None:
    """``stateflow mcp`` created a store (and its folders) for a mistyped --store in silence, so
    the typo showed only as an empty memory. It now names the file it created, as the hook does,
    once: a server started again on that file says nothing."""
    db = tmp_path / "typo" / "deep" / "m.db"

    def serve() -> subprocess.CompletedProcess[str]:
        return subprocess.run(  # (no client: the server ends at its input's end)
            ["stateflow", "--store", str(db), "mcp"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            env=dict(os.environ, STATEFLOW_RUNTIME_DIR=str(tmp_path / "runtime")),
            input="",
        )

    first = serve()
    assert first.returncode == 0 and db.exists(), first.stderr
    assert first.stderr == (
        f"warning: no store was at {db}: this MCP server created it, empty. If the server and hooks "
        "should use another, fix the store they name (--store in .claude/settings.json and .mcp.json, "
        "or STATEFLOW_STORE)\n"
    )
    again = serve()
    assert again.returncode == 0 and again.stderr == "", again.stderr
