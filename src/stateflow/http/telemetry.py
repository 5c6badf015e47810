"""FastAPI's per-request check for a configured OpenTelemetry provider, answered at once where
it surely finds none.

FastAPI (0.16x) asks on every request whether a tracer, meter or logger provider is configured
(``NativeTelemetry.enabled``): each of OpenTelemetry's ``get_*_provider`` looks its environment
variable up in ``os.environ`` when no provider is set, and a missing key costs ``os.environ``
two Python exceptions — three lookups were ~8% of a record write's instructions on the event
loop's thread. Where no provider is set and none of the three variables is in the environment,
every lookup would return OpenTelemetry's deferred (proxy) provider and the check says no;
:func:`quicken` answers that case from the same globals and the environment's own dict, and
hands every other case to FastAPI's check, which then loads and sets a provider named in the
environment as before. A provider set at any time, or a variable put in the environment, is seen
on the next request, as before.

Where FastAPI or OpenTelemetry do not have what this reads (other versions), nothing changes.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any


def quicken(app: Any) -> bool:
    """Answer ``app``'s per-request telemetry check at once where no provider is configured;
    True when it does (False: the check is FastAPI's own, unchanged)."""
    native = getattr(app, "_native_telemetry", None)
    config = getattr(native, "config", None)
    original = getattr(native, "enabled", None)
    if native is None or not isinstance(config, dict) or original is None:
        return False
    if any(config.get(k) is not None for k in ("tracer_provider", "meter_provider", "logger_provider")):
        return False  # the app names a provider of its own: FastAPI's check decides
    none_configured = _none_configured()
    if none_configured is None:
        return False

    def enabled() -> bool:
        return False if none_configured() else bool(original())

    native.enabled = enabled
    return True


def _none_configured() -> Callable[[], bool] | None:
    """A test that OpenTelemetry's three ``get_*_provider`` would each return its deferred
    provider now (no global provider set, no variable naming one); None where this version of
    OpenTelemetry keeps them otherwise than read here."""
    try:  # (modules as ``Any``: what is read here is theirs, not their published names)
        trace: Any = importlib.import_module("opentelemetry.trace")
        metrics: Any = importlib.import_module("opentelemetry.metrics._internal")
        logs: Any = importlib.import_module("opentelemetry._logs._internal")

        providers = ((trace, "_TRACER_PROVIDER"), (metrics, "_METER_PROVIDER"), (logs, "_LOGGER_PROVIDER"))
        names = (
            trace.OTEL_PYTHON_TRACER_PROVIDER,
            metrics.OTEL_PYTHON_METER_PROVIDER,
            logs._OTEL_PYTHON_LOGGER_PROVIDER,
        )
        environ = os.environ
        data: dict[Any, Any] = environ._data  # type: ignore[attr-defined]
        keys = tuple(environ.encodekey(name) for name in names)
        for module, name in providers:
            getattr(module, name)
    except (ImportError, AttributeError):
        return None
    if not (type(data) is dict and trace.os is os and metrics.environ is environ and logs.environ is environ):
        return None
    tracer_key, meter_key, logger_key = keys

    def none_configured() -> bool:
        return (
            trace._TRACER_PROVIDER is None
            and metrics._METER_PROVIDER is None
            and logs._LOGGER_PROVIDER is None
            and tracer_key not in data
            and meter_key not in data
            and logger_key not in data
            and os.environ is environ
        )

    return none_configured
