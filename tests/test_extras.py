"""The SQLite-only install, and the refusal that names the extra a command needs.

Each case runs the real CLI in a fresh interpreter in which the extra's libraries cannot be
imported (as in an install without that extra).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from stateflow.extras import EXTRAS

DECLARATION = (
    '{"schema": {"type": "object", "properties": {"text": {"type": "string"}}}, '
    '"subject_kinds": ["thread"], "default_subject_kind": "thread"}'
)
EVERY_EXTRA = [module for modules in EXTRAS.values() for module in modules]


def cli_without(missing: list[str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    code = (
        "import sys\n"
        f"for name in {missing!r}: sys.modules[name] = None  # not installed\n"
        "from stateflow.cli.main import main\n"
        "sys.argv[0] = 'stateflow'\n"
        "sys.exit(main())\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60, cwd=cwd
    )


def test_memory_and_states_work_without_any_extra(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    patch = cli_without(
        EVERY_EXTRA,
        "--store",
        db,
        "tool",
        "patch_state",
        '{"session": {"tactics": {"next": "a"}}}',
        cwd=tmp_path,
    )
    assert patch.returncode == 0, patch.stderr
    read = cli_without(
        EVERY_EXTRA, "--store", db, "tool", "read_state", '{"path": "session.tactics"}', cwd=tmp_path
    )
    assert read.stdout == '{"value":{"next":"a"}}\n'
    declare = cli_without(
        EVERY_EXTRA,
        "--store",
        db,
        "states",
        "put",
        "notes",
        "--data",
        DECLARATION,
        cwd=tmp_path,
    )
    assert declare.returncode == 0, declare.stderr
    state_read = cli_without(
        EVERY_EXTRA, "--store", db, "tool", "state_read", '{"state": "memory"}', cwd=tmp_path
    )
    assert state_read.returncode == 0, state_read.stderr


@pytest.mark.parametrize(
    ("extra", "args", "feature"),
    [
        (
            "postgres",
            ["--store", "postgresql://nobody@127.0.0.1:9/none", "doc", "get", "a", "b"],
            "a PostgreSQL store",
        ),
        ("server", ["--store", "s.db", "serve", "--port", "9"], "stateflow serve"),
        ("mcp", ["--store", "s.db", "mcp"], "stateflow mcp"),
    ],
)
def test_a_missing_extra_is_named_with_the_command_that_installs_it(
    tmp_path: Path, extra: str, args: list[str], feature: str
) -> None:
    for missing in EXTRAS[extra]:
        out = cli_without([missing], *args, cwd=tmp_path)
        assert out.returncode == 1
        assert out.stderr == (
            f"error[missing-extra]: {feature} needs the '{extra}' extra ({missing} is not installed): "
            f"python3 -m pip install 'stateflow[{extra}]'\n"
        )
        assert not (tmp_path / "s.db").exists()  # refused before any store was opened: nothing made


def test_serve_without_the_mcp_extra_serves_the_api_and_says_what_mcp_needs(tmp_path: Path) -> None:
    """``pip install 'stateflow[server]'`` installs the MCP SDK now; a server whose install
    lacks it anyway (an install made before) serves the API and the studio, says so in its
    banner, and answers ``/mcp`` naming the extra — where it crashed at its start, after
    writing its token and store."""
    import os
    import urllib.error
    import urllib.request

    from . import servers

    port = servers.free_port()
    code = (
        "import sys\n"
        "for name in ('mcp', 'mcp_types'): sys.modules[name] = None  # not installed\n"
        "from stateflow.cli.main import main\n"
        "sys.argv[0] = 'stateflow'\n"
        "sys.exit(main())\n"
    )
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data"), STATEFLOW_TOKENS="", STATEFLOW_TOKEN="")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            code,
            "--store",
            str(tmp_path / "s.db"),
            "serve",
            "--port",
            str(port),
            "--token",
            "a-token-of-20-chars",
        ],
        env=env,
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stderr is not None
        banner = [proc.stderr.readline() for _ in range(4)]
        note = banner[3]
        assert note.startswith("note: MCP over HTTP (/mcp) needs the 'mcp' extra ("), banner
        assert note.endswith(" is not installed): python3 -m pip install 'stateflow[mcp]'\n"), banner
        url = f"http://127.0.0.1:{port}"
        servers.wait_ready(servers.Server(url, proc), timeout=120)
        states = urllib.request.Request(
            f"{url}/api/states", headers={"Authorization": "Bearer a-token-of-20-chars"}
        )
        with urllib.request.urlopen(states, timeout=30) as answered:
            assert answered.status == 200
        mcp = urllib.request.Request(
            f"{url}/mcp", data=b"{}", method="POST", headers={"Authorization": "Bearer a-token-of-20-chars"}
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(mcp, timeout=30)
        assert refused.value.code == 501
        assert json.loads(refused.value.read()) == {
            "error": note[len("note: ") : -1],
            "code": "missing-extra",
        }
    finally:
        proc.terminate()
        proc.wait(timeout=60)
