"""Typed configuration of a deployment: the store, the API server, jq limits, retention, HTTP limits.

This module holds the typed object and its validation only. Sources are read at the edges (the
CLI reads ``stateflow.toml``, the environment and its flags) and handed here as layers of plain
mappings, merged in order — later layers win, so an edge passes ``file, environment, flags``.
Unknown keys and ill-typed values are refused with ``invalid-config``, naming the key and the
source. Services never read the environment at call time; they take a :class:`Config` (or its
defaults). :meth:`Config.from_env` reads the documented ``STATEFLOW_*`` variables alone.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import date, time
from typing import Any, ClassVar, Final, Self, TypedDict

from stateflow.doc.canonical import shown
from stateflow.errors import InvalidInput
from stateflow.store.open import display_location

MAX_DAYS: Final = 2_147_483_647
MAX_SECONDS: Final = 86_400
"""the longest wait, timeout or limit in seconds a setting may give (a day)"""
MAX_WORKERS: Final = 64
"""the most server (``serve --workers``) or jq worker processes"""
DEFAULT_MAX_BODY_BYTES: Final = 10 * 1024 * 1024

ENVIRONMENT: Final[Mapping[str, tuple[str, str]]] = {
    "STATEFLOW_STORE": ("store", "url"),
    "STATEFLOW_STORE_WAIT_SECONDS": ("store", "wait_seconds"),
    "STATEFLOW_STORE_CONNECT_TIMEOUT_SECONDS": ("store", "connect_timeout_seconds"),
    "STATEFLOW_STORE_STATEMENT_TIMEOUT_SECONDS": ("store", "statement_timeout_seconds"),
    "STATEFLOW_TOKENS": ("server", "tokens"),
    "STATEFLOW_TOKEN_FILE": ("server", "token_file"),
    "STATEFLOW_WORKERS": ("server", "workers"),
    "STATEFLOW_LOG_LEVEL": ("server", "log_level"),
    "STATEFLOW_LOG_FORMAT": ("server", "log_format"),
    "STATEFLOW_CORS_ORIGINS": ("server", "cors_origins"),
    "STATEFLOW_JQ_TIMEOUT_SECONDS": ("jq", "timeout_seconds"),
    "STATEFLOW_JQ_MEMORY_MB": ("jq", "memory_mb"),
    "STATEFLOW_JQ_WORKERS": ("jq", "workers"),
    "STATEFLOW_JQ_QUEUE": ("jq", "queue"),
    "STATEFLOW_DEFAULT_RETENTION_DAYS": ("retention", "default_days"),
    "STATEFLOW_OP_RETENTION_DAYS": ("retention", "op_days"),
    "STATEFLOW_AUDIT_RETENTION_DAYS": ("retention", "audit_days"),
    "STATEFLOW_MAX_BODY_BYTES": ("http", "max_body_bytes"),
    "STATEFLOW_BODY_TIMEOUT_SECONDS": ("http", "body_timeout_seconds"),
    "STATEFLOW_MAX_RECORD_MEMBERS": ("states", "max_record_members"),
}
"""each ``STATEFLOW_*`` variable of a setting, and the setting (section, key) it gives"""
ENV_LABELS: Final = {f"{section}.{key}": name for name, (section, key) in ENVIRONMENT.items()}


class InvalidConfig(InvalidInput):
    code = "invalid-config"


LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")


class StoreOpenOptions(TypedDict):
    """``open_store``'s keywords from the ``[store]`` settings."""

    wait_seconds: float
    connect_timeout: float
    statement_timeout: float | None


@dataclass(frozen=True)
class StoreSettings:
    url: str | None = None
    """a SQLite path or URL, or ``postgresql://…``; None: the default file in the data directory"""
    wait_seconds: float = 10.0
    """PostgreSQL: how long a call waits for a connection during an outage"""
    connect_timeout_seconds: float = 5.0
    """PostgreSQL: how long one connection attempt may take (unless the URL sets it)"""
    statement_timeout_seconds: float | None = None
    """PostgreSQL: the server cancels a statement running longer (``store-timeout``); 0: never;
    None: 60 s (a whole-store pass: never). A URL's own ``statement_timeout`` option wins"""

    def open_options(self) -> StoreOpenOptions:
        """The keywords every door opens its store with (``open_store``'s, and
        ``stateflow.aio.open_store_async``'s)."""
        return StoreOpenOptions(
            wait_seconds=self.wait_seconds,
            connect_timeout=self.connect_timeout_seconds,
            statement_timeout=self.statement_timeout_seconds,
        )


@dataclass(frozen=True)
class ServerSettings:
    host: str = "127.0.0.1"
    port: int = 8765
    workers: int = 1
    token_file: str | None = None
    tokens: tuple[str, ...] = ()
    """token specs (secrets: masked when shown)"""
    log_level: str = "info"
    log_format: str = "text"
    cors_origins: tuple[str, ...] = ()


@dataclass(frozen=True)
class JqSettings:
    timeout_seconds: float = 10.0
    memory_mb: int = 512
    workers: int = 2
    queue: int | None = None
    """callers that may wait for a worker; None: four per worker"""


@dataclass(frozen=True)
class RetentionConfig:
    """``default_days``: records of declared states without ``retention_days`` (None keeps them
    forever; never the built-in ``memory`` state, which only its own ``retention_days`` sweeps,
    nor a ``retention_exempt`` one);
    ``op_days``: how long ``op_id`` keys are remembered; ``audit_days``: audit rows (None: forever)."""

    default_days: int | None = None
    op_days: int = 30
    audit_days: int | None = None


@dataclass(frozen=True)
class HttpConfig:
    """``max_body_bytes``: a larger request body is refused with 413 before it is parsed.
    ``body_timeout_seconds``: a request body not all in by then (from the route's first read of
    it) is refused with 408, so a slow or stalled client does not hold a connection for ever."""

    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    body_timeout_seconds: float = 60.0


DEFAULT_MAX_RECORD_MEMBERS: Final = 100_000


@dataclass(frozen=True)
class StatesSettings:
    """``max_record_members``: a write may not leave a declared state's record with more
    top-level members than this (nor, on one already over it, with more than it had): a write's
    cost grows with them — 300,000 took ~55 s — and a record that large is read whole."""

    max_record_members: int = DEFAULT_MAX_RECORD_MEMBERS


@dataclass(frozen=True)
class Config:
    store: StoreSettings = field(default_factory=StoreSettings)
    server: ServerSettings = field(default_factory=ServerSettings)
    jq: JqSettings = field(default_factory=JqSettings)
    retention: RetentionConfig = field(default_factory=RetentionConfig)
    http: HttpConfig = field(default_factory=HttpConfig)
    states: StatesSettings = field(default_factory=StatesSettings)

    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    """``section.key`` → where the value in effect came from, as that source names it
    (``STATEFLOW_TOKENS``, ``--token-file``, a file's path); unset: the default"""

    SECTIONS: ClassVar[tuple[str, ...]] = ("store", "server", "jq", "retention", "http", "states")

    def with_store(self, store: str | None) -> Config:
        return self if store is None else replace(self, store=replace(self.store, url=store))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Config:
        """The configuration the ``STATEFLOW_*`` variables describe (unset or empty ones keep
        defaults), checked as every source is (:meth:`from_layers`)."""
        return cls.from_layers(("environment", env_layer(environ)), labels={"environment": ENV_LABELS})

    @classmethod
    def from_layers(
        cls,
        *layers: tuple[str, Mapping[str, Any]],
        labels: Mapping[str, Mapping[str, str]] | None = None,
        typed: Collection[str] = (),
    ) -> Self:
        """Merge ``(source name, {section: {key: value}})`` layers, later ones winning.
        ``labels`` names a source's settings as that source spells them (``{"environment":
        {"jq.workers": "STATEFLOW_JQ_WORKERS"}}``): a refusal names where the bad value came from.
        ``typed`` names the sources whose values have types of their own (a TOML file): there a
        string is not a number; elsewhere (the environment) text is converted.

        The API tokens are one setting given in two forms (``tokens``, ``token_file``): a layer
        that gives either replaces what lower layers gave in either form (within one layer the
        specs win). ``sources`` keeps which source set each setting."""
        config = cls()
        origin: dict[str, str] = {}
        """``section.key`` → the source that set it, as that source names it"""
        for source, layer in layers:
            names = (labels or {}).get(source, {})

            def label(key: str, source: str = source, names: Mapping[str, str] = names) -> str:
                return names.get(key) or f"{source}: {key}"

            for section, values in layer.items():
                if section not in cls.SECTIONS:
                    raise InvalidConfig(
                        f"{source}: unknown section {section!r} (known: {', '.join(cls.SECTIONS)})"
                    )
                if not isinstance(values, Mapping):
                    raise InvalidConfig(f"{source}: [{section}] must be a table of settings")
                current = getattr(config, section)
                if section == "server" and {"tokens", "token_file"} & set(values):
                    current = replace(current, tokens=(), token_file=None)
                    origin.pop("server.tokens", None)
                    origin.pop("server.token_file", None)
                merged = _merged(current, values, source, section, label, text=source not in typed)
                config = replace(config, **{section: merged})
                origin.update({f"{section}.{key}": names.get(f"{section}.{key}") or source for key in values})
        config._validate(origin)
        return replace(config, sources=origin)

    def _validate(self, origin: Mapping[str, str] | None = None) -> None:
        """Refuse a value out of range, naming the source that gave it (``origin``)."""
        seconds = f"must be a number of seconds above 0, at most {MAX_SECONDS}"
        checks = [
            (
                self.server.log_level in LOG_LEVELS,
                "server.log_level",
                f"must be one of {', '.join(LOG_LEVELS)}",
            ),
            (
                self.server.log_format in LOG_FORMATS,
                "server.log_format",
                f"must be one of {', '.join(LOG_FORMATS)}",
            ),
            (1 <= self.server.port <= 65535, "server.port", "must be 1..65535"),
            (1 <= self.server.workers <= MAX_WORKERS, "server.workers", f"must be from 1 to {MAX_WORKERS}"),
            (1 <= self.jq.workers <= MAX_WORKERS, "jq.workers", f"must be from 1 to {MAX_WORKERS}"),
            (_seconds(self.jq.timeout_seconds), "jq.timeout_seconds", seconds),
            (16 <= self.jq.memory_mb <= 1 << 20, "jq.memory_mb", "must be from 16 to 1048576"),
            (
                self.retention.default_days is None or 1 <= self.retention.default_days <= MAX_DAYS,
                "retention.default_days",
                f"must be from 1 to {MAX_DAYS} or unset",
            ),
            (1 <= self.retention.op_days <= MAX_DAYS, "retention.op_days", f"must be from 1 to {MAX_DAYS}"),
            (
                self.retention.audit_days is None or 1 <= self.retention.audit_days <= MAX_DAYS,
                "retention.audit_days",
                f"must be from 1 to {MAX_DAYS} or unset",
            ),
            (
                1024 <= self.http.max_body_bytes <= 1 << 40,
                "http.max_body_bytes",
                f"must be from 1024 to {1 << 40}",
            ),
            (_seconds(self.http.body_timeout_seconds), "http.body_timeout_seconds", seconds),
            (
                1 <= self.states.max_record_members <= 1 << 40,
                "states.max_record_members",
                f"must be from 1 to {1 << 40}",
            ),
            (
                self.jq.queue is None or 0 <= self.jq.queue <= 1 << 20,
                "jq.queue",
                f"must be from 0 to {1 << 20}",
            ),
            (_seconds(self.store.wait_seconds), "store.wait_seconds", seconds),
            (_seconds(self.store.connect_timeout_seconds), "store.connect_timeout_seconds", seconds),
            (
                self.store.statement_timeout_seconds in (None, 0)
                or _seconds(self.store.statement_timeout_seconds),
                "store.statement_timeout_seconds",
                f"must be 0 (no limit) or a number of seconds above 0, at most {MAX_SECONDS}",
            ),
        ]
        for ok, key, rule in checks:
            if not ok:
                source = (origin or {}).get(key)
                raise InvalidConfig(f"{source}: {key} {rule}" if source else f"{key} {rule}")

    def to_json(self, *, secrets: bool = False) -> dict[str, Any]:
        """Every setting; secrets (token specs, a password in the store URL) masked unless asked."""
        out: dict[str, Any] = {}
        for section in self.SECTIONS:
            values = {f.name: getattr(getattr(self, section), f.name) for f in fields(getattr(self, section))}
            out[section] = {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}
        if not secrets:
            out["server"]["tokens"] = [_mask_spec(s) for s in self.server.tokens]
            if self.store.url:
                out["store"]["url"] = display_location(self.store.url)
        return out


def _merged(
    current: Any,
    values: Mapping[str, Any],
    source: str,
    section: str,
    label: Callable[[str], str],
    *,
    text: bool = True,
) -> Any:
    """``current`` with ``values`` set; ``label`` names a setting as ``source`` spells it, in
    refusals; ``text``: a number may be given as a string (see :func:`_typed`)."""
    known = {f.name: f for f in fields(current)}
    changes: dict[str, Any] = {}
    for key, value in values.items():
        if key not in known:
            raise InvalidConfig(f"{source}: {section}: unknown setting {key!r} (known: {', '.join(known)})")
        changes[key] = _typed(
            value, known[key].type, label(f"{section}.{key}"), words=key == "cors_origins", text=text
        )
    return replace(current, **changes)


def _typed(value: Any, annotation: Any, where: str, *, words: bool = False, text: bool = True) -> Any:
    """``value`` as the setting's type (strings from the environment are converted; a tuple's
    string is split into lines, or into words at spaces and commas when ``words``). Without
    ``text`` (a source with types of its own) a string is not taken for a number."""
    kind = str(annotation)
    if value is None and "None" in kind:
        return None
    try:
        if kind.startswith("tuple"):
            if isinstance(value, str):
                return (
                    tuple(v for v in value.replace(",", " ").split() if v)
                    if words
                    else (tuple(line.strip() for line in value.splitlines() if line.strip()))
                )
            if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
                return tuple(value)
            raise TypeError
        # (Python's own reading of a number would take other scripts' digits, "١" as 1, and "1_000")
        if (
            kind.startswith(("float", "int"))
            and isinstance(value, str)
            and (not text or not value.isascii() or "_" in value)
        ):
            raise TypeError
        if kind.startswith("float"):
            if isinstance(value, bool):
                raise TypeError
            return float(value)
        if kind.startswith("int"):
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise TypeError
            return int(value)
        if kind.startswith("str"):
            if not isinstance(value, str):
                raise TypeError
            return value
    except (TypeError, ValueError):
        pass
    else:
        return value
    raise InvalidConfig(f"{where}: {_spelled(value)} is not a valid {kind.replace(' | None', '')}")


def _spelled(value: Any) -> str:
    """``value`` as the file or the environment spells it (``true``, not Python's ``True``):
    text quoted (TOML reads ``'7'`` as the string it is), ``inf`` and ``nan`` as TOML writes
    them, a date or time as its TOML literal, anything else as JSON."""
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, date | time):  # (a datetime is a date)
        return value.isoformat()
    return shown(value)


def _mask_spec(spec: str) -> str:
    secret, sep, rest = spec.partition("@")
    head, colon, access = secret.partition(":")
    return f"{head[:3]}…{colon}{access}{sep}{rest}"


def _seconds(value: float | None) -> bool:
    """A number of seconds a wait or a limit may be: finite (an infinite one passed ``> 0`` and
    then broke the arithmetic of deadlines), above 0 and at most a day."""
    return value is not None and math.isfinite(value) and 0 < value <= MAX_SECONDS


def env_layer(environ: Mapping[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """The settings the ``STATEFLOW_*`` variables give, as a layer for :meth:`Config.from_layers`
    (an empty variable counts as unset)."""
    env = os.environ if environ is None else environ
    layer: dict[str, dict[str, Any]] = {}
    for name, (section, key) in ENVIRONMENT.items():
        value = env.get(name)
        if value:
            layer.setdefault(section, {})[key] = value
    return layer
