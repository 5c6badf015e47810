"""API tokens an operator configures without putting secrets on a command line: a token file,
STATEFLOW_TOKENS one spec per line, and `stateflow token show|create|revoke` (real processes)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from stateflow.http.auth import token_specs, write_token_file

from . import servers

ALICE = "alice-secret-0123456789"
READER = "reader-secret-0123456789"
RECORD = "/api/states/memory/records/agent/{name}/session/s1"


def sf(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["stateflow", *args], capture_output=True, text=True, timeout=60, env=env)


def test_the_spec_grammar_keeps_multi_target_specs_whole() -> None:
    text = f"# team tokens\n{ALICE}@agent/alice,tool/crm\n\n{READER}:read\nold-style-secret-1234,other-secret-12345678\n"
    assert token_specs(text) == [
        f"{ALICE}@agent/alice,tool/crm",
        f"{READER}:read",
        "old-style-secret-1234",
        "other-secret-12345678",
    ]


def _probe(server: servers.Server) -> dict[str, int]:
    return {
        "alice-own": server.call("GET", RECORD.format(name="alice"), token=ALICE)[0],
        "alice-other": server.call("GET", RECORD.format(name="bob"), token=ALICE)[0],
        "crm": server.call("GET", "/api/states/memory/records/tool/crm/session/s1", token=ALICE)[0],
        "reader-write": server.call("PUT", RECORD.format(name="bob"), {}, token=READER)[0],
        "reader-read": server.call("GET", RECORD.format(name="bob"), token=READER)[0],
        "stranger": server.call("GET", RECORD.format(name="bob"), token="x" * 20)[0],
    }


EXPECTED = {
    "alice-own": 200,
    "alice-other": 403,
    "crm": 200,
    "reader-write": 403,
    "reader-read": 200,
    "stranger": 401,
}


def test_multi_target_tokens_from_the_environment(tmp_path: Path) -> None:
    env = servers.base_env(tmp_path, str(tmp_path / "s.db"))
    env["STATEFLOW_TOKENS"] = f"{ALICE}@agent/alice,tool/crm\n{READER}:read\n"
    server = servers.start(env, token=False)
    try:
        assert _probe(server) == EXPECTED
    finally:
        server.stop()


def test_a_token_file(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# who may call\n{ALICE}@agent/alice,tool/crm\n{READER}:read\n")
    env = servers.base_env(tmp_path, str(tmp_path / "s.db"))
    server = servers.start(env, "--token-file", str(tokens), token=False)
    try:
        assert _probe(server) == EXPECTED
    finally:
        server.stop()


def test_a_short_secret_is_refused_before_serving(tmp_path: Path) -> None:
    env = servers.base_env(tmp_path, str(tmp_path / "s.db"), STATEFLOW_TOKENS="too-short\n")
    out = sf(env, "serve", "--port", str(servers.free_port()))
    assert out.returncode == 1
    assert out.stderr.strip() == (
        "error[invalid-input]: STATEFLOW_TOKENS, token 1 of 1: a token secret must be at least 16 characters"
    )


def test_a_bad_token_source_is_refused_naming_it_and_the_line(tmp_path: Path) -> None:
    # among many specs the operator must be told which one is wrong, and where it is
    env = servers.base_env(tmp_path, str(tmp_path / "s.db"))
    port = str(servers.free_port())
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# team tokens\n{ALICE}\n\nshort:read\n{READER}@agent/bob\n")
    out = sf(env, "serve", "--port", port, "--token-file", str(tokens))
    assert out.returncode == 1
    assert out.stderr == (
        f"error[invalid-input]: token file {tokens} line 4: a token secret must be at least 16 characters\n"
    )
    tokens.write_text(f"{ALICE}\n{READER}:admin\n")
    out = sf({**env, "STATEFLOW_TOKEN_FILE": str(tokens)}, "serve", "--port", port)
    assert out.returncode == 1
    assert out.stderr == (
        f"error[invalid-input]: token file {tokens} line 2: token access must be read or write, got 'admin'\n"
    )
    out = sf({**env, "STATEFLOW_TOKENS": f"{ALICE}\n{READER}@team/x"}, "serve", "--port", port)
    assert out.returncode == 1 and out.stderr.startswith(
        "error[invalid-input]: STATEFLOW_TOKENS, token 2 of 2: "
    )
    # the variable's lines are read as a file's: comments skipped, specs split at commas
    out = sf({**env, "STATEFLOW_TOKENS": f"# ops\n{ALICE},short"}, "serve", "--port", port)
    assert out.returncode == 1 and out.stderr == (
        "error[invalid-input]: STATEFLOW_TOKENS, token 2 of 2: a token secret must be at least 16 characters\n"
    )
    # a directory named as the token file, from the environment or the file, is one refusal
    out = sf({**env, "STATEFLOW_TOKEN_FILE": str(tmp_path)}, "serve", "--port", port)
    assert out.returncode == 1
    assert out.stderr == (
        f"error[invalid-input]: token file {tmp_path} is a directory (given by STATEFLOW_TOKEN_FILE)\n"
    )
    (tmp_path / "stateflow.toml").write_text('[server]\ntoken_file = "."\n')
    out = sf(env, "--config", str(tmp_path / "stateflow.toml"), "serve", "--port", port)
    assert out.returncode == 1
    assert out.stderr == (
        f"error[invalid-input]: token file {tmp_path} is a directory (given by {tmp_path / 'stateflow.toml'})\n"
    )


def test_token_create_show_revoke_manage_what_serve_accepts(tmp_path: Path) -> None:
    env = servers.base_env(tmp_path, str(tmp_path / "s.db"))
    kept = tmp_path / "data" / "stateflow" / "api-token"
    created = sf(env, "token", "create", "--target", "agent/alice")
    assert created.returncode == 0, created.stderr
    secret = created.stdout.strip()
    assert secret.startswith("sf_") and len(secret) > 16
    assert oct(kept.stat().st_mode & 0o777) == "0o600"
    for folder in (tmp_path / "data", kept.parent):  # each folder it created is private
        assert oct(folder.stat().st_mode & 0o777) == "0o700", folder
    shown = sf(env, "token", "show")
    assert secret not in shown.stdout  # fingerprints only unless asked
    (line,) = shown.stdout.strip().splitlines()
    fingerprint = line.split()[0]
    assert fingerprint.startswith("token:") and line.endswith("agent/alice")
    assert sf(env, "token", "show", "--secrets").stdout.strip() == f"{secret}@agent/alice"

    second = sf(env, "token", "create").stdout.strip()
    server = servers.start(env, token=False)  # no token configured: the kept file is used
    try:
        assert server.call("GET", RECORD.format(name="alice"), token=secret)[0] == 200
        assert server.call("GET", RECORD.format(name="bob"), token=secret)[0] == 403
        assert server.call("GET", RECORD.format(name="bob"), token=second)[0] == 200
    finally:
        server.stop()

    revoked = sf(env, "token", "revoke", fingerprint)
    assert revoked.returncode == 0, revoked.stderr
    assert sf(env, "token", "revoke", fingerprint).stderr.startswith("error[not-found]: ")
    server = servers.start(env, token=False)
    try:
        assert server.call("GET", RECORD.format(name="alice"), token=secret)[0] == 401
        assert server.call("GET", RECORD.format(name="alice"), token=second)[0] == 200
    finally:
        server.stop()


def test_a_token_file_flag_beats_tokens_in_the_environment(tmp_path: Path) -> None:
    """Flags, then the environment, then the file: --token-file replaces STATEFLOW_TOKENS (the
    two are one setting in two forms), and the banner says which source is in effect."""
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{ALICE}@agent/alice\n")
    env = servers.base_env(tmp_path, str(tmp_path / "s.db"), STATEFLOW_TOKENS=f"{READER}\n")
    port = servers.free_port()
    log = tmp_path / "serve.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            ["stateflow", "serve", "--port", str(port), "--token-file", str(tokens)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
            text=True,
        )
        server = servers.Server(f"http://127.0.0.1:{port}", proc)
        try:
            servers.wait_ready(server)
            assert server.call("GET", RECORD.format(name="alice"), token=ALICE)[0] == 200
            assert server.call("GET", RECORD.format(name="alice"), token=READER)[0] == 401
        finally:
            server.stop()
    assert f"using the API tokens in {tokens} (--token-file)" in log.read_text()


def test_a_token_file_is_never_written_through_a_file_planted_beside_it(tmp_path: Path) -> None:
    # Another user who may write in the directory plants a link (here: to a file they own, which
    # anyone may write) at each name the partial file could take; the secret must not reach it.
    planted = tmp_path / "planted"
    planted.write_text("")
    planted.chmod(0o666)
    target = tmp_path / "api-token"
    os.symlink(planted, tmp_path / f".{target.name}.{os.getpid()}.partial")
    write_token_file(target, [f"{ALICE}:read"])
    assert planted.read_text() == ""
    assert not target.is_symlink() and oct(target.stat().st_mode & 0o777) == "0o600"
    assert target.read_text() == f"{ALICE}:read\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f".{target.name}.{os.getpid()}.partial",
        "api-token",
        "planted",
    ]
