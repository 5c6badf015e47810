"""The async Python API: the store, the states service and memory views, awaitable.

Every method of the synchronous object is offered as a coroutine of the same name and
arguments. On PostgreSQL (:func:`connect` with a ``postgresql://`` URL) the store runs on
psycopg's ``AsyncConnectionPool``: the call runs on the event loop's thread and each of its
round trips is awaited there (:mod:`stateflow.store.async_bridge`), so many calls share one
thread and no call waits for a free worker. On SQLite the call runs on a worker thread
(as ``asyncio.to_thread`` runs it): SQLite has no async I/O, and the loop must not wait on its
fsync; a call made runs to its end there even when its caller is cancelled (:func:`call`).

    async with await stateflow.aio.connect("./agent.db") as sf:
        await sf.states.declare(...)
        record = await sf.states.read("tickets", subject)
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from time import monotonic
from typing import TYPE_CHECKING, Any, Concatenate, Final, Generic, ParamSpec, TypeVar

from stateflow.config import Config
from stateflow.errors import StoreUnavailable
from stateflow.extras import needs_extra
from stateflow.memory import SCOPES, Identity, MemoryConfig, MemoryView
from stateflow.memory.scopes import SESSION_ENV
from stateflow.offload import run_sync
from stateflow.states import StatesService
from stateflow.states.models import DoorContext
from stateflow.states.unit import Unit
from stateflow.store import Store, open_store
from stateflow.store.open import ENV_VAR as STORE_ENV
from stateflow.store.open import StoreLocation, pg_mode, resolve_store_url

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")


def runs_on_loop(store: Store) -> bool:
    """Whether ``store`` is awaited on the event loop (PostgreSQL opened by :func:`connect`)."""
    return bool(getattr(store, "runs_on_loop", False))


class _Offloaded:
    """A store's calls on worker threads not yet done (:func:`call`), and whether an async
    close began: :func:`close` waits for the ones in flight and refuses later ones."""

    __slots__ = ("closing", "pending")

    def __init__(self) -> None:
        self.pending: set[asyncio.Future[Any]] = set()
        self.closing = False


_offloaded: weakref.WeakKeyDictionary[Store, _Offloaded] = weakref.WeakKeyDictionary()


def _offloaded_of(store: Store) -> _Offloaded:
    calls = _offloaded.get(store)
    return _offloaded.setdefault(store, _Offloaded()) if calls is None else calls


async def call(store: Store, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """``fn(*args, **kwargs)`` — synchronous code working on ``store`` — awaited: on the loop
    for an async PostgreSQL store (a cancelled caller stops it at its next round trip, its
    open transaction rolled back), else on a worker thread (where it runs to its end)."""
    if runs_on_loop(store):
        from stateflow.store.async_bridge import spawn

        if _offloaded_of(store).closing:  # (as ``on_thread`` refuses it: a call once the close began)
            raise StoreUnavailable("the store was closed: open it again to use it")
        return await spawn(fn, *args, **kwargs)
    return await on_thread(store, fn, *args, **kwargs)


async def on_thread(store: Store, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """``fn(*args, **kwargs)`` on a worker thread whatever the store — code that waits on more
    than the database (jq workers) must not run on the loop — counted in flight on ``store``,
    so that an async :func:`close` waits for it (and refuses it once the close began)."""
    calls = _offloaded_of(store)
    if calls.closing:
        raise StoreUnavailable("the store was closed: open it again to use it")
    # (what asyncio.to_thread does, with the future kept until done: a close waits for it)
    run = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    future = asyncio.get_running_loop().run_in_executor(None, run)
    calls.pending.add(future)
    future.add_done_callback(functools.partial(_settled, calls.pending))
    # A call made is not cancelled with its caller: SQLite cannot stop a call midway, so the
    # call runs to its end (its writes commit) and stays in flight until it has, so that a
    # close waits for it; the caller alone is cancelled.
    return await asyncio.shield(future)


def _settled(pending: set[asyncio.Future[Any]], future: asyncio.Future[Any]) -> None:
    """A worker thread's call is done: no longer in flight, and its error taken (a cancelled
    caller no longer awaits it: else asyncio would log it as never retrieved)."""
    pending.discard(future)
    if not future.cancelled():
        future.exception()


async def close(store: Store, closing: Callable[[], None] | None = None) -> None:
    """Close ``store`` — or run ``closing``, which closes it — once the calls in flight on it
    are done; a call made through :func:`call` from here on is refused (``StoreUnavailable``).
    A call on a worker thread (:func:`on_thread`; every call on SQLite) awaited before the
    close may still wait for a thread: it is in flight all the same, and runs. (An async
    PostgreSQL pool waits itself for the calls on the loop that hold a connection.)"""
    finish = closing or store.close
    calls = _offloaded_of(store)
    calls.closing = True
    loop = asyncio.get_running_loop()
    while mine := [f for f in calls.pending if f.get_loop() is loop]:
        await asyncio.wait(mine)
    if runs_on_loop(store):
        from stateflow.store.async_bridge import spawn

        await spawn(finish)  # (on the loop: nothing of it waits for a worker thread)
    else:
        await asyncio.to_thread(finish)  # (not ``on_thread``: it refuses once closing)


async def on_edge(store: Store, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """How the HTTP and MCP edges run ``fn`` (synchronous code working on ``store``): on the
    loop for an async PostgreSQL store — its round trips are awaited there, no worker thread
    is taken and none hands the result back — else on a worker thread of
    :mod:`stateflow.offload` (anyio's contract at a third of its cost per hop). Code that waits
    on anything but the database (the jq workers) must not run on the loop: the edges keep it
    on a worker thread."""
    result: R = await edge_runner(store)(fn, *args, **kwargs)
    return result


def edge_runner(store: Store) -> Callable[..., Awaitable[Any]]:
    """What :func:`on_edge` awaits ``store``'s calls through, told once: an edge that makes a
    call per request keeps it and awaits it straight (a coroutine's layer fewer per call, its
    arguments not packed again)."""
    if runs_on_loop(store):
        from stateflow.store.async_bridge import spawn

        return spawn
    return run_sync


SHARED_SECONDS: Final = 0.1
"""How long an edge keeps every call off its loop after it last saw two calls in flight at once."""

LONG_SECONDS: Final = 0.01
"""How long a call on the loop's thread may hold it before the edge keeps its calls off the loop
for :data:`LONG_HOLD_SECONDS` (a lone write takes ~0.5–1.5 ms there, its fsync included)."""

LONG_HOLD_SECONDS: Final = 1.0
"""How long an edge keeps every call off its loop after one held the loop over
:data:`LONG_SECONDS`: requests that arrive meanwhile are read and answered beside such a call."""

SHORT_BODY_BYTES: Final = 64 * 1024
"""A write whose request body is larger never runs on the loop's thread (:meth:`EdgeCalls.sized`):
its cost grows with its members — a 5 MB record of 300,000 members took ~55 s to write — and
on the loop every other request would wait that long for it. (A lone write's body is a few
hundred bytes.)"""

SAMPLE_SECONDS: Final = 0.25
"""How often an edge asks how long its loop's thread waited for a CPU."""

CONTENDED_SHARE: Final = 0.05
"""The share of the time since the last sample that the loop's thread spent waiting for a CPU
above which the machine has no CPU to spare: the edge's calls then take worker threads. (Here,
at load 6–8 on 2 cores, the loop's thread waited 0.11–0.25 of the time with the hop and
0.71–0.79 with every write on it.)"""

SCHEDSTAT: Final = "/proc/thread-self/schedstat"


def _waited_ns() -> int | None:
    """Nanoseconds the calling thread has spent runnable but waiting for a CPU (Linux's
    schedstat: on CPU, waiting, slices); None where the system does not say."""
    try:
        with open(SCHEDSTAT, "rb") as stat:
            return int(stat.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None


class EdgeCalls:
    """An edge's calls on ``store``, counted while in flight in this process (one event loop).

    :meth:`run` awaits a call as :func:`on_edge` does. :meth:`short` — a call on one record —
    runs on the loop's own thread when it is the only call in flight, no two calls have been
    in flight together for :data:`SHARED_SECONDS`, and the machine has CPU to spare: a lone
    caller then pays no thread hop (each way a wake-up of another thread). Whenever a second
    call may come while one runs, it takes the hop as :meth:`run` does: a SQLite write on the
    loop commits and flushes with the loop blocked, so the writes behind it could not gather
    into one group commit — with eight callers every write on the loop read 0.58× the
    throughput. On a machine without CPU to spare (the loop's thread waited for a CPU more than
    :data:`CONTENDED_SHARE` of the last sample's time) the hop is kept too: the scheduler gives
    each thread its share, and a write's whole CPU on one thread waited ~2 ms a write for it
    where the loop's and a worker's halves waited ~0.3 ms (one writer 0.50–0.56× the
    throughput at load 7–9, against 1.17–1.31× on a quiet machine). A request that arrives during a
    call on the loop waits in its socket until that call returns, then is read and served as
    any other, in its order; none waits behind more than the one call, and a call that held the
    loop over :data:`LONG_SECONDS` (a large record, another process's turn) sends the calls
    after it to worker threads for :data:`LONG_HOLD_SECONDS`. Only this object's calls
    are counted: other processes on the same store (and the MCP endpoint's calls) are not seen,
    and a call on the loop may wait there for their commit, as a worker thread would. On an
    async PostgreSQL store every call runs on the loop already, its round trips awaited. On a
    synchronous PostgreSQL store (``Store.cancellable``) no call runs on the loop's thread: such
    a call waits on the network and on other sessions' locks, up to the statement timeout, with
    every request behind it (``/api/health`` too), and the loop it holds is what would see its
    client go away and cancel it (``stateflow.http.gone``); each takes the hop, as :meth:`run`.
    A write of a large request body (:meth:`sized`) always takes the hop: its time is known to
    be long before it begins."""

    __slots__ = (
        "_active",
        "_held_until",
        "_lock_held",
        "_loop_ok",
        "_sample",
        "_shared_until",
        "_spare",
        "hop",
    )

    def __init__(self, store: Store) -> None:
        self.hop = edge_runner(store)
        """what a call not on the loop's thread is awaited through (:func:`on_edge`'s way)"""
        self._loop_ok = not runs_on_loop(store) and not getattr(store, "cancellable", False)
        """a lone call may run on the loop's thread: the hop takes a worker thread (else the call
        runs on the loop already, awaited), and the store's calls are not ones that wait on the
        network (PostgreSQL's; see the class)"""
        self._lock_held: Callable[[], bool] | None = getattr(store, "write_lock_held", None)
        """whether a write begun now would wait for the store's write lock (SQLite's)"""
        self._active = 0
        """calls begun and not yet returned"""
        self._shared_until = 0.0
        """until when every call takes the hop, having seen calls in flight together"""
        self._held_until = 0.0
        """until when every call takes the hop, one having held the loop long (apart from
        ``_shared_until``, which calls seen together then would otherwise shorten)"""
        self._sample: tuple[float, int, int] | None = None
        """when the loop's thread was last asked, which thread it was, how long it had waited"""
        self._spare = False
        """the machine had CPU to spare at the last sample"""

    async def run(self, call: Awaitable[R]) -> R:
        """``call`` awaited, counted in flight (a call that is not :meth:`short`'s)."""
        self._active += 1
        try:
            return await call
        finally:
            self._active -= 1

    async def short(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        """``fn(*args, **kwargs)``: on the loop's thread when it is the only call in flight,
        else as :meth:`run` (see the class)."""
        return await self._short(False, fn, args, kwargs)

    async def _short(self, writes: bool, fn: Callable[..., R], args: Any, kwargs: Any) -> R:
        """:meth:`short`; a call that ``writes`` runs on the loop's thread only while the
        store's write lock is free (``write_lock_held``, one system call on SQLite): taken —
        another process's turn, a ``sqlite3`` shell's transaction — the call would wait for it
        there, up to ``wait_seconds``, with every request (``/api/health`` too) behind it, so
        it takes the hop and the loop goes on answering. (The lock may be taken between the
        look and the write's ``BEGIN``: that write waits on the loop, as every one did.)"""
        self._active += 1
        try:
            now = monotonic()
            if (
                self._loop_ok
                and self._active == 1
                and now >= self._shared_until
                and now >= self._held_until
                and self._cpu_to_spare(now)
            ):
                # Requests read with this one in the same loop pass reach their calls first.
                await asyncio.sleep(0)
                if self._active == 1 and not (writes and self._lock_held is not None and self._lock_held()):
                    began = monotonic()
                    try:
                        return contextvars.copy_context().run(fn, *args, **kwargs)
                    finally:
                        # A call that held the loop long (a large record, another process's
                        # write turn waited for) may come again: the hop for a while.
                        if monotonic() - began > LONG_SECONDS:
                            self._held_until = monotonic() + LONG_HOLD_SECONDS
            if self._active > 1:
                self._shared_until = monotonic() + SHARED_SECONDS
            result: R = await self.hop(fn, *args, **kwargs)
            return result
        finally:
            self._active -= 1

    async def sized(self, size: int, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        """:meth:`short` for a call given a ``size``-byte request body: one over
        :data:`SHORT_BODY_BYTES` always takes the hop (never the loop's thread), as :meth:`run`."""
        if size > SHORT_BODY_BYTES:
            return await self.run(self.hop(fn, *args, **kwargs))
        return await self._short(False, fn, args, kwargs)

    async def write(self, size: int, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        """:meth:`sized` for a call that writes: never on the loop's thread while the store's
        write lock is taken (see :meth:`_short`)."""
        if size > SHORT_BODY_BYTES:
            return await self.run(self.hop(fn, *args, **kwargs))
        return await self._short(True, fn, args, kwargs)

    def _cpu_to_spare(self, now: float) -> bool:
        """Whether the loop's thread waited for a CPU under :data:`CONTENDED_SHARE` of the time
        since the last sample (asked at most every :data:`SAMPLE_SECONDS`: a read of the
        thread's schedstat costs ~20–90 µs here). Unknown — no schedstat, or a sample from
        another thread — is no."""
        sample = self._sample
        if sample is not None and now < sample[0] + SAMPLE_SECONDS:
            return self._spare
        waited, thread = _waited_ns(), threading.get_ident()
        if waited is None:
            # Asked again only after SAMPLE_SECONDS (thread 0 is no thread's: that next sample
            # can only be the first of a series), not by every call where the file is missing.
            self._sample, self._spare = (now, 0, 0), False
            return False
        self._spare = (
            sample is not None
            and sample[1] == thread
            and waited - sample[2] <= CONTENDED_SHARE * (now - sample[0]) * 1e9
        )
        self._sample = (now, thread, waited)
        return self._spare


async def open_store_async(
    location: StoreLocation | None = None,
    *,
    auto_migrate: bool | None = None,
    wait_seconds: float | None = None,
    connect_timeout: float | None = None,
    statement_timeout: float | None = None,
) -> Store:
    """:func:`stateflow.store.open_store`, with PostgreSQL on the async pool."""
    url = resolve_store_url(location)
    if url.startswith(("postgresql://", "postgres://")):
        with needs_extra("postgres", "a PostgreSQL store"):
            from stateflow.store.postgres_async import AsyncPostgresStore

        url, read_only = pg_mode(url)
        return await AsyncPostgresStore.connect(
            url,
            auto_migrate=bool(auto_migrate),
            timeout=wait_seconds,
            connect_timeout=connect_timeout,
            statement_timeout=statement_timeout,
            read_only=read_only,
        )
    return await asyncio.to_thread(
        open_store,
        location,
        auto_migrate=auto_migrate,
        wait_seconds=wait_seconds,
        connect_timeout=connect_timeout,
        statement_timeout=statement_timeout,
    )


class Offloaded(Generic[T]):
    """``obj``'s public methods as coroutines (see :func:`call`); ``sync`` is ``obj``. Each
    wrapper names its methods one by one (:func:`awaitable`), so they keep their synchronous
    signatures for type checkers and ``help()``; any other public method of ``obj`` (a concrete
    store's own) is offered too, untyped."""

    def __init__(self, obj: T, store: Store) -> None:
        self.sync = obj
        self._store = store

    async def _run(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``sync.<name>(*args, **kwargs)`` awaited (see :func:`call`)."""
        return await call(self._store, getattr(self.sync, name), *args, **kwargs)

    if not TYPE_CHECKING:  # (at run time only: a type checker refuses a name no wrapper declares)

        def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
            if name.startswith("_"):
                raise AttributeError(name)
            method = getattr(self.sync, name)
            if not callable(method):
                raise AttributeError(f"{type(self.sync).__name__}.{name} is not a method")

            @functools.wraps(method)
            async def awaited(*args: Any, **kwargs: Any) -> Any:
                return await self._run(name, args, kwargs)

            return awaited


def awaitable(
    method: Callable[Concatenate[T, P], R],
) -> Callable[Concatenate[Offloaded[T], P], Coroutine[Any, Any, R]]:
    """The synchronous ``method`` as a coroutine method of its object's wrapper, with its
    parameters and result (awaited): called on the wrapper's ``sync`` object by name, so a
    subclass's override runs."""
    name = method.__name__

    @functools.wraps(method)
    async def awaited(self: Offloaded[T], /, *args: P.args, **kwargs: P.kwargs) -> R:
        result: R = await self._run(name, args, kwargs)
        return result

    return awaited


def awaitable_static(
    name: str, function: Callable[P, R]
) -> Callable[Concatenate[Offloaded[Any], P], Coroutine[Any, Any, R]]:
    """A static method of the synchronous object (``function``, its attribute ``name``) as a
    coroutine method of the wrapper, typed as :func:`awaitable`'s: called on ``sync`` by name."""

    @functools.wraps(function)
    async def awaited(self: Offloaded[Any], /, *args: P.args, **kwargs: P.kwargs) -> R:
        result: R = await self._run(name, args, kwargs)
        return result

    return awaited


class AsyncStore(Offloaded[Store]):
    """The store (``read``, ``get``, ``read_at``, ``history``, ``scan``, ``search``, …)."""

    def __init__(self, store: Store) -> None:
        super().__init__(store, store)

    async def close(self) -> None:
        """Close the store once the calls in flight on it are done (:func:`close`)."""
        await close(self.sync)

    applied_op = awaitable(Store.applied_op)
    body_as_seen = awaitable(Store.body_as_seen)
    cache_recent = awaitable(Store.cache_recent)
    cached = awaitable(Store.cached)
    check_schema = awaitable(Store.check_schema)
    children = awaitable(Store.children)
    claims_in = awaitable(Store.claims_in)
    commit = awaitable(Store.commit)
    contended = awaitable(Store.contended)
    count = awaitable(Store.count)
    counts = awaitable(Store.counts)
    get = awaitable(Store.get)
    history = awaitable(Store.history)
    keep_whole = awaitable(Store.keep_whole)
    kind_counts = awaitable(Store.kind_counts)
    member_counts = awaitable(Store.member_counts)
    member_sizes = awaitable(Store.member_sizes)
    meta_value = awaitable(Store.meta_value)
    migrate = awaitable(Store.migrate)
    missing_rows = awaitable(Store.missing_rows)
    patch_on_server = awaitable(Store.patch_on_server)
    prune_history = awaitable(Store.prune_history)
    prune_ops = awaitable(Store.prune_ops)
    purge = awaitable(Store.purge)
    read = awaitable(Store.read)
    read_at = awaitable(Store.read_at)
    read_first_under = awaitable(Store.read_first_under)
    read_paths = awaitable(Store.read_paths)
    read_under = awaitable(Store.read_under)
    rename_subjects = awaitable(Store.rename_subjects)
    scan = awaitable(Store.scan)
    schema_version = awaitable(Store.schema_version)
    search = awaitable(Store.search)
    search_sorted = awaitable(Store.search_sorted)
    transitions = awaitable(Store.transitions)
    update = awaitable(Store.update)
    update_parts = awaitable(Store.update_parts)
    when_migrated = awaitable(Store.when_migrated)
    write_whole = awaitable(Store.write_whole)


class AsyncUnit(Offloaded[Unit]):
    """A unit of work (:mod:`stateflow.states.unit`), awaitable: ``async with await
    sf.states.unit() as unit:`` stages ``await unit.apply(...)`` and commits it all on leaving
    the block (nothing on an exception). Its reads and its commit are awaited as every call of
    its service's; ``savepoint`` answers at once (it reads nothing)."""

    def __init__(self, unit: Unit, store: Store) -> None:
        super().__init__(unit, store)

    @contextmanager
    def savepoint(self) -> Iterator[AsyncUnit]:
        """:meth:`Unit.savepoint`: an exception inside drops what was staged inside."""
        with self.sync.savepoint():
            yield self

    async def __aenter__(self) -> AsyncUnit:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        """The synchronous unit's exit, awaited: commit on success, else discard."""
        await self._run("__exit__", (kind, *rest), {})

    absorb = awaitable(Unit.absorb)
    apply = awaitable(Unit.apply)
    commit = awaitable(Unit.commit)
    defer = awaitable(Unit.defer)
    discard = awaitable(Unit.discard)
    read = awaitable(Unit.read)
    template_jq = awaitable(Unit.template_jq)


class AsyncStatesService(Offloaded[StatesService]):
    """The declared-states service (``declare``, ``read``, ``replace``, ``merge``, ``apply``,
    ``apply_batch``, ``writes``, ``search``, ``template_jq_update``, …)."""

    def __init__(self, service: StatesService, *, install: bool = False) -> None:
        """``install``: ``service`` was made on a bare store, so its built-ins are installed (as
        ``stateflow.api.states_service`` installs them) before its first call runs."""
        super().__init__(service, service.store)
        self._installed = not install

    def __call__(self) -> AsyncStatesService:
        """Itself: ``sf.states()`` as the synchronous ``Stateflow.states()`` is called, so code
        ported from it runs unchanged (``sf.states`` is the service already)."""
        return self

    async def _run(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if not self._installed:  # (idempotent: two first calls at once both may run it)
            await call(self._store, self.sync.install_builtins)
            self._installed = True
        return await super()._run(name, args, kwargs)

    acting_as = awaitable(StatesService.acting_as)
    # the service's pure helpers (static methods), awaited as its other methods are
    check_document_write = awaitable_static("check_document_write", StatesService.check_document_write)
    check_ops = awaitable_static("check_ops", StatesService.check_ops)
    effective_schema = awaitable_static("effective_schema", StatesService.effective_schema)
    regimes = awaitable_static("regimes", StatesService.regimes)
    stamp = awaitable_static("stamp", StatesService.stamp)
    stamp_document = awaitable_static("stamp_document", StatesService.stamp_document)
    apply = awaitable(StatesService.apply)
    apply_batch = awaitable(StatesService.apply_batch)
    apply_change = awaitable(StatesService.apply_change)
    attach = awaitable(StatesService.attach)
    attachments = awaitable(StatesService.attachments)
    close = awaitable(StatesService.close)
    consumers = awaitable(StatesService.consumers)
    declare = awaitable(StatesService.declare)
    delete_declaration = awaitable(StatesService.delete_declaration)
    delete_template = awaitable(StatesService.delete_template)
    detach = awaitable(StatesService.detach)
    diff = awaitable(StatesService.diff)
    erase = awaitable(StatesService.erase)
    erase_unchanged = awaitable(StatesService.erase_unchanged)
    fold = awaitable(StatesService.fold)
    get_attachment = awaitable(StatesService.get_attachment)
    get_declaration = awaitable(StatesService.get_declaration)
    get_template = awaitable(StatesService.get_template)
    install_builtins = awaitable(StatesService.install_builtins)
    install_seeds = awaitable(StatesService.install_seeds)
    jq = awaitable(StatesService.jq)
    list_declarations = awaitable(StatesService.list_declarations)
    list_templates = awaitable(StatesService.list_templates)
    merge = awaitable(StatesService.merge)
    prune = awaitable(StatesService.prune)
    put_template = awaitable(StatesService.put_template)
    read = awaitable(StatesService.read)
    register_attach_reconciler = awaitable(StatesService.register_attach_reconciler)
    register_attach_validator = awaitable(StatesService.register_attach_validator)
    register_consumer_lister = awaitable(StatesService.register_consumer_lister)
    register_detach_referee = awaitable(StatesService.register_detach_referee)
    register_seed = awaitable(StatesService.register_seed)
    replace = awaitable(StatesService.replace)
    replace_from = awaitable(StatesService.replace_from)
    revert = awaitable(StatesService.revert)
    search = awaitable(StatesService.search)
    stats = awaitable(StatesService.stats)
    subjects = awaitable(StatesService.subjects)
    template_jq_apply = awaitable(StatesService.template_jq_apply)
    template_jq_input = awaitable(StatesService.template_jq_input)
    template_jq_ops = awaitable(StatesService.template_jq_ops)
    template_jq_purpose = awaitable(StatesService.template_jq_purpose)
    template_jq_params = awaitable(StatesService.template_jq_params)
    template_jq_update = awaitable(StatesService.template_jq_update)

    async def unit(self, *, origin: Any = None, context: DoorContext | None = None) -> AsyncUnit:
        """:meth:`StatesService.unit`, answering an :class:`AsyncUnit` (``async with await
        sf.states.unit() as unit:``)."""
        made: Unit = await self._run("unit", (), {"origin": origin, "context": context})
        return AsyncUnit(made, self._store)

    update_attachment = awaitable(StatesService.update_attachment)
    use_jq = awaitable(StatesService.use_jq)
    writes = awaitable(StatesService.writes)


class AsyncMemoryView(Offloaded[MemoryView]):
    """A memory view (``read_state``, ``patch_state``, ``context``, ``record_response``,
    ``as_of``, ``transitions``, ``restore``); ``fork`` answers another async view."""

    def __init__(self, view: MemoryView) -> None:
        super().__init__(view, view.store)

    async def fork(self, new_session: str, offset: int = 0) -> AsyncMemoryView:
        return AsyncMemoryView(await call(self._store, self.sync.fork, new_session, offset))

    as_of = awaitable(MemoryView.as_of)
    context = awaitable(MemoryView.context)
    current_projection = awaitable(MemoryView.current_projection)
    dry_run = awaitable(MemoryView.dry_run)
    knowledge_status = awaitable(MemoryView.knowledge_status)
    patch_state = awaitable(MemoryView.patch_state)
    projection_id = awaitable(MemoryView.projection_id)
    protocol = awaitable(MemoryView.protocol)
    prune_knowledge = awaitable(MemoryView.prune_knowledge)
    read_state = awaitable(MemoryView.read_state)
    record_response = awaitable(MemoryView.record_response)
    restore = awaitable(MemoryView.restore)
    transitions = awaitable(MemoryView.transitions)


class AsyncStateflow:
    """A store and its services, awaitable: :func:`connect` opens one, :meth:`on` makes one on
    a store already open. ``async with`` closes it."""

    def __init__(self, states: StatesService | Store, *, session: str | None = None) -> None:
        """``states``: a service made by ``stateflow.api.states_service`` (the built-ins
        installed) — which :meth:`on` does —, or a store: its service is made here and its
        built-ins installed on the service's first call, as ``stateflow.Stateflow(store)``
        installs them on first use (a constructor cannot wait for the store)."""
        if isinstance(states, StatesService):
            self.states = AsyncStatesService(states)
        else:
            self.states = AsyncStatesService(StatesService(states), install=True)
        self.store = AsyncStore(self.states.sync.store)
        self.session = session
        """the default session of memory views (None: ``default``)"""

    @classmethod
    async def on(
        cls, store: Store, config: Config | None = None, *, session: str | None = None
    ) -> AsyncStateflow:
        """An instance on ``store`` (closed with it), its service put together where the
        synchronous API's is (``states_service``: the built-ins installed, so a store an
        earlier version wrote is brought up to date before this one writes). A store not
        migrated yet gets them when it is first found migrated; until then its calls raise
        ``StoreNotMigrated``."""
        from stateflow.api import states_service

        service = await call(store, states_service, store, config, unmigrated=_installed_when_migrated)
        return cls(service, session=session)

    def memory(
        self,
        agent: str | None = None,
        cwd: str | os.PathLike[str] | None = None,
        session: str | None = None,
        scopes: Sequence[str] = SCOPES,
        **config: Any,
    ) -> AsyncMemoryView:
        identity = Identity.of(agent, cwd, self.session if session is None else session)
        view = MemoryView(self.store.sync, identity, scopes, MemoryConfig(**config))
        return AsyncMemoryView(view)

    async def close(self) -> None:
        """Once the calls in flight are done (:func:`close`), the service and the store."""
        service = self.states.sync

        def closing() -> None:
            service.close()
            service.store.close()

        await close(self.store.sync, closing)

    async def __aenter__(self) -> AsyncStateflow:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def connect(
    store: StoreLocation | None = None, config: Config | None = None, *, session: str | None = None
) -> AsyncStateflow:
    """Open the store at ``store`` (path or URL), else ``config.store.url``, else
    ``$STATEFLOW_STORE``, else the default file — PostgreSQL on the async pool — as
    ``stateflow.connect`` does (``config``'s ``[store]`` waits and timeouts too); ``session``
    (else ``$STATEFLOW_SESSION``) is the memory views' default session. The environment is
    read here, once."""
    config = config or Config()
    location = store or config.store.url or os.environ.get(STORE_ENV) or None
    opened = await open_store_async(location, **config.store.open_options())
    try:
        return await AsyncStateflow.on(
            opened, config, session=session if session is not None else os.environ.get(SESSION_ENV) or None
        )
    except BaseException:
        await close(opened)
        raise


def _installed_when_migrated(_: Exception) -> None:
    """(``states_service`` installs the built-ins once the store is migrated; the store's
    calls raise ``StoreNotMigrated`` until then, as they would have at connect.)"""
