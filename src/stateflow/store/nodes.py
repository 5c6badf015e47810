"""Tree nodes in the database: reading a member's tree, the node lookups of an update, and the
reachability walk that ``stateflow check`` and garbage collection share.

Every node is checked against its id (the hash of its bytes) when it is read, so a missing or
damaged node fails the read closed (``CorruptStore``: `error[corrupt-store]`) instead of answering wrongly.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import orjson

from stateflow.doc.canonical import JSON
from stateflow.errors import CorruptData, CorruptStore
from stateflow.store import tree
from stateflow.store.tx import Tx

BATCH: Final = 500
"""Node ids per lookup statement."""


def fetch_bodies(tx: Tx, ids: Iterable[bytes]) -> dict[bytes, bytes]:
    """The stored bytes of these nodes (a missing one is simply absent), in few statements."""
    wanted = list(dict.fromkeys(ids))
    found: dict[bytes, bytes] = {}
    for start in range(0, len(wanted), BATCH):
        part = wanted[start : start + BATCH]
        rows = tx.all(f"SELECT id, body FROM nodes WHERE id IN ({','.join('?' * len(part))})", part)
        found.update((bytes(i), bytes(b)) for i, b in rows)
    return found


def fetch_holding(tx: Tx, ids: Iterable[bytes], needle: bytes, holds_sql: str) -> dict[bytes, bytes | None]:
    """Of these nodes, the bytes of the interior ones and of the leaves whose bytes contain
    ``needle``; None for every other leaf (found, its bytes left in the database); a missing id
    is absent (``tree.Scan``). ``holds_sql``: the backend's test that ``body`` contains the
    parameter."""
    wanted = list(dict.fromkeys(ids))
    found: dict[bytes, bytes | None] = {}
    for start in range(0, len(wanted), BATCH):
        part = wanted[start : start + BATCH]
        rows = tx.all(
            f"SELECT id, CASE WHEN substr(body, 1, {len(tree.INTERIOR_HEAD)}) = ? OR {holds_sql} "
            f"THEN body END FROM nodes WHERE id IN ({','.join('?' * len(part))})",
            [tree.INTERIOR_HEAD, needle, *part],
        )
        found.update((bytes(i), None if b is None else bytes(b)) for i, b in rows)
    return found


NODE_CACHE_MAX: Final = 8192
"""Decoded nodes kept for path reads and tree updates (~2 KiB of JSON each)."""
WRITTEN_MAX: Final = 256
"""At most this many nodes of one commit enter the cache (an update writes a dozen or so)."""


class NodeCache:
    """Decoded nodes by id, least recently used first out. A node's id is the hash of its
    bytes, so an entry never goes stale; only nodes checked against their ids enter."""

    def __init__(self, max_nodes: int = NODE_CACHE_MAX) -> None:
        self.max_nodes = max_nodes
        self._nodes: OrderedDict[bytes, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def reader(self, tx: Tx, what: str) -> tree.Decoded:
        """Nodes by id through this cache, the misses read in ``tx`` (``CorruptData`` naming
        ``what`` when one is missing or damaged)."""

        def get(ids: Sequence[bytes]) -> dict[bytes, dict[str, Any]]:
            out, misses = self._held(ids)
            if misses:
                found = fetch_bodies(tx, misses)
                try:
                    read = {i: tree.checked(i, found.get(i)) for i in misses}
                except CorruptData as exc:
                    raise type(exc)(f"stored {what} is corrupt: {exc}") from exc
                out.update(read)
                self._keep(read)
            return out

        return get

    def scanner(self, tx: Tx, what: str, holds_sql: str) -> tree.Scan:
        """A key's scan of an object's nodes (``tree.Scan``) through this cache: nodes held here
        are answered from it, the others asked about in ``tx`` (``fetch_holding``); the nodes
        sent are checked, decoded and kept."""

        def scan(ids: Sequence[bytes], needle: bytes) -> dict[bytes, dict[str, Any] | None]:
            held, misses = self._held(ids)
            out: dict[bytes, dict[str, Any] | None] = dict(held)
            if misses:
                found = fetch_holding(tx, misses, needle, holds_sql)
                try:
                    read = {i: tree.checked(i, body) for i, body in found.items() if body is not None}
                except CorruptData as exc:
                    raise type(exc)(f"stored {what} is corrupt: {exc}") from exc
                out.update((i, read.get(i)) for i in found)
                self._keep(read)
            return out

        return scan

    def _held(self, ids: Sequence[bytes]) -> tuple[dict[bytes, dict[str, Any]], list[bytes]]:
        """The nodes of ``ids`` held here (marked recently used) and the ids that are not."""
        out: dict[bytes, dict[str, Any]] = {}
        misses = []
        with self._lock:
            for ident in ids:
                node = self._nodes.get(ident)
                if node is None:
                    misses.append(ident)
                else:
                    self._nodes.move_to_end(ident)
                    out[ident] = node
        return out, misses

    def _keep(self, read: Mapping[bytes, dict[str, Any]]) -> None:
        with self._lock:
            self._nodes.update(read)
            while len(self._nodes) > self.max_nodes:
                self._nodes.popitem(last=False)

    def written(self, bodies: Mapping[bytes, bytes]) -> None:
        """Nodes a committed transaction wrote (their ids were computed from these bytes, so
        they need no check): the next write to the same member walks them first."""
        if not bodies or len(bodies) > WRITTEN_MAX:
            return  # a fresh build of a large value: not what the next write walks
        decoded = {ident: orjson.loads(body) for ident, body in bodies.items()}
        with self._lock:
            self._nodes.update(decoded)
            while len(self._nodes) > self.max_nodes:
                self._nodes.popitem(last=False)

    def peek(self, ident: bytes) -> dict[str, Any] | None:
        """The node if it is cached (no statement: a write staged with no transaction)."""
        with self._lock:
            node = self._nodes.get(ident)
            if node is not None:
                self._nodes.move_to_end(ident)
            return node

    def getter(self, tx: Tx, what: str) -> Callable[[bytes], dict[str, Any]]:
        """One node by id through this cache (what a tree update walks: root to leaf)."""
        read = self.reader(tx, what)
        return lambda ident: read([ident])[ident]

    def clear(self) -> None:
        with self._lock:
            self._nodes.clear()


class Generations:
    """The decoded nodes of the trees loaded since the last :meth:`turn` and of those loaded
    before it: loading versions of a tree one after another (a replay of a document's history)
    decodes only the nodes a version does not share with the one before — path copying
    rewrites a few nodes per change — and holds at most two generations of nodes."""

    def __init__(self) -> None:
        self.previous: dict[bytes, dict[str, Any]] = {}
        self.current: dict[bytes, dict[str, Any]] = {}

    def turn(self) -> None:
        self.previous, self.current = self.current, {}

    def reader(self, tx: Tx) -> tree.Decoded:
        def get(ids: Sequence[bytes]) -> dict[bytes, dict[str, Any]]:
            known = {i: n for i in ids if (n := self.current.get(i) or self.previous.get(i)) is not None}
            found = fetch_bodies(tx, [i for i in ids if i not in known])
            # a node is checked against its id when first decoded; ids name their bytes
            out = {i: known[i] if i in known else tree.checked(i, found.get(i)) for i in ids}
            self.current.update(out)
            return out

        return get


def load_tree(tx: Tx, root: bytes, what: str, nodes: Generations | None = None) -> JSON:
    """The whole value under ``root``: its nodes read level by level (one statement per
    ``BATCH`` nodes), each checked against its id once (``nodes``: decoded nodes kept
    between loads)."""
    try:
        if nodes is not None:
            return tree.load_decoded(root, nodes.reader(tx))
        return tree.load(root, lambda ids: fetch_bodies(tx, ids))
    except CorruptData as exc:
        raise type(exc)(f"stored {what} is corrupt: {exc}") from exc


def getter(tx: Tx, what: str) -> Callable[[bytes], dict[str, Any]]:
    """A node's decoded body by id, read when first asked (what a tree update walks)."""
    seen: dict[bytes, dict[str, Any]] = {}

    def get(ident: bytes) -> dict[str, Any]:
        node = seen.get(ident)
        if node is None:
            try:
                node = seen[ident] = tree.node(ident, lambda ids: fetch_bodies(tx, ids))
            except CorruptData as exc:
                raise type(exc)(f"stored {what} is corrupt: {exc}") from exc
        return node

    return get


def all_roots(tx: Tx) -> list[bytes]:
    """Every tree root the store holds: members, snapshots, and the large edit values the
    history keeps as refs."""
    roots = [
        bytes(r[0])
        for r in tx.all(
            "SELECT root FROM members WHERE root IS NOT NULL "
            "UNION SELECT root FROM snapshot_members WHERE root IS NOT NULL"
        )
    ]
    for (held,) in tx.all("SELECT roots FROM change_edits WHERE roots IS NOT NULL"):
        held = bytes(held)
        roots += [held[i : i + 16] for i in range(0, len(held), 16)]
    return roots


def walk(tx: Tx, roots: Iterable[bytes], problem: Callable[[str], None] | None = None) -> set[bytes]:
    """Every node reachable from ``roots``, each read and checked once. A missing or damaged
    node is reported to ``problem`` (or raises ``CorruptData`` when there is none) and its
    subtree is not walked."""
    reached: set[bytes] = set()
    frontier = list(dict.fromkeys(roots))
    while frontier:
        found = fetch_bodies(tx, frontier)
        upcoming: list[bytes] = []
        for ident in frontier:
            reached.add(ident)
            try:
                body = found.get(ident)
                if body is None:
                    raise CorruptStore(f"node {ident.hex()} is missing")
                upcoming += [c for c in _children(ident, body) if c not in reached]
            except CorruptData as exc:
                if problem is None:
                    raise
                problem(str(exc))
        frontier = list(dict.fromkeys(upcoming))
    return reached


def _children(ident: bytes, body: bytes) -> list[bytes]:
    if tree.node_id(body) != ident:
        raise CorruptStore(f"node {ident.hex()} is corrupt: its bytes do not match its id")
    try:
        return tree.children(body)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        raise CorruptStore(f"node {ident.hex()} is corrupt: {exc}") from exc
