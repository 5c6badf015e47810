"""How the algebra copies the containers it changes, and what it tells the copier afterwards.

Every ``doc/`` function is copy-on-write: a changed container is copied, then changed. Copying
a container of half a million elements (and, later, freeing the version it replaced) costs far
more than the change itself. A caller that can make such copies cheaper passes a
:class:`Copies`: the functions that accept one ask it for each copy of a container they are
about to change, and report what they did to the copy once they are done with it
(:meth:`Copies.made`: the copy is then never changed again). Without one, a copy is
``list(x)`` / ``dict(x)``. Either way the result is the same value; only its cost differs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, Protocol


class _Delete:
    def __repr__(self) -> str:
        return "DELETE"


DELETE: Final = _Delete()
"""A step that deleted the key (``(key, DELETE)``)."""

APPEND_STEP: Final = object()
"""A step that appended the value to a list (``(APPEND_STEP, value)``)."""

Step = tuple[Any, Any]
"""``(key or index, value)`` set on the copy, ``(key, DELETE)`` or ``(APPEND_STEP, value)``, in
the order they were made."""


class Copies(Protocol):
    """Where the algebra gets the copies of containers it is about to change."""

    min_elements: int
    """A container with fewer elements is copied plainly (``list(x)`` / ``dict(x)``) and never
    reported to :meth:`made`: the algebra asks the copier only for larger ones."""

    def list_copy(self, source: list[Any]) -> list[Any]:
        """A list equal to ``source`` that the caller alone holds and may change."""
        ...

    def dict_copy(self, source: dict[str, Any]) -> dict[str, Any]:
        """A dict equal to ``source`` (same key order) that the caller alone holds and may change."""
        ...

    def made(self, new: Any, source: Any, steps: Sequence[Step]) -> None:
        """``new`` — a copy of ``source`` from this copier — is ``source`` with ``steps`` applied,
        and will not change again."""
        ...


def list_copy(copies: Copies | None, source: list[Any]) -> list[Any]:
    if copies is None or len(source) < copies.min_elements:
        return list(source)
    return copies.list_copy(source)


def dict_copy(copies: Copies | None, source: dict[str, Any]) -> dict[str, Any]:
    if copies is None or len(source) < copies.min_elements:
        return dict(source)
    return copies.dict_copy(source)


def made(copies: Copies | None, new: Any, source: Any, steps: Sequence[Step]) -> None:
    """Tell ``copies`` what was made of ``source`` (nothing to tell about a small container)."""
    if copies is not None and len(source) >= copies.min_elements:
        copies.made(new, source, steps)
