"""Agent memory: scoped planes read with ``read_state`` and changed with ``patch_state``."""

from stateflow.memory.planes import ExtraRoot
from stateflow.memory.scopes import SCOPES, Identity, parse_scopes
from stateflow.memory.view import Context, MemoryConfig, MemoryView, Receipt

__all__ = [
    "SCOPES",
    "Context",
    "ExtraRoot",
    "Identity",
    "MemoryConfig",
    "MemoryView",
    "Receipt",
    "parse_scopes",
]
