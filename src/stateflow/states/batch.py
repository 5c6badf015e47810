"""Op batches on several records — of one state or several — in one transaction.

The in-process facet of the published ``apply_batch``: each item is an op batch (or a
template-jq ``update`` program that produces one) for one record. The items run through the
record-write pipeline (:mod:`stateflow.states.pipeline`) as one call: records lock in
``(state, subject)`` order, several items on one record apply one after another, every changed
record is validated whole, and anything refused rolls the whole batch back. Results come back
in input order. Each item's ``op_id`` is its own idempotency key, scoped by its state and its
record's tenant: a replayed item applies nothing (and says ``replayed``) while the others apply.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from stateflow.doc.ops import parse_ops
from stateflow.doc.select import MISSING
from stateflow.errors import InvalidInput
from stateflow.states import pipeline
from stateflow.states.models import DoorContext, op_id_problem
from stateflow.states.pipeline import RecordWrite, ops_transform
from stateflow.states.results import ApplyResult
from stateflow.states.service import StatesService, origin_of, subject_of
from stateflow.store import DocKey, Document
from stateflow.store.rows import lock_order

MAX_BATCH_ITEMS: Final = 100
ITEM_KEYS: Final = frozenset({"state", "subject", "ops", "template_jq", "input", "op_id"})


def apply_batch(
    service: StatesService,
    items: Any,
    *,
    origin: Any = None,
    context: DoorContext | None = None,
) -> list[ApplyResult]:
    if not isinstance(items, list):
        raise InvalidInput("a batch is a list of items")
    if len(items) > MAX_BATCH_ITEMS:
        raise InvalidInput(f"a batch holds at most {MAX_BATCH_ITEMS} items, got {len(items)}")
    for i, raw in enumerate(items):  # (a pipeline write is for apply_items' callers only)
        if not isinstance(raw, dict):
            raise InvalidInput(f"items[{i}] must be an object")
    return apply_items(service, items, origin=origin, context=context)


def apply_items(
    service: StatesService,
    items: list[Any],
    *,
    origin: Any = None,
    context: DoorContext | None = None,
) -> list[ApplyResult]:
    """:func:`apply_batch` without its bound on the number of items: any number in one
    transaction, for a writer in this process whose batch must be all or nothing whatever its
    size (the LangGraph adapters'; the bound is the published call's, on what one request may
    ask). An item may also be a pipeline write, such as :func:`erase_item`'s."""
    parsed = [
        (raw, True) if type(raw) is RecordWrite else _parse(service, i, raw) for i, raw in enumerate(items)
    ]
    # an op_id is claimed per state and tenant (``pipeline.op_scope``): two tenants' items may
    # share one, as two applies may; one claim twice in a commit is refused
    ids = [(pipeline.op_scope(it.state, it.subject), it.op_id) for it, _ in parsed if it.op_id is not None]
    if len(ids) != len(set(ids)):
        raise InvalidInput("two items of one batch carry the same op_id for the same state and tenant")
    results: list[ApplyResult] = [ApplyResult(False, None, None, []) for _ in parsed]
    live = [i for i, (_, writes) in enumerate(parsed) if writes]  # an empty batch applies nothing
    if not live:
        return results
    # subjects resolved up front: a batch of folded subjects needs no second attempt
    written = pipeline.run(
        service,
        [parsed[i][0] for i in live],
        service._origin(origin_of(origin), context, "apply-batch"),
        labels=[f"items[{i}]" for i in live],
        canonical=[service._canonical(parsed[i][0].state, parsed[i][0].subject) for i in live],
    )
    for i, out in zip(live, written, strict=True):
        if out.replayed:
            results[i] = ApplyResult(False, None, None, [], replayed=True, replayed_seq=out.replayed_seq)
        else:
            data = None if out.data is MISSING else out.data  # the body the store caches: copied when read
            results[i] = ApplyResult(True, data, out.seq, out.skipped, written=out.written, shared=True)
    return results


def apply_items_in_parts(
    service: StatesService,
    state: str,
    keys: Sequence[DocKey],
    items_of: Callable[[Sequence[DocKey], Mapping[DocKey, Document]], Sequence[RecordWrite]],
    *,
    part: int,
    beside: Callable[[Sequence[DocKey]], Sequence[DocKey]] | None = None,
    origin: Any = None,
    context: DoorContext | None = None,
) -> bool:
    """:func:`apply_items` for the records ``keys`` of one state (each named by its own key), in
    one transaction too, but read, changed and written ``part`` records at a time
    (``pipeline.run_parts``): what is held at once is a part, however many records (a LangGraph
    thread of tens of thousands of checkpoints erased or copied). ``items_of(part, docs)``: the
    items of a part's records, one per key, in order, given those records and the ones
    ``beside(part)`` names (read with the part, not written: what a copy is made from). False, nothing written, where the state has
    aliases (the caller applies its items with :func:`apply_items`, which resolves them)."""
    ordered = sorted(keys, key=lock_order)
    parts = [ordered[start : start + part] for start in range(0, len(ordered), part)]
    done = pipeline.run_parts(
        service, state, parts, items_of, service._origin(origin_of(origin), context, "apply-batch"), beside
    )
    return done is not None


def erase_item(state: str, subject: Any) -> RecordWrite:
    """An :func:`apply_items` item that erases the record of ``subject`` (and the aliases
    pointing at it), as ``StatesService.erase`` does, inside the batch's one transaction; an
    absent record is left as it is."""
    return RecordWrite(state, subject_of(subject), pipeline.erase_record)


def _parse(service: StatesService, index: int, raw: Any) -> tuple[RecordWrite, bool]:
    """The item's pipeline write, and whether it may write anything (an empty op batch does not)."""
    where = f"items[{index}]"
    if not isinstance(raw, dict):
        raise InvalidInput(f"{where} must be an object")
    unknown = sorted(set(raw) - ITEM_KEYS)
    if unknown:
        raise InvalidInput(f"{where} carries unknown keys {unknown}")
    state = raw.get("state")
    if not isinstance(state, str) or not state:
        raise InvalidInput(f"{where} needs 'state', a state name")
    if ("ops" in raw) == ("template_jq" in raw):
        raise InvalidInput(f"{where} sets exactly one of 'ops' or 'template_jq'")
    if "input" in raw and "template_jq" not in raw:
        raise InvalidInput(f"{where}: 'input' goes only with 'template_jq'")
    op_id = raw.get("op_id")
    if op_id is not None and (why := op_id_problem(op_id, f"{where}.op_id")):
        raise InvalidInput(f"{where}: {why}")
    subject = subject_of(raw.get("subject"))
    if "template_jq" in raw:
        reference = raw["template_jq"]
        if not isinstance(reference, str) or not reference:
            raise InvalidInput(f"{where}: template_jq names a program ('template.name')")
        # the program runs inside the transaction, over the record as the items before left it
        # (evaluated here, a write committed meanwhile would be overwritten by its ops)
        change = service.programs.transform(state, reference, raw.get("input"))
        return RecordWrite(state, subject, change, op_id), True
    ops = raw["ops"]
    try:
        parsed = parse_ops(ops)
    except InvalidInput as exc:
        raise type(exc)(f"{where}: {exc.message}") from exc
    return RecordWrite(state, subject, ops_transform(parsed), op_id), bool(parsed)
