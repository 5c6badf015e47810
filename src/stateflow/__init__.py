"""stateflow: durable, versioned, schema-aware JSON state for LLM agents."""

__version__ = "0.1.0"
