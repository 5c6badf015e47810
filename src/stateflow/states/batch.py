"""Op batches on several records — of one state or several — in one transaction.

The in-process facet of the published ``apply_batch``: each item is an op batch (or a
template-jq ``update`` program that produces one) for one record; items apply in ``(state,
subject)`` order, so concurrent batches lock records in the same order, and several items on
one record apply one after another. Every changed record is validated whole; anything refused
rolls the whole batch back. Results come back in input order. Each item's ``op_id`` is its own
idempotency key: a replayed item applies nothing while the others apply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from stateflow.doc.canonical import detach
from stateflow.doc.ops import Op, apply_ops, parse_ops
from stateflow.doc.select import MISSING
from stateflow.errors import Conflict, InvalidInput
from stateflow.states.models import DoorContext, StateSubject
from stateflow.states.service import (
    ALIASES,
    CATALOG,
    ApplyResult,
    StatesService,
    _AliasMoved,
    origin_of,
    subject_of,
)
from stateflow.store import DocKey, Document, OpIdTaken, Write

MAX_BATCH_ITEMS: Final = 100
ITEM_KEYS: Final = frozenset({"state", "subject", "ops", "template_jq", "input", "op_id"})
ALIAS_RETRIES: Final = 3


@dataclass(frozen=True)
class _Outcome:
    key: DocKey
    data: Any
    """the record after this item (items on one record apply in turn)"""
    skipped: list[dict[str, Any]]
    seq_before: int | None


@dataclass(frozen=True)
class _Item:
    index: int
    state: str
    subject: StateSubject
    ops: list[Op]
    op_id: str | None


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
    parsed = [_parse(service, i, raw) for i, raw in enumerate(items)]
    ids = [(it.state, it.op_id) for it in parsed if it.op_id is not None]
    if len(ids) != len(set(ids)):
        raise InvalidInput("two items of one batch carry the same op_id for the same state")
    base = service._origin(origin_of(origin), context, "apply-batch")
    results: list[ApplyResult] = [ApplyResult(False, None, None, []) for _ in parsed]
    replayed: set[tuple[str, str]] = set()  # learned inside the transaction: never applied twice
    moves = 0
    while True:
        live = [it for it in parsed if it.ops and (it.state, it.op_id) not in replayed]
        if not live:
            return results
        canonical = {it.index: service._canonical(it.state, it.subject) for it in live}
        order = sorted(live, key=lambda it: (it.state, canonical[it.index].encode()))
        states = sorted({it.state for it in live})
        keys = sorted({DocKey(it.state, canonical[it.index].encode()) for it in live})

        def compute(
            docs: dict[DocKey, Document],
            order: list[_Item] = order,
            canonical: dict[int, StateSubject] = canonical,
            keys: list[DocKey] = keys,
        ) -> tuple[list[Write], tuple[dict[int, _Outcome], set[DocKey]]]:
            working: dict[DocKey, Any] = {key: docs[key].value for key in keys}
            paths: dict[DocKey, list[list[str | int]]] = {key: [] for key in keys}
            declarations: dict[DocKey, dict[str, Any]] = {}
            outcomes: dict[int, _Outcome] = {}
            for it in order:
                declaration = service._declaration(docs, it.state)
                service._admit(declaration, it.subject)
                aliases = docs[DocKey(ALIASES, it.state)].body or {}
                if service._resolve(aliases, it.subject) != canonical[it.index]:
                    raise _AliasMoved(None)
                key = DocKey(it.state, canonical[it.index].encode())
                declarations[key] = declaration
                service.check_ops(declaration, it.ops)
                stamped = service.stamp(declaration, it.ops, {**base, "op_id": it.op_id})
                result = apply_ops(working[key], stamped)
                if result.applied:
                    if result.document is not MISSING and type(result.document) is not dict:
                        raise InvalidInput(f"items[{it.index}]: a record document must be a JSON object")
                    working[key] = result.document
                    paths[key] += result.paths
                outcomes[it.index] = _Outcome(key, working[key], list(result.skipped), docs[key].seq)
            writes = []
            for key in keys:
                if not paths[key]:
                    continue
                new = working[key]
                subject = StateSubject.decode(key.subject)
                if new is not MISSING:
                    service.validators.validate(
                        service.effective_schema(declarations[key]),
                        new,
                        f"record {subject.kind}/{subject.key} of state {key.state!r}",
                    )
                writes.append(Write.between(key, docs[key].body, new, docs[key].revision, paths=paths[key]))
            return writes, (outcomes, {w.key for w in writes if w.edits})

        try:
            commit, computed = service.store.update(
                keys,
                compute,
                base,
                shared=[DocKey(CATALOG, s) for s in states] + [DocKey(ALIASES, s) for s in states],
                claims=[(it.state, it.op_id) for it in live if it.op_id is not None],
            )
        except OpIdTaken as taken:
            replayed |= taken.taken  # those items are replays; the others go again
            continue
        except _AliasMoved:
            moves += 1
            if moves >= ALIAS_RETRIES:
                raise Conflict("the batch's subjects kept being folded meanwhile; retry") from None
            continue
        assert computed is not None
        outcomes, changed = computed
        for index, out in outcomes.items():
            seq = commit.seq if out.key in changed else out.seq_before
            data = None if out.data is MISSING else detach(out.data)  # the body the store caches
            results[index] = ApplyResult(True, data, seq, out.skipped)
        return results


def _parse(service: StatesService, index: int, raw: Any) -> _Item:
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
    if op_id is not None and (not isinstance(op_id, str) or not op_id):
        raise InvalidInput(f"{where}: op_id must be a non-empty string")
    subject = subject_of(raw.get("subject"))
    if "template_jq" in raw:
        reference = raw["template_jq"]
        if not isinstance(reference, str) or not reference:
            raise InvalidInput(f"{where}: template_jq names a program ('template.name')")
        ops = service.template_jq_ops(state, subject, reference, raw.get("input"))
    else:
        ops = raw["ops"]
    try:
        parsed = parse_ops(ops)
    except InvalidInput as exc:
        raise type(exc)(f"{where}: {exc.message}") from exc
    return _Item(index, state, subject, parsed, op_id)
