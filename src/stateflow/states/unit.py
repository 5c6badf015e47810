"""A unit of work: stage op batches, read through them, commit them as one transaction.

``with states.unit() as unit:`` stages ``unit.apply(...)`` calls (and template update programs,
``unit.template_jq(...)``, run again at commit over the record as the transaction finds it)
instead of writing; reads
through the unit see the records as the staged batches would leave them; leaving the block
commits everything with :func:`~stateflow.states.batch.apply_batch` (one transaction, all or
nothing) and then runs the calls deferred with ``unit.defer``. An exception inside the block —
or ``unit.discard()`` — drops the staging and writes nothing. ``unit.savepoint()`` scopes a part
of the staging: an exception inside it drops only what was staged there.

Unlike the published system's unit of work, a commit does not leave a pending save to drain
later: it writes at once, durably, before ``commit`` returns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from stateflow.doc.ops import Op, apply_ops, parse_ops
from stateflow.doc.select import MISSING
from stateflow.errors import InvalidInput, StateflowError
from stateflow.states.models import DoorContext
from stateflow.states.results import ApplyResult
from stateflow.states.service import CATALOG, StatesService, origin_of, subject_of
from stateflow.store import DocKey


class UnitClosed(StateflowError):
    code = "unit-closed"
    http_status = 409


class Unit:
    """Staged op batches over one service; see the module documentation."""

    def __init__(
        self, service: StatesService, *, origin: Any = None, context: DoorContext | None = None
    ) -> None:
        self._service = service
        self._origin = origin
        self._context = context
        self._items: list[tuple[dict[str, Any], list[Op]]] = []
        """staged batch items for ``apply_batch``, each with its parsed ops (for projections)"""
        self._deferred: list[Callable[[], object]] = []
        self._open = True

    # ------------------------------------------------------------------ staging

    def apply(self, state: str, subject: Any, ops: Any, *, op_id: str | None = None) -> ApplyResult:
        """Stage an op batch; return what it would do to the record as staged so far
        (``seq`` is None: nothing is written yet). Guards read the staged record. The batch
        passes the same regime check now as at commit (a violation is refused here, not only
        at the end), and staged reads carry the ``_trace`` stamps the commit writes (their
        ``at`` is the commit's own)."""
        self._check_open()
        self._check_not_on_loop("apply")
        subj = subject_of(subject)
        parsed = parse_ops(ops)
        before = self._project(state, subj.model_dump(), self._service.read(state, subj))
        item: dict[str, Any] = {"state": state, "subject": subj.model_dump(), "ops": ops}
        if op_id is not None:
            item["op_id"] = op_id
        return self._stage(item, before, parsed, op_id)

    def template_jq(self, state: str, subject: Any, reference: str, input_value: Any = None) -> ApplyResult:
        """Stage a template ``update`` program: the commit runs it inside its transaction, over
        the record as it then is with the batches staged before applied (a write another
        caller commits meanwhile is built on, not overwritten); the result, as :meth:`apply`'s,
        is its op batch over the record as staged so far."""
        self._check_open()
        self._check_not_on_loop("template_jq")
        subj = subject_of(subject)
        before = self._project(state, subj.model_dump(), self._service.read(state, subj))
        parsed = parse_ops(self._service.programs.program_ops(state, reference, input_value)(before))
        item = {"state": state, "subject": subj.model_dump(), "template_jq": reference, "input": input_value}
        return self._stage(item, before, parsed, None)

    def _stage(self, item: dict[str, Any], before: Any, parsed: list[Op], op_id: str | None) -> ApplyResult:
        service, state = self._service, item["state"]
        declaration = service._declaration(service.store.read([DocKey(CATALOG, state)]), state)
        service.check_ops(declaration, parsed)
        origin = service._origin(origin_of(self._origin), self._context, "apply-batch")
        stamped = service.stamp(declaration, parsed, {**origin, "op_id": op_id})
        result = apply_ops(MISSING if before is None else before, stamped)
        self._items.append((item, stamped))
        data = result.document if result.applied else before
        return ApplyResult(True, None if data is MISSING else data, None, list(result.skipped))

    def read(self, state: str, subject: Any) -> dict[str, Any] | None:
        """The record as the staged batches would leave it (``None``: no record)."""
        self._check_open()
        self._check_not_on_loop("read")
        subj = subject_of(subject)
        record = self._service.read(state, subj)
        data = self._project(state, subj.model_dump(), record)
        if data is None:
            return None
        view = dict(record) if record is not None else {"state": state, "subject": subj.model_dump()}
        return {**view, "data": data, "staged": self._staged_on(state, subj.model_dump())}

    async def aapply(self, state: str, subject: Any, ops: Any, *, op_id: str | None = None) -> ApplyResult:
        """:meth:`apply` for async code (an async bound callable): its reads awaited — on the
        event loop for an async PostgreSQL store (``open_store_async``), else on a worker
        thread. The batch is staged as :meth:`apply` stages it."""
        from stateflow.aio import call

        return await call(self._service.store, self.apply, state, subject, ops, op_id=op_id)

    async def aread(self, state: str, subject: Any) -> dict[str, Any] | None:
        """:meth:`read` for async code (as :meth:`aapply`)."""
        from stateflow.aio import call

        return await call(self._service.store, self.read, state, subject)

    def defer(self, call: Callable[[], object]) -> None:
        """Run ``call`` after a successful commit (in staging order); dropped on discard."""
        self._check_open()
        self._deferred.append(call)

    @contextmanager
    def savepoint(self) -> Iterator[Unit]:
        """An exception inside drops what was staged (and deferred) inside, then propagates."""
        self._check_open()
        items, deferred = len(self._items), len(self._deferred)
        try:
            yield self
        except BaseException:
            del self._items[items:]
            del self._deferred[deferred:]
            raise

    def absorb(self, other: Unit) -> None:
        """Take over ``other``'s staged batches and deferred calls (after this unit's own) and
        close it: they commit with this unit, or not at all (a bound run called inside another)."""
        self._check_open()
        other._check_open()
        other._open = False
        self._items.extend(other._items)  # (one list operation each: safe beside other stagers)
        self._deferred.extend(other._deferred)

    @property
    def service(self) -> StatesService:
        """The service this unit stages on and commits through."""
        return self._service

    # ------------------------------------------------------------------ ending

    def commit(self) -> list[ApplyResult]:
        """Write every staged batch in one transaction, then run the deferred calls."""
        self._check_open()
        self._open = False
        results = self._service.apply_batch(
            [item for item, _ in self._items], origin=self._origin, context=self._context
        )
        for call in self._deferred:
            call()
        return results

    def discard(self) -> None:
        """Drop the staging; nothing is written."""
        self._open = False
        self._items.clear()
        self._deferred.clear()

    def __enter__(self) -> Unit:
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        if not self._open:
            return
        if kind is None:
            self.commit()
        else:
            self.discard()

    # ------------------------------------------------------------------ helpers

    def _check_not_on_loop(self, what: str) -> None:
        """An async PostgreSQL store's reads cannot wait on its event loop's thread: say what
        to call instead of the bridge's generic refusal."""
        if getattr(self._service.store, "runs_on_loop", False):
            from stateflow.store.async_bridge import would_block

            if would_block():
                raise InvalidInput(
                    f"this unit's store is async (open_store_async): from async code call "
                    f"`await unit.a{what}(...)`, which awaits the reads {what} makes; nothing was staged"
                )

    def _check_open(self) -> None:
        if not self._open:
            raise UnitClosed("this unit of work was already committed or discarded")

    def _staged_on(self, state: str, subject: dict[str, Any]) -> int:
        return sum(1 for item, _ in self._items if item["state"] == state and item["subject"] == subject)

    def _project(self, state: str, subject: dict[str, Any], record: Mapping[str, Any] | None) -> Any:
        """``record``'s data with the batches staged on it applied (None: no record)."""
        data: Any = MISSING if record is None else record["data"]
        for item, ops in self._items:
            if item["state"] == state and item["subject"] == subject:
                result = apply_ops(data, ops)
                if result.applied:
                    data = result.document
        if data is not MISSING and not isinstance(data, dict):
            raise InvalidInput(f"staged ops leave the record of {state!r} as a non-object")
        return None if data is MISSING else data
