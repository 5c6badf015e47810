"""The one record-write pipeline: every write that changes record data runs here.

Replace, merge, revert, op batches, template-jq updates, units of work, multi-record batches
and attachment reconcile writes are all lists of :class:`RecordWrite` — a single write is a
one-item list. One store transaction locks the records (in ``(state, subject)`` order, so
concurrent writers lock in the same order) and shares the declarations and alias documents
(a fold or re-declare locks them exclusively, so neither interleaves with a write). For each
item, in turn:

1. the declaration (or the one being written in the same transaction) and subject admission;
2. the alias check — the subject must still resolve to the record that was locked; if a fold
   moved it meanwhile, the whole call goes again against the new canonical subjects (at most
   :data:`ALIAS_RETRIES` times);
3. the compare-and-set check (``expect_revision``);
4. the item's change (regime check, ``_trace`` stamp, ops or whole document) on the record as
   the items before it left it;

then every changed record must be an object valid against its declaration's effective schema,
and the writes commit together or not at all. Idempotency is one mechanism: each item's
``op_id`` is a claim in the same commit, scoped by the state and the record's tenant; an item
whose claim was already recorded is a replay — it applies nothing (the others go again without
it) and reports the seq its original write produced.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from stateflow.doc.canonical import JSON
from stateflow.doc.diff import Edit
from stateflow.doc.ops import Op, apply_ops
from stateflow.doc.select import MISSING
from stateflow.errors import Conflict, InvalidInput
from stateflow.states.builtin import record_rule
from stateflow.states.models import StateSubject
from stateflow.states.regimes import check_ops, effective_schema, stamp
from stateflow.states.schema import DocumentInvalid, RecordTooLarge
from stateflow.store import Commit, DocKey, Document, OpIdTaken, Store, Write
from stateflow.store.ledger import scope_in
from stateflow.store.plan import validate_writes
from stateflow.store.spares import SPARES
from stateflow.subjects import Subject, record_name

if TYPE_CHECKING:
    from stateflow.states.service import StatesService

ALIAS_RETRIES: Final = 3
CATALOG: Final = "_states"
ALIASES: Final = "_aliases"

Path = list[str | int]


@dataclass(frozen=True)
class Change:
    """What an item does to its record: the new document (:data:`MISSING`: none) and the
    paths it wrote (empty: nothing changed), with the ops its guards skipped. ``checked``: the
    document is still the whole document the item vouched for (:attr:`RecordWrite.checked`),
    not deepened since (by a ``_trace`` stamp)."""

    document: JSON
    paths: list[Path]
    skipped: list[dict[str, Any]] = field(default_factory=list)
    checked: bool = False


UNCHANGED: Final = Change(MISSING, [])

Transform = Callable[[dict[str, Any], JSON, dict[str, Any]], Change]
"""``(declaration, current document or MISSING, completed origin) → Change``; raises to refuse.
It may run more than once (an optimistic attempt, an alias retry): it keeps no state."""

Redeclare = Callable[[dict[str, Any]], dict[str, Any]]
"""``stored declaration → new declaration`` written in the same transaction as the records."""


class RecordWrite(NamedTuple):
    """One item of a pipeline run (a tuple: made on every record write, and built in C)."""

    state: str
    subject: StateSubject
    transform: Transform
    op_id: str | None = None
    expect_revision: int | None = None
    checked: bool = False
    """the transform writes a whole document checked as plain JSON on its way in (or read from
    the store): the store is told not to walk its values again, and where the change says the
    document is no longer that one (``Change.checked``) the pipeline checks the write itself"""


@dataclass
class Written:
    """One item's outcome. ``replayed``: its ``op_id`` was already applied (``replayed_seq``
    the seq of that write, None if it changed nothing); otherwise the record after the item
    (``data``, MISSING when there is none), at ``seq``/``revision``/``at`` after the commit."""

    replayed: bool = False
    replayed_seq: int | None = None
    canonical: StateSubject | None = None
    aliases: dict[str, Any] = field(default_factory=dict)
    data: JSON = MISSING
    seq: int | None = None
    revision: int = 0
    at: str | None = None
    skipped: list[dict[str, Any]] = field(default_factory=list)
    written: bool = False
    """this item's record changed in the commit"""


class RevisionMismatch(Conflict):
    """A compare-and-set write named a revision the record is no longer (or not yet) at."""

    code = "revision-mismatch"
    http_status = 412


class _AliasMoved(Exception):
    """A subject's alias changed between resolution and the locked read: ``{index: canonical}``."""


def resolve(aliases: Mapping[str, Any], subject: StateSubject) -> StateSubject:
    """A subject through its state's fold aliases (one hop: folds keep aliases flat)."""
    entry = aliases.get(subject.encode())
    return StateSubject.decode(entry["canonical"]) if entry else subject


def folded_into(aliases: Mapping[str, Any], canonical: str) -> list[str]:
    """The subjects (encoded) folded into the one encoded as ``canonical``, in encoded order."""
    return sorted(a for a, e in aliases.items() if e.get("canonical") == canonical)


def expected_revision(current: Document) -> int:
    """The revision a compare-and-set names ``current`` by (``expect_revision``, ``If-Match``,
    the ``ETag`` of a read): its revision while it exists, 0 while it is absent — never written
    or erased. The stored counter of an erased record keeps counting (its history stays), but
    the revision a reader can see of it is 0, so "0" is create-only either way."""
    return current.revision if current.body is not None else 0


ANY_REVISION: Final = -1
"""The checked ``expect_revision`` of ``"*"`` (HTTP ``If-Match: *``): the record must exist, at
any revision (RFC 9110: ``*`` is false when there is no current representation)."""


def check_expected(current: Document, expect: int | None, subject: StateSubject, state: str) -> None:
    """The compare-and-set check of every record write (the pipeline's items, erase)."""
    if expect is None:
        return
    now = expected_revision(current)
    if expect == ANY_REVISION:
        if not now:
            raise RevisionMismatch(
                f"{record_name(state, subject.encode())} does not exist (revision 0), "
                'and "*" needs a current record; write it without the condition, or create-only with 0'
            )
        return
    if now != expect:
        where = f"is at revision {now}" if now else "does not exist (revision 0)"
        raise RevisionMismatch(
            f"{record_name(state, subject.encode())} {where}, not {expect}; read it again and retry"
        )


def _check_valid(
    service: StatesService, key: DocKey, declared: dict[str, Any], data: JSON, before: JSON
) -> None:
    """A changed record against its declaration's effective schema, and against its state's
    record rule too (``builtin.record_rule``: the one its declaration names, else its name's); a
    refusal names the record as every message does (``subjects.record_name``: its kind, key,
    target and state, whichever door wrote it). First its size: no more top-level
    members than the configuration's limit (or than ``before``, the record as it was, had)."""
    if data is MISSING:
        return
    limit = service.config.states.max_record_members
    if type(data) is dict and len(data) > limit and len(data) > (len(before) if type(before) is dict else 0):
        raise RecordTooLarge(
            f"{key} would hold {len(data):,} top-level members, over the "
            f"{limit:,} a record may hold ([states] max_record_members): split it over several records"
        )
    schema = effective_schema(declared)
    if not service.validators.valid(schema, data):
        service.validators.validate(schema, data, str(key))
    rule = record_rule(key.state, declared)
    why = None if rule is None else rule(data, StateSubject.decode(key.subject).key)
    if why is not None:
        raise DocumentInvalid(f"{key} is refused: {why}")


def op_scope(state: str, subject: StateSubject) -> str:
    """The ledger scope of an item's ``op_id``: its state and its record's tenant. Nothing crosses
    a tenant: another tenant's write with the same id is its own, not a replay of this one."""
    return scope_in(state, f"{subject.target_kind}/{subject.target_name}")


def _replayed(service: StatesService, scope: str, op_id: str | None) -> Written:
    """An item whose ``op_id`` was already applied: the seq its original write produced."""
    original = service.store.applied_op(op_id or "", scope)
    return Written(replayed=True, replayed_seq=original if type(original) is int else None)


_UNSCOPED: weakref.WeakKeyDictionary[Store, dict[str, bool]] = weakref.WeakKeyDictionary()
"""Per store, whether a state held claims scoped by the state alone when first asked: none is
made any more, so a state found without them (they expire with retention) is not asked again."""


def _unscoped_replay(service: StatesService, state: str, subject: StateSubject, op_id: str) -> Written | None:
    """A replay of an id claimed while claims were scoped by the state alone, for the tenant whose
    record that write changed (another tenant's write with the id goes ahead). A claim whose write
    changed nothing, or whose transition is pruned, names no tenant: it stays a replay for all."""
    known = _UNSCOPED.setdefault(service.store, {})
    if state not in known:
        known[state] = service.store.claims_in(state)
    if not known[state]:
        return None
    original = service.store.applied_op(op_id, state)
    if original is False:
        return None
    if type(original) is int:
        found = service.store.transitions(after_seq=original - 1, limit=1)
        if found and found[0].seq == original:
            tenants = {  # (as stored: a subject the model now refuses still names its tenant)
                (s.target_kind, s.target_name)
                for c in found[0].changes
                if c.key.state == state and (s := Subject.decode(c.key.subject))
            }
            if tenants and subject.tenant not in tenants:
                return None
    return Written(replayed=True, replayed_seq=original if type(original) is int else None)


def _moved_again(moves: int) -> int:
    """One more alias retry, refused after :data:`ALIAS_RETRIES`."""
    if moves + 1 >= ALIAS_RETRIES:
        raise Conflict("the written subjects kept being folded meanwhile; retry") from None
    return moves + 1


def _committed(written: Written, commit: Commit, key: DocKey) -> None:
    """An item's outcome once its record changed in ``commit``."""
    written.seq, written.at = commit.seq, commit.at
    written.revision = commit.revisions[key]
    written.written = True


def run(
    service: StatesService,
    items: Sequence[RecordWrite],
    origin: dict[str, Any],
    *,
    labels: Sequence[str] | None = None,
    redeclare: Mapping[str, Redeclare] | None = None,
    canonical: Sequence[StateSubject] | None = None,
) -> list[Written]:
    """Run ``items`` through the pipeline in one transaction; one :class:`Written` per item, in
    input order. ``origin`` is the completed origin (an item's ``op_id`` is stamped into its own
    copy). ``labels`` prefix an item's refusals (``items[3]``); ``redeclare`` rewrites states'
    declarations in the same transaction (the records then answer to the new ones);
    ``canonical`` gives subjects already resolved (else each is assumed its own canonical
    subject, and the alias check corrects that)."""
    results: list[Written | None] = [None] * len(items)
    resolved = list(canonical) if canonical is not None else [it.subject for it in items]
    replayed: set[int] = set()
    scopes = [op_scope(it.state, it.subject) for it in items]
    for i, it in enumerate(items):
        if it.op_id is not None and (legacy := _unscoped_replay(service, it.state, it.subject, it.op_id)):
            replayed.add(i)
            results[i] = legacy
    moves = 0
    commit_origin = {**origin, "op_id": items[0].op_id} if len(items) == 1 and items[0].op_id else origin
    while True:
        live = [i for i in range(len(items)) if i not in replayed]
        if not live and (items or not redeclare):  # (a redeclare with no records runs once)
            return [r if r is not None else Written() for r in results]
        keys = {i: DocKey(items[i].state, resolved[i].encode()) for i in live}
        if len(live) == 1 and not redeclare:  # the common case: one record, nothing to sort
            order, states, record_keys = live, [items[live[0]].state], [keys[live[0]]]
        else:
            order = sorted(live, key=lambda i: (keys[i].state, keys[i].subject, i))
            states = sorted({items[i].state for i in live} | set(redeclare or ()))
            record_keys = sorted(set(keys.values()))
        catalog = [DocKey(CATALOG, s) for s in states]
        alias_keys = {s: DocKey(ALIASES, s) for s in states}
        rewritten = [k for k in catalog if redeclare and k.subject in redeclare]
        # an erase takes the aliases pointing at its record with it: their documents are written
        erasing = sorted({keys[i].state for i in live if items[i].transform is erase_record})
        unaliased = [alias_keys[s] for s in erasing]

        def compute(
            docs: dict[DocKey, Document],
            order: list[int] = order,
            states: list[str] = states,
            keys: dict[int, DocKey] = keys,
            record_keys: list[DocKey] = record_keys,
            catalog: list[DocKey] = catalog,
            alias_keys: dict[str, DocKey] = alias_keys,
            unaliased: list[DocKey] = unaliased,
        ) -> tuple[list[Write], tuple[dict[int, Written], set[DocKey]]]:
            declarations: dict[str, dict[str, Any]] = {}
            writes: list[Write] = []
            for state, key in zip(states, catalog, strict=True):
                declared = service._declared(docs[key].body, state)
                if redeclare and state in redeclare:
                    new = redeclare[state](declared)
                    writes.append(Write.between(key, docs[key].body, new, docs[key].revision))
                    declared = new
                declarations[state] = declared
            aliases_of = {state: docs[key].body or {} for state, key in alias_keys.items()}
            moved: dict[int, StateSubject] = {}
            for i in order:
                it = items[i]
                service._admit(declarations[it.state], it.subject)
                now = resolve(aliases_of[it.state], it.subject)
                if now is not resolved[i] and now != resolved[i]:  # (model equality is slow)
                    moved[i] = now
            if moved:
                raise _AliasMoved(moved)
            working: dict[DocKey, JSON] = {key: docs[key].value for key in record_keys}
            paths: dict[DocKey, list[Path]] = {key: [] for key in record_keys}
            out: dict[int, Written] = {}
            for i in order:
                it, key = items[i], keys[i]
                current = docs[key]
                check_expected(current, it.expect_revision, resolved[i], it.state)
                stamped = {**origin, "op_id": it.op_id} if it.op_id else origin
                try:
                    change = it.transform(declarations[it.state], working[key], stamped)
                except InvalidInput as exc:
                    if labels is None:
                        raise
                    raise type(exc)(f"{labels[i]}: {exc.message}") from exc
                if change.paths:
                    if change.document is not MISSING and type(change.document) is not dict:
                        where = f"{labels[i]}: " if labels is not None else ""
                        raise InvalidInput(f"{where}a record document must be a JSON object")
                    working[key] = change.document
                    paths[key] += change.paths
                out[i] = Written(
                    canonical=resolved[i],
                    aliases=aliases_of[it.state],
                    data=working[key],
                    seq=current.seq,
                    revision=current.revision,
                    at=current.at,
                    skipped=change.skipped,
                )
            for key in record_keys:
                if not paths[key]:
                    continue
                new = working[key]
                _check_valid(service, key, declarations[key.state], new, docs[key].body)
                writes.append(
                    Write.between(
                        key, docs[key].body, new, docs[key].revision, changed=paths[key], paths=paths[key]
                    )
                )
            for alias_key in unaliased:
                erased = {
                    k.subject for k in record_keys if k.state == alias_key.subject and working[k] is MISSING
                }
                gone = [a for a, e in aliases_of[alias_key.subject].items() if e.get("canonical") in erased]
                if gone:
                    writes.append(Write(alias_key, [Edit((a,)) for a in gone], docs[alias_key].revision))
            return writes, (out, {w.key for w in writes if w.edits})

        try:
            commit, computed = service.store.update(
                [*record_keys, *rewritten, *unaliased],
                compute,
                commit_origin,
                shared=[k for k in catalog if k not in rewritten]
                + [k for k in alias_keys.values() if k not in unaliased],
                claims=[(scopes[i], op) for i in live if (op := items[i].op_id) is not None],
                optimistic=not rewritten,  # compute keeps no state between calls
            )
        except OpIdTaken as taken:
            for i in live:
                if (scopes[i], items[i].op_id) in taken.taken:
                    replayed.add(i)
                    results[i] = _replayed(service, scopes[i], items[i].op_id)
            continue
        except _AliasMoved as exc:
            moves = _moved_again(moves)
            for i, now in exc.args[0].items():
                resolved[i] = now
            continue
        assert computed is not None
        outcomes, changed = computed
        for i, written in outcomes.items():
            if commit.changed and keys[i] in changed:
                _committed(written, commit, keys[i])
            results[i] = written
        return [r if r is not None else Written() for r in results]


class _Aliased(Exception):
    """A state with aliases, met by :func:`run_parts` (which names records by their own keys)."""


def run_parts(
    service: StatesService,
    state: str,
    parts: Sequence[Sequence[DocKey]],
    items_of: Callable[[Sequence[DocKey], Mapping[DocKey, Document]], Sequence[RecordWrite]],
    origin: dict[str, Any],
    beside: Callable[[Sequence[DocKey]], Sequence[DocKey]] | None = None,
) -> Commit | None:
    """:func:`run` for many records of one state, in parts of one transaction and one transition
    (``Store.update_parts``): each part's records are read, changed and sent before the next
    part's are read, so what is held at once is one part, not the batch. ``items_of(part, docs)``:
    the items of a part's records, one per key, in order, each naming its record by its own key,
    with no op id or expected revision (``docs``: the part's records and those ``beside`` names,
    read with it). The same steps as :func:`run` — the declaration shared,
    subject admission, the item's change, the record's validity. None, nothing written, where
    the state has aliases: a folded subject resolves elsewhere and an erase takes its aliases
    with it, which :func:`run` does (the caller runs that instead)."""
    catalog, alias_key = DocKey(CATALOG, state), DocKey(ALIASES, state)

    def compute(part: Sequence[DocKey], docs: dict[DocKey, Document]) -> list[Write]:
        aliases = docs.get(alias_key)
        if aliases is not None and aliases.body:
            raise _Aliased
        found = docs.get(catalog)
        declared = service._declared(None if found is None else found.body, state)
        writes: list[Write] = []
        for key, it in zip(part, items_of(part, docs), strict=True):
            if (
                it.op_id is not None
                or it.expect_revision is not None
                or DocKey(it.state, it.subject.encode()) != key
            ):
                raise ValueError(
                    f"run_parts: an item of {key} must name its record, with no op id or revision"
                )
            service._admit(declared, it.subject)
            current = docs[key]
            change = it.transform(declared, current.value, origin)
            if not change.paths:
                continue
            data = change.document
            if data is not MISSING:
                if type(data) is not dict:
                    raise InvalidInput("a record document must be a JSON object")
                _check_valid(service, key, declared, data, current.body)
            paths = list(change.paths)
            writes.append(
                Write.between(key, current.body, data, current.revision, changed=paths, paths=paths)
            )
        return writes

    try:
        return service.store.update_parts(parts, compute, origin, shared=[catalog, alias_key], beside=beside)
    except _Aliased:
        return None


def run_one(service: StatesService, item: RecordWrite, origin: dict[str, Any]) -> Written:
    """:func:`run` for one record write with no redeclare, labels or pre-resolved subject — every
    single write takes this path. The same steps and refusals, without what only several items
    need (sorting, per-item maps, the working copies a later item reads)."""
    state, subject, op_id, expect = item.state, item.subject, item.op_id, item.expect_revision
    vouched = item.checked
    catalog_key, alias_key = DocKey(CATALOG, state), DocKey(ALIASES, state)
    stamped = {**origin, "op_id": op_id} if op_id else origin
    scope = op_scope(state, subject) if op_id is not None else ""  # (named only for a claim)
    claims = [(scope, op_id)] if op_id is not None else []
    if op_id is not None and (legacy := _unscoped_replay(service, state, subject, op_id)):
        return legacy
    resolved = subject
    moves = 0
    while True:
        key = DocKey(state, resolved.encode())

        def compute(
            docs: dict[DocKey, Document], key: DocKey = key, resolved: StateSubject = resolved
        ) -> tuple[list[Write], tuple[Written, bool]]:
            declared = service._declared(docs[catalog_key].body, state)
            aliases = docs[alias_key].body or {}
            service._admit(declared, subject)
            now = resolve(aliases, subject) if aliases else subject  # (no folds: itself)
            if now is not resolved and now != resolved:  # (model equality is slow)
                raise _AliasMoved({0: now})
            current = docs[key]
            if expect is not None:
                check_expected(current, expect, resolved, state)
            change = item.transform(declared, current.value, stamped)
            data = current.value
            writes: list[Write] = []
            if change.paths:
                data = change.document
                if data is not MISSING:
                    if type(data) is not dict:
                        raise InvalidInput("a record document must be a JSON object")
                    _check_valid(service, key, declared, data, current.body)
                paths = list(change.paths)
                write = Write.between(key, current.body, data, current.revision, changed=paths, paths=paths)
                if vouched and not change.checked:  # the store's own check, made here
                    validate_writes([write], None)
                writes.append(write)
            written = Written(
                canonical=resolved,
                aliases=aliases,
                data=data,
                seq=current.seq,
                revision=current.revision,
                at=current.at,
                skipped=change.skipped,
            )
            return writes, (written, bool(writes) and bool(writes[0].edits))

        try:
            commit, computed = service.store.update(
                [key],
                compute,
                stamped,
                shared=[catalog_key, alias_key],
                claims=claims,
                optimistic=True,  # compute keeps no state between calls
                checked=vouched,
            )
        except OpIdTaken as taken:
            if (scope, op_id) in taken.taken:
                return _replayed(service, scope, op_id)
            continue
        except _AliasMoved as exc:
            moves = _moved_again(moves)
            resolved = exc.args[0][0]
            continue
        assert computed is not None
        written, changed = computed
        if commit.changed and changed:
            _committed(written, commit, key)
        return written


def erase_record(declaration: dict[str, Any], current: JSON, origin: dict[str, Any]) -> Change:
    """The transform of an item that erases its record, as ``StatesService.erase`` does (the
    aliases pointing at it go in the same transaction: :func:`run` writes them); an absent
    record is left as it is."""
    return UNCHANGED if current is MISSING else Change(MISSING, [[]])


def ops_transform(ops: list[Op]) -> Transform:
    """An op batch as a pipeline change: the regime check, the ``_trace`` stamp, the ops
    (guards read the record as the items before left it)."""

    def transform(declaration: dict[str, Any], current: JSON, origin: dict[str, Any]) -> Change:
        check_ops(declaration, ops)
        result = apply_ops(current, stamp(declaration, ops, origin), copies=SPARES)
        if not result.applied:
            return Change(current, [], list(result.skipped))
        return Change(result.document, result.paths, list(result.skipped))

    return transform
