"""Content-addressed trees for large JSON values (pure: no I/O).

A value whose encoding exceeds ``INLINE_MAX`` is stored as a tree of nodes. Each node is a
small JSON document named by the hash of its bytes (``node_id``), so equal subtrees are one
node wherever they occur — across revisions, members and documents — and a new version of a
value writes only the nodes that differ: the changed leaves and their ancestors.

Node shapes (all compact JSON, each well under a SQLite page or a PostgreSQL TOAST chunk):

- array leaf ``{"a": [elements], "r": [positions holding refs]}``
- object leaf ``{"k": [keys], "v": [values], "r": [positions holding refs]}``
- interior ``{"t": "a" | "o", "c": [[count, ref], …]}`` (``count``: elements or keys below)

A *ref* is the hex id of a child node. Leaves hold children inline when they are small; a
larger child container is a subtree of its own, and its ref takes its place (listed in ``r``,
so a string that merely looks like a ref is never mistaken for one).

Boundaries are content-defined: an entry closes its leaf when the hash of its own bytes falls
under a threshold proportional to its size (expected leaf ≈ ``LEAF_TARGET`` bytes), or when the
leaf reaches ``LEAF_MAX``. An entry's decision does not depend on its neighbours, so an edit
moves at most the boundaries of the entries it changes: the leaves around it are rewritten, the
rest are shared. The same rule, over child refs, cuts interior levels. The shape is a function
of the value alone (equal values give equal root ids, however they were built).
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain, islice
from typing import Any, Final

import orjson

from stateflow.doc.canonical import JSON
from stateflow.doc.select import MISSING
from stateflow.errors import CorruptStore
from stateflow.store.trail import MISSING_STEP, KeysForm, SliceEnd, SliceForm, Step, TreeRef, step_of
from stateflow.store.trail import probe as trail_probe

INLINE_MAX: Final = 2048
"""A value encoding to at most this many bytes is kept inline (in its parent, or in the member
row itself); larger containers become trees."""
LEAF_TARGET: Final = 2048
"""Expected bytes per node."""
LEAF_MAX: Final = 3072
"""A node closes here whatever the hashes say (keeps every node inside one SQLite page)."""
_SPAN: Final = 1 << 32


def node_id(body: bytes) -> bytes:
    """A node's name: 16 bytes of BLAKE2b over its bytes."""
    return hashlib.blake2b(body, digest_size=16).digest()


@dataclass(slots=True)
class Built:
    """A value as stored: ``inline`` bytes, or the ``root`` id of its tree; ``nodes`` are the
    node bodies this build produced (id → bytes; some may exist already)."""

    inline: bytes | None = None
    root: bytes | None = None
    size: int = 0
    """bytes of the value's own encoding (what reading it whole decodes)"""
    nodes: dict[bytes, bytes] = field(default_factory=dict)


@dataclass(slots=True)
class Entry:
    """One child of a container as a leaf holds it: its JSON (inline) or its ref."""

    json: bytes
    is_ref: bool
    size: int
    """encoded size of the child's value (for ``Built.size``)"""
    key: str | None = None
    """its key, in an object"""


class Builder:
    """Encodes values into nodes, remembering what it encoded by object identity.

    Values are immutable once built (every ``doc/`` function is copy-on-write), so a container
    object seen before encodes to the same entry: a new version of a large value re-encodes
    only the containers on the paths that changed, and re-hashes only their leaves.
    """

    def __init__(self, max_memo: int = 1_000_000) -> None:
        self._memo: dict[int, tuple[Any, Entry]] = {}
        self._max_memo = max_memo

    def build(self, value: JSON) -> Built:
        out = Built()
        entry = self._entry(value, out.nodes)
        out.size = entry.size
        if entry.is_ref:
            out.root = bytes.fromhex(entry.json[1:-1].decode())
        else:
            out.inline = entry.json
        return out

    def refs(self) -> dict[int, bytes]:
        """Root ids of the containers this builder made trees, by ``id()`` of the object."""
        return {
            key: bytes.fromhex(entry.json[1:-1].decode())
            for key, (_, entry) in self._memo.items()
            if entry.is_ref
        }

    def ref_of(self, value: JSON) -> bytes | None:
        """The root id this builder gave ``value`` (the very object), if it made it a tree."""
        known = self._memo.get(id(value))
        if known is None or known[0] is not value or not known[1].is_ref:
            return None
        return bytes.fromhex(known[1].json[1:-1].decode())

    def _entry(self, value: JSON, nodes: dict[bytes, bytes]) -> Entry:
        kind = type(value)
        if kind is not dict and kind is not list:
            data = orjson.dumps(value)
            return Entry(data, False, len(data))
        known = self._memo.get(id(value))
        if known is not None and known[0] is value:
            return known[1]
        if kind is dict:
            assert isinstance(value, dict)
            children = [self._entry(v, nodes) for v in value.values()]
            entry = self._container("o", list(value), children, nodes)
        else:
            assert isinstance(value, list)
            children = [self._entry(v, nodes) for v in value]
            entry = self._container("a", None, children, nodes)
        if len(self._memo) >= self._max_memo:
            self._memo.clear()  # bounded; a miss only costs re-encoding
        self._memo[id(value)] = (value, entry)
        return entry

    def _container(
        self, kind: str, keys: list[str] | None, children: list[Entry], nodes: dict[bytes, bytes]
    ) -> Entry:
        size = 2 + max(0, len(children) - 1) + sum(c.size for c in children)
        if keys is not None:
            size += sum(len(orjson.dumps(k)) + 1 for k in keys)
        if size <= INLINE_MAX and not any(c.is_ref for c in children):
            if keys is None:
                data = b"[" + b",".join(c.json for c in children) + b"]"
            else:
                data = (
                    b"{"
                    + b",".join(orjson.dumps(k) + b":" + c.json for k, c in zip(keys, children, strict=True))
                    + b"}"
                )
            return Entry(data, False, size)
        # leaves, then interior levels, until one node remains
        if keys is not None:
            for k, c in zip(keys, children, strict=True):
                c.key = k
        level: list[tuple[int, bytes]] = []  # (count, id) per node of the current level
        start = 0
        for end in cuts([len(c.json) for c in children], [c.json for c in children]):
            body = leaf_body(children[start:end], keys is not None)
            ident = node_id(body)
            nodes[ident] = body
            level.append((end - start, ident))
            start = end
        while len(level) > 1:
            entries = [b"[" + str(n).encode() + b',"' + i.hex().encode() + b'"]' for n, i in level]
            upper: list[tuple[int, bytes]] = []
            start = 0
            for end in cuts([len(e) for e in entries], [i for _, i in level]):
                body = interior_body(kind, level[start:end])
                ident = node_id(body)
                nodes[ident] = body
                upper.append((sum(n for n, _ in level[start:end]), ident))
                start = end
            level = upper
        return Entry(b'"' + level[0][1].hex().encode() + b'"', True, size)


def leaf_body(part: Sequence[Entry], is_object: bool) -> bytes:
    """A leaf's bytes: its entries' JSON (refs listed in ``r``), and their keys in an object."""
    refs = [i for i, c in enumerate(part) if c.is_ref]
    values = b",".join(c.json for c in part)
    if not is_object:
        return b'{"a":[' + values + b'],"r":' + orjson.dumps(refs) + b"}"
    keys = orjson.dumps([c.key for c in part])
    return b'{"k":' + keys + b',"v":[' + values + b'],"r":' + orjson.dumps(refs) + b"}"


def interior_body(kind: str, level: Sequence[tuple[int, bytes]]) -> bytes:
    """An interior node's bytes: ``(count, child id)`` per child."""
    entries = b",".join(b"[" + str(n).encode() + b',"' + i.hex().encode() + b'"]' for n, i in level)
    return b'{"t":"' + kind.encode() + b'","c":[' + entries + b"]}"


def cuts(sizes: Sequence[int], keys: Sequence[bytes]) -> Iterable[int]:
    """End positions of the nodes over entries of these sizes (the last is ``len(sizes)``).

    An entry ends its node when the hash of its bytes falls below a threshold proportional to
    its size, so nodes hold ``LEAF_TARGET`` bytes on average; a node never exceeds ``LEAF_MAX``
    unless one entry alone does."""
    filled = 0
    for i, size in enumerate(sizes):
        if filled and filled + size > LEAF_MAX:
            yield i
            filled = 0
        filled += size + 1
        mark = zlib.crc32(keys[i])  # boundaries need spread, not secrecy: CRC-32 is cheap
        if mark < _SPAN * min(1.0, size / LEAF_TARGET) and i + 1 < len(sizes):
            yield i + 1
            filled = 0
    if sizes:
        yield len(sizes)


Fetch = Callable[[Sequence[bytes]], Mapping[bytes, bytes]]
"""Reads node bodies by id (the store's query); a missing id is simply absent from the answer."""


Decoded = Callable[[Sequence[bytes]], Mapping[bytes, dict[str, Any]]]
"""Reads nodes by id, decoded and checked against their ids (``CorruptStore`` when one is
missing or damaged)."""


def decoding(fetch: Fetch) -> Decoded:
    """``fetch``, each node checked and decoded."""

    def get(ids: Sequence[bytes]) -> dict[bytes, dict[str, Any]]:
        found = fetch(ids)
        return {i: checked(i, found.get(i)) for i in ids}

    return get


def load(root: bytes, fetch: Fetch) -> JSON:
    """The whole value under ``root``.

    Nodes are fetched level by level (one ``fetch`` per level), each hashed and decoded once;
    the value is then assembled by extending flat lists (keys and values for an object), so the
    per-element work happens inside ``orjson`` and the C list/dict constructors, not in Python."""
    return load_decoded(root, decoding(fetch))


def load_decoded(root: bytes, nodes: Decoded) -> JSON:
    """The whole value under ``root``, its nodes read through ``nodes``."""
    return _assemble(root, fetch_tree(root, nodes))


def fetch_tree(root: bytes, nodes: Decoded) -> dict[bytes, dict[str, Any]]:
    """Every node under ``root``, decoded and checked against its id, read a level at a time."""
    decoded: dict[bytes, dict[str, Any]] = {}
    frontier = [root]
    while frontier:
        found = nodes(frontier)
        upcoming: list[bytes] = []
        for ident in frontier:
            data = decoded[ident] = found[ident]
            upcoming += _child_ids(ident, data)
        frontier = [c for c in dict.fromkeys(upcoming) if c not in decoded]
    return decoded


def checked(ident: bytes, body: bytes | None) -> dict[str, Any]:
    """A node's decoded body, after checking its bytes hash to its id (``CorruptStore`` when it
    is missing or damaged)."""
    if body is None:
        raise CorruptStore(f"node {ident.hex()} is missing")
    if node_id(body) != ident:
        raise CorruptStore(f"node {ident.hex()} is corrupt: its bytes do not match its id")
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise CorruptStore(f"node {ident.hex()} is corrupt: {exc}") from exc
    if type(data) is not dict:
        raise CorruptStore(f"node {ident.hex()} is corrupt: not an object")
    return data


def _child_ids(ident: bytes, data: dict[str, Any]) -> list[bytes]:
    if not data.get("r") and "c" not in data:
        return []  # most leaves hold no refs
    try:
        if "c" in data:
            return [_ref(child, ident) for _, child in data["c"]]
        values = data["a"] if "a" in data else data["v"]
        return [_ref(values[i], ident) for i in data.get("r", ())]
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise CorruptStore(f"node {ident.hex()} is corrupt: {exc!r}") from exc


def _assemble(root: bytes, decoded: Mapping[bytes, dict[str, Any]]) -> JSON:
    data = decoded[root]
    try:
        if data.get("t") == "o" or "k" in data:
            keys: list[str] = []
            values: list[Any] = []
            _collect(root, decoded, values, keys)
            if len(keys) != len(values):
                raise CorruptStore(f"node {root.hex()} is corrupt: keys and values differ in number")
            return dict(zip(keys, values, strict=True))
        out: list[Any] = []
        _collect(root, decoded, out, None)
        return out
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise CorruptStore(f"node {root.hex()} is corrupt: {exc!r}") from exc


def _collect(
    ident: bytes, decoded: Mapping[bytes, dict[str, Any]], values: list[Any], keys: list[str] | None
) -> None:
    """Appends the entries under ``ident`` to ``values`` (and an object's keys to ``keys``)."""
    data = decoded[ident]
    if "c" in data:
        for _, child in data["c"]:
            _collect(_ref(child, ident), decoded, values, keys)
        return
    part = data["a"] if keys is None else data["v"]
    refs = data.get("r")
    if refs:
        part = list(part)  # a node may occur twice in one tree: leave its decoded body intact
        for i in refs:
            part[i] = _assemble(_ref(part[i], ident), decoded)
    values += part
    if keys is not None:
        keys += data["k"]


def _node(ident: bytes, fetch: Fetch) -> dict[str, Any]:
    return checked(ident, fetch([ident]).get(ident))


def node(ident: bytes, fetch: Fetch) -> dict[str, Any]:
    """One node's decoded body, checked against its id (``CorruptStore`` when missing/damaged)."""
    return _node(ident, fetch)


def _ref(text: Any, ident: bytes) -> bytes:
    try:
        return bytes.fromhex(text)
    except (TypeError, ValueError) as exc:
        raise CorruptStore(f"stored node {ident.hex()} is corrupt: bad child ref {text!r}") from exc


def load_path(root: bytes, path: Sequence[str | int], fetch: Fetch) -> JSON:
    """The value at ``path`` under ``root``, reading only the nodes on the way (for an array
    index: one node per level, found by the counts; for a key: the object's leaves in turn).
    Raises ``KeyError``/``IndexError`` when the path does not exist."""
    ident = root
    depth = 0
    while True:
        data = _node(ident, fetch)
        if depth == len(path):
            return load(ident, fetch)
        seg = path[depth]
        if "c" in data:
            if data.get("t") == "a":
                if type(seg) is not int or seg < 0:
                    raise IndexError(seg)
                step = _child_at(data, seg, ident)
                if step is None:
                    raise IndexError(path[depth])
                ident, seg = step
                path = [*path[:depth], seg, *path[depth + 1 :]]
                continue
            for _, child in data["c"]:  # an object: try its leaves in order
                try:
                    return load_path(_ref(child, ident), path[depth:], fetch)
                except KeyError:
                    continue
            raise KeyError(seg)
        refs = set(data.get("r", ()))
        if "a" in data:
            if type(seg) is not int:
                raise IndexError(seg)
            values = data["a"]
            index = seg
        else:
            if type(seg) is not str or seg not in data["k"]:
                raise KeyError(seg)
            index = data["k"].index(seg)
            values = data["v"]
        value = values[index]
        if index in refs:
            ident = _ref(value, ident)
            depth += 1
            continue
        for inner in path[depth + 1 :]:  # the rest of the path inside an inline value
            if isinstance(value, dict) and isinstance(inner, str) and inner in value:
                value = value[inner]
                continue
            if isinstance(value, list) and isinstance(inner, int) and 0 <= inner < len(value):
                value = value[inner]
                continue
            raise KeyError(inner)
        return value


def children(body: bytes) -> list[bytes]:
    """The ids a node refers to (for reachability walks: check, garbage collection)."""
    data = orjson.loads(body)
    if "c" in data:
        return [bytes.fromhex(child) for _, child in data["c"]]
    values = data["a"] if "a" in data else data["v"]
    return [bytes.fromhex(values[i]) for i in data.get("r", ())]


def shape(data: dict[str, Any]) -> tuple[str, int]:
    """The kind (``"array"`` or ``"object"``) and the element or key count of the value whose
    root node is ``data`` (an interior node's counts say it without reading below)."""
    if "c" in data:
        return ("array" if data.get("t") == "a" else "object"), sum(int(n) for n, _ in data["c"])
    if "a" in data:
        return "array", len(data["a"])
    return "object", len(data["k"])


Scan = Callable[[Sequence[bytes], bytes], Mapping[bytes, dict[str, Any] | None]]
"""Of these node ids, every interior node and every leaf whose bytes may hold the needle,
decoded and checked against its id, and None for each other leaf (there, but its bytes ruled
out in the database and never sent); a missing id is absent. A leaf known already may be
answered decoded whatever it holds."""

INTERIOR_HEAD: Final = b'{"t":'
"""How an interior node's bytes begin (a leaf's begin ``{"a":`` or ``{"k":``)."""


def probe(
    root: bytes,
    path: Sequence[str | int],
    nodes: Decoded,
    fetch: Fetch,
    *,
    whole: bool = True,
    scan: Scan | None = None,
    place: Place | None = None,
) -> tuple[list[Step], JSON]:
    """The steps of ``path`` in the value under ``root`` and the value at its end (or
    MISSING), reading only the nodes on the way (``nodes``) and, at the end, the subtree
    asked for (``fetch``; with ``whole=False`` a subtree at the end is answered as its
    :class:`TreeRef`, unread). An index descends by the interior counts, one node per level;
    a key is looked up in the object's leaves, a batch at a time, never below them — with
    ``scan``, only the leaves whose bytes hold the key's JSON are sent and decoded; with
    ``place``, a key whose position it knows descends by the counts like an index (checked
    against the leaf it reaches)."""
    steps: list[Step] = []
    ident = root
    data = nodes([root])[root]
    for depth, seg in enumerate(path):
        try:
            kind, count = shape(data)
            steps.append(Step(kind, count if kind == "array" else 0))
            if (kind == "array") != (type(seg) is int):
                return steps, MISSING
            leaf: tuple[bytes, dict[str, Any]] | None = None
            if place is not None and kind == "object" and "c" in data:
                leaf, index = _placed(ident, data, str(seg), place, nodes) or (None, 0)
            if leaf is not None:
                pass
            elif scan is not None and kind == "object" and "c" in data:
                leaf, index = _key_leaf(ident, data, str(seg), scan)
            else:
                leaf, index = _leaf_of(ident, data, seg, nodes)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise CorruptStore(f"node {ident.hex()} is corrupt: {exc!r}") from exc
        if leaf is None:
            if kind == "object":
                steps.append(MISSING_STEP)
            return steps, MISSING
        owner, body = leaf
        value = (body["a"] if "a" in body else body["v"])[index]
        if index not in body.get("r", ()):
            below, found = trail_probe(value, tuple(path[depth + 1 :]))
            return [*steps, *below], found
        ident = _ref(value, owner)
        data = nodes([ident])[ident]
    try:
        kind, count = shape(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptStore(f"node {ident.hex()} is corrupt: {exc!r}") from exc
    steps.append(Step(kind, count if kind == "array" else 0))
    return steps, load(ident, fetch) if whole else TreeRef(ident)


Place = Callable[[bytes, str], int | None]
"""Where a key stands in the object whose tree has this root, when that is known (a position,
which the caller's leaf then confirms), else None."""


def _leaf_at(
    ident: bytes, data: dict[str, Any], index: int, nodes: Decoded
) -> tuple[tuple[bytes, dict[str, Any]], int] | None:
    """The leaf holding the ``index``-th entry of the container rooted at ``ident`` and the
    entry's position in it, descending by the children's counts; None when ``index`` is past
    the last child (a leaf's own bounds are the caller's to check)."""
    while "c" in data:
        step = _child_at(data, index, ident)
        if step is None:
            return None
        ident, index = step
        data = nodes([ident])[ident]
    return (ident, data), index


def _child_at(data: dict[str, Any], index: int, owner: bytes) -> tuple[bytes, int] | None:
    """One step down an interior node: the child holding its ``index``-th entry and the
    entry's index in that child, or None past the last child."""
    for count, child in data["c"]:
        if index < count:
            return _ref(child, owner), index
        index -= count
    return None


def _placed(
    ident: bytes, data: dict[str, Any], key: str, place: Place, nodes: Decoded
) -> tuple[tuple[bytes, dict[str, Any]], int] | None:
    """The leaf holding ``key`` and its position there, found from the key's position in the
    object (descending by the counts); None when the position is not known or the leaf found
    does not hold the key there."""
    index = place(ident, key)
    if index is None or index < 0:
        return None
    leaf = _leaf_at(ident, data, index, nodes)
    if leaf is None:
        return None
    (ident, data), index = leaf
    keys = data.get("k")
    if type(keys) is not list or index >= len(keys) or keys[index] != key:
        return None
    return (ident, data), index


LEAF_BATCH: Final = 64
"""Leaves of an object read per statement while looking for a key."""


def _leaf_of(
    ident: bytes, data: dict[str, Any], seg: str | int, nodes: Decoded
) -> tuple[tuple[bytes, dict[str, Any]] | None, int]:
    """The leaf holding entry ``seg`` of the container rooted at ``ident`` and its position
    there, or ``(None, 0)`` when there is none."""
    if isinstance(seg, int):
        leaf = _leaf_at(ident, data, seg, nodes) if seg >= 0 else None
        if leaf is None:
            return None, 0
        (ident, data), index = leaf
        return ((ident, data), index) if index < len(data["a"]) else (None, 0)
    if "c" not in data:
        keys = data["k"]
        return ((ident, data), keys.index(seg)) if seg in keys else (None, 0)
    level = [(ident, data)]  # an object's keys are unique: its leaves may be read in any order
    while level:
        below = [_ref(c, parent) for parent, body in level for _, c in body["c"]]
        level = []
        for first in range(0, len(below), LEAF_BATCH):
            part = below[first : first + LEAF_BATCH]
            found = nodes(part)
            for child in part:
                body = found[child]
                if "c" in body:
                    level.append((child, body))
                elif seg in body["k"]:
                    return (child, body), body["k"].index(seg)
    return None, 0


SCAN_MAX: Final = 4096
"""The most nodes one step of a key's scan asks the database about (the first asks
:data:`LEAF_BATCH`; each next one twice as many)."""


def _key_leaf(
    ident: bytes, data: dict[str, Any], key: str, scan: Scan
) -> tuple[tuple[bytes, dict[str, Any]] | None, int]:
    """The leaf holding ``key`` in the object whose (interior) root ``data`` is at ``ident``,
    and its position there; ``(None, 0)`` when there is none (see :func:`find_key`)."""
    found = find_key(ident, data, key, scan)
    if found is None:
        return None, 0
    leaf, body, index, _ = found
    return (leaf, body), index


def find_key(
    ident: bytes, data: dict[str, Any], key: str, scan: Scan
) -> tuple[bytes, dict[str, Any], int, int] | None:
    """The leaf holding ``key`` in the object whose (interior) root ``data`` is at ``ident``:
    its id and body, the key's index in it and the key's position in the object; None when
    the object does not hold it.

    Keys are kept in insertion order, so no node says where a key is; instead the database is
    asked which leaves hold the key's JSON bytes, and only those (and the interior nodes) are
    sent, checked against their ids and decoded — a value that merely contains the same bytes
    is a candidate ruled out by its keys. Each level is asked about in tree order, in batches
    that double, descending into a batch's interior nodes before asking about the next batch:
    an early key is found in a statement per level. A leaf ruled out in the database is not
    checked against its id here (``stateflow check`` walks every node); a missing node still
    fails the read. A key the object does not hold costs the interior nodes and the leaves
    whose bytes hold it, not every leaf."""
    needle = orjson.dumps(key)

    def search(children: Iterator[tuple[bytes, int]]) -> tuple[bytes, dict[str, Any], int, int] | None:
        size = LEAF_BATCH
        while part := list(islice(children, size)):
            size = min(2 * size, SCAN_MAX)
            found = scan([child for child, _ in part], needle)
            interiors: list[tuple[bytes, dict[str, Any], int]] = []
            for child, start in part:
                if child not in found:
                    raise CorruptStore(f"node {child.hex()} is missing")
                node = found[child]
                if node is None:
                    continue
                if "c" in node:
                    interiors.append((child, node, start))
                elif key in node["k"]:
                    index = node["k"].index(key)
                    return child, node, index, start + index
            if interiors:  # their children, named only as far as the batches below reach
                hit = search(chain.from_iterable(_children(*interior) for interior in interiors))
                if hit is not None:
                    return hit
        return None

    return search(_children(ident, data, 0))


def _children(owner: bytes, data: dict[str, Any], start: int) -> Iterator[tuple[bytes, int]]:
    """An interior node's children, each with the position of its first entry in the value."""
    for count, child in data["c"]:
        yield _ref(child, owner), start
        start += int(count)


def listing(
    root: bytes, start: int, limit: int, nodes: Decoded
) -> tuple[str, int, list[tuple[str | int, str, int | None, JSON]]]:
    """The kind and size of the value under ``root`` and its children ``start`` to
    ``start + limit``, each as ``(key or index, kind, size of a container or None, value —
    MISSING for a child kept as a subtree)``. Reads the nodes down to the leaves holding those
    children, found by the counts, and one node per child kept as a subtree (its root says its
    kind and size) — never a grandchild's subtree."""
    data = nodes([root])[root]
    try:
        kind, count = shape(data)
        slices: list[tuple[bytes, dict[str, Any], int, int]] = []
        _slices(root, data, max(0, start), max(0, limit), nodes, slices)
        out: list[tuple[str | int, str, int | None, JSON]] = []
        refs: list[bytes] = []
        index = max(0, start)
        for ident, body, lo, hi in slices:
            values = body["a"] if "a" in body else body["v"]
            held = set(body.get("r", ()))
            for i in range(lo, hi):
                name: str | int = body["k"][i] if "k" in body else index
                index += 1
                value = values[i]
                if i in held:
                    refs.append(_ref(value, ident))
                    out.append((name, "", None, MISSING))
                else:
                    sized = len(value) if type(value) in (dict, list) else None
                    out.append((name, step_of(value).kind, sized, value))
        heads = nodes(refs) if refs else {}
        pending = iter(refs)
        for n, entry in enumerate(out):
            if entry[1] == "":
                child_kind, size = shape(heads[next(pending)])
                out[n] = (entry[0], child_kind, size, MISSING)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise CorruptStore(f"a node under {root.hex()} is corrupt: {exc!r}") from exc
    return kind, count, out


def keys_of(root: bytes, nodes: Decoded) -> KeysForm:
    """The ``keys`` projection of the value under ``root``: an array's length from its root;
    an object's keys and their children's kinds from its leaves and one node per child kept
    as a subtree — never below them."""
    kind, count = shape(nodes([root])[root])
    if kind == "array":
        return KeysForm("array", count)
    _, _, items = listing(root, 0, count, nodes)
    return KeysForm("object", 0, {str(k): child_kind for k, child_kind, _, _ in items})


def slice_of(root: bytes, end: SliceEnd, nodes: Decoded, fetch: Fetch) -> SliceForm:
    """Elements ``end.start`` to ``end.end`` of the array under ``root`` and its length,
    reading the nodes down to the leaves that hold them and the subtrees of those elements."""
    data = nodes([root])[root]
    try:
        kind, count = shape(data)
        if kind != "array":
            return SliceForm(kind)
        slices: list[tuple[bytes, dict[str, Any], int, int]] = []
        _slices(root, data, end.start, max(0, end.end - end.start), nodes, slices)
        items: list[Any] = []
        for ident, body, lo, hi in slices:
            held = set(body.get("r", ()))
            for i in range(lo, hi):
                value = body["a"][i]
                items.append(load(_ref(value, ident), fetch) if i in held else value)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise CorruptStore(f"a node under {root.hex()} is corrupt: {exc!r}") from exc
    return SliceForm("array", count, items)


def _slices(
    ident: bytes,
    data: dict[str, Any],
    skip: int,
    take: int,
    nodes: Decoded,
    out: list[tuple[bytes, dict[str, Any], int, int]],
) -> None:
    """Appends ``(leaf id, leaf, first, end)`` for entries ``skip`` to ``skip + take`` below
    ``ident``, in order, reading only the nodes that hold them."""
    if "c" not in data:
        size = len(data["a"] if "a" in data else data["k"])
        end = min(size, skip + take)
        if skip < end:
            out.append((ident, data, skip, end))
        return
    wanted: list[tuple[bytes, int, int]] = []
    for n, child in data["c"]:
        count = int(n)
        if skip >= count:
            skip -= count
            continue
        if take <= 0:
            break
        part = min(take, count - skip)
        wanted.append((_ref(child, ident), skip, part))
        take -= part
        skip = 0
    found = nodes([w[0] for w in wanted]) if wanted else {}
    for child_id, first, part in wanted:
        _slices(child_id, found[child_id], first, part, nodes, out)
