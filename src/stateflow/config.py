"""The configuration object: parsed once at the edges (CLI flags, environment), then passed in.

Services never read the environment at call time; they take a :class:`Config` (or its
defaults). :meth:`Config.from_env` reads the documented ``STATEFLOW_*`` variables and refuses a
malformed value naming the variable, so a typo fails at start-up rather than at the first prune.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Final

from stateflow.errors import InvalidInput

MAX_DAYS: Final = 2_147_483_647
DEFAULT_MAX_BODY_BYTES: Final = 10 * 1024 * 1024


class ConfigInvalid(InvalidInput):
    code = "invalid-config"


@dataclass(frozen=True)
class RetentionConfig:
    """``default_days``: records of states without ``retention_days`` (None keeps them forever);
    ``op_days``: how long ``op_id`` keys are remembered; ``audit_days``: audit rows (None: forever)."""

    default_days: int | None = None
    op_days: int = 30
    audit_days: int | None = None


@dataclass(frozen=True)
class JqConfig:
    """Limits of one template jq evaluation."""

    timeout_seconds: float = 10.0
    memory_mb: int = 512


@dataclass(frozen=True)
class HttpConfig:
    """``max_body_bytes``: a larger request body is refused with 413 before it is parsed."""

    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES


@dataclass(frozen=True)
class Config:
    store: str | None = None
    retention: RetentionConfig = field(default_factory=RetentionConfig)
    jq: JqConfig = field(default_factory=JqConfig)
    http: HttpConfig = field(default_factory=HttpConfig)

    def with_store(self, store: str | None) -> Config:
        return self if store is None else replace(self, store=store)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Config:
        """The configuration the ``STATEFLOW_*`` variables describe (unset ones keep defaults)."""
        env = os.environ if environ is None else environ
        defaults = cls()
        return cls(
            store=env.get("STATEFLOW_STORE") or None,
            retention=RetentionConfig(
                default_days=_int(env, "STATEFLOW_DEFAULT_RETENTION_DAYS", None, 1, MAX_DAYS),
                op_days=_int(env, "STATEFLOW_OP_RETENTION_DAYS", defaults.retention.op_days, 1, MAX_DAYS)
                or defaults.retention.op_days,
                audit_days=_int(env, "STATEFLOW_AUDIT_RETENTION_DAYS", None, 1, MAX_DAYS),
            ),
            jq=JqConfig(
                timeout_seconds=_float(env, "STATEFLOW_JQ_TIMEOUT_SECONDS", defaults.jq.timeout_seconds),
                memory_mb=_int(env, "STATEFLOW_JQ_MEMORY_MB", defaults.jq.memory_mb, 16, 1 << 20)
                or defaults.jq.memory_mb,
            ),
            http=HttpConfig(
                max_body_bytes=_int(
                    env, "STATEFLOW_MAX_BODY_BYTES", defaults.http.max_body_bytes, 1024, 1 << 40
                )
                or defaults.http.max_body_bytes
            ),
        )


def _int(env: Mapping[str, str], name: str, default: int | None, low: int, high: int) -> int | None:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise ConfigInvalid(f"{name} must be an integer from {low} to {high} or unset, got {raw!r}")
    return value


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not 0 < value < 86_400:
        raise ConfigInvalid(f"{name} must be a number of seconds above 0 or unset, got {raw!r}")
    return value
