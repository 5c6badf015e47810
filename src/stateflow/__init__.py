"""stateflow: durable, versioned, schema-aware JSON state for LLM agents."""

__version__ = "0.1.0"

from stateflow.api import Stateflow, connect

__all__ = ["Stateflow", "__version__", "connect"]
