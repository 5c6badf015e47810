"""An array of which only some elements are in hand, with its real length (pure: no I/O).

A store writing by path to a large array it has not read whole (``store.tree_skeleton``)
holds the elements the write's paths reach and nothing else. A list of the array's real
length with placeholders elsewhere made every step cost the array — building it, each
copy-on-write of it — where the write costs a path. :class:`Sparse` is that array as its
length and the elements held, by index: the algebra's steps along a path (:func:`doc.diff.
apply_below`, a merge patch's indices, a diff along a trie) take it where they take an array,
with the same results and refusals (lengths are the real ones), and copying it costs the
elements held. Reaching an element not held raises :class:`NotHeld`: the caller then reads
the array whole. A ``Sparse`` is never stored nor shown (encoding one fails).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


class NotHeld(LookupError):
    """An element of a :class:`Sparse` that is not in hand was reached."""


class Sparse:
    """``length`` elements, of which those at the indices of ``held`` are in hand."""

    __slots__ = ("held", "length")

    def __init__(self, length: int, held: dict[int, Any]) -> None:
        self.length = length
        self.held = held

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Any:
        if type(index) is not int:
            raise NotHeld(f"a sparse array is read by index, not by {index!r}")
        found = self.held.get(index, _NONE)
        if found is _NONE:
            raise NotHeld(f"element {index} of an array of length {self.length} is not in hand")
        return found

    def tail(self, count: int) -> list[Any]:
        """The last ``count`` elements (each must be held)."""
        return [self[i] for i in range(self.length - count, self.length)]

    def replaced(self, index: int, value: Any) -> Sparse:
        """A copy with element ``index`` (``< len``) set to ``value``, or appended at ``len``."""
        if not 0 <= index <= self.length:
            raise IndexError(f"index {index} is outside an array of length {self.length}")
        held = dict(self.held)
        held[index] = value
        return Sparse(self.length + (index == self.length), held)

    def __iter__(self) -> Iterator[Any]:
        raise NotHeld(f"a sparse array of length {self.length} is not iterated: its elements are not in hand")

    def __repr__(self) -> str:
        return f"Sparse({self.length}, {self.held!r})"


_NONE: Any = object()
