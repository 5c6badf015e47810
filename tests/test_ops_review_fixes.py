"""What an operator is told, checked through the real CLI, server and store files: the token
commands manage the token file `serve` reads; an operating-system refusal (a read-only file
system, a folder that may not be written) is one clean `error[...]` line, never a traceback;
readiness names the remedy for its code; messages name a store by its URL and a record as the
docs say; a config value is shown as the file spells it; every progress step ends with `(done)`.

File permissions do not bind root, so as root the CLI runs with the capabilities that bypass
them dropped (``setpriv``, util-linux): what an unprivileged operator would see."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from stateflow.config import Config, RetentionConfig
from stateflow.http.app import create_app
from stateflow.http.auth import TokenSet, parse_token
from stateflow.states import StatesService
from stateflow.store import open_store
from stateflow.store.migrations import SCHEMA_VERSION

from . import servers

UNPRIVILEGED = (
    ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner,-linux_immutable", "--"]
    if os.geteuid() == 0
    else []
)
needs_setpriv = pytest.mark.skipif(
    bool(UNPRIVILEGED) and shutil.which("setpriv") is None, reason="setpriv (util-linux) is not installed"
)
ADMIN = "admin-secret-0123456789"


def sf(
    env: dict[str, str], *args: str, cwd: Path | None = None, prefix: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*(prefix or []), "stateflow", *args], capture_output=True, text=True, timeout=120, env=env, cwd=cwd
    )


def clean_refusal(out: subprocess.CompletedProcess[str], start: str) -> None:
    """Exit 1 with one ``error[...]`` line: no traceback."""
    assert out.returncode == 1, (out.returncode, out.stderr)
    assert "Traceback" not in out.stderr, out.stderr
    assert out.stderr.startswith(start) and out.stderr.count("\n") == 1, out.stderr


@pytest.fixture
def open_dir(tmp_path: Path) -> Iterator[Path]:
    """A folder of ``tmp_path`` its permissions may be taken from, given back at the end."""
    folder = tmp_path / "medium"
    folder.mkdir()
    try:
        yield folder
    finally:
        for p in [folder, *folder.rglob("*")]:
            if not p.is_symlink():
                p.chmod(0o700 if p.is_dir() else 0o600)


# ---------------------------------------------------------------- 1: one token file for all


def test_token_commands_manage_the_token_file_serve_reads_from_the_configuration(tmp_path: Path) -> None:
    """`[server] token_file` of the configuration file (relative: to the file's folder) is the
    file `token create|show|revoke` change, the one `serve` reads — a revoked token stops
    working there; the environment and the flag outrank it, as for serve."""
    dep = tmp_path / "dep"
    dep.mkdir()
    (dep / "stateflow.toml").write_text('[server]\ntoken_file = "tokens"\n')
    env = servers.base_env(tmp_path, str(tmp_path / "s.db"), STATEFLOW_CONFIG=str(dep / "stateflow.toml"))
    kept = tmp_path / "data" / "stateflow" / "api-token"

    first = sf(env, "token", "create", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert f"in {dep / 'tokens'};" in first.stderr, first.stderr
    second = sf(env, "token", "create", "--read", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert (dep / "tokens").is_file() and not kept.exists()
    shown = sf(env, "token", "show", cwd=tmp_path)
    assert shown.returncode == 0 and shown.stderr == f"# {dep / 'tokens'}\n", shown.stderr
    fingerprint = shown.stdout.splitlines()[0].split()[0]
    secret, reader = first.stdout.strip(), second.stdout.strip()

    record = "/api/states/memory/records/agent/alice/session/s1"
    server = servers.start(env, token=False)
    try:
        assert server.call("GET", record, token=secret)[0] == 200
    finally:
        server.stop()
    revoked = sf(env, "token", "revoke", fingerprint, cwd=tmp_path)
    assert revoked.returncode == 0, revoked.stderr
    server = servers.start(env, token=False)
    try:
        assert server.call("GET", record, token=secret)[0] == 401  # gone from the file serve reads
        assert server.call("GET", record, token=reader)[0] == 200
    finally:
        server.stop()

    # the environment beats the file, and the flag the environment (serve's precedence)
    other, flagged = tmp_path / "env-tokens", tmp_path / "flag-tokens"
    by_env = sf({**env, "STATEFLOW_TOKEN_FILE": str(other)}, "token", "create", cwd=tmp_path)
    assert by_env.returncode == 0 and other.is_file(), by_env.stderr
    by_flag = sf(
        {**env, "STATEFLOW_TOKEN_FILE": str(other)},
        "token",
        "create",
        "--token-file",
        str(flagged),
        cwd=tmp_path,
    )
    assert by_flag.returncode == 0 and flagged.is_file(), by_flag.stderr
    assert len((dep / "tokens").read_text().splitlines()) == 1 and not kept.exists()


# ---------------------------------------------------------------- 2: a load on a read-only file system


def _read_only_mount_works() -> bool:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount --bind / /mnt && mount -o remount,bind,ro /mnt"],
        capture_output=True,
        timeout=30,
    )
    return probe.returncode == 0


@pytest.mark.skipif(not _read_only_mount_works(), reason="needs root and unshare -m to mount read-only")
def test_a_load_refused_on_a_read_only_file_system_says_so_in_one_line(tmp_path: Path) -> None:
    """The load's refusal (the store cannot be created) is what the user sees: taking back the
    store it never made does not raise over it (unlink there fails with EROFS)."""
    source = tmp_path / "s.db"
    env = servers.base_env(tmp_path, str(source))
    assert sf(env, "doc", "put", "notes", "a", '{"x": 1}').returncode == 0
    dump = tmp_path / "d.jsonl"
    assert sf(env, "dump", str(dump)).returncode == 0
    medium = tmp_path / "ro"
    medium.mkdir()
    script = (
        f'mount --bind "{medium}" "{medium}" && mount -o remount,bind,ro "{medium}" && '
        f'exec stateflow --store "{medium}/live.db" load "{dump}"'
    )
    out = subprocess.run(
        ["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    clean_refusal(out, "error[")
    assert f"{medium}/live.db" in out.stderr and "Read-only file system" in out.stderr, out.stderr
    assert list(medium.iterdir()) == []


# ---------------------------------------------------------------- 3: a token file that cannot be made


def test_a_token_file_under_a_regular_file_is_one_clean_refusal(tmp_path: Path) -> None:
    """A path through a file (no folder can be made there): one line naming the token file."""
    (tmp_path / "plain").write_text("")
    env = servers.base_env(tmp_path, str(tmp_path / "s.db"))
    out = sf(env, "token", "create", "--token-file", str(tmp_path / "plain" / "t"))
    clean_refusal(out, f"error[target-unwritable]: cannot create token file {tmp_path / 'plain' / 't'}: ")
    assert "Not a directory" in out.stderr


@needs_setpriv
def test_a_token_file_in_a_folder_that_may_not_be_written_is_permission_denied(open_dir: Path) -> None:
    """`token create --token-file` and serve's first run (which creates the kept file) say
    `permission-denied`, as a store file's creation does (operations.md)."""
    open_dir.chmod(0o555)
    env = servers.base_env(open_dir.parent, str(open_dir.parent / "s.db"))
    target = open_dir / "t"
    out = sf(env, "token", "create", "--token-file", str(target), prefix=UNPRIVILEGED)
    clean_refusal(out, f"error[permission-denied]: permission denied: cannot create token file {target}\n")

    # serve with no token configured: its data folder (the kept file's) may not be made
    served = sf(
        {**env, "XDG_DATA_HOME": str(open_dir / "data")},
        "serve",
        "--port",
        str(servers.free_port()),
        prefix=UNPRIVILEGED,
    )
    kept = open_dir / "data" / "stateflow" / "api-token"
    assert served.returncode == 1 and "Traceback" not in served.stderr, served.stderr
    assert served.stderr.endswith(
        f"error[permission-denied]: permission denied: cannot create token file {kept}\n"
    )


# ---------------------------------------------------------------- 4: readiness names the remedy


def _set_version(path: Path, version: int) -> None:
    conn = sqlite3.connect(path)
    try:
        with conn:
            conn.execute("UPDATE stateflow_meta SET value = ? WHERE key = 'schema_version'", (str(version),))
    finally:
        conn.close()


def test_readiness_says_upgrade_for_a_newer_store_and_migrate_for_an_older_one(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = open_store(str(path), auto_migrate=True)
    service = StatesService(store)
    try:
        with TestClient(create_app(service, TokenSet([parse_token(ADMIN)]))) as client:
            assert client.get("/api/ready").status_code == 200
            _set_version(path, SCHEMA_VERSION + 1)  # a newer release migrated it meanwhile
            newer = client.get("/api/ready")
            assert newer.status_code == 503 and newer.json()["code"] == "store-too-new"
            assert "upgrade stateflow" in newer.json()["error"] and "migrate" not in newer.json()["error"]
            _set_version(path, SCHEMA_VERSION - 1)
            older = client.get("/api/ready")
            assert older.status_code == 503 and older.json()["code"] == "store-not-migrated"
            assert "stateflow migrate" in older.json()["error"]
            _set_version(path, SCHEMA_VERSION)
    finally:
        service.close()
        store.close()


# ---------------------------------------------------------------- 5: how messages name things


@needs_setpriv
def test_a_read_only_store_is_named_by_the_url_of_its_absolute_path(open_dir: Path) -> None:
    env = servers.base_env(open_dir.parent, "")
    assert (
        sf(env, "--store", "medium/live.db", "doc", "put", "notes", "a", "{}", cwd=open_dir.parent).returncode
        == 0
    )
    (open_dir / "live.db").chmod(0o444)
    open_dir.chmod(0o555)
    out = sf(
        env,
        "--store",
        "medium/live.db",
        "doc",
        "put",
        "notes",
        "b",
        "{}",
        cwd=open_dir.parent,
        prefix=UNPRIVILEGED,
    )
    clean_refusal(out, "error[store-read-only]: ")
    assert f"sqlite:///{open_dir / 'live.db'} is open read-only" in out.stderr, out.stderr


def test_a_dump_refused_for_pruned_history_names_the_record_not_its_storage_key(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = open_store(str(path), auto_migrate=True)
    service = StatesService(store, Config(retention=RetentionConfig(audit_days=1)))
    subject = {"target_kind": "agent", "target_name": "default", "kind": "session", "key": "default"}
    try:
        service.install_builtins()
        for n in range(3):
            service.replace("memory", subject, {"n": n})
        service.prune(now=datetime.now(UTC) + timedelta(days=3))
        service.replace("memory", subject, {"n": 9})
    finally:
        service.close()
        store.close()
    out = sf(servers.base_env(tmp_path, str(path)), "dump", str(tmp_path / "d.jsonl"))
    clean_refusal(out, "error[invalid-input]: ")
    assert "the history of record session/default of agent default in state 'memory' " in out.stderr, (
        out.stderr
    )
    assert '["agent"' not in out.stderr


# ---------------------------------------------------------------- 6: a value as spelled, a step ended


def test_a_config_value_is_shown_as_the_file_spells_it(tmp_path: Path) -> None:
    (tmp_path / "stateflow.toml").write_text("[server]\nport = true\n")
    env = servers.base_env(tmp_path, str(tmp_path / "s.db"))
    out = sf(env, "config", "show", cwd=tmp_path)
    clean_refusal(out, "error[invalid-config]: ")
    assert "server.port: true is not a valid int" in out.stderr, out.stderr


def test_every_progress_step_that_starts_ends_with_done(tmp_path: Path) -> None:
    env = servers.base_env(tmp_path, str(tmp_path / "s.db"))
    assert sf(env, "doc", "put", "notes", "a", '{"x": 1}').returncode == 0
    checked = sf(env, "check", "--progress")
    assert checked.returncode == 0, checked.stderr
    lines = checked.stderr.splitlines()
    started = [line.removesuffix(": starting") for line in lines if line.endswith(": starting")]
    assert started == ["check: the file's pages", "check: the store"], lines
    for step in started:
        assert any(line.startswith(f"{step}: ") and line.endswith(" (done)") for line in lines), (step, lines)
    assert any(line.startswith("check: the file's pages: ") and " pages (done)" in line for line in lines), (
        lines
    )


def test_a_store_path_through_a_regular_file_is_one_clean_refusal(tmp_path: Path) -> None:
    """A folder on the store's path that is a regular file: no store can be opened or made there,
    said in one line (it was a ``NotADirectoryError`` traceback), nothing written."""
    blocker = tmp_path / "afile"
    blocker.write_text("")
    env = {**os.environ, "HOME": str(tmp_path)}
    for args in (["doc", "put", "x", "y", "{}"], ["check"]):
        out = sf(env, "--store", str(blocker / "s.db"), *args)
        clean_refusal(out, "error[store-unavailable]: cannot open")
        assert "a folder on its path is a file" in out.stderr
    assert blocker.read_text() == ""
