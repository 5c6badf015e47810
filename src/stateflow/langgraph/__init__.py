"""LangGraph adapters: thread state (``StateflowSaver``) and long-term memory
(``StateflowStore``) kept as stateflow records — every revision readable, every write audited.

Needs the ``langgraph`` extra (``pip install 'stateflow[langgraph]'``).
"""

from stateflow.langgraph.saver import StateflowSaver
from stateflow.langgraph.store import StateflowStore

__all__ = ["StateflowSaver", "StateflowStore"]
