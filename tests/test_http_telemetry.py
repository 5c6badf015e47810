"""FastAPI's per-request OpenTelemetry check, answered at once where no provider is configured,
gives FastAPI's answer in every case: no provider, one named in the environment, one set."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from fastapi import FastAPI

from stateflow.http.telemetry import quicken


def test_no_provider_answers_as_fastapi_does() -> None:
    app = FastAPI()
    fastapi_says = app._native_telemetry.enabled()
    assert quicken(app)
    assert app._native_telemetry.enabled() is fastapi_says is False


@pytest.mark.parametrize(
    "variable", ["OTEL_PYTHON_TRACER_PROVIDER", "OTEL_PYTHON_METER_PROVIDER", "OTEL_PYTHON_LOGGER_PROVIDER"]
)
def test_a_provider_named_in_the_environment_is_fastapis_to_load(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    """With a variable set, the check is FastAPI's own: OpenTelemetry loads the provider it
    names (here none is installed by that name, so both checks fail alike and set nothing)."""
    app, plain = FastAPI(), FastAPI()
    assert quicken(app)
    monkeypatch.setenv(variable, "no-such-provider")
    failures = []
    for check in (plain._native_telemetry.enabled, app._native_telemetry.enabled):
        with pytest.raises(Exception) as raised:
            check()
        failures.append(type(raised.value))
    assert failures[0] is failures[1]
    monkeypatch.delenv(variable)
    assert app._native_telemetry.enabled() is False


def test_a_provider_set_in_process_turns_telemetry_on() -> None:
    """A provider set after the app was built (in a process of its own: a provider is set once)."""
    program = textwrap.dedent(
        """
        from fastapi import FastAPI
        from opentelemetry import trace
        from stateflow.http.telemetry import quicken

        app = FastAPI()
        assert quicken(app) and app._native_telemetry.enabled() is False
        trace.set_tracer_provider(trace.NoOpTracerProvider())
        assert app._native_telemetry.enabled() is True
        assert FastAPI()._native_telemetry.enabled() is True
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "ok", done.stderr


def test_an_app_naming_its_own_provider_keeps_fastapis_check() -> None:
    from opentelemetry import trace

    app = FastAPI(telemetry={"tracer_provider": trace.NoOpTracerProvider()})
    assert not quicken(app)
    assert app._native_telemetry.enabled() is True
