"""``StateflowStore``: LangGraph's ``BaseStore`` (long-term memory) over declared-state records.

Every item is one record of the state ``langgraph_store``, subject kind ``item``, subject key
``<label>/<label>/…/<key>`` (each part percent-encoded), tenant ``agent/<target_name>``
(``langgraph`` unless given). The record holds ``{namespace, key, value, created_at,
expires_at, ttl_minutes}``; ``updated_at`` is the item's last put: the record's own last write,
or, once a TTL refresh rewrote the record, the ``updated_at`` that refresh kept in it. Writes go through
the states service — schema-checked, audited with their origin (consumer ``langgraph``) — so
an item's history, audit trail and as-of reads are those of any other record, on every door.
"""

from __future__ import annotations

import builtins
import functools
import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal, cast

import orjson
from langchain_core.runnables.config import var_child_runnable_config
from langgraph.store.base import (
    NOT_PROVIDED,
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    NotProvided,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    _ensure_ttl,
    _validate_namespace,
    validate_op_namespace,
)

from stateflow.aio import call
from stateflow.doc.canonical import MAX_DEPTH, check, checked_copy
from stateflow.errors import CorruptStore, InvalidInput, InvalidJSON
from stateflow.langgraph.codec import NOT_PLAIN, plain, plain_edits, walk
from stateflow.langgraph.records import OwnsStore, Records
from stateflow.states import StatesService, StateSubject
from stateflow.states.batch import apply_items, erase_item
from stateflow.states.langgraph_items import (
    KEPT_SUBJECT_KEYS,
    MAX_TTL_MINUTES,
    STATE,
    KeyTooLong,
    item_refusal,
    join,
    subject_key,
)
from stateflow.states.models import DoorContext, WriteOrigin
from stateflow.store import Whole
from stateflow.store.base import utc_text
from stateflow.store.model import DocKey

ITEM: Final = "item"
DECLARATION: Final[dict[str, Any]] = {
    "description": "LangGraph store items: one record per namespace and key",
    "schema": {
        "type": "object",
        "properties": {
            "namespace": {"type": "array", "items": {"type": "string"}},
            "key": {"type": "string"},
            "value": {"type": "object"},
            "created_at": {"type": "string"},
            "expires_at": {"type": ["string", "null"]},
            "ttl_minutes": {"type": ["number", "null"]},
        },
        "required": ["namespace", "key", "value", "created_at"],
    },
    "subject_kinds": [ITEM],
    "default_subject_kind": ITEM,
    # the states door refuses a record the adapter could not read back as an item, under
    # whatever name the store was given (``stateflow.states.langgraph_items``)
    "record_rule": "langgraph_item",
}
_PAGE = 500
_log = logging.getLogger("stateflow.langgraph")
_COMPARISONS: Final = ("$gt", "$gte", "$lt", "$lte")
_OPERATORS: Final = ("$eq", "$ne", *_COMPARISONS)
CHECKED_REVISIONS_MAX: Final = 65536
"""record revisions a store remembers the item check of (then it forgets them all)"""
_Refresh = dict[str, tuple[dict[str, Any], str | None]]
"""The items a batch's reads refresh the TTL of: by subject key, the record as read and its
last write's time."""
NAMESPACES_CHECKED_MAX: Final = 4096
"""namespaces a store remembers LangGraph's checks passed for (then it forgets them all)"""


class StateflowStore(OwnsStore, BaseStore):
    """LangGraph's ``BaseStore`` keeping items as stateflow records (sync and async).

    ``StateflowStore.open("./agent.db")`` (or a PostgreSQL URL) opens and migrates a store; or
    pass a :class:`~stateflow.states.StatesService`. ``ttl`` takes LangGraph's ``TTLConfig``
    (``default_ttl`` and ``refresh_on_read``, checked here; expired items read as absent, and
    :meth:`sweep_ttl` erases them); a TTL is None or minutes in ``(0, MAX_TTL_MINUTES]``. Semantic search (``index``) is not offered: ``query`` is
    ignored, as LangGraph's stores do without an index.
    """

    supports_ttl: bool = True

    def __init__(
        self,
        states: StatesService,
        *,
        state: str = STATE,
        target_name: str = "langgraph",
        ttl: TTLConfig | None = None,
    ) -> None:
        self.ttl_config = _checked_config(ttl)  # (refused before the declaration is written)
        self.states = states
        self.records = Records(states, state, target_name)
        self.records.ensure_declared(DECLARATION)
        self.records.keep_whole()
        self.context = DoorContext(door="api", actor="stateflow.langgraph")
        self._outside = WriteOrigin(consumer="langgraph")  # validated once: the service takes it as is
        self._namespaces_checked: set[tuple[str, ...]] = set()
        """namespaces of strings that passed LangGraph's checks (``put`` checks each once)"""
        self._checked_revisions: dict[tuple[DocKey, int | None], str | None] = {}
        """each record revision's :func:`item_refusal` (None: an item), by key and the seq that
        wrote it (a revision's body never changes; a seq is never given again, even to a record
        deleted with its state and made anew): a listing checks every record it reads"""

    # ------------------------------------------------------------------ subjects

    @staticmethod
    def subject_key(namespace: tuple[str, ...], key: str) -> str:
        """The subject key of an item: its namespace labels and key, percent-encoded, ``/``-joined."""
        return subject_key(tuple(namespace), key)

    def subject(self, namespace: tuple[str, ...], key: str) -> dict[str, str]:
        """The full stateflow subject of an item (for the states API, HTTP, CLI)."""
        return self.records.subject(ITEM, self.subject_key(namespace, key))

    # ------------------------------------------------------------------ batch

    def batch(self, ops: Iterable[Op]) -> builtins.list[Result]:
        """Reads first (as LangGraph's SQL stores do), then the puts — the last put of a
        (namespace, key) wins — in one transaction whatever their number (every put is checked
        before any is written, a refused one named by its index in ``ops``; an erase, a ``None``
        value, is a write of its own, through the one erase path)."""
        ops = builtins.list(ops)
        several = len(ops) > 1
        for n, op in enumerate(ops):
            validate_op_namespace(op)
            if isinstance(op, PutOp):
                if op.value is not None and several:  # (one put: made so where its write refuses it)
                    value = as_json(op.value)
                    if value is not op.value:
                        op = ops[n] = op._replace(value=value)
                _check_put(op, f"ops[{n}]" if several else None)
        results: builtins.list[Result] = [None] * len(ops)
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        refresh: _Refresh = {}
        now = datetime.now(UTC)
        for n, op in enumerate(ops):
            if isinstance(op, GetOp):
                results[n] = self._get(op, now, refresh)
            elif isinstance(op, SearchOp):
                results[n] = self._search(op, now, refresh)
            elif isinstance(op, ListNamespacesOp):
                results[n] = self._list_namespaces(op, now)
            elif isinstance(op, PutOp):
                namespace = op.namespace
                where = (namespace if type(namespace) is tuple else tuple(namespace), op.key)
                puts.pop(where, None)
                # (a namedtuple's ``_replace`` costs a few µs: only when the namespace is no tuple)
                puts[where] = op if where[0] is namespace else op._replace(namespace=where[0])
            else:
                raise ValueError(f"unknown store operation {op!r}")
        if refresh:
            self._refresh(refresh, now)
        if puts:
            # (a delete of a key longer than any item's deletes nothing)
            written = [op for op in puts.values() if op.value is not None or not _unaddressable(op)]
            if written:
                self._put(written, now)
        return results

    def put(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: Mapping[str, Any],
        index: Literal[False] | builtins.list[str] | None = None,
        *,
        ttl: float | NotProvided | None = NOT_PROVIDED,
    ) -> None:
        """LangGraph's ``put`` — its checks, then what :meth:`batch` does with one put — without
        the batch's generality (a list of ops told apart by kind, the labels checked again)."""
        if type(self).batch is not StateflowStore.batch:  # a subclass's batch sees every op
            BaseStore.put(self, namespace, key, value, index, ttl=ttl)
            return
        # what BaseStore.put checks (TTLs are supported): once per namespace of strings, whose
        # checks only read its labels' text (an unhashable label goes to the checks, refused)
        try:
            checked = namespace in self._namespaces_checked
        except TypeError:
            checked = False
        if not checked:
            _validate_namespace(namespace)
            self._checked(namespace)
        # (no TTL given nor configured: none, without the two calls that say so)
        ttl = (
            None
            if ttl is NOT_PROVIDED and not self.ttl_config
            else _checked_ttl(_ensure_ttl(self.ttl_config, ttl))
        )
        # (the tuple made at once: the named tuple's class makes it through a Python call)
        op = tuple.__new__(PutOp, (namespace, str(key), value, index, ttl))
        if type(namespace) is not tuple:
            op = op._replace(namespace=tuple(namespace))
        if isinstance(value, dict):  # one item written (``_put``'s one put, without its loop)
            # (no time taken: ``_document`` takes it only for what it stamps, a new item's
            # creation or an expiry — an item replaced without a TTL needs none)
            self._put_one(op, None, self._run_origin())
        elif op.value is not None or not _unaddressable(op):  # (a delete, or the refusal)
            self._put([op], datetime.now(UTC))

    def _checked(self, namespace: tuple[str, ...]) -> None:
        """Remember that ``namespace`` passed LangGraph's checks, if it is a tuple of strings
        (a subclass's text could change behind an equal hash), bounded."""
        if type(namespace) is tuple and all(type(label) is str for label in namespace):
            if len(self._namespaces_checked) >= NAMESPACES_CHECKED_MAX:
                self._namespaces_checked.clear()
            self._namespaces_checked.add(namespace)

    async def abatch(self, ops: Iterable[Op]) -> builtins.list[Result]:
        """``batch``, awaited: on the event loop over PostgreSQL's async pool (a store opened
        by :meth:`aopen`), else on a worker thread."""
        ops = builtins.list(ops)
        return await call(self.states.store, self.batch, ops)

    # ------------------------------------------------------------------ reads

    @staticmethod
    def _live(data: dict[str, Any], now: datetime) -> bool:
        # (only on records ``item_refusal`` passed: their times parse)
        expires = data.get("expires_at")
        return expires is None or datetime.fromisoformat(expires) > now

    @staticmethod
    def _item(
        data: dict[str, Any], updated_at: str | None, cls: type[Item] = Item, *, own: bool = False
    ) -> Any:
        # the caller's own copy (``own``: ``data`` already is one)
        value = data["value"] if own else orjson.loads(orjson.dumps(data["value"]))
        created = datetime.fromisoformat(data["created_at"])
        updated_at = _last_put(data, updated_at)
        updated = datetime.fromisoformat(updated_at) if updated_at else created
        namespace = tuple(data["namespace"])
        if cls is SearchItem:
            return SearchItem(namespace, data["key"], value, created, updated)
        return Item(value=value, key=data["key"], namespace=namespace, created_at=created, updated_at=updated)

    def _get(self, op: GetOp, now: datetime, refresh: _Refresh) -> Item | None:
        try:
            subject_key = self.subject_key(op.namespace, op.key)
        except KeyTooLong:  # (longer than any item's: none has it)
            return None
        record = self.states.read(self.records.state, self.subject(op.namespace, op.key))
        if record is None:
            return None
        data = record["data"]
        why = item_refusal(data, subject_key)
        if why is not None:
            raise CorruptStore(_refusal(self.records.doc_key(ITEM, subject_key), why))
        if not self._live(data, now):
            return None
        if op.refresh_ttl and data.get("ttl_minutes") is not None:
            refresh[subject_key] = (data, record["updated_at"])
        item: Item = self._item(data, record["updated_at"], own=True)  # states.read copied it
        return item

    def _search(self, op: SearchOp, now: datetime, refresh: _Refresh) -> builtins.list[SearchItem]:
        if op.limit < 0 or op.offset < 0:
            raise ValueError(
                f"search limit and offset are at least 0, got limit={op.limit} offset={op.offset}"
            )
        if op.filter:
            check_filter(op.filter)
        try:
            prefix = (
                f"{join(op.namespace_prefix, 'namespace_prefix[{}]'.format)}/" if op.namespace_prefix else ""
            )
        except KeyTooLong:  # (longer than any item's: none is under it)
            return []
        wanted = op.offset + op.limit
        page: builtins.list[tuple[dict[str, Any], str | None]] = []
        if op.limit == 0:
            return []
        for data, at in self._newest_first(prefix):
            if self._live(data, now) and (not op.filter or matches(data["value"], op.filter)):
                page.append((data, at))
                if len(page) >= wanted:
                    break
        page = page[op.offset :]
        if op.refresh_ttl:
            for data, at in page:
                if data.get("ttl_minutes") is not None:
                    refresh[self.subject_key(tuple(data["namespace"]), data["key"])] = (data, at)
        return [self._item(data, at, SearchItem) for data, at in page]

    def _newest_first(self, prefix: str) -> tuple[tuple[dict[str, Any], str | None], ...]:
        """The items under a subject key prefix, last written first (as LangGraph's SQL stores
        order a search) — kept until anything commits, on stores that can tell."""

        def build() -> tuple[tuple[dict[str, Any], str | None], ...]:
            found = []
            checked = self._checked_revisions
            for doc in self.records.documents(ITEM, prefix):
                if not doc.body:
                    continue
                # a record another door wrote out of shape is left out and named, once per
                # listing (kept until anything commits), not a crash of every reader
                revision = (doc.key, doc.seq)
                if revision in checked:
                    why = checked[revision]
                else:
                    why = item_refusal(doc.body, self.records.key_of(doc.key))
                    if doc.seq is not None:
                        if len(checked) >= CHECKED_REVISIONS_MAX:
                            checked.clear()  # bounded; a miss only checks the record again
                        checked[revision] = why
                if why is not None:
                    _log.warning("%s", _refusal(doc.key, why))
                    continue
                found.append((doc.body, doc.at))
            found.sort(key=lambda x: _last_put(*x) or x[0]["created_at"], reverse=True)
            return tuple(found)

        return self.records.store.cached(
            ("langgraph-items", self.records.state, self.records.target_name, prefix), build
        )

    def _list_namespaces(self, op: ListNamespacesOp, now: datetime) -> builtins.list[tuple[str, ...]]:
        """The namespaces that hold a live item (one whose every item expired is not listed, as
        its items read as absent)."""
        conditions = op.match_conditions or ()
        prefix = ""
        for condition in conditions:  # a literal prefix narrows the scan
            if condition.match_type == "prefix" and condition.path and "*" not in condition.path:
                try:
                    prefix = f"{join(condition.path, (condition.match_type + '[{}]').format)}/"
                except KeyTooLong:  # (longer than any item's: none is under it)
                    return []
                break
        seen: set[tuple[str, ...]] = set()
        for data, _ in self._newest_first(prefix):
            if not self._live(data, now):
                continue
            namespace = tuple(data["namespace"])
            if all(_namespace_matches(namespace, c) for c in conditions):
                seen.add(namespace if op.max_depth is None else namespace[: op.max_depth])
        ordered = sorted(seen, key=".".join)
        return ordered[op.offset : op.offset + op.limit]

    # ------------------------------------------------------------------ writes

    def _run_origin(self) -> WriteOrigin:
        """The write's origin; inside a LangGraph run, with its thread, node and run id."""
        config = var_child_runnable_config.get()  # (what ``get_config`` reads, without its raise)
        if not config:  # not called from inside a graph
            return self._outside
        metadata = config.get("metadata") or {}
        configurable = config.get("configurable") or {}
        thread_id = configurable.get("thread_id")
        node = metadata.get("langgraph_node")
        run_id = config.get("run_id") or metadata.get("run_id")
        if not run_id:  # a node's config has none: LangGraph's runtime carries the invocation's
            info = getattr(configurable.get("__pregel_runtime"), "execution_info", None)
            run_id = getattr(info, "run_id", None)
        return _graph_origin(
            str(run_id) if run_id else None,
            None if thread_id is None else str(thread_id),
            None if node is None else str(node),
        )

    def _put(self, puts: Sequence[PutOp], now: datetime) -> None:
        origin = self._run_origin()
        # several puts: the items as they are, read together (one put reads nothing: its write
        # keeps the creation time inside it, and the item's keys are needed for nothing else)
        current = None
        if len(puts) > 1:
            keys = {
                (op.namespace, op.key): self.records.doc_key(ITEM, self.subject_key(op.namespace, op.key))
                for op in puts
            }
            found = self.records.store.read(builtins.list(keys.values()))
            current = {where: found[key].body for where, key in keys.items()}
        items: builtins.list[Any] = []
        for op in puts:
            if op.value is None:
                if current is None:  # one put: one write
                    self.states.erase(
                        self.records.state,
                        self.subject(op.namespace, op.key),
                        origin=origin,
                        context=self.context,
                    )
                else:  # in the batch's transaction (through a fold, as an erase; absent: no write)
                    items.append(erase_item(self.records.state, self.subject(op.namespace, op.key)))
                continue
            if not isinstance(op.value, dict) and isinstance(op.value, Mapping):
                # (a read-only view, a ``UserDict``: stored as the object it is — a ``put`` of
                # one comes here too, through its call for anything but a dict)
                op = op._replace(value=as_json(op.value))
            if not isinstance(op.value, dict):
                raise ValueError(f"a store value must be a dict, got {type(op.value).__name__}")
            if current is None:  # one put: one write, the creation time kept inside it
                self._put_one(op, now, origin)
            else:
                before = current[(op.namespace, op.key)]
                document = _document(op, now, before)
                ops = [{"op": "set", "path": [k], "value": v} for k, v in document.items()]
                # (a refresh's, kept in the record: this put is the last now — removed whether
                # or not the read above saw one, as a refresh may commit after it)
                ops.append({"op": "remove", "path": ["updated_at"]})
                items.append(
                    {"state": self.records.state, "subject": self.subject(op.namespace, op.key), "ops": ops}
                )
        # a LangGraph batch may hold any number of puts: all of them, erases included, in one
        # transaction, so that a batch cut short (a close, a failure of the store) writes none
        if items:
            apply_items(self.states, items, origin=origin, context=self.context)

    def _put_one(self, op: PutOp, now: datetime | None, origin: WriteOrigin) -> None:
        """One item written whole, its creation time kept (``now`` for a new item: made text
        only then); its record built once, against the body it replaces (``_owned``)."""
        if type(op.key) is not str:
            self._put_general(op, now, origin)  # (the schema's refusal)
            return
        # valid by construction once plain: LangGraph checked the namespace's labels are
        # strings, the key is one, the value an object (above), the times text, the TTL a
        # number or None; checked plain as every replace is (the same refusal), and copied so
        # that no caller's object ends up in what the store caches (``_owned``)
        # (the namespace a tuple already: ``put`` and ``batch`` made it one; the kept subject key
        # read here, without a call: a C cache's call makes an argument tuple and hashes it)
        subject = KEPT_SUBJECT_KEYS.get((op.namespace, op.key))
        if subject is None:  # (a lone surrogate in the namespace or key: refused by its place)
            subject = subject_key(op.namespace, op.key)
        try:
            self.records.write(
                ITEM,
                subject,
                functools.partial(_owned, op, now),
                origin=origin,
                context=self.context,
                action="replace",
                general=self._put_general,
                args=(op, now, origin),
            )
        except InvalidJSON:
            # mappings other than dicts inside (an ``OrderedDict``, a ``Counter``): objects, as
            # LangGraph's stores keep them — written again as dicts (nothing was written)
            value = as_json(op.value)
            if value is not op.value:
                self._put_one(op._replace(value=value), now, origin)
                return
            # the codec's copy leaves a lone surrogate to the store's encoder, which refuses it
            # unnamed: named here as the check names it (what else it refused, re-raised)
            checked_copy(_document(op, now, None), "document")
            raise

    def _put_general(self, op: PutOp, now: datetime | None, origin: WriteOrigin) -> None:
        """An item written with the same checks and audit row as ``replace`` (no record view
        back): where the lean write does not apply."""
        self.states.replace_from(
            self.records.state,
            self.subject(op.namespace, op.key),
            functools.partial(_document, op, now),
            origin=origin,
            context=self.context,
        )

    def _refresh(self, refresh: _Refresh, now: datetime) -> None:
        """Move each read item's expiry to ``now`` plus its TTL — only where the record still
        has the expiry it was read with (each op guarded on it): a put or delete that came in
        between keeps what it wrote (a put without a TTL is not given one, a deleted item is
        not written again). The refresh keeps the item's ``updated_at``, its last put, as
        LangGraph's stores do: the record keeps it in its body once a refresh rewrote it."""
        items = []
        for key, (data, at) in refresh.items():
            guard = {"path": ["expires_at"], "expected": data.get("expires_at")}
            expires = utc_text(now + timedelta(minutes=data["ttl_minutes"]))
            ops: builtins.list[dict[str, Any]] = [
                {"op": "set", "path": ["expires_at"], "value": expires, "guard": guard}
            ]
            last_put = _last_put(data, at)
            if last_put is not None and data.get("updated_at") != last_put:
                ops.append({"op": "set", "path": ["updated_at"], "value": last_put, "guard": guard})
            items.append(
                {"state": self.records.state, "subject": self.records.subject(ITEM, key), "ops": ops}
            )
        # (any number: a batch may read more items than the published batch's bound)
        apply_items(
            self.states,
            items,
            origin={"consumer": "langgraph", "meta": {"ttl": "refresh"}},
            context=self.context,
        )

    def sweep_ttl(self) -> int:
        """Erase every expired item (the audit trail stays); return how many this call erased.
        Each only while it is still the revision found expired: an item put again since (by
        another process, say) keeps what that put wrote, and of two sweeps at once each counts
        only what it erased."""
        now = datetime.now(UTC)
        erased = 0
        for doc in self.records.documents(ITEM, ""):
            if doc.body is None or item_refusal(doc.body, self.records.key_of(doc.key)) is not None:
                continue  # (a record out of shape: named by the readers, not erased here)
            if self._live(doc.body, now):
                continue
            if self.states.erase_unchanged(
                self.records.state,
                StateSubject.decode(doc.key.subject),
                doc.revision,
                origin={"consumer": "langgraph", "meta": {"ttl": "expired"}},
                context=self.context,
            ):
                erased += 1
        return erased

    async def asweep_ttl(self) -> int:
        return await call(self.states.store, self.sweep_ttl)


_TTL_KEYS: Final = ("default_ttl", "refresh_on_read", "omit_expired", "sweep_interval_minutes")


def _checked_ttl(ttl: Any, what: str = "ttl") -> float | None:
    """``ttl`` if it is None (no expiry) or a number of minutes more than 0 and at most
    :data:`MAX_TTL_MINUTES`, else ``ValueError``: a TTL that could not be honoured was dropped
    (a string — the item kept forever), failed in the time arithmetic, or wrote an item
    expired at once."""
    if ttl is None:
        return None
    if type(ttl) is bool or not isinstance(ttl, int | float) or not 0 < ttl <= MAX_TTL_MINUTES:
        shown = repr(ttl) if isinstance(ttl, int | float) else f"a {type(ttl).__name__}"
        raise ValueError(
            f"{what} is a number of minutes more than 0 and at most {MAX_TTL_MINUTES} "
            f"(100 years), or None for no expiry; got {shown}"
        )
    return ttl if type(ttl) is int or type(ttl) is float else float(ttl)  # (a subclass: plain JSON)


def _checked_config(config: Any) -> TTLConfig | None:
    """A store's ``TTLConfig``, checked when the store is made (its ``default_ttl`` as a put's
    TTL; a misspelt key would be silently ignored, so it is refused)."""
    if config is None:
        return None
    if not isinstance(config, Mapping):
        raise ValueError(f"ttl is a TTLConfig (a dict) or None, got a {type(config).__name__}")
    unknown = sorted(str(k) for k in config if k not in _TTL_KEYS)
    if unknown:
        raise ValueError(f"ttl holds unknown keys {unknown} (known: {', '.join(_TTL_KEYS)})")
    _checked_ttl(config.get("default_ttl"), "ttl['default_ttl']")
    for flag in ("refresh_on_read", "omit_expired"):
        if flag in config and type(config[flag]) is not bool:
            raise ValueError(f"ttl[{flag!r}] is true or false, got {config[flag]!r}")
    sweep = config.get("sweep_interval_minutes")
    if sweep is not None and (type(sweep) is bool or not isinstance(sweep, int | float) or not sweep > 0):
        raise ValueError(f"ttl['sweep_interval_minutes'] is a number of minutes more than 0, got {sweep!r}")
    checked = cast(TTLConfig, dict(config))  # (the store's own copy: its keys checked above)
    if "default_ttl" in checked:
        checked["default_ttl"] = _checked_ttl(checked["default_ttl"])
    return checked


def _unaddressable(op: PutOp) -> bool:
    """Whether the put's key is longer than any item's once encoded (a delete of it: nothing)."""
    try:
        subject_key(tuple(op.namespace), op.key)
    except KeyTooLong:
        return True
    return False


_JSON_LEAVES: Final = frozenset((str, int, float, bool, type(None)))
"""The leaves :func:`as_json` keeps as they are (exact types: a subclass is converted)."""


def as_json(value: Any, depth: int = 0) -> Any:
    """``value`` as LangGraph's SQL stores keep it — they encode a value with orjson (or psycopg's
    JSON) and hand back the JSON they stored — at any depth: a mapping that is not a ``dict``
    (an ``OrderedDict``, a ``Counter``, a read-only view, a ``UserDict``) made a ``dict``, a
    tuple a list, and any other leaf orjson encodes (an enum, a ``str`` or ``int`` subclass, a
    ``datetime``, a ``UUID``, a dataclass) the JSON it encodes to (an enum's value, a
    datetime's ISO 8601 text). ``value`` itself where it holds none. A float that is not finite
    is kept, so that the check refuses it where orjson would write ``null``; so is a leaf orjson
    refuses (a set, bytes), and anything past the depth any record may have."""
    kind = type(value)
    if kind in _JSON_LEAVES or depth > MAX_DEPTH:
        return value
    if kind is dict:
        made: dict[Any, Any] | None = None
        for k, v in value.items():
            c = as_json(v, depth + 1)
            if c is not v:
                if made is None:
                    made = dict(value)
                made[k] = c
        return value if made is None else made
    if kind is list:
        items: list[Any] | None = None
        for n, v in enumerate(value):
            c = as_json(v, depth + 1)
            if c is not v:
                if items is None:
                    items = list(value)
                items[n] = c
        return value if items is None else items
    if isinstance(value, Mapping):
        return {k: as_json(v, depth + 1) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [as_json(v, depth + 1) for v in value]
    if isinstance(value, float):  # (a float subclass: its value, finite or not, for the check)
        return float(value)
    try:
        return orjson.loads(orjson.dumps(value))
    except (TypeError, orjson.JSONDecodeError):
        return value  # (refused by the check, named by its place)


def _check_put(op: PutOp, where: str | None) -> None:
    """Refuse a put of a batch its write would refuse, before anything of the batch is written
    (its erases are writes of their own), named by its index: ``where`` (``ops[150]``) prefixes
    the refusal; None — a batch of one put — leaves its value to the write's own check."""
    try:
        if type(op.key) is not str:
            raise ValueError(f"a store key must be a string, got {type(op.key).__name__}")
        try:
            subject_key(tuple(op.namespace), op.key)  # its encoded length (kept for the write)
        except KeyTooLong:
            if op.value is not None:  # (a delete of it deletes nothing)
                raise
        _checked_ttl(op.ttl)
        if op.value is not None:
            if not isinstance(op.value, dict):
                raise ValueError(f"a store value must be a dict, got {type(op.value).__name__}")
            if where is not None:
                check(op.value, "value", 1)  # (where the record holds it: one level down)
    except (ValueError, InvalidInput) as exc:
        if where is None:
            raise
        raise type(exc)(f"{where}: {exc}") from exc


def _last_put(data: dict[str, Any], written_at: str | None) -> str | None:
    """An item's ``updated_at``: its last put — the time its record keeps once a TTL refresh
    rewrote it, else the record's last write (``written_at``)."""
    kept = data.get("updated_at")
    return kept if type(kept) is str else written_at


def _document(op: PutOp, now: datetime | None, before: dict[str, Any] | None) -> dict[str, Any]:
    """The record of a put's item (its value an object) with the creation time ``before``
    holds, else ``now`` (None: the time is taken here, only where the record stamps one).

    An item written again names the namespace and key it had (its subject key encodes them):
    where ``before`` holds equal ones, its own objects are kept, so the write's diff passes
    them by identity instead of comparing them (a list of strings equal to another is
    identical to it: a string equals only a string)."""
    ttl = op.ttl  # (checked by ``put`` and ``batch``: a number of minutes, or None)
    namespace: list[str] = builtins.list(op.namespace)
    key = op.key
    if not before or "created_at" not in before:
        if now is None:
            now = datetime.now(UTC)
        created = utc_text(now)
    else:
        created = before["created_at"]
        try:  # (one written out of shape through another door is repaired)
            _from_iso(created)
        except (TypeError, ValueError):
            created = utc_text(now or datetime.now(UTC))
        held = before.get("namespace")
        if type(held) is list and held == namespace:
            namespace = held
        if before.get("key") == key:
            key = before["key"]
    return {
        "namespace": namespace,
        "key": key,
        "value": op.value,
        "created_at": created,
        "expires_at": utc_text((now or datetime.now(UTC)) + timedelta(minutes=ttl))
        if ttl is not None
        else None,
        "ttl_minutes": ttl,
    }


@functools.lru_cache(maxsize=1024)
def _graph_origin(run_id: str | None, thread_id: str | None, node: str | None) -> WriteOrigin:
    """A write's origin inside a run, validated once per run, thread and node (a frozen model
    the service takes as is)."""
    meta = {k: v for k, v in (("thread_id", thread_id), ("node", node)) if v is not None}
    return WriteOrigin(consumer="langgraph", run_id=run_id, meta=meta or None)


def _owned(op: PutOp, now: datetime | None, before: dict[str, Any] | None) -> Whole:
    """An item's new body — its record, the creation time kept (:func:`_document`, built once
    here) — as the store's own copy, with its edits against ``before`` where it has one. The
    codec's walk checks, copies and diffs it in one pass (what it accepts, ``check`` does: its
    integers and depth are narrower; its copy is the one a JSON round trip gives; its edits are
    the diff's; the record is the copy, filled in place); else ``check`` refuses or passes it,
    and one copy in C (the store diffs that)."""
    if before is not None and op.ttl is None:
        rewritten = _rewritten(op, before)
        if rewritten is not None:
            return rewritten
    kept = _document(op, now, before)
    if before is None:
        owned = plain(kept)
        if owned is not NOT_PLAIN:
            return Whole(owned, [[]], rewritten=True)
    else:
        made = plain_edits(kept, before)
        if made is not None:
            return Whole(made[0], [[]], None, made[1], rewritten=True)
    return Whole(checked_copy(kept, "document"), [[]], rewritten=True)


_from_iso: Final = datetime.fromisoformat


def _rewritten(op: PutOp, before: dict[str, Any]) -> Whole | None:
    """:func:`_owned` of an item written again without a TTL over a record in shape holding
    none either — every field but its value as it was — without the general walk: the record
    :func:`_document` makes (``before``'s own namespace, key and creation time) and the edits
    :func:`plain_edits` gives (its value's, and only those: the other fields are ``before``'s
    own objects, which its walk passes by identity). None where anything else holds (another
    field set, a field repaired or refused): the general way decides."""
    try:  # (its six fields, and no other: six of them found in six)
        if len(before) != 6 or before["expires_at"] is not None or before["ttl_minutes"] is not None:
            return None
        namespace, key, created, was = (
            before["namespace"],
            before["key"],
            before["created_at"],
            before["value"],
        )
    except KeyError:
        return None
    if (
        type(namespace) is not list
        or key != op.key
        or type(key) is not str
        or namespace != list(op.namespace)
    ):
        return None
    try:  # (one written out of shape through another door is repaired: the general way)
        _from_iso(created)
    except (TypeError, ValueError):
        return None
    value = op.value
    edits: list[Any] = []
    if value is not was:  # (the stored value itself: no edit, as the walk passes it)
        value = walk(value, was, ("value",), 1, edits)  # (as ``plain_edits`` walks a member)
        if value is NOT_PLAIN:
            return None
    record = {
        "namespace": namespace,
        "key": key,
        "value": value,
        "created_at": created,
        "expires_at": None,
        "ttl_minutes": None,
    }
    # (the tuple made at once: a keyword to the named tuple's class makes a dict per call)
    return tuple.__new__(Whole, (record, [[]], None, {"value": edits} if edits else {}, True))


def _refusal(key: DocKey, why: str) -> str:
    return (
        f"{key} does not hold a LangGraph item: {why} "
        "(put the item again through the store, which writes it back in shape, or erase the record)"
    )


# ---------------------------------------------------------------------- filters

_MISSING: Final = object()


def _at(value: Any, dotted: str) -> Any:
    for name in dotted.split("."):
        if not isinstance(value, dict) or name not in value:
            return _MISSING
        value = value[name]
    return value


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _compare(actual: Any, op: str, expected: Any) -> bool:
    if op == "$eq":
        return actual is not _MISSING and _equal(actual, expected)
    if op == "$ne":
        return actual is not _MISSING and not _equal(actual, expected)
    if op not in _COMPARISONS:
        raise ValueError(f"unsupported filter operator {op!r} (supported: $eq $ne $gt $gte $lt $lte)")
    # numbers compare as numbers and strings as strings; anything else never matches
    if not ((_number(actual) and _number(expected)) or (type(actual) is str and type(expected) is str)):
        return False
    if op == "$gt":
        return bool(actual > expected)
    if op == "$gte":
        return bool(actual >= expected)
    if op == "$lt":
        return bool(actual < expected)
    return bool(actual <= expected)


def _contains(actual: Any, expected: Any) -> bool:
    """A plain filter value: a nested object matches when it holds every key given, each
    passing its own condition (an operator object among them: ``{"meta": {"score": {"$gt":
    3}}}``), as the in-memory store does; ``None`` matches a null or a missing field
    (``{"archived_at": None}`` finds the items never archived, as LangGraph's in-memory and
    SQLite stores find them); anything else by :func:`_equal` (a missing field matches nothing
    else)."""
    if expected is None:
        return actual is None or actual is _MISSING
    if actual is _MISSING:
        return False
    if isinstance(expected, dict) and isinstance(actual, dict):
        return all(_passes(actual.get(k, _MISSING), v) for k, v in expected.items())
    return _equal(actual, expected)


def _is_operators(condition: Any) -> bool:
    """Whether a filter condition is an operator object (``{"$gt": 3, "$lt": 9}``)."""
    return isinstance(condition, dict) and bool(condition) and str(next(iter(condition))).startswith("$")


def _passes(actual: Any, condition: Any) -> bool:
    """One field's filter condition: every comparison of an operator object, else the plain
    value's containment."""
    if _is_operators(condition):
        return all(_compare(actual, op, operand) for op, operand in condition.items())
    return _contains(actual, condition)


def check_filter(filter: Mapping[str, Any], where: str = "filter") -> None:
    """Refuse (``ValueError``, naming where) a search filter that could only match nothing
    silently: an object mixing operators with field names (``{"$gt": 1, "x": 2}``), or an
    operator this store does not have — at any depth, before any item is read (a filter on
    an empty namespace is refused the same)."""
    for key, condition in filter.items():
        at = f"{where}[{key!r}]"
        if not isinstance(condition, dict) or not condition:
            continue
        operators = [k for k in condition if str(k).startswith("$")]
        if operators and len(operators) != len(condition):
            raise ValueError(
                f"{at} mixes operators {operators} with field names "
                f"{[k for k in condition if not str(k).startswith('$')]}: give a field's "
                'comparisons alone ({"$gt": 1}), or its nested fields alone'
            )
        for op in operators:
            if op not in _OPERATORS:
                raise ValueError(
                    f"{at}: unsupported filter operator {op!r} (supported: {' '.join(_OPERATORS)})"
                )
        if not operators:
            check_filter(condition, at)


def _equal(actual: Any, expected: Any) -> bool:
    """JSON equality (``$eq``/``$ne``: an object equals only an object with the same keys);
    a boolean equals only a boolean (Python's ``True == 1`` is not JSON's)."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        return actual.keys() == expected.keys() and all(_equal(actual[k], v) for k, v in expected.items())
    if isinstance(expected, list | tuple) and isinstance(actual, list):  # (a tuple given: an array)
        return len(actual) == len(expected) and all(
            _equal(a, e) for a, e in zip(actual, expected, strict=True)
        )
    if isinstance(actual, bool) or isinstance(expected, bool):
        return type(actual) is type(expected) and actual == expected
    return bool(actual == expected)


def matches(value: dict[str, Any], filter: dict[str, Any]) -> bool:
    """Whether an item's value passes a LangGraph search filter (checked by
    :func:`check_filter`): each key (dotted keys reach nested fields) passes its condition —
    equals the given value (a nested object: holds each of its keys, each passing its own
    condition), or, given ``{"$op": operand, …}``, passes every comparison. A missing field
    matches no operator, and no plain value but ``None``."""
    return all(_passes(_at(value, key), condition) for key, condition in filter.items())


def _namespace_matches(namespace: tuple[str, ...], condition: MatchCondition) -> bool:
    path = tuple(condition.path)
    if len(path) > len(namespace):
        return False
    part = (
        namespace[: len(path)]
        if condition.match_type == "prefix"
        else namespace[len(namespace) - len(path) :]
    )
    return all(p == "*" or p == n for p, n in zip(path, part, strict=True))
