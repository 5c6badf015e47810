"""Where a store location is shown to people (``config show``, ``check``, ``migrate``, the
``serve`` banner, refusals), a PostgreSQL password is masked in every form the URL can carry it:
``user:password@`` and libpq's ``?password=`` / ``?sslpassword=`` parameters."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from stateflow.store.open import display_location

from . import servers

SECRET = "S3cretPassw0rd"


def sf(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = servers.base_env(cwd, str(cwd / "unused.db"))
    env.pop("STATEFLOW_STORE")
    return subprocess.run(["stateflow", *args], capture_output=True, text=True, timeout=120, cwd=cwd, env=env)


def test_display_masks_every_password_form_and_keeps_the_rest_as_written() -> None:
    assert (
        display_location(f"postgresql://u:{SECRET}@h1:5432,h2:5433/db")
        == "postgresql://u:***@h1:5432,h2:5433/db"
    )
    assert (
        display_location(
            f"postgres://u@h/db?options=-csearch_path%3Dx&password={SECRET}&sslpassword={SECRET}"
        )
        == "postgres://u@h/db?options=-csearch_path%3Dx&password=***&sslpassword=***"
    )
    assert display_location("./team.db") == "./team.db"


def test_an_unreachable_store_is_refused_without_its_password(tmp_path: Path) -> None:
    for url in (
        f"postgresql://u@127.0.0.1:1/db?password={SECRET}",
        f"postgresql://u:{SECRET}@127.0.0.1:1/db",
    ):
        shown = sf(tmp_path, "--store", url, "config", "show")
        assert shown.returncode == 0 and "***" in shown.stdout and SECRET not in shown.stdout
        refused = sf(tmp_path, "--store", url, "doc", "get", "a", "b")
        assert refused.returncode == 1 and "store-unavailable" in refused.stderr
        assert SECRET not in refused.stderr and "***" in refused.stderr


def test_check_migrate_and_the_serve_banner_mask_a_password_parameter(
    tmp_path: Path, pg_schema_url: str
) -> None:
    url = f"{pg_schema_url}&password={SECRET}"  # (the test server trusts loopback: the password is unused)
    migrated = sf(tmp_path, "--store", url, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    checked = sf(tmp_path, "--store", url, "check")
    assert checked.returncode == 0, checked.stderr
    for out in (migrated.stdout, checked.stdout):
        assert "password=***" in out and SECRET not in out

    log = tmp_path / "serve.log"
    port = servers.free_port()
    with log.open("w") as err:
        proc = subprocess.Popen(
            ["stateflow", "--store", url, "serve", "--port", str(port), "--token", servers.TOKEN],
            env={**os.environ, "XDG_DATA_HOME": str(tmp_path / "data"), "STATEFLOW_TOKENS": ""},
            stdout=subprocess.DEVNULL,
            stderr=err,
            text=True,
        )
        server = servers.Server(f"http://127.0.0.1:{port}", proc)
        try:
            servers.wait_ready(server)  # the banner is printed before the server answers
        finally:
            server.stop()
    banner = log.read_text()
    assert "(store: postgresql://" in banner and "password=***" in banner and SECRET not in banner


def test_the_serve_banner_names_the_store_with_several_processes(backend: str, tmp_path: Path) -> None:
    """With --workers N (the documented deployment) the banner named neither the store nor the
    studio: the service log never said which store it serves."""
    sqlite = not backend.startswith("postgresql")
    url = str(tmp_path / "team.db") if sqlite else f"{backend}&password={SECRET}"
    expected = f"sqlite:///{tmp_path / 'team.db'}" if sqlite else display_location(url)
    log = tmp_path / "serve.log"
    servers.start(servers.base_env(tmp_path, url), "--workers", "2", log=log).stop()
    lines = log.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("stateflow API on "))
    assert lines[at].endswith(f"/api/states (store: {expected}; 2 processes)"), lines
    assert lines[at + 1].startswith("studio on http://127.0.0.1:") and SECRET not in "".join(lines), lines
