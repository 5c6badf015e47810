"""``StateflowSaver``: LangGraph's ``BaseCheckpointSaver`` over declared-state records.

Every checkpoint is one record of the state ``langgraph_checkpoints`` (subject kind
``checkpoint``), and the pending writes of a checkpoint one record of kind ``writes``; their
subject key is ``<thread_id>/<checkpoint_ns>/<checkpoint_id in hex>`` (the thread and namespace
percent-encoded, the id as the hex digits of its UTF-8 bytes: subject order is id order, a new
checkpoint's key lands at the end of its thread's, and a thread is listed newest first by a
backward scan; see ``checkpoint_keys``, which also renames the subjects of stores written with
the earlier, inverted ids once, at the saver's open). A checkpoint record has one member, ``saved``: ``config`` names it (``thread_id``,
``checkpoint_ns``, ``checkpoint_id``, ``parent_checkpoint_id``, ``run_id``), and beside it the
checkpoint without its values (``checkpoint``), its ``metadata``, the values of the channels
this checkpoint wrote (``channel_values``, from ``new_versions``) and, for every other channel,
the id of the checkpoint of the same thread and namespace that holds the value at the version
it names (``sources``: LangGraph's blob sharing, without a third kind of record). One member,
so a write adds one member row (each row costs its key entry, its member count and its
statement; the record's JSON is the same); records written with ``config`` as a member of its
own beside ``saved``, with those four at the top, or with the names at the top too still read. A writes record keeps its writes in at most 16
members, ``p0`` … ``pf`` (a task's in the one its id hashes to), each ``{"<task_id>:<idx>":
[channel, value, task_path]}``, and nothing else (its subject key names the checkpoint; see
``pending_writes``); records of the earlier shapes (buckets ``w0`` … ``wf`` of entries naming
every field, a member ``w:<task_id>:<idx>`` per write, a ``config`` member) still read, and
the saver's next write to one puts it in the current shape. Records
are written through the states service, so each checkpoint has an audit row with its origin
(consumer ``langgraph``, the run's id).
"""

from __future__ import annotations

import builtins
import functools
import random
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import suppress
from typing import Any, Final, cast

import orjson
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from stateflow.aio import call
from stateflow.doc.canonical import checked_copy
from stateflow.doc.ops import parse_ops
from stateflow.errors import CorruptStore, InvalidInput, StoreBusy, StoreReadOnly
from stateflow.langgraph import checkpoint_keys, pending_writes
from stateflow.langgraph.checkpoint_keys import ascending, id_of
from stateflow.langgraph.codec import STRICT, Codec, strict_bytes
from stateflow.langgraph.records import OwnsStore, Records, Stale, invert
from stateflow.states import StatesService
from stateflow.states.batch import apply_items, apply_items_in_parts, erase_item
from stateflow.states.langgraph_items import CHECKPOINTS_DESCRIPTION, MAX_KEY, join, part, unpart
from stateflow.states.models import DoorContext, StateSubject, WriteOrigin
from stateflow.states.pipeline import UNCHANGED, Change, RecordWrite, ops_transform
from stateflow.store import DocKey, Document, Whole

STATE: Final = "langgraph_checkpoints"
_WRITE: Final[dict[str, Any]] = {"type": "object", "required": ["task_id", "idx", "channel", "value"]}
CHECKPOINT: Final = "checkpoint"
_NAMES: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "thread_id": {"type": "string"},
        "checkpoint_ns": {"type": "string"},
        "checkpoint_id": {"type": "string"},
        "parent_checkpoint_id": {"type": ["string", "null"]},
        "run_id": {"type": ["string", "null"]},
    },
    "required": ["thread_id", "checkpoint_ns", "checkpoint_id"],
}
WRITES: Final = "writes"
DECLARATION: Final[dict[str, Any]] = {
    "description": CHECKPOINTS_DESCRIPTION,
    "schema": {
        "type": "object",
        "properties": {
            "config": _NAMES,
            "saved": {  # (holds ``config`` too, undeclared: changing this schema would refuse
                # to re-declare over stores that have checkpoints; the saver builds it valid)
                "type": "object",
                "properties": {
                    "checkpoint": {"type": "object"},
                    "metadata": {"type": "object"},
                    "channel_values": {"type": "object"},
                    "sources": {"type": "object", "additionalProperties": {"type": "string"}},
                },
                "required": ["checkpoint", "metadata", "channel_values", "sources"],
            },
            "checkpoint": {"type": "object"},
            "metadata": {"type": "object"},
            "channel_values": {"type": "object"},
            "sources": {"type": "object", "additionalProperties": {"type": "string"}},
        },
        # (the writes records' current buckets ``p0`` … ``pf`` are undeclared, as ``saved``'s
        # ``config`` is: a pattern for them would change the schema stores with records have;
        # these two are the earlier shapes, which the saver still reads)
        "patternProperties": {
            "^w[0-9a-f]$": {"type": "object", "additionalProperties": _WRITE},
            "^w:": _WRITE,
        },
    },
    "subject_kinds": [CHECKPOINT, WRITES],
    "default_subject_kind": CHECKPOINT,
    # a checkpoint keeps the channels it did not write in an earlier one's record (``sources``):
    # only the saver trims a thread (prune, delete_for_runs, delete_thread), never the sweep by age
    "retention_exempt": True,
}
_FOUR: Final[dict[str, Any]] = {
    k: DECLARATION["schema"]["properties"][k] for k in ("checkpoint", "metadata", "channel_values", "sources")
}
_EARLIER: Final[list[dict[str, Any]]] = [
    # names and the four at the top, pending writes in an array; then a member per write
    {
        "type": "object",
        "properties": {
            **_NAMES["properties"],
            **_FOUR,
            "writes": {"type": "array", "items": {"type": "object"}},
        },
    },
    {"type": "object", "properties": {**_NAMES["properties"], **_FOUR}, "patternProperties": {"^w:": _WRITE}},
    # the names under ``config``; then the four under ``saved`` too
    {"type": "object", "properties": {"config": _NAMES, **_FOUR}, "patternProperties": {"^w:": _WRITE}},
    {
        "type": "object",
        "properties": {"config": _NAMES, "saved": DECLARATION["schema"]["properties"]["saved"], **_FOUR},
        "patternProperties": {"^w:": _WRITE},
    },
]
"""The schemas earlier versions declared: over one, the saver declares its own widened by what
that one had (a store keeps the records they allowed, which the saver still reads)."""
_PARENTS_KEPT = 1024
_RELISTS: Final = 8
"""How many times a trim lists its checkpoints again for ones put meanwhile (``_trim``)."""
_UNWRITTEN_KEPT = 16384
"""checkpoints put here whose writes record this saver has not made, at most (``_unwritten``)"""
_HEADS_KEPT = 1024
_ROOT: Final[list[list[str]]] = [[]]
"""The paths of a record written whole (shared: nobody changes them)."""
_CHECKPOINT_KEYS: Final = frozenset(("id", "channel_versions", "versions_seen"))
"""What LangGraph reads of every checkpoint it is given back."""


def _config(body: dict[str, Any]) -> dict[str, Any]:
    """What names a checkpoint record: ``saved.config``, the member ``config`` (records written
    before it moved into ``saved``), or the top (records written before ``config`` existed)."""
    config: dict[str, Any] | None = body.get("config")
    if config is None:
        saved = body.get("saved")
        config = saved.get("config") if type(saved) is dict else None
    return body if config is None else config


def _saved(body: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint record's checkpoint, metadata, channel values and sources (records written
    before ``saved`` existed carry them at the top)."""
    saved: dict[str, Any] = body.get("saved", body)
    return saved


@functools.lru_cache(maxsize=1024)
def _origin(run_id: str | None) -> WriteOrigin:
    """A write's origin, validated once per run (a frozen model the service takes as is)."""
    return WriteOrigin(consumer="langgraph", run_id=run_id)


def _invocation(config: RunnableConfig) -> str | None:
    """The run id LangChain gives the invocation (``config["run_id"]``, what its callbacks and
    tracing name the run): a write's audit row carries it where the checkpoint's metadata names
    no run. (Not the checkpoint's ``run_id``: ``delete_for_runs`` matches the metadata's, as
    LangGraph's savers do.)"""
    run_id = config.get("run_id")
    return str(run_id) if run_id else None


_THREAD_PARTS: Final = ("thread_id", "checkpoint_ns", "checkpoint_id")
"""How a refusal names a checkpoint key's parts (one holding a lone surrogate: see ``join``)."""


@functools.lru_cache(maxsize=1024)
def _thread_part(thread_id: str, ns: str) -> str:
    """A key's ``<thread_id>/<checkpoint_ns>``, encoded once per thread (every new checkpoint's
    key misses ``_key``'s cache: its id is new)."""
    return join([thread_id, ns], _THREAD_PARTS.__getitem__)


def _key_of(thread_id: str, ns: str, checkpoint_id: str) -> str:
    """A checkpoint's subject key (``StateflowSaver._key`` keeps those read again; a new
    checkpoint's is made here: its id is new, so the cache would only miss and evict)."""
    try:
        spelt = ascending(checkpoint_id)
    except UnicodeEncodeError:  # a lone surrogate: named as the thread's parts are
        checked_copy(checkpoint_id, "checkpoint_id")
        raise
    return f"{_thread_part(thread_id, ns)}/{spelt}"


def _refuse_long(key: str) -> None:
    """A checkpoint's key past the subject keys' bound refused, before anything is written: its
    thread's parts are checked when first encoded (``join``), its id only here, where a record
    would be written under it (a reader looking such a key up finds nothing, as LangGraph's)."""
    raise InvalidInput(
        f"the checkpoint's encoded subject key is {len(key)} characters long (at most {MAX_KEY}): "
        "use shorter checkpoint ids, thread ids or checkpoint namespaces"
    )


def _inverted_key(key: str) -> str:
    """A checkpoint key as a store not yet renamed may still hold it (the id inverted)."""
    thread, _, spelt = key.rpartition("/")
    return f"{thread}/{invert(id_of(spelt))}"


def _ascending_key(stored: str) -> str:
    """A stored checkpoint key, of either form, in the ascending form (the key the readers and
    maintenance name the record by while a state's keys are not all ascending)."""
    thread, _, spelt = stored.rpartition("/")
    return f"{thread}/{ascending(id_of(spelt))}"


_PAGE: Final = 200
"""Records a thread's maintenance reads at a time."""

MAINTENANCE_PART: Final = 500
"""Records a maintenance call (``delete_thread``, ``copy_thread``, a prune's erase) reads, writes
and sends at a time within its one transaction: what it holds at once (a thread of 34,000
checkpoints erased whole held ~1.1 GB), and on PostgreSQL the rows of one statement."""


def _unchanged(declaration: dict[str, Any], current: Any, origin: dict[str, Any]) -> Change:
    """The transform of a record left as it is (a source record gone before its copy)."""
    return UNCHANGED


def _delta_pending(metadata: Any) -> bool:
    """Whether a checkpoint's metadata says a ``DeltaChannel`` of it is rebuilt from its
    ancestors' writes (updates since its last snapshot; ``delta_writes_versioned``: LangGraph.js)."""
    return type(metadata) is dict and bool(
        metadata.get("counters_since_delta_snapshot") or metadata.get("delta_writes_versioned")
    )


_Learnt = tuple[dict[str, Any], dict[str, str], dict[str, Any], DocKey]
"""What a put needs of its parent checkpoint: its channel versions, the id of the checkpoint
holding each channel's value, its record's ``saved`` (which a put checks is still the
record's) and its document key."""

_HELD_KEPT = 256
"""Checkpoints whose channel values are kept in memory (the holders of later checkpoints'
unchanged channels)."""


class StateflowSaver(OwnsStore, BaseCheckpointSaver[str]):
    """A LangGraph checkpointer keeping thread state as stateflow records (sync and async).

    ``StateflowSaver.open("./agent.db")`` (or a PostgreSQL URL) opens and migrates a store; or
    pass a :class:`~stateflow.states.StatesService` you already have. The async methods run
    the same calls awaited: on the event loop over PostgreSQL's async pool (a saver opened by
    :meth:`aopen`), else on a worker thread.
    """

    def __init__(
        self,
        states: StatesService,
        *,
        state: str = STATE,
        target_name: str = "langgraph",
        serde: SerializerProtocol | None = None,
    ) -> None:
        BaseCheckpointSaver.__init__(self, serde=serde)
        self.states = states
        self.records = Records(states, state, target_name)
        self.maintenance_part = MAINTENANCE_PART
        self.records.ensure_declared(DECLARATION, _EARLIER)
        self.records.keep_whole()
        # (a checkpoint is asked for again as the next one's parent, its writes while its step
        # runs, seldom after: the store's caches hold the latest only, not a long run's all)
        self.records.store.cache_recent(self.records.state)
        self._ascending = self._keys_ascending()
        """whether every checkpoint key of the state is in the ascending form (else the readers
        list a thread by sorting its ids, and look a record up under both forms)"""
        self.codec = Codec(self.serde)
        self.context = DoorContext(door="api", actor="stateflow.langgraph")
        # what a put needs of its parent (channel versions, where each value lives), by
        # (thread, ns, id): checkpoints never change once written, so this only saves reads
        # (and the record's ``saved``, which a put checks is still the record's, and its key)
        self._parents: OrderedDict[tuple[str, str, str], _Learnt] = OrderedDict()
        # the checkpoints put here that have no writes record made here yet: their first pending
        # writes create it with no read first. A server with many threads at once puts far
        # more checkpoints between a put and its writes than ``_parents`` keeps; names only
        self._unwritten: OrderedDict[tuple[str, str, str], None] = OrderedDict()
        # the channel values of checkpoints that hold other checkpoints' unchanged channels
        self._held: OrderedDict[DocKey, dict[str, Any]] = OrderedDict()
        # by (thread, ns): its checkpoints' key and subject up to the id (``_head``)
        self._heads: dict[tuple[str, str], tuple[str, str]] = {}

    # ------------------------------------------------------------------ keys

    _key = staticmethod(functools.lru_cache(maxsize=16384)(_key_of))

    def _head(self, thread_id: str, ns: str) -> tuple[str, str]:
        """The key of a checkpoint of this thread and namespace up to its id's spelling, and
        its record's subject up to the same point (kept, bounded: a new checkpoint's id is new,
        so its key and document key are these with the id appended, not cached)."""
        heads = self._heads
        if len(heads) >= _HEADS_KEPT:
            heads.clear()
        prefix = f"{_thread_part(thread_id, ns)}/"
        made = heads[(thread_id, ns)] = (prefix, self.records.subject_head(CHECKPOINT, prefix))
        return made

    @staticmethod
    def _split(key: str) -> tuple[str, str, str]:
        thread, ns, spelt = key.split("/")
        return unpart(thread), unpart(ns), id_of(spelt)

    def _keys_ascending(self) -> bool:
        """Rename the state's checkpoint subjects still keyed by an inverted id (a store written
        before: once, in batches under the write lock, the mark recorded last); whether every
        key is now ascending. A read-only store is read as it is, in either form."""
        store, state = self.records.store, self.records.state
        key, value = checkpoint_keys.mark(state)
        if store.meta_value(key) == value:
            return True
        try:
            return store.rename_subjects(
                state, checkpoint_keys.renamed_subject, mark=(key, value), batch=checkpoint_keys.RENAME_BATCH
            )
        except StoreReadOnly:
            return False

    def _forms(self, kind: str, key: str) -> tuple[DocKey, ...]:
        """The documents ``key``'s record of ``kind`` may be: its own, and where keys are not all
        ascending yet, the inverted form's too."""
        if self._ascending:
            return (self.records.doc_key(kind, key),)
        return self.records.doc_key(kind, key), self.records.doc_key(kind, _inverted_key(key))

    def _read_forms(self, kind: str, keys: Sequence[str]) -> dict[str, Document]:
        """The records of ``kind`` under ``keys`` (ascending keys), by key: in one read, each
        under whichever form it is stored."""
        forms = {key: self._forms(kind, key) for key in keys}
        docs = self.records.store.read([k for f in forms.values() for k in f])
        found = {}
        for key, doc_keys in forms.items():
            first = docs[doc_keys[0]]
            found[key] = next((docs[k] for k in doc_keys if docs[k].body is not None), first)
        return found

    @staticmethod
    def _where(config: RunnableConfig) -> tuple[str, str]:
        conf = config["configurable"]
        return str(conf["thread_id"]), str(conf.get("checkpoint_ns", ""))

    # ------------------------------------------------------------------ reads

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id, ns = self._where(config)
        checkpoint_id = get_checkpoint_id(config)
        if checkpoint_id:
            return next(iter(self._tuples([self._key(thread_id, ns, checkpoint_id)])), None)
        if not self._ascending:  # (a thread may hold keys of both forms: its ids sorted)
            where: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
            return next(iter(self.list(where, limit=1)), None)
        prefix = f"{_thread_part(thread_id, ns)}/"
        # the newest checkpoint and the newest pending writes of the thread, together (one
        # statement on PostgreSQL), each the last of its kind's keys (a backward scan); the
        # writes are the checkpoint's when their keys match
        newest, writes = self.records.store.cached(
            ("langgraph-newest", self.records.state, self.records.target_name, prefix),
            lambda: self.records.first_under([(CHECKPOINT, prefix), (WRITES, prefix)], descending=True),
        )
        if newest is None or newest.body is None:
            return None
        key = self.records.key_of(newest.key)
        written = self.records.key_of(writes.key) if writes is not None else None
        if written is not None and written > key:  # writes of a newer checkpoint than any stored
            pending = self.records.store.read([self.records.doc_key(WRITES, key)])
            found = {key: pending[self.records.doc_key(WRITES, key)].body}
        else:
            found = {key: writes.body if writes is not None and written == key else None}
        return next(iter(self._assembled([newest.body], found)), None)

    def _tuples(self, keys: Sequence[str]) -> Iterator[CheckpointTuple]:
        """The tuples of the checkpoints under ``keys`` (missing ones skipped), in order: the
        checkpoints and their pending writes in one read."""
        records = self.records
        if not self._ascending:
            found = self._read_forms(CHECKPOINT, keys)
            pending = self._read_forms(WRITES, keys)
            return self._assembled(
                [body for k in keys if (body := found[k].body) is not None],
                {k: pending[k].body for k in keys},
            )
        checkpoints = [records.doc_key(CHECKPOINT, k) for k in keys]
        docs = records.store.read([*checkpoints, *(records.doc_key(WRITES, k) for k in keys)])
        writes = {k: docs[records.doc_key(WRITES, k)].body for k in keys}
        return self._assembled([body for k in checkpoints if (body := docs[k].body) is not None], writes)

    def _assembled(
        self, bodies: Sequence[dict[str, Any]], writes: dict[str, dict[str, Any] | None]
    ) -> Iterator[CheckpointTuple]:
        """The tuples of these checkpoint records, given their pending writes by key: the
        checkpoints holding their unchanged channels come from memory (a checkpoint never
        changes once written), those not held there in one read."""
        records = self.records
        holders: dict[DocKey, dict[str, Any]] = {}
        sourced: list[DocKey] = []
        for body in bodies:
            try:
                names = _config(body)
                thread_id, ns = names["thread_id"], names["checkpoint_ns"]
                sources = set(_saved(body).get("sources", {}).values())
            except (KeyError, TypeError, AttributeError) as exc:
                raise self._unreadable(body, exc) from exc
            for source in sources:
                doc_key = records.doc_key(CHECKPOINT, self._key(thread_id, ns, source))
                if doc_key in holders:
                    continue
                held = self._held.get(doc_key)
                if held is None:
                    sourced.append(doc_key)
                else:
                    holders[doc_key] = held
        if sourced:
            if self._ascending:
                docs = records.store.read(sourced)
            else:  # (each under whichever form it is stored)
                by_key = self._read_forms(CHECKPOINT, [records.key_of(k) for k in sourced])
                docs = {k: by_key[records.key_of(k)] for k in sourced}
            for doc_key in sourced:
                if (found := docs[doc_key].body) is not None:
                    holders[doc_key] = _saved(found).get("channel_values", {})
                    self._hold(doc_key, holders[doc_key])
        for body in bodies:
            # (a record replaced through another door passes the schema, which checks shapes
            # only: one whose checkpoint, metadata, values or pending writes do not decode is
            # refused by name, never a raw crash — whatever the serializer raises: LangGraph's
            # raises NotImplementedError for a type it does not know)
            try:
                names = _config(body)
                key = self._key(names["thread_id"], names["checkpoint_ns"], names["checkpoint_id"])
                made = self._tuple(body, writes.get(key), holders)
            except CorruptStore:
                raise
            except Exception as exc:
                raise self._unreadable(body, exc) from exc
            yield made

    def _unreadable(self, body: Any, exc: Exception) -> CorruptStore:
        try:
            names = _config(body)
            where = f"of thread {names['thread_id']!r}, checkpoint {names['checkpoint_id']!r} "
        except (KeyError, TypeError, AttributeError):
            where = ""
        return CorruptStore(
            f"a checkpoint record {where}of state {self.records.state!r}, or its pending writes, "
            "does not decode "
            f"({type(exc).__name__}: {exc}); it was not written by this saver: erase the thread's "
            "records or write the record back as it was (its audit trail keeps every revision)"
        )

    def _lost(self, thread_id: str, ns: str, checkpoint_id: str, channel: str, source: str) -> CorruptStore:
        where = f"namespace {ns!r}, " if ns else ""
        return CorruptStore(
            f"checkpoint {checkpoint_id!r} of thread {thread_id!r} ({where}state "
            f"{self.records.state!r}) keeps channel {channel!r} in checkpoint {source!r}, whose "
            "record is gone or no longer holds it (erased or replaced other than by the saver: by "
            "the retention sweep or through another door); the checkpoint cannot be read whole. "
            "Restore that record from its audit trail, or delete the thread. Trim checkpoints "
            "with the saver's prune or delete_for_runs, which first write the values of the "
            "checkpoints kept inline"
        )

    def _hold(self, doc_key: DocKey, channel_values: dict[str, Any]) -> None:
        self._held[doc_key] = channel_values
        if len(self._held) > _HELD_KEPT:
            with suppress(KeyError):  # (emptied meanwhile by another thread's erase)
                self._held.popitem(last=False)

    def _tuple(
        self, body: dict[str, Any], writes: dict[str, Any] | None, holders: dict[DocKey, dict[str, Any]]
    ) -> CheckpointTuple:
        decode = self.codec.decode
        names = _config(body)
        thread_id, ns, checkpoint_id = names["thread_id"], names["checkpoint_ns"], names["checkpoint_id"]
        # (every value decoded afresh, the caller's own: LangGraph changes the checkpoint, its
        # values and its writes, and ``saved`` is the store's cached body — ``Codec.decode``)
        saved = _saved(body)
        checkpoint: Checkpoint = decode(saved["checkpoint"])
        if type(checkpoint) is not dict or not checkpoint.keys() >= _CHECKPOINT_KEYS:
            raise ValueError(f"its checkpoint lacks {sorted(_CHECKPOINT_KEYS)}")
        values = {c: decode(v) for c, v in saved["channel_values"].items()}
        for channel, source in saved.get("sources", {}).items():
            doc_key = self.records.doc_key(CHECKPOINT, self._key(thread_id, ns, source))
            held = holders.get(doc_key)
            stored = held.get(channel) if held is not None else None
            if stored is None and doc_key in self._held:
                # held here as last seen: another process's prune may have rewritten it since,
                # with more values inline (read again, once)
                found = self.records.store.get(doc_key).body
                held = holders[doc_key] = _saved(found).get("channel_values", {}) if found is not None else {}
                self._hold(doc_key, held)
                stored = held.get(channel)
            if stored is None:
                # (its record erased other than through the saver — the retention sweep, a
                # door's erase: never a checkpoint answered without the channel)
                raise self._lost(thread_id, ns, checkpoint_id, channel, source)
            values[channel] = decode(stored)
        checkpoint["channel_values"] = values
        pending = sorted(pending_writes.pending(writes or {}), key=lambda w: writes_sort_key(*w[:3]))
        parent = names.get("parent_checkpoint_id")
        return CheckpointTuple(
            config={
                "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}
            },
            checkpoint=checkpoint,
            metadata=decode(saved["metadata"]),
            parent_config=(
                {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": parent}}
                if parent
                else None
            ),
            pending_writes=[(task_id, channel, decode(value)) for _, task_id, _, channel, value in pending],
        )

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        conf = (config or {}).get("configurable", {})
        thread_id = conf.get("thread_id")
        ns = conf.get("checkpoint_ns")
        only = conf.get("checkpoint_id")
        before_id = get_checkpoint_id(before) if before else None
        if thread_id is None:
            prefix = ""
        elif ns is None:
            prefix = f"{part(str(thread_id), 'thread_id')}/"
        else:
            prefix = f"{_thread_part(str(thread_id), str(ns))}/"
        keys: Iterator[str]
        if thread_id is not None and ns is not None and self._ascending:
            # one thread and namespace: subject order is id order, read backwards (newest first)
            start = self._key(str(thread_id), str(ns), before_id) if before_id else None
            keys = (
                self.records.key_of(k)
                for k in self.records.scan(CHECKPOINT, prefix, after_key=start, descending=True)
            )
        else:  # several, or keys of both forms: newest first by id, as LangGraph's savers list
            found = [self.records.key_of(k) for k in self.records.scan(CHECKPOINT, prefix)]
            split = sorted(((self._split(k), k) for k in found), key=lambda x: x[0][2], reverse=True)
            # (keys of both forms: a record a blocked rename left in each is listed once)
            keys = iter(
                dict.fromkeys(
                    k if self._ascending else self._key(t, n, cid)
                    for (t, n, cid), k in split
                    if before_id is None or cid < before_id
                )
            )
        yielded = 0
        while limit is None or yielded < limit:
            page = [k for _, k in zip(range(100), keys, strict=False)]
            if not page:
                return
            for tup in self._tuples(page):
                if only and tup.config["configurable"]["checkpoint_id"] != only:
                    continue
                if filter and not all(tup.metadata.get(k) == v for k, v in filter.items()):
                    continue
                yield tup
                yielded += 1
                if limit is not None and yielded >= limit:
                    return

    # ------------------------------------------------------------------ writes

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        conf = config["configurable"]  # (``_where`` and ``get_checkpoint_id`` inline)
        thread_id, ns = str(conf["thread_id"]), str(conf.get("checkpoint_ns", ""))
        parent_id = conf.get("checkpoint_id")
        checkpoint_id = checkpoint["id"]
        # (each value's keys and integers left to the record's strict encoding: ``_encoded``)
        encode = self.codec.encode_shaped
        values = checkpoint["channel_values"]
        versions = checkpoint["channel_versions"]
        inline: dict[str, Any] = {}
        for channel in new_versions:  # (loops, not comprehensions: each of those is a call)
            if channel in values:
                inline[channel] = encode(values[channel])
        sources: dict[str, str] = {}
        guard = None
        # the channels not written here (any: a comparison of the key views, in C), each kept
        # where the parent keeps it at this version, else here
        parent = None
        if parent_id and not inline.keys() >= versions.keys():
            parent = self._parents.get((thread_id, ns, parent_id)) or self._parent(thread_id, ns, parent_id)
        if parent is not None:
            parent_versions, parent_sources, parent_saved, parent_key = parent
            for channel, version in versions.items():
                if channel in inline:
                    continue
                if channel in parent_sources and parent_versions.get(channel) == version:
                    sources[channel] = parent_sources[channel]
                elif channel in values:  # no checkpoint holds it at this version: kept here
                    inline[channel] = encode(values[channel])
            if sources:
                # where the parent keeps its values was learnt here, from its record: the
                # write holds only while that record is as it was (another process's prune
                # or delete_for_runs rewrites it, erasing where its values were)
                guard = (
                    parent_key,
                    functools.partial(_holds, parent_saved, parent_sources, cast(str, parent_id)),
                )
        else:
            for channel in versions:
                if channel not in inline and channel in values:
                    inline[channel] = encode(values[channel])
        # the checkpoint without its values and the metadata: dicts made here, encoded in
        # place (only their members copied)
        bare: dict[str, Any] = dict(checkpoint)  # (in its order, without the values)
        del bare["channel_values"]
        # (a new dict, LangGraph's own savers' merge: encoded in place below)
        full_metadata = cast(dict[str, Any], get_serializable_checkpoint_metadata(config, metadata))
        run_id = full_metadata.get("run_id")
        if not isinstance(run_id, str):  # (exact: LangGraph's copy)
            run_id = None
        encoded_checkpoint = self.codec.encode_made(bare)
        saved = {
            "config": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint_id,
                "parent_checkpoint_id": parent_id,
                "run_id": run_id,
            },
            "checkpoint": encoded_checkpoint,
            "metadata": self.codec.encode_made(full_metadata),
            "channel_values": inline,
            "sources": sources,
        }
        # the key and document key made from the thread's (``_key_of``'s, ``ascending`` inline:
        # a new checkpoint's are new, so no cache of them would ever hit)
        try:
            spelt = checkpoint_id.encode().hex()
        except UnicodeEncodeError:  # a lone surrogate: named as the thread's parts are
            checked_copy(checkpoint_id, "checkpoint_id")
            raise
        head = self._heads.get((thread_id, ns)) or self._head(thread_id, ns)
        key = head[0] + spelt
        if len(key) > MAX_KEY:
            _refuse_long(key)
        origin = _origin(run_id or _invocation(config))
        if type(checkpoint_id) is not str or not (parent_id is None or type(parent_id) is str):
            self._exact(saved, values, bare, full_metadata)
            self._put_general(key, saved, origin)  # (the schema's refusal)
            doc_key = self.records.doc_key(CHECKPOINT, key)
        else:
            # (the id's hex digits need no escaping in the subject's JSON)
            doc_key = tuple.__new__(DocKey, (self.records.state, head[1] + spelt + '"]'))
            try:  # (``_encoded``'s common case, without its calls)
                encoded = orjson.dumps(saved, option=STRICT)
            except TypeError:
                encoded = self._encoded(saved, values, bare, full_metadata)
            try:
                self._write_lean(key, doc_key, saved, encoded, origin, guard)
            except Stale:
                # learnt from the parent's record as it no longer is (another process trimmed
                # the thread): forget what was learnt from any record, and keep every value of
                # this checkpoint in its own record, which depends on no other
                self._parents.clear()
                self._held.clear()
                self._unwritten.clear()
                sources = {}
                inline = {c: encode(v) for c, v in values.items()}
                saved = {**saved, "channel_values": inline, "sources": sources}
                encoded = self._encoded(saved, values, bare, full_metadata)
                self._write_lean(key, doc_key, saved, encoded, origin, None)
        # what the next put learns of this one: the channel versions (the copy the record
        # holds, where it holds the checkpoint as JSON: nobody's but this saver's and the
        # store's, which change neither), where each value is, and the values held here
        where = (thread_id, ns, checkpoint_id)
        unwritten = self._unwritten
        unwritten[where] = None
        if len(unwritten) > _UNWRITTEN_KEPT:
            with suppress(KeyError):  # (emptied meanwhile by another thread's erase)
                unwritten.popitem(last=False)
        self._remember(
            where,
            (
                bare["channel_versions"] if "json" in encoded_checkpoint else dict(versions),
                {**sources, **dict.fromkeys(inline, checkpoint_id)},
                saved,
                doc_key,
            ),
            inline,
        )
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}}

    def _encoded(
        self,
        saved: dict[str, Any],
        values: Mapping[str, Any],
        bare: dict[str, Any],
        metadata: Mapping[str, Any],
    ) -> bytes:
        """``saved``'s bytes, its values encoded by ``Codec.encode_shaped``: under ``STRICT``,
        which refuses the keys and integers ``plain`` refuses and that codec leaves to it —
        then its values (``values``' channels it holds, ``bare``, ``metadata``) are encoded
        again by ``Codec.encode`` in place, which sends those to the serializer."""
        encoded = strict_bytes(saved)
        if encoded is not None:
            return encoded
        self._exact(saved, values, bare, metadata)
        try:
            return orjson.dumps(saved)
        except TypeError:  # a lone surrogate the codec's copy kept: named, nothing written
            _refuse_checkpoint(saved)
            raise

    def _exact(
        self,
        saved: dict[str, Any],
        values: Mapping[str, Any],
        bare: dict[str, Any],
        metadata: Mapping[str, Any],
    ) -> None:
        """``saved``'s values encoded again, in place, by ``Codec.encode`` (``plain``'s checks)."""
        encode = self.codec.encode
        inline = saved["channel_values"]
        for channel in inline:
            inline[channel] = encode(values[channel])
        saved["checkpoint"] = encode(bare)
        saved["metadata"] = encode(metadata)

    def _write_lean(
        self,
        key: str,
        doc_key: DocKey,
        saved: dict[str, Any],
        encoded: bytes,
        origin: WriteOrigin,
        guard: tuple[DocKey, Callable[[Any], bool]] | None,
    ) -> None:
        """A checkpoint's record written whole (``encoded``: ``saved``'s bytes), ``guard`` (its
        parent's record) checked by the commit (:class:`Stale` if it moved, nothing written)."""
        # valid by construction: the names are strings (run_id a string or None), the codec
        # makes objects of plain JSON (JSON kept only where ``plain``, else base64 text),
        # ``sources`` names checkpoint ids. Nothing in ``saved`` is the caller's but immutable
        # leaves (the codec copies, the names are exact strings, and ``orjson`` refuses a
        # channel named by a subclass of ``str``), so the store may cache it as it is; its
        # bytes are the member's row and the change's edit (a new checkpoint: encoded once)
        # (one member: one row, one key entry, one count; the tuple made in C, without the
        # named tuple's Python ``__new__``)
        self.records.write(
            CHECKPOINT,
            key,
            tuple.__new__(Whole, ({"saved": saved}, _ROOT, {"saved": encoded}, None, False)),
            origin=origin,
            context=self.context,
            action="replace",
            general=self._put_general,
            args=(key, saved, origin),
            guard=guard,
            doc_key=doc_key,
        )

    def _put_general(self, key: str, saved: dict[str, Any], origin: WriteOrigin) -> None:
        """A checkpoint written with the same checks and audit row as ``replace`` (no record
        view back): where the lean write does not apply."""
        document = {"saved": saved}
        self.states.replace_from(
            self.records.state,
            self.records.subject(CHECKPOINT, key),
            lambda _: document,
            origin=origin,
            context=self.context,
        )

    def _remember(
        self, where: tuple[str, str, str], learnt: _Learnt, channel_values: dict[str, Any] | None = None
    ) -> None:
        """What a put needs of the checkpoint at ``where`` (thread, namespace, id) as its
        parent, and the channel values its record holds (``channel_values``: where they are
        known whole, a put's own)."""
        parents = self._parents
        parents[where] = learnt
        if len(parents) > _PARENTS_KEPT:
            with suppress(KeyError):  # (emptied meanwhile by another thread's erase)
                parents.popitem(last=False)
        if channel_values is not None:
            self._hold(learnt[3], channel_values)

    def _parent(self, thread_id: str, ns: str, checkpoint_id: str) -> _Learnt | None:
        known = self._parents.get((thread_id, ns, checkpoint_id))
        if known is not None:
            return known
        doc_key = self.records.doc_key(CHECKPOINT, self._key(thread_id, ns, checkpoint_id))
        # (as the put's write will find it: one read, held for both)
        seen = self.records.store.body_as_seen(doc_key)
        body = (
            seen[1]
            if seen is not None
            else self.records.store.get(doc_key, ["saved", "checkpoint", "channel_values", "sources"]).body
        )
        if body is None:
            return None
        saved = _saved(body)
        versions = dict(self.codec.decode(saved["checkpoint"])["channel_versions"])
        holders = {
            **saved.get("sources", {}),
            **{c: checkpoint_id for c in saved.get("channel_values", {})},
        }
        learnt = versions, holders, saved, doc_key
        self._remember((thread_id, ns, checkpoint_id), learnt)
        return learnt

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        if not writes:
            return
        conf = config["configurable"]  # (``_where`` inline)
        thread_id, ns = str(conf["thread_id"]), str(conf.get("checkpoint_ns", ""))
        checkpoint_id = str(conf["checkpoint_id"])
        # into the task's bucket member: a write rewrites that member (the writes of the tasks
        # sharing it), never the others, and adds no member name of its own
        bucket = pending_writes.bucket(task_id)
        encode = self.codec.encode
        entries = []
        paths = []
        named = True  # (every channel a string: else the schema's checks, below)
        for n, (channel, value) in enumerate(writes):
            if type(channel) is not str:
                named = False
            name = f"{task_id}:{WRITES_IDX_MAP.get(channel, n)}"
            entries.append((name, [channel, encode(value), task_path]))
            paths.append([bucket, name])
        run_id = conf.get("run_id") or (config.get("metadata") or {}).get("run_id")
        origin = _origin(str(run_id) if run_id else _invocation(config))
        key = self._key(thread_id, ns, checkpoint_id)
        if len(key) > MAX_KEY:
            _refuse_long(key)
        where, unwritten = (thread_id, ns, checkpoint_id), self._unwritten
        if not named:
            self._writes_general(key, bucket, entries, origin)
            unwritten.pop(where, None)
            return
        # valid by construction: the bucket ``p0``…``pf`` an object of write entries, each
        # named by its task id and index, holding the channel string, the codec's plain JSON
        # and the task path. The entries are new lists holding the codec's copies and exact
        # strings, so the store may cache them as they are (a task path of another type:
        # copied through JSON, as it comes back). No ``config`` member: the subject key names
        # the checkpoint (and its record holds the names)
        fresh = dict(entries)
        try:
            encoded = orjson.dumps(fresh)
        except TypeError:  # a lone surrogate the codec's copy kept: named, nothing written
            _refuse_writes(task_id, task_path, entries)
            raise
        if type(task_path) is not str:
            fresh = orjson.loads(encoded)

        self.records.write(
            WRITES,
            key,
            # (a partial, not a closure: no cell per name it reads)
            functools.partial(pending_writes.writes_whole, bucket, fresh, paths, encoded),
            origin=origin,
            context=self.context,
            action="apply",
            general=self._writes_general,
            args=(key, bucket, entries, origin),
            # a checkpoint this saver did not put or read a moment ago (another process's)
            # most likely has its writes record: read first (its first task's writes on a
            # checkpoint put here make the record, guessed new)
            exists=where not in self._parents and where not in unwritten,
        )
        if unwritten:
            unwritten.pop(where, None)  # (its record made: the next writes find it)

    def _writes_general(
        self, key: str, bucket: str, entries: Sequence[tuple[str, builtins.list[Any]]], origin: WriteOrigin
    ) -> None:
        """Pending writes set with the same checks and audit row as ``apply``: where the lean
        write does not apply. The record is put in the current shape first where it is of an
        earlier one (a ``replace`` of its converted body, only then)."""
        subject = self.records.subject(WRITES, key)
        current = self.records.store.get(self.records.doc_key(WRITES, key)).body
        if current and pending_writes.earlier(current):  # (converted as the write finds it)
            self.states.replace_from(
                self.records.state,
                subject,
                lambda found: pending_writes.converted(found or {}),
                origin=origin,
                context=self.context,
            )
        # (a regular write already held is kept, as in ``writes_whole``: set only where absent)
        ops = [
            {"op": "set", "path": [bucket, name], "value": e}
            if name.rpartition(":")[2].startswith("-")
            else {
                "op": "set",
                "path": [bucket, name],
                "value": e,
                "guard": {"path": [bucket, name], "expected": None},
            }
            for name, e in entries
        ]
        self.states.apply(self.records.state, subject, ops, origin=origin, context=self.context)

    # ------------------------------------------------------------------ thread maintenance

    def _thread_keys(self, thread_id: str, kind: str = CHECKPOINT) -> builtins.list[str]:
        """The thread's checkpoint keys, newest first within each namespace (a backward scan);
        of ``kind``'s records (``WRITES``: the checkpoints with a writes record, whether or not
        the checkpoint itself was ever put)."""
        keys = [
            self.records.key_of(k)
            for k in self.records.scan(kind, f"{part(thread_id, 'thread_id')}/", descending=True)
        ]
        if self._ascending:
            return keys
        # keys of both forms: each named by its ascending key (once, where a blocked rename left
        # a record in each), by id — the ascending form's order
        return sorted({_ascending_key(k) for k in keys}, key=lambda k: k.rsplit("/", 1), reverse=True)

    def _every_key(self, thread_id: str) -> builtins.list[str]:
        """The keys of every record of the thread: its checkpoints' and its writes records',
        one of which may have no checkpoint (its writes saved, its checkpoint's put never made:
        a run saves a step's writes in the background, and can fail or stop before the put)."""
        keys = self._thread_keys(thread_id)
        return [*keys, *(set(self._thread_keys(thread_id, WRITES)) - set(keys))]

    def _bodies(self, kind: str, keys: Sequence[str]) -> Iterator[tuple[str, dict[str, Any] | None]]:
        """The records of ``kind`` under ``keys``, in order, read a page at a time (each under
        whichever form it is stored)."""
        for start in range(0, len(keys), _PAGE):
            page = keys[start : start + _PAGE]
            docs = self._read_forms(kind, page)
            for key in page:
                yield key, docs[key].body

    def _erase(self, keys: Sequence[str]) -> None:
        """Erase checkpoints and their writes (their audit trail stays), all in one transaction:
        a call cut short erases none of them (a record already absent is left as it is). Read
        and erased ``maintenance_part`` records at a time within it (``apply_items_in_parts``):
        what is held at once is a part, however long the thread."""
        state, records = self.records.state, self.records
        # only the records there (a checkpoint without pending writes has no writes record):
        # a write naming an absent document makes its row, absent, which nothing would use
        there = [
            records.doc_key(kind, key) for kind in (CHECKPOINT, WRITES) for key in self._there(kind, keys)
        ]

        def items_of(part: Sequence[DocKey], _: object = None) -> builtins.list[RecordWrite]:
            return [erase_item(state, StateSubject.decode(k.subject)) for k in part]

        try:
            if there and not apply_items_in_parts(
                self.states,
                state,
                there,
                items_of,
                part=self.maintenance_part,
                origin={"consumer": "langgraph"},
                context=self.context,
            ):  # (a state with aliases: they are resolved, and go with their records, whole)
                items = items_of(there)
                apply_items(self.states, items, origin={"consumer": "langgraph"}, context=self.context)
        finally:
            self._parents.clear()
            self._held.clear()
            self._unwritten.clear()

    def _there(self, kind: str, keys: Sequence[str]) -> builtins.list[str]:
        """The stored keys of the records of ``kind`` under ``keys`` (checkpoint keys) that are
        there, in their order: each key's own; where keys are not all ascending, whichever form
        it is stored in — both where a blocked rename left one record in each, the inverted
        first."""
        stored = self._stored(kind, keys)
        return [s for key in keys for s in stored.get(key, ())]

    def _stored(self, kind: str, keys: Sequence[str]) -> dict[str, builtins.list[str]]:
        """Where the records of ``kind`` under ``keys`` are stored, by key (as ``_there``): from
        a listing of their threads' records, not a read of each (which would cache every
        record's heads, tens of thousands for a long thread)."""
        threads = sorted({key.split("/", 1)[0] for key in keys})
        wanted = set(keys)
        found: dict[str, builtins.list[str]] = {}
        for t in threads:
            for doc_key in self.records.scan(kind, f"{t}/"):
                stored = self.records.key_of(doc_key)
                key = stored if self._ascending else _ascending_key(stored)
                if key in wanted:
                    found.setdefault(key, []).append(stored)
        for forms in found.values():
            forms.sort(key=lambda s: not s.endswith("g"))  # (an ascending key never ends so)
        return found

    def _materialize(
        self, keys: Sequence[str], dropped: set[tuple[str, str, str]], *, parents: bool = False
    ) -> int:
        """Rewrite the kept checkpoints that name checkpoints about to go (in one transaction):
        those whose values live in one, with every value inline; or, ``parents``, once those
        are gone, those whose parent one was, with no parent (as LangGraph's
        ``PostgresSaver.prune`` leaves them), so no ``parent_config`` names a checkpoint that
        is gone. How many records it rewrote."""
        items: builtins.list[dict[str, Any]] = []
        # (a record in the inverted form is rewritten there, and in both where it is in both)
        stored = {} if self._ascending else self._stored(CHECKPOINT, keys)
        for key, doc in builtins.list(self._bodies(CHECKPOINT, keys)):
            if doc is None:
                continue
            names = _config(doc)
            thread_id, ns = names["thread_id"], names["checkpoint_ns"]
            orphaned = parents and (thread_id, ns, names.get("parent_checkpoint_id")) in dropped
            moved = not parents and any(
                (thread_id, ns, s) in dropped for s in _saved(doc).get("sources", {}).values()
            )
            if not orphaned and not moved:
                continue
            rewritten: dict[str, Any] = {"saved": dict(doc["saved"])} if "saved" in doc else {}
            if moved:
                tup = next(iter(self._tuples([key])))
                values = tup.checkpoint["channel_values"]
                inline = {
                    "channel_values": {c: self.codec.encode(v) for c, v in values.items()},
                    "sources": {},
                }
                (rewritten["saved"] if "saved" in doc else rewritten).update(inline)
            if orphaned:  # (where the record keeps its names: ``_config``'s three places)
                if "config" in doc:
                    rewritten["config"] = {**doc["config"], "parent_checkpoint_id": None}
                elif "saved" in doc and "config" in doc["saved"]:
                    rewritten["saved"]["config"] = {**doc["saved"]["config"], "parent_checkpoint_id": None}
                else:
                    rewritten["parent_checkpoint_id"] = None
            items.extend(
                {
                    "state": self.records.state,
                    "subject": self.records.subject(CHECKPOINT, at),
                    "ops": [{"op": "set", "path": [k], "value": v} for k, v in rewritten.items()],
                }
                for at in stored.get(key, [key])
            )
        if items:
            apply_items(self.states, items, origin={"consumer": "langgraph"}, context=self.context)
        return len(items)

    def _trim(
        self, docs: dict[str, dict[str, Any]], gone: set[str], listed: Callable[[], Iterable[str]]
    ) -> None:
        """Erase the checkpoints ``gone`` of those in ``docs`` (by key), the others kept whole:
        first the kept ones whose values live in one going are rewritten with their values
        inline (one transaction), then the others are erased (one more): cut short between
        the two, the thread reads whole, as it was. Then the kept ones whose parent went are
        left with no parent (one more: cut short before it, their parent link names a
        checkpoint that is gone, as LangGraph reads a missing parent).

        Another process may put a checkpoint meanwhile, a child of one kept, keeping a channel
        where that one keeps it — in a checkpoint going (its put checks only its parent's
        record, rewritten only once it has committed), or a child of one going (a run going on
        from the head while an earlier run's checkpoints are deleted). So the checkpoints are
        listed again (``listed``: the keys of the threads trimmed) and the new ones rewritten
        the same way where they need it, until a listing finds nothing to rewrite: every record
        then keeps nothing in a checkpoint going, and a put learning from one it saw before
        its rewrite fails its parent's check and keeps its values itself. A checkpoint put after
        the last listing as the child of one going (a fork from a checkpoint being trimmed) is
        not followed, as LangGraph's own prune does not follow it. Still rewriting after 8
        listings: refused, ``StoreBusy``, nothing erased (what was rewritten reads the same).

        Refused, ``NotImplementedError`` as LangGraph's ``PostgresSaver.prune`` refuses, nothing
        erased, where a kept checkpoint has a ``DeltaChannel`` value still to be rebuilt from
        the writes of an ancestor going: such a channel keeps only a sentinel in a checkpoint
        (a value of its own only every ``snapshot_frequency`` updates) and LangGraph replays
        the ancestors' pending writes to rebuild it; the saver cannot, it has no reducer."""
        self._refuse_severed(docs, gone)
        dropped = {self._split(k) for k in gone}
        self._materialize([k for k in docs if k not in gone], dropped)
        for _ in range(_RELISTS):  # (listed once at least: a put since the first listing)
            new = [k for k in listed() if k not in docs and k not in gone]
            more = {k: body for k, body in self._bodies(CHECKPOINT, new) if body is not None}
            docs = {**docs, **more}
            self._refuse_severed(docs, gone)
            if not self._materialize(builtins.list(more), dropped):
                break
        else:
            raise StoreBusy(
                f"new checkpoints kept coming while {len(gone)} were trimmed; nothing was erased: "
                "trim again once the thread's run is over",
                retry_after=1,
            )
        self._erase([k for k in docs if k in gone])
        # only once they are gone: a trim stopped before (refused, cut short) cut no link; read
        # again, the kept ones whose parent went only (``docs`` says which: a value's rewrite
        # never moves a parent)
        orphaned = []
        for key, doc in docs.items():
            names = _config(doc)
            if (
                key not in gone
                and (names["thread_id"], names["checkpoint_ns"], names.get("parent_checkpoint_id")) in dropped
            ):
                orphaned.append(key)
        if orphaned:
            self._materialize(orphaned, dropped, parents=True)

    def _refuse_severed(self, docs: dict[str, dict[str, Any]], gone: set[str]) -> None:
        """``NotImplementedError`` where a checkpoint of ``docs`` kept has a ``DeltaChannel``
        value to rebuild from a checkpoint ``gone`` (see :meth:`_trim`)."""
        parent = {}
        for key, doc in docs.items():
            names = _config(doc)
            parent[key] = names.get("parent_checkpoint_id")
        severed = []
        for key in docs:
            if key in gone or not _delta_pending(self.codec.decode(_saved(docs[key])["metadata"])):
                continue
            thread_id, ns, _ = self._split(key)
            at = parent[key]
            while at:  # its ancestors: any going?
                above = self._key(thread_id, ns, at)
                if above in gone:
                    severed.append(thread_id)
                    break
                at = parent.get(above)
        if severed:
            raise NotImplementedError(
                "the saver cannot trim checkpoints a kept one's DeltaChannel is rebuilt from "
                f"(threads {sorted(set(severed))}): delete the thread, or prune it with "
                'strategy="delete"'
            )

    def delete_thread(self, thread_id: str) -> None:
        self._erase(self._every_key(str(thread_id)))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        if isinstance(run_ids, str):  # (each of its characters a run id: refused, as ``prune``'s)
            raise TypeError("run_ids must be a sequence of run IDs, not a str")
        wanted = {str(r) for r in run_ids}
        if not wanted:
            return
        docs: dict[str, dict[str, Any]] = {}
        gone: set[str] = set()
        keys = [self.records.key_of(k) for k in self.records.scan(CHECKPOINT, "")]
        if not self._ascending:  # (each named by its ascending key, once)
            keys = builtins.list(dict.fromkeys(_ascending_key(k) for k in keys))
        for key, body in self._bodies(CHECKPOINT, keys):
            if body is not None:
                docs[key] = body
                if _config(body).get("run_id") in wanted:
                    gone.add(key)
        if gone:
            threads = sorted({self._split(k)[0] for k in gone})
            self._trim(docs, gone, lambda: [k for t in threads for k in self._thread_keys(t)])

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Every checkpoint of the thread and its pending writes, under the target thread, in one
        transaction: a copy cut short leaves no target thread at all, never part of one. Read and
        written ``maintenance_part`` records at a time within it (``apply_items_in_parts``):
        what is held at once is a part, and on PostgreSQL each part's rows are one statement."""
        source, target = str(source_thread_id), str(target_thread_id)
        records = self.records
        keys = self._every_key(source)  # (a writes record whose checkpoint is not put too)
        copies: dict[DocKey, tuple[str, str]] = {}  # each target record → (kind, source key)
        for kind in (CHECKPOINT, WRITES):
            for key in self._there(kind, keys):  # (of a record in both forms, the ascending last: read first)
                _, ns, checkpoint_id = self._split(key)
                copies[records.doc_key(kind, self._key(target, ns, checkpoint_id))] = (kind, key)

        def sources(part: Sequence[DocKey]) -> builtins.list[DocKey]:
            return [records.doc_key(*copies[t]) for t in part]

        def items_of(part: Sequence[DocKey], docs: Mapping[DocKey, Document]) -> builtins.list[RecordWrite]:
            # each source record as read with its part (not cached: a thread of tens of
            # thousands would fill the member cache with values nobody reads again)
            return [self._copied(t, docs[records.doc_key(*copies[t])].body, target) for t in part]

        if not copies:
            return
        # every record in one transaction, however many (the published batch's bound is on what
        # one request may ask): a copy cut short leaves no part of the thread behind
        if not apply_items_in_parts(
            self.states,
            records.state,
            builtins.list(copies),
            items_of,
            part=self.maintenance_part,
            beside=sources,
            origin={"consumer": "langgraph"},
            context=self.context,
        ):  # (a state with aliases: they are resolved, and the copy made whole)
            every = builtins.list(copies)
            read = records.store.read(sources(every))
            apply_items(
                self.states, items_of(every, read), origin={"consumer": "langgraph"}, context=self.context
            )

    def _copied(self, target_key: DocKey, body: dict[str, Any] | None, target: str) -> RecordWrite:
        """The item writing ``body``, a record of the source thread, as ``target_key``'s record
        of the target thread (nothing, where the source record is gone meanwhile)."""
        subject = StateSubject.decode(target_key.subject)
        if body is None:
            return RecordWrite(self.records.state, subject, _unchanged)
        if "config" in body:
            copied = {**body, "config": {**body["config"], "thread_id": target}}
        elif type(saved := body.get("saved")) is dict and "config" in saved:
            copied = {**body, "saved": {**saved, "config": {**saved["config"], "thread_id": target}}}
        elif "thread_id" in body:  # (names at the top)
            copied = {**body, "thread_id": target}
        else:  # a writes record: its subject key names it
            copied = body
        ops = parse_ops([{"op": "set", "path": [k], "value": v} for k, v in copied.items()])
        return RecordWrite(self.records.state, subject, ops_transform(ops))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if isinstance(thread_ids, str):  # (each of its characters a thread: refused, as LangGraph's)
            raise TypeError("thread_ids must be a sequence of thread IDs, not a str")
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r} (keep_latest or delete)")
        for thread_id in thread_ids:
            if strategy == "delete":
                self._erase(self._every_key(str(thread_id)))
                continue
            # (a writes record without its checkpoint stays: its checkpoint's put may be on its
            # way, the run having saved the step's writes first — LangGraph's own prune keeps it)
            keys = self._thread_keys(str(thread_id))
            newest: dict[str, str] = {}
            for key in keys:  # newest first within each namespace
                newest.setdefault(key.rsplit("/", 1)[0], key)
            gone = set(keys) - set(newest.values())
            if gone:
                docs = {k: body for k, body in self._bodies(CHECKPOINT, keys) if body is not None}
                self._trim(docs, gone, functools.partial(self._thread_keys, str(thread_id)))

    def get_next_version(self, current: str | int | None, channel: None) -> str:
        # the format of LangGraph's own savers: a zero-padded counter, then a random tail
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(current.split(".")[0])
        return f"{current_v + 1:032}.{random.random():016}"

    # ------------------------------------------------------------------ async: the same calls, awaited
    # (on the event loop over PostgreSQL's async pool, else on a worker thread: see stateflow.aio)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await call(self.states.store, self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found = await call(
            self.states.store, lambda: list(self.list(config, filter=filter, before=before, limit=limit))
        )
        for tup in found:
            yield tup

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await call(self.states.store, self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await call(self.states.store, self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await call(self.states.store, self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await call(self.states.store, self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await call(self.states.store, self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await call(self.states.store, self.prune, thread_ids, strategy=strategy)


def _refuse_checkpoint(saved: dict[str, Any]) -> None:
    """Raise InvalidJSON naming the place in a checkpoint's JSON that orjson refused (a lone
    surrogate: the codec keeps plain JSON as it is, and the encoding is its only test), as the
    store's check names it. Walked only after the encoding failed: a put pays for no walk."""
    checked_copy(saved["config"], "config")
    checked_copy(_json_of(saved["checkpoint"]), "checkpoint")
    checked_copy(
        {channel: _json_of(v) for channel, v in saved["channel_values"].items()}, "checkpoint.channel_values"
    )
    checked_copy(_json_of(saved["metadata"]), "metadata")


def _refuse_writes(task_id: str, task_path: Any, entries: Sequence[tuple[str, builtins.list[Any]]]) -> None:
    """:func:`_refuse_checkpoint` for pending writes: the place named in ``put_writes``'s
    ``writes`` (a pair's channel ``[0]``, its value ``[1]``), or the task's id or path."""
    checked_copy(task_id, "task_id")
    checked_copy(task_path, "task_path")
    checked_copy([[channel, _json_of(value)] for _, (channel, value, _) in entries], "writes")


def _json_of(stored: dict[str, Any]) -> Any:
    """The plain JSON a codec's encoding keeps (its serializer's base64 text: nothing to name)."""
    return stored.get("json")


def _holds(saved: dict[str, Any], holders: dict[str, str], checkpoint_id: str, body: Any) -> bool:
    """Whether a checkpoint record (``body``) still keeps its values where ``holders`` says (as
    learnt from its ``saved``): the same object as last seen here (no walk), else by content."""
    if type(body) is not dict:
        return False
    now = body.get("saved", body)  # (``_saved`` inline: a put's guard)
    if now is saved:
        return True
    return {**now.get("sources", {}), **{c: checkpoint_id for c in now.get("channel_values", {})}} == holders
