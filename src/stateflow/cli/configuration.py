"""Where configuration comes from, read at the edge: ``stateflow.toml``, the environment, flags.

Precedence: flags > environment > file > defaults. The file is ``--config PATH`` (or
``STATEFLOW_CONFIG``), else ``stateflow.toml`` in the working directory, else in the data
directory; a named file that does not exist is refused, a file found by looking is optional.
A relative path in the file is read against the file's folder (flags and the environment: the
working directory).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from stateflow.cli.examples import decorate
from stateflow.config import ENV_LABELS, Config, InvalidConfig, env_layer
from stateflow.store.open import absolute_location

FILE_NAME = "stateflow.toml"
ENV_CONFIG = "STATEFLOW_CONFIG"
FLAGS: dict[str, str] = {
    "store.url": "--store",
    "server.host": "--host",
    "server.port": "--port",
    "server.workers": "--workers",
    "server.tokens": "--token",
    "server.token_file": "--token-file",
    "server.log_level": "--log-level",
    "server.log_format": "--log-format",
    "server.cors_origins": "--cors-origin",
}
"""the command-line flag of each setting that has one, for refusals naming what was given"""


def config_file(explicit: Path | None) -> Path | None:
    given = ""
    if explicit is None and os.environ.get(ENV_CONFIG):
        explicit, given = Path(os.environ[ENV_CONFIG]), f" ({ENV_CONFIG})"
    if explicit is not None:
        if explicit.is_dir():
            raise InvalidConfig(f"configuration file {explicit}{given} is a directory")
        if not explicit.is_file():
            raise InvalidConfig(f"configuration file {explicit}{given} does not exist")
        return explicit
    import platformdirs

    for folder in (Path.cwd(), Path(platformdirs.user_data_dir("stateflow", appauthor=False))):
        if (folder / FILE_NAME).is_file():
            return folder / FILE_NAME
    return None


def _file_layer(path: Path) -> dict[str, Any]:
    import tomllib

    try:
        with path.open("rb") as fh:
            layer = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidConfig(f"{path} is not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:  # TOML is UTF-8; tomllib lets the decoder's error through
        raise InvalidConfig(
            f"{path} is not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start}); "
            "save it as UTF-8"
        ) from None
    except OSError as exc:
        raise InvalidConfig(f"cannot read {path}: {exc.strerror or exc}") from None
    return _anchored(layer, path.parent.absolute())


def _anchored(layer: dict[str, Any], folder: Path) -> dict[str, Any]:
    """The file's relative paths (``[store] url``, ``[server] token_file``) read against the
    file's own folder: one file names one store and one token file, whatever the working
    directory of the command that reads it."""
    store, server = layer.get("store"), layer.get("server")
    if isinstance(store, dict) and isinstance(store.get("url"), str) and store["url"]:
        store["url"] = absolute_location(store["url"], folder)
    if isinstance(server, dict) and isinstance(server.get("token_file"), str) and server["token_file"]:
        server["token_file"] = os.path.abspath(folder / Path(server["token_file"]).expanduser())
    return layer


def load(explicit: Path | None, flags: Mapping[str, Mapping[str, Any]]) -> tuple[Config, Path | None]:
    """The configuration in effect, and the file it read (if any)."""
    path = config_file(explicit)
    layers: list[tuple[str, Mapping[str, Any]]] = []
    if path is not None:
        layers.append((str(path), _file_layer(path)))
    layers.append(("environment", env_layer(os.environ)))
    given = {s: {k: v for k, v in values.items() if v is not None} for s, values in flags.items()}
    layers.append(("command line", {s: v for s, v in given.items() if v}))
    labels = {
        "environment": ENV_LABELS,
        "command line": FLAGS,
    }
    # the file's values have TOML's types: a string there is not a number
    typed = () if path is None else (str(path),)
    return Config.from_layers(*layers, labels=labels, typed=typed), path


@click.group("config")
def config() -> None:
    """The configuration in effect (stateflow.toml, environment, flags)."""


@config.command("show")
@click.option("--secrets", is_flag=True, help="Show token secrets and passwords instead of masking them.")
@click.pass_context
def show(click_ctx: click.Context, secrets: bool) -> None:
    """Print every setting in effect as JSON (secrets masked), and which file was read."""
    from stateflow.cli.common import Context, echo_json, visible

    ctx = click_ctx.find_object(Context)
    assert ctx is not None
    try:
        resolved, path = ctx.settings()
    except InvalidConfig as exc:
        click.echo(f"error[{exc.code}]: {visible(exc.message, lines=True)}", err=True)
        raise SystemExit(1) from None
    echo_json({"file": str(path) if path else None, **resolved.to_json(secrets=secrets)})


decorate(config, "config")
