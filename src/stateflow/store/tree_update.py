"""Path-copying updates of content-addressed trees (pure: no I/O).

A new version of a large value is written as the nodes that differ from its previous tree: the
changed range of each changed container is found by identity against the previous value (every
``doc/`` function is copy-on-write, so unchanged children are the same objects), the leaves
holding that range are re-cut, and their ancestors are rewritten — O(change + depth) nodes,
however large the value. A single changed element that is itself a tree is updated the same
way, recursively, so a deep edit rewrites one leaf per level.

Unlike a fresh build, the shape of an updated tree depends on its history (cuts are re-made
only inside the rewritten leaves), so equal values built along different histories may have
different roots; every shape reads back the same (``tree.load``), and nodes are still shared
wherever content repeats.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Final

import orjson

from stateflow.doc.canonical import JSON
from stateflow.doc.diff import Within, within
from stateflow.doc.sparse import Sparse
from stateflow.errors import CorruptData
from stateflow.store.key_positions import Positions
from stateflow.store.tree import INLINE_MAX, LEAF_MAX, Builder, Entry, cuts, interior_body, leaf_body, node_id
from stateflow.store.tree_skeleton import NeedsWhole

Shapes = dict[int, tuple[int, dict[str, int]]]
"""A skeleton's containers' real sizes and key positions (``tree_skeleton.Skeleton.shapes``)."""

Get = Callable[[bytes], dict[str, Any]]
"""A node's decoded body by id (raises ``CorruptData`` when it is missing or damaged)."""


@dataclass(slots=True)
class Updated:
    """A value as an update left it: ``root`` (None: small enough to be inline, see ``inline``),
    its encoded ``size``, and the node bodies written (id → bytes; some may exist already)."""

    root: bytes | None
    inline: bytes | None
    size: int
    nodes: dict[bytes, bytes] = field(default_factory=dict)
    refs: dict[int, bytes] = field(default_factory=dict)
    """root id of every container of ``new`` this update wrote as a subtree, by ``id()`` of the
    container object (an edit whose value is one can be stored as its ref)"""


def where_of(edits: Iterable[tuple[tuple[str | int, ...], bool]]) -> Within:
    """Where a value may differ after edits given as ``(path, is_delete)`` in order, for
    :func:`update`. A key set again after a delete at or above it has moved to the end of its
    object, which the paths do not say: then the whole value is compared (an empty trie)."""
    paths: list[tuple[str | int, ...]] = []
    deleted: set[tuple[str | int, ...]] = set()
    for path, is_delete in edits:
        if is_delete:
            deleted.add(path)
        elif deleted and any(path[:n] in deleted for n in range(len(path) + 1)):
            # (the path's prefixes looked up, not every delete compared: thousands of deletes
            # and sets in one write made this quadratic)
            return {}
        paths.append(path)
    return within(paths)


def update(
    root: bytes,
    size: int,
    old: JSON,
    new: JSON,
    get: Get,
    where: Within | None = None,
    positions: Positions | None = None,
    shapes: Shapes | None = None,
) -> Updated:
    """``new`` as a tree, given ``old`` (encoded in ``size`` bytes) stored under ``root``.

    ``where``: the paths (relative to the value) where ``new`` may differ from ``old`` — the
    edits that made it. Containers along them find their changed elements from the paths
    instead of comparing every element; elsewhere (or without ``where``) the changed range is
    found by identity. ``positions``: where large objects' keys stand, kept by tree root
    (an existing key's position is then looked up, not scanned for). ``shapes``: ``old`` is
    a skeleton (``tree_skeleton``) and ``new`` the edits applied to it: every position comes
    from these and the paths, and ``NeedsWhole`` is raised where they do not say enough."""
    nodes: dict[bytes, bytes] = {}
    if type(new) is not type(old) or type(new) not in (dict, list, Sparse):
        builder = Builder()
        built = builder.build(new)
        return Updated(built.root, built.inline, built.size, built.nodes, builder.refs())
    refs: dict[int, bytes] = {}
    entry, delta = _update(root, old, new, get, nodes, refs, where or None, positions, shapes)
    if size + delta <= INLINE_MAX:  # shrunk: small values are inline
        if shapes:
            raise NeedsWhole("the value shrinks inline")
        data = orjson.dumps(new)
        return Updated(None, data, len(data))
    if entry.is_ref:
        refs[id(new)] = _ref_id(entry.json)
        return Updated(_ref_id(entry.json), None, size + delta, nodes, refs)
    return Updated(None, entry.json, size + delta, nodes, refs)


def _ref_id(data: bytes) -> bytes:
    return bytes.fromhex(data[1:-1].decode())


def _update(
    root: bytes,
    old: Any,
    new: Any,
    get: Get,
    nodes: dict[bytes, bytes],
    refs: dict[int, bytes],
    where: Within | None = None,
    positions: Positions | None = None,
    shapes: Shapes | None = None,
) -> tuple[Entry, int]:
    """The container ``new`` as an entry (a ref: its tree), and its size minus ``old``'s."""
    if shapes and id(old) in shapes:
        return _update_skeleton(root, old, new, get, nodes, refs, where, shapes)
    if type(new) is not dict or positions is None:
        return _update_in(root, old, new, get, nodes, refs, where, positions, None, shapes)
    keyed = _Keyed(root, old, positions)
    try:
        return _update_in(root, old, new, get, nodes, refs, where, positions, keyed, shapes)
    except BaseException:
        # (a node it could not get: an update staged with no transaction meets one not cached,
        # and the write is staged again under the lock, which must find the index as it was)
        keyed.give_back()
        raise


def _update_skeleton(
    root: bytes,
    old: Any,
    new: Any,
    get: Get,
    nodes: dict[bytes, bytes],
    refs: dict[int, bytes],
    where: Within | None,
    shapes: Shapes,
) -> tuple[Entry, int]:
    """:func:`_update` of a skeleton container: one step per element or key it changes (each
    a splice of the tree), the appends first and then the others from the last position back,
    so that no step moves a position a later one takes from the tree."""
    count, places = shapes[id(old)]
    unchanged = Entry(b'"' + root.hex().encode() + b'"', True, 0), 0
    if new is old:
        return unchanged
    if not where:
        raise NeedsWhole("no paths say where the container changed")
    steps: list[tuple[Any, Any, Within]] = []
    if type(old) is dict:
        if not all(type(k) is str for k in where):
            raise NeedsWhole("an index into an object")
        present = [str(k) for k in where if k in old]
        added = {k: new[k] for k in new if k not in old}
        if len(present) + bool(added) <= 1:
            return _update_in(root, old, new, get, nodes, refs, where, None, None, shapes)
        if added:
            steps.append(({}, added, {k: where[k] for k in added if k in where}))
        for key in sorted(present, key=places.__getitem__, reverse=True):
            steps.append(({key: old[key]}, {key: new[key]} if key in new else {}, {key: where[key]}))
    else:
        indices = sorted((k for k in where if type(k) is int), reverse=True)
        if len(indices) != len(where) or len(new) < count:
            raise NeedsWhole("an array's element deleted, or a key into an array")
        if indices[0] >= len(new):  # (deletes past the end: nothing was there to change)
            indices = [i for i in indices if i < len(new)]
            where = {i: where[i] for i in indices}
            if not indices:
                return unchanged
        inside = [i for i in indices if i < count]
        if len(inside) + (len(new) > count) <= 1:
            return _update_in(root, old, new, get, nodes, refs, where, None, None, shapes)
        if len(new) > count:
            steps.append((old, new, {i: where[i] for i in indices if i >= count}))
        for i in inside:  # (a skeleton's array is a ``Sparse``: a copy costs what it holds)
            steps.append((old, old.replaced(i, new[i]), {i: where[i]}))
    delta = 0
    ident = root
    size = count
    get = _with_written(get, nodes)  # (a step walks the nodes the steps before it wrote)
    for before, after, below in steps:
        if before is not old:  # (an object's step: its own container, shaped as the tree now)
            at = {k: places[k] for k in before}
            shapes[id(before)] = (size, at)
        try:
            entry, moved = _update_in(ident, before, after, get, nodes, refs, below, None, None, shapes)
        finally:
            if before is not old:
                del shapes[id(before)]
        if not entry.is_ref:
            raise NeedsWhole("a step left the container inline")
        delta += moved
        size += len(after) - len(before)
        ident = _ref_id(entry.json)
    return Entry(b'"' + ident.hex().encode() + b'"', True, 0), delta


def _with_written(get: Get, nodes: dict[bytes, bytes]) -> Get:
    """``get``, but a node this update has written is taken from ``nodes``."""

    def written(ident: bytes) -> dict[str, Any]:
        body = nodes.get(ident)
        return get(ident) if body is None else orjson.loads(body)

    return written


def _update_in(
    root: bytes,
    old: Any,
    new: Any,
    get: Get,
    nodes: dict[bytes, bytes],
    refs: dict[int, bytes],
    where: Within | None,
    positions: Positions | None,
    keyed: _Keyed | None,
    shapes: Shapes | None = None,
) -> tuple[Entry, int]:
    """:func:`_update`, with the key index of ``old`` when it is an object."""
    is_object = type(new) is dict
    shaped = shapes.get(id(old)) if shapes else None
    old_len = len(old)
    new_len = len(new)
    located: tuple[int, int, int, Any] | None
    if shaped is not None:
        located = _shaped(old, new, where, shaped)
        old_len = shaped[0]
        new_len = located[2] + old_len - located[1]
    else:
        located = None if where is None else _located(old, new, where, keyed)
    if located is not None:
        lo, old_hi, new_hi, one = located
    elif is_object:
        lo, old_hi, new_hi = _window(list(old), list(new), list(old.values()), list(new.values()))
        one = None
    else:
        lo, old_hi, new_hi = _window(None, None, old, new)
        one = None
    if lo == old_hi == new_hi:
        if keyed is not None and located is not None:
            keyed.follow(old, new, where or {}, root)
        return Entry(b'"' + root.hex().encode() + b'"', True, 0), 0
    old_keys: list[str] | None
    new_keys: list[str] | None
    old_values: list[Any]
    new_values: list[Any]
    if one is not None:  # the changed (or deleted) key, found by path: nothing else is listed
        old_keys, old_values = [one], [old[one]]
        new_keys, new_values = ([one], [new[one]]) if one in new else ([], [])
        base = lo
    elif located is not None and new_hi == new_len and old_hi == old_len:  # a tail (appends)
        base = lo
        old_keys, old_values = _tail(old, old_len - lo)
        new_keys, new_values = _tail(new, new_len - lo)
    else:
        base = 0
        old_keys = list(old) if is_object else None
        new_keys = list(new) if is_object else None
        old_values = list(old.values()) if is_object else old
        new_values = list(new.values()) if is_object else new
    delta = 0
    make: Callable[[list[Entry]], list[Entry]] | list[Entry]
    in_place = old_hi - lo == 1 and new_hi - lo == 1
    if in_place and (not is_object or old_keys[lo - base] == new_keys[lo - base]):  # type: ignore[index]
        # one element changed in place: a subtree is updated by path, not rebuilt
        before, after = old_values[lo - base], new_values[lo - base]
        below = None
        if where is not None and one is not None:
            below = where.get(one)
        elif where is not None and not is_object:
            below = where.get(lo)

        def make(found: list[Entry]) -> list[Entry]:
            nonlocal delta
            (was,) = found
            if was.is_ref and type(after) is type(before) and type(after) in (dict, list, Sparse):
                entry, inner = _update(
                    _ref_id(was.json), before, after, get, nodes, refs, below, positions, shapes
                )
                if entry.is_ref:
                    refs[id(after)] = _ref_id(entry.json)
            else:
                if was.is_ref and shapes and id(before) in shapes:
                    # (a container held along the paths only: its encoded size is not in hand)
                    raise NeedsWhole("a container held along the paths is replaced whole")
                builder = Builder()
                entry = builder._entry(after, nodes)
                refs.update(builder.refs())
                inner = entry.size - (len(was.json) if not was.is_ref else len(orjson.dumps(before)))
            delta += inner
            return [Entry(entry.json, entry.is_ref, entry.size, was.key)]

    else:
        builder = Builder()
        make = []
        for i in range(lo - base, new_hi - base):
            entry = builder._entry(new_values[i], nodes)
            entry.key = None if new_keys is None else new_keys[i]
            make.append(entry)
        refs.update(builder.refs())
        delta += sum(e.size + (len(orjson.dumps(e.key)) + 1 if is_object else 0) for e in make)
        delta -= sum(
            len(orjson.dumps(old_values[i])) + (len(orjson.dumps(old_keys[i])) + 1 if old_keys else 0)
            for i in range(lo - base, old_hi - base)
        )
    count_delta = max(0, new_len - 1) - max(0, old_len - 1)
    kind = "o" if is_object else "a"
    level = _splice(root, lo, old_hi, make, kind, get, nodes)
    while len(level) > 1:
        level = _pack(level, kind, nodes)
    if not level:
        data = b"{}" if is_object else b"[]"
        return Entry(data, False, 2), delta + count_delta
    if keyed is not None and located is not None:
        keyed.follow(old, new, where or {}, level[0][1])
    return Entry(b'"' + level[0][1].hex().encode() + b'"', True, 0), delta + count_delta


def _shaped(
    old: Any, new: Any, where: Within | None, shaped: tuple[int, dict[str, int]]
) -> tuple[int, int, int, Any]:
    """:func:`_located` for a skeleton container (real size and key positions in ``shaped``),
    where only what the paths address is in hand: one element or key replaced in place, one key
    deleted, or only appends (new keys, elements past the end). ``NeedsWhole`` otherwise."""
    count, places = shaped
    if where:
        if type(new) is dict:
            if all(type(k) is str for k in where):
                present = [str(k) for k in where if k in old]
                added = len(new) - (len(old) - sum(1 for k in present if k not in new))
                if len(present) == 1 and not added:
                    at = places[present[0]]
                    return at, at + 1, at + 1 if present[0] in new else at, present[0]
                if not present:
                    return count, count, count + added, None
        elif type(new) is list or type(new) is Sparse:
            indices = [k for k in where if type(k) is int]
            if len(indices) == len(where) and len(new) > count and min(indices) >= count:
                return count, count, len(new), None
            if len(indices) == len(where) == 1 and len(new) == count and 0 <= indices[0] < count:
                at = indices[0]
                return at, at + 1, at + 1, None
    raise NeedsWhole("the edits change more of a container than its skeleton holds")


def _located(
    old: Any, new: Any, where: Within, keyed: _Keyed | None = None
) -> tuple[int, int, int, Any] | None:
    """The changed range of a container from the paths that changed it — ``(lo, old_hi, new_hi,
    key)``, ``key`` naming the one key replaced in place or deleted (else None) — or None when
    the paths do not say (the range is then found by identity).

    Edits keep an existing object key where it is and add new keys at the end, and an array
    grows only by appends (an index set at its length), so positions follow from the paths;
    only the position of an existing key costs a lookup (``keyed``: an index of a large
    object's keys) or a scan of the keys (in C)."""
    if type(new) is dict:
        if not all(type(k) is str for k in where):
            return None
        present = [str(k) for k in where if k in old]
        added = len(new) - (len(old) - sum(1 for k in present if k not in new))
        if len(present) == 1 and not added:
            key = present[0]
            at = _position(old, key) if keyed is None else keyed.position(key)
            return at, at + 1, at + 1 if key in new else at, key
        if not present:  # only new keys: they follow every old one
            return len(old), len(old), len(new), None
        places = _positions(old, present) if keyed is None else keyed.positions(present)
        lo = min(places)
        old_hi = len(old) if added else max(places) + 1
        return lo, old_hi, old_hi + len(new) - len(old), None
    indices = [k for k in where if type(k) is int]
    if len(indices) != len(where) or len(new) < len(old):
        return None
    lo = min(min(indices), len(old))
    if lo < 0:
        return None
    grew = len(new) > len(old)
    old_hi = len(old) if grew else max(indices) + 1
    new_hi = len(new) if grew else old_hi
    if not grew and old_hi > len(old):
        return None
    return lo, old_hi, new_hi, None


class _Keyed:
    """The key index of one large object for one update: taken from ``positions`` by the root
    the update starts from, and left under the root it makes once :meth:`follow` has moved it
    on. An object without one has its keys scanned; the root that update makes is marked, and
    the next update that needs a position there builds the index (one pass over the keys, a
    few dozen scans' worth), so an object edited once is never indexed for nothing."""

    __slots__ = ("_index", "_marked", "_old", "_positions", "_root", "_scanned")

    def __init__(self, root: bytes, old: dict[str, Any], positions: Positions) -> None:
        self._positions = positions
        self._root = root
        self._old = old
        large = len(old) >= positions.min_keys
        self._index = positions.take(root) if large else None
        self._marked = large and positions.unmark(root)
        self._scanned = False

    def position(self, key: str) -> int:
        if len(self._old) < self._positions.min_keys:
            return _position(self._old, key)
        if self._index is None:
            if not self._marked:
                self._scanned = True
                return _position(self._old, key)
            self._index = self._positions.build(self._old)
        at = self._index.position(key)
        assert at is not None, "a key of the object is in its index"
        return at

    def positions(self, keys: list[str]) -> list[int]:
        """:meth:`position` of each of ``keys``: by the index where there is one (or is to be),
        else by one pass over the object's keys (see :func:`_positions`)."""
        large = len(self._old) >= self._positions.min_keys
        if not large or (self._index is None and not self._marked):
            self._scanned = self._scanned or large
            return _positions(self._old, keys)
        return [self.position(key) for key in keys]

    def follow(self, old: dict[str, Any], new: dict[str, Any], where: Within, root: bytes) -> None:
        """Move the index on by the update ``where`` describes (``old`` → ``new``, whose tree
        is ``root``): deleted keys free their slots, new keys (at the end) take the next ones."""
        index = self._index
        self._index = None
        marked, self._marked = self._marked, False
        if len(new) < self._positions.min_keys:
            return
        if index is None:
            if self._scanned or marked:
                self._positions.mark(root)
            return
        deleted = [str(k) for k in where if k in old and k not in new]
        for key in deleted:
            index.delete(key)
        added = len(new) - (len(old) - len(deleted))
        if added > 0:
            for key in _tail(new, added)[0] or ():
                index.append(key)
        if len(index) == len(new):
            self._positions.put(root, index)

    def give_back(self) -> None:
        """Leave the old root's index (taken, or built from its mark) or mark as they were
        found, for an update that did not finish: the next one needs them just the same."""
        if self._index is not None:
            self._positions.put(self._root, self._index)
            self._index = None
        elif self._marked:
            self._positions.mark(self._root)
        self._marked = False


def _position(obj: dict[str, Any], key: str) -> int:
    """Where ``key`` stands in ``obj``: a scan of the keys in C that stops at the key, without
    copying them into a list first (an object of 500,000 keys made a 4 MB list per edit)."""
    return operator.indexOf(obj, key)


_SCANS: Final = 4
"""Keys whose positions are found by a scan each; for more, one pass over the object's keys finds
them all (a scan per key made a write of thousands of keys into a large object quadratic: 3,000
deletes from a 30,000-key object, 5.6 s of scans)."""


def _positions(obj: dict[str, Any], keys: list[str]) -> list[int]:
    """Where each of ``keys`` (keys of ``obj``) stands in ``obj``."""
    if len(keys) <= _SCANS:
        return [_position(obj, key) for key in keys]
    wanted = set(keys)
    found = {key: at for at, key in enumerate(obj) if key in wanted}
    return [found[key] for key in keys]


def _tail(container: Any, count: int) -> tuple[list[str] | None, list[Any]]:
    """The last ``count`` keys and values of an object (or elements of an array), in order."""
    if type(container) is dict:
        items = list(islice(reversed(container.items()), count))[::-1]
        return [k for k, _ in items], [v for _, v in items]
    if type(container) is Sparse:
        return None, container.tail(count)
    return None, container[len(container) - count :]


def _window(
    old_keys: list[str] | None, new_keys: list[str] | None, old: list[Any], new: list[Any]
) -> tuple[int, int, int]:
    """The changed range: ``old[lo:old_hi]`` became ``new[lo:new_hi]`` (found by identity)."""
    shortest = min(len(old), len(new))
    same = list(map(operator.is_, old, new))
    if old_keys is not None and new_keys is not None:
        same = list(map(operator.and_, same, map(operator.eq, old_keys, new_keys)))
    lo = same.index(False) if False in same else shortest
    tail_same = list(map(operator.is_, reversed(old), reversed(new)))
    if old_keys is not None and new_keys is not None:
        tail_same = list(
            map(operator.and_, tail_same, map(operator.eq, reversed(old_keys), reversed(new_keys)))
        )
    tail = tail_same.index(False) if False in tail_same else shortest
    tail = min(tail, shortest - lo)
    return lo, len(old) - tail, len(new) - tail


def _splice(
    ident: bytes,
    lo: int,
    hi: int,
    make: Callable[[list[Entry]], list[Entry]] | list[Entry],
    kind: str,
    get: Get,
    nodes: dict[bytes, bytes],
) -> list[tuple[int, bytes]]:
    """Replace elements ``[lo, hi)`` under node ``ident``; the nodes (count, id) that take the
    node's place at its level (none when it is left empty, several when it overflows)."""
    node = get(ident)
    if "c" in node:
        children: list[tuple[int, bytes]] = [(int(n), _hex(c, ident)) for n, c in node["c"]]
        total = sum(n for n, _ in children)
        starts = []
        pos = 0
        for n, _ in children:
            starts.append(pos)
            pos += n
        first = _child_at(starts, children, lo, total)
        last = first if hi <= lo else _child_at(starts, children, hi - 1, total)
        out = children[:first]
        for i in range(first, last + 1):
            start, (count, child) = starts[i], children[i]
            a, b = max(lo, start) - start, min(hi, start + count) - start
            out += _splice(child, a, max(a, b), make if i == first else [], kind, get, nodes)
        out += children[last + 1 :]
        return _pack_node(out, kind, nodes)
    keys: list[str] | None = node.get("k")
    values = node["a"] if "a" in node else node.get("v")
    if type(values) is not list or (keys is not None and len(keys) != len(values)):
        raise CorruptData(f"stored node {ident.hex()} is corrupt: not a leaf")
    refs = set(node.get("r", ()))
    entries = [
        Entry(
            (b'"' + v.encode() + b'"') if i in refs else orjson.dumps(v),
            i in refs,
            0,
            None if keys is None else keys[i],
        )
        for i, v in enumerate(values)
    ]
    found = entries[lo:hi]
    new = make(found) if callable(make) else make
    entries[lo:hi] = new
    if not entries:
        return []
    out = []
    start = 0
    for end in cuts([len(e.json) for e in entries], [e.json for e in entries]):
        body = leaf_body(entries[start:end], keys is not None)
        ident_new = node_id(body)
        nodes[ident_new] = body
        out.append((end - start, ident_new))
        start = end
    return out


def _child_at(starts: list[int], children: list[tuple[int, bytes]], index: int, total: int) -> int:
    """The child holding element ``index`` (the last child for an index at the end)."""
    if index >= total:
        return len(children) - 1
    low, high = 0, len(starts) - 1
    while low < high:
        middle = (low + high + 1) // 2
        if starts[middle] <= index:
            low = middle
        else:
            high = middle - 1
    return low


def _pack_node(
    level: list[tuple[int, bytes]], kind: str, nodes: dict[bytes, bytes]
) -> list[tuple[int, bytes]]:
    """Interior nodes over ``level`` — one unless its entries outgrow a node."""
    if not level:
        return []
    size = sum(len(str(n)) + 36 for n, _ in level)
    if size <= LEAF_MAX:
        body = interior_body(kind, level)
        ident = node_id(body)
        nodes[ident] = body
        return [(sum(n for n, _ in level), ident)]
    return _pack(level, kind, nodes)


def _pack(level: list[tuple[int, bytes]], kind: str, nodes: dict[bytes, bytes]) -> list[tuple[int, bytes]]:
    """One level up: interior nodes over ``level``, cut by content as a build cuts them."""
    entries = [b"[" + str(n).encode() + b',"' + i.hex().encode() + b'"]' for n, i in level]
    upper: list[tuple[int, bytes]] = []
    start = 0
    for end in cuts([len(e) for e in entries], [i for _, i in level]):
        part = level[start:end]
        body = interior_body(kind, part)
        ident = node_id(body)
        nodes[ident] = body
        upper.append((sum(n for n, _ in part), ident))
        start = end
    return upper


def _hex(text: Any, ident: bytes) -> bytes:
    try:
        return bytes.fromhex(text)
    except (TypeError, ValueError) as exc:
        raise CorruptData(f"stored node {ident.hex()} is corrupt: bad child ref {text!r}") from exc
