"""`stateflow.toml`, the environment and flags: precedence, `config show`, refusals."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from stateflow.config import Config, InvalidConfig

from . import servers


def sf(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("STATEFLOW_") or k == "STATEFLOW_TEST_POSTGRES"
    }
    environ.update(XDG_DATA_HOME=str(cwd / "data"), **env)
    return subprocess.run(
        ["stateflow", *args], capture_output=True, text=True, timeout=60, cwd=cwd, env=environ
    )


FILE = """
[store]
url = "from-file.db"
wait_seconds = 3

[server]
port = 9999
log_level = "warning"
tokens = ["file-secret-0123456789@agent/alice,tool/crm"]

[jq]
timeout_seconds = 4
"""


def test_flags_beat_the_environment_which_beats_the_file(tmp_path: Path) -> None:
    (tmp_path / "stateflow.toml").write_text(FILE)
    shown = json.loads(sf(tmp_path, "config", "show").stdout)
    assert shown["file"] == str(tmp_path / "stateflow.toml")
    assert shown["store"] == {
        "url": str(tmp_path / "from-file.db"),  # (read against the file's folder)
        "wait_seconds": 3.0,
        "connect_timeout_seconds": 5.0,
        "statement_timeout_seconds": None,  # (60 s; a URL's own option wins)
    }
    assert shown["server"]["log_level"] == "warning" and shown["jq"]["timeout_seconds"] == 4.0
    assert shown["server"]["tokens"] == ["fil…@agent/alice,tool/crm"]  # masked
    assert "file-secret" not in sf(tmp_path, "config", "show").stdout

    env = {
        "STATEFLOW_STORE": "from-env.db",
        "STATEFLOW_JQ_TIMEOUT_SECONDS": "6",
        "STATEFLOW_LOG_LEVEL": "error",
    }
    shown = json.loads(sf(tmp_path, "config", "show", **env).stdout)
    assert shown["store"]["url"] == "from-env.db" and shown["store"]["wait_seconds"] == 3.0
    assert shown["jq"]["timeout_seconds"] == 6.0 and shown["server"]["log_level"] == "error"
    shown = json.loads(sf(tmp_path, "--store", "from-flag.db", "config", "show", **env).stdout)
    assert shown["store"]["url"] == "from-flag.db"
    secrets = json.loads(sf(tmp_path, "config", "show", "--secrets").stdout)
    assert secrets["server"]["tokens"] == ["file-secret-0123456789@agent/alice,tool/crm"]

    # the store in effect is the file's: a write lands there
    assert sf(tmp_path, "doc", "put", "notes", "a", '{"x": 1}').returncode == 0
    assert (tmp_path / "from-file.db").exists()


def test_serve_takes_its_settings_from_the_file_and_its_flags_win(tmp_path: Path) -> None:
    port = servers.free_port()
    (tmp_path / "stateflow.toml").write_text(FILE.replace("9999", str(port)))
    env = servers.base_env(tmp_path, str(tmp_path / "s.db"))
    env.pop("STATEFLOW_TOKENS")
    env.pop("STATEFLOW_STORE")
    proc = subprocess.Popen(
        ["stateflow", "serve"], cwd=tmp_path, env=env, stderr=subprocess.DEVNULL, text=True
    )
    server = servers.Server(f"http://127.0.0.1:{port}", proc)
    try:
        servers.wait_ready(server)
        record = "/api/states/memory/records/agent/alice/session/s1"
        assert server.call("GET", record, token="file-secret-0123456789")[0] == 200
        assert server.call("GET", record.replace("alice", "bob"), token="file-secret-0123456789")[0] == 403
    finally:
        server.stop()
    other = servers.free_port()
    proc = subprocess.Popen(
        ["stateflow", "serve", "--port", str(other)],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    server = servers.Server(f"http://127.0.0.1:{other}", proc)
    try:
        servers.wait_ready(server)  # the flag's port, not the file's
    finally:
        server.stop()


def test_relative_paths_in_the_file_are_read_against_the_file_s_folder(tmp_path: Path) -> None:
    """One file names one store (and one token file) from whichever directory reads it."""
    conf, a, b = tmp_path / "conf", tmp_path / "a", tmp_path / "b"
    for folder in (conf, a, b):
        folder.mkdir()
    (conf / "stateflow.toml").write_text('[store]\nurl = "team.db"\n[server]\ntoken_file = "sub/tokens"\n')
    config = str(conf / "stateflow.toml")
    wrote = sf(a, "--config", config, "doc", "put", "notes", "n1", '{"from": "a"}')
    assert wrote.returncode == 0, wrote.stderr
    assert (conf / "team.db").exists() and not (a / "team.db").exists()
    read = sf(b, "doc", "get", "notes", "n1", STATEFLOW_CONFIG=config)
    assert read.returncode == 0 and json.loads(read.stdout) == {"from": "a"}, read.stderr
    shown = json.loads(sf(b, "--config", config, "config", "show").stdout)
    assert shown["store"]["url"] == str(conf / "team.db")
    assert shown["server"]["token_file"] == str(conf / "sub" / "tokens")
    # a URL and an absolute path are taken as written; the flag and the environment keep the cwd
    (conf / "stateflow.toml").write_text(f'[store]\nurl = "sqlite:///{tmp_path}/x.db?mode=ro"\n')
    shown = json.loads(sf(b, "--config", config, "config", "show").stdout)
    assert shown["store"]["url"] == f"sqlite:///{tmp_path}/x.db?mode=ro"
    shown = json.loads(sf(b, "--config", config, "config", "show", STATEFLOW_STORE="env.db").stdout)
    assert shown["store"]["url"] == "env.db"


def test_bad_configuration_is_refused_naming_the_key_and_the_source(tmp_path: Path) -> None:
    (tmp_path / "stateflow.toml").write_text("[server]\nprot = 1\n")
    out = sf(tmp_path, "config", "show")
    assert out.returncode == 1
    assert (
        out.stderr.startswith("error[invalid-config]: ")
        and "prot" in out.stderr
        and "stateflow.toml" in out.stderr
    )
    out = sf(tmp_path, "--config", str(tmp_path / "missing.toml"), "doc", "get", "a", "b")
    assert out.returncode == 1 and "missing.toml does not exist" in out.stderr
    (tmp_path / "stateflow.toml").unlink()
    # a value from the environment is refused naming its variable, a range check included
    out = sf(tmp_path, "config", "show", STATEFLOW_JQ_WORKERS="many")
    assert out.returncode == 1
    assert out.stderr == "error[invalid-config]: STATEFLOW_JQ_WORKERS: 'many' is not a valid int\n"
    out = sf(tmp_path, "doc", "get", "a", "b", STATEFLOW_JQ_WORKERS="0")
    assert out.returncode == 1
    assert out.stderr == "error[invalid-config]: STATEFLOW_JQ_WORKERS: jq.workers must be from 1 to 64\n"
    (tmp_path / "stateflow.toml").write_text("[retention]\nop_days = 0\n")
    out = sf(tmp_path, "config", "show")
    assert out.returncode == 1
    assert (
        out.stderr
        == f"error[invalid-config]: {tmp_path / 'stateflow.toml'}: retention.op_days must be from 1 to 2147483647\n"
    )


def test_a_file_that_is_not_utf8_is_refused_naming_it(tmp_path: Path) -> None:
    # a file saved as UTF-16 crashed every command in its folder with a UnicodeDecodeError
    (tmp_path / "stateflow.toml").write_bytes('[store]\nurl = "x.db"\n'.encode("utf-16"))
    for args in (["doc", "get", "notes", "a"], ["--config", "stateflow.toml", "config", "show"]):
        out = sf(tmp_path, *args)
        assert (out.returncode, out.stderr) == (
            1,
            f"error[invalid-config]: {'' if args[0] == '--config' else str(tmp_path) + '/'}stateflow.toml "
            "is not UTF-8 text (byte 0xff at offset 0); save it as UTF-8\n",
        ), args
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stateflow.toml"]


@pytest.mark.parametrize(
    ("variable", "value", "rule"),
    [
        (
            "STATEFLOW_STORE_WAIT_SECONDS",
            "inf",
            "store.wait_seconds must be a number of seconds above 0, at most 86400",
        ),
        (
            "STATEFLOW_STORE_WAIT_SECONDS",
            "1e400",
            "store.wait_seconds must be a number of seconds above 0, at most 86400",
        ),
        (
            "STATEFLOW_JQ_TIMEOUT_SECONDS",
            "inf",
            "jq.timeout_seconds must be a number of seconds above 0, at most 86400",
        ),
        (
            "STATEFLOW_BODY_TIMEOUT_SECONDS",
            "nan",
            "http.body_timeout_seconds must be a number of seconds above 0, at most 86400",
        ),
        (
            "STATEFLOW_STORE_CONNECT_TIMEOUT_SECONDS",
            "86401",
            "store.connect_timeout_seconds must be a number of seconds above 0, at most 86400",
        ),
        (
            "STATEFLOW_STORE_STATEMENT_TIMEOUT_SECONDS",
            "inf",
            "store.statement_timeout_seconds must be 0 (no limit) or a number of seconds above 0, at most 86400",
        ),
        ("STATEFLOW_WORKERS", "100", "server.workers must be from 1 to 64"),
        ("STATEFLOW_MAX_BODY_BYTES", str(1 << 41), f"http.max_body_bytes must be from 1024 to {1 << 40}"),
    ],
)
def test_every_source_is_held_to_the_same_ranges(
    tmp_path: Path, variable: str, value: str, rule: str
) -> None:
    """An infinite number passed `> 0` and broke the commands that used it (a traceback), and
    the environment and the file allowed more server processes than --workers does: every source
    is checked by one rule, finite and bounded, the refusal naming where the value came from."""
    out = sf(tmp_path, "--store", "s.db", "doc", "get", "a", "b", **{variable: value})
    assert out.returncode == 1 and out.stderr == f"error[invalid-config]: {variable}: {rule}\n", out.stderr
    section, key = rule.split(" ", 1)[0].split(".")
    toml = tmp_path / "stateflow.toml"
    toml.write_text(f"[{section}]\n{key} = {value}\n")  # each value is a TOML number as written
    out = sf(tmp_path, "config", "show")
    assert out.returncode == 1 and out.stderr == f"error[invalid-config]: {toml}: {rule}\n", out.stderr
    with pytest.raises(InvalidConfig, match=re.escape(f"{variable}: {rule}")):
        Config.from_env({variable: value})
    out = sf(tmp_path, "serve", "--workers", "65")  # the flag's own range is the same
    assert out.returncode == 2 and "1<=x<=64" in out.stderr


@pytest.mark.parametrize(
    ("setting", "kind"),
    [
        ('[retention]\nop_days = "7"', "retention.op_days: '7' is not a valid int"),
        ('[server]\nport = "18425"', "server.port: '18425' is not a valid int"),
        ('[store]\nwait_seconds = "3"', "store.wait_seconds: '3' is not a valid float"),
    ],
)
def test_the_file_s_strings_are_not_numbers(tmp_path: Path, setting: str, kind: str) -> None:
    """A TOML file has types: a string where a number is wanted is ill-typed there, and refused
    as a boolean is; the environment, which holds text only, still gives numbers as text."""
    (tmp_path / "stateflow.toml").write_text(setting + "\n")
    out = sf(tmp_path, "config", "show")
    assert out.returncode == 1
    assert out.stderr == f"error[invalid-config]: {tmp_path / 'stateflow.toml'}: {kind}\n", out.stderr
    (tmp_path / "stateflow.toml").unlink()
    shown = sf(tmp_path, "config", "show", STATEFLOW_OP_RETENTION_DAYS="7")
    assert shown.returncode == 0 and json.loads(shown.stdout)["retention"]["op_days"] == 7, shown.stderr


def test_the_config_object_validates_values() -> None:
    with pytest.raises(InvalidConfig, match="log_level"):
        Config.from_layers(("test", {"server": {"log_level": "loud"}}))
    with pytest.raises(InvalidConfig, match="unknown section"):
        Config.from_layers(("test", {"servr": {}}))
    config = Config.from_layers(("a", {"server": {"port": 1}}), ("b", {"server": {"port": "2"}}))
    assert config.server.port == 2


def test_numbers_in_the_environment_are_ascii_decimal_only() -> None:
    """``STATEFLOW_WORKERS=١`` was read as 1 and ``1_000`` as 1000 (Python's own reading of a
    number): a setting named another value than the one written. Refused naming the variable."""
    for text in ("\u0661", "\uff12", "1_000", "2\u00a0"):
        with pytest.raises(InvalidConfig, match=r"STATEFLOW_WORKERS: .* is not a valid int"):
            Config.from_env({"STATEFLOW_WORKERS": text})
    with pytest.raises(InvalidConfig, match="STATEFLOW_STORE_WAIT_SECONDS"):
        Config.from_env({"STATEFLOW_STORE_WAIT_SECONDS": "\u0663.5"})
    assert (
        Config.from_env({"STATEFLOW_WORKERS": " 2 ", "STATEFLOW_STORE_WAIT_SECONDS": "1.5"}).server.workers
        == 2
    )


def test_the_documented_settings_live_in_the_file_or_are_documented_as_environment_only() -> None:
    """docs/operations.md lists the STATEFLOW_* variables and says which have no key in
    stateflow.toml; every other one has a key (the environment layer maps it to one)."""
    from stateflow.config import ENVIRONMENT

    text = (Path(__file__).resolve().parent.parent / "docs" / "operations.md").read_text()
    table = text.split("## Where state lives", 1)[1].split("These are parsed once", 1)[0]
    listed = set(re.findall(r"`(STATEFLOW_[A-Z_]+)`", table))
    file_section = text.split("## Configuration file", 1)[1].split("```toml", 1)[0]
    without_key = set(
        re.findall(
            r"`(STATEFLOW_[A-Z_]+)`", file_section.split("have no key in the file", 1)[1].split(" — ", 1)[0]
        )
    )
    assert without_key == {"STATEFLOW_SESSION", "STATEFLOW_URL", "STATEFLOW_TOKEN"}
    assert listed - without_key <= set(ENVIRONMENT), listed - without_key - set(ENVIRONMENT)
