"""The declared-states service: catalog, records, audit, listings, retention.

Records are store documents ``(<state>, <encoded subject>)``. The catalog keeps each declaration
as a document of the reserved state ``_states``; fold aliases of a state live in one document of
``_aliases`` (one member per alias subject, so resolving an alias reads one small member).
Every record write runs in one store transaction that also locks the declaration, so a
re-declare and a write never interleave. Every write is stamped with its completed origin.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias, cast

from pydantic import ValidationError

from stateflow.config import Config
from stateflow.doc.canonical import JSON, checked_copy, detach
from stateflow.doc.diff import Edit, diff
from stateflow.doc.merge import patch_between
from stateflow.doc.ops import parse_ops
from stateflow.doc.select import MISSING
from stateflow.errors import Conflict, CorruptStore, InvalidInput, NotFound, StoreReadOnly
from stateflow.states import pipeline, regimes, retention
from stateflow.states.attachments import (
    Attachments,
    AttachReconciler,
    AttachValidator,
    DetachReferee,
)
from stateflow.states.builtin import BUILTIN_STATES
from stateflow.states.listing import PAGE_MAX, Listing, _plain
from stateflow.states.models import (
    EXEMPT_WITH_DAYS,
    Declaration,
    DoorContext,
    StateSubject,
    WriteOrigin,
    op_id_problem,
    renamed,
)
from stateflow.states.pipeline import (
    UNCHANGED,
    Change,
    RecordWrite,
    RevisionMismatch,
    Transform,
    Written,
    ops_transform,
)
from stateflow.states.recheck import check_records
from stateflow.states.results import ApplyResult as ApplyResult  # (its home; imported from here too)
from stateflow.states.results import (
    Attached,
    AttachmentUpdated,
    Consumer,
    DeclarationView,
    Deleted,
    Detached,
    Diff,
    Erased,
    FoldReport,
    JqInput,
    JqUpdate,
    PruneReport,
    Record,
    SearchPage,
    StateAttachment,
    Stats,
    SubjectRef,
    SubjectsPage,
    Template,
    TemplateRow,
    WritesPage,
)
from stateflow.states.schema import ValidatorCache, check_base_schema, narrowing
from stateflow.states.template_catalog import TemplateCatalog
from stateflow.states.template_jq import TemplateJq
from stateflow.store import DocKey, Document, RevisionNotFound, Store, Write

if TYPE_CHECKING:
    from stateflow.jq import JqRunner
    from stateflow.states.unit import Unit

CATALOG: Final = "_states"
ALIASES: Final = "_aliases"


class StateNotFound(NotFound):
    code = "state-not-found"


class SubjectRefused(InvalidInput):
    code = "subject-refused"


class NonAdditiveRedeclare(Conflict):
    code = "non-additive-redeclare"


class DeclarationInUse(Conflict):
    code = "declaration-in-use"


class StateExists(Conflict):
    """A create-only declare (``replace=False``) of a state declared already."""

    code = "state-exists"


class FoldRefused(Conflict):
    code = "fold-refused"


class BuiltinState(Conflict):
    """The built-in ``memory`` state holds every agent's memory: it is never deleted, and a
    re-declare may only add to it."""

    code = "builtin-state"


def catalog_row(name: str, body: Any) -> dict[str, Any]:
    """A stored declaration, checked for the fields every reader relies on: a row changed by a
    low-level write is ``corrupt-store`` naming the state, never a ``KeyError`` later."""
    problem = None
    if not isinstance(body, dict):
        problem = "it is not an object"
    elif not isinstance(body.get("schema"), dict):
        problem = "'schema' is missing or not an object"
    elif not isinstance(body.get("subject_kinds"), list) or not body["subject_kinds"]:
        problem = "'subject_kinds' is missing or empty"
    elif not isinstance(body.get("default_subject_kind"), str):
        problem = "'default_subject_kind' is missing"
    if problem is not None:
        raise CorruptStore(
            f"the catalog row of state {name!r} is corrupt ({problem}); restore it from a backup "
            f"or re-write it with `stateflow doc put {CATALOG} {name} --raw`",
            advised=True,
        )
    row: dict[str, Any] = body
    return row


@dataclass(frozen=True)
class ConsumerRow:
    kind: str
    name: str | None = None
    detail: str | None = None
    unavailable: str | None = None

    def to_json(self) -> Consumer:
        return cast(Consumer, {k: v for k, v in self.__dict__.items() if v is not None})


ConsumerLister = Callable[[str], list[ConsumerRow]]


def _invalid(exc: ValidationError, what: str) -> InvalidInput:
    details = "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or what}: {e['msg'].removeprefix('Value error, ')}"
        for e in exc.errors()
    )
    return InvalidInput(f"invalid {what}: {details}")


def parse_declaration(name: str, raw: Any) -> Declaration:
    """``raw`` as the declaration of ``name``, or the refusal its shape alone earns: it reads
    nothing, so a door may check a declaration before it opens a store."""
    if not isinstance(raw, dict):
        raise InvalidInput("a declaration must be a JSON object")
    if said := renamed(raw, name, "state"):
        raise InvalidInput(said)
    for computed, what in (
        ("effective_schema", "effective_schema is computed by the platform"),
        ("regimes", "regimes are computed by the platform"),
        ("updated_at", "updated_at is set by the platform"),
    ):
        if raw.get(computed) is not None:
            raise InvalidInput(what)
    try:
        decl = Declaration.model_validate({**raw, "name": name})
    except ValidationError as exc:
        raise InvalidInput(str(_invalid(exc, "declaration"))) from exc
    check_base_schema(decl.schema_)
    return decl


def subject_of(raw: Any) -> StateSubject:
    if isinstance(raw, StateSubject):
        return raw
    if type(raw) is dict and len(raw) == 4:
        try:
            return subject_from(raw["target_kind"], raw["target_name"], raw["kind"], raw["key"])
        except (KeyError, TypeError):
            pass  # not the four string fields: let the model say what is wrong
    try:
        return StateSubject.model_validate(raw)
    except ValidationError as exc:
        raise SubjectRefused(str(_invalid(exc, "subject"))) from exc


@functools.lru_cache(maxsize=4096)
def subject_from(target_kind: str, target_name: str, kind: str, key: str) -> StateSubject:
    """The subject of four strings (what :func:`subject_of` makes of a dict of them). Subjects
    repeat across calls: validate each distinct one once (frozen, so shareable)."""
    try:
        return StateSubject(target_kind=target_kind, target_name=target_name, kind=kind, key=key)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise SubjectRefused(str(_invalid(exc, "subject"))) from exc


_NO_ORIGIN: Final = WriteOrigin()
_NO_CONTEXT: Final = DoorContext()


def origin_of(raw: Any) -> WriteOrigin:
    if raw is None:
        return _NO_ORIGIN  # frozen: one shared default
    if isinstance(raw, WriteOrigin):
        return raw
    try:
        return WriteOrigin.model_validate(raw)
    except ValidationError as exc:
        raise InvalidInput(str(_invalid(exc, "origin"))) from exc


Expect: TypeAlias = int | Literal["*"] | None
"""A compare-and-set's ``expect_revision``: the revision N (0: absent), ``"*"`` (it exists, at
any revision) or None (no check)."""


def check_revision(value: Any, what: str = "expect_revision") -> int | None:
    if value is None:
        return None
    if value == "*" and what == "expect_revision":
        return pipeline.ANY_REVISION
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(f"{what} must be a non-negative integer, got {value!r}")
    return value


def check_as_of(revision: Any, seq: Any) -> tuple[int | None, int | None]:
    """An as-of read's ``revision`` or ``seq`` (at most one), checked: by the read and, before
    anything is sent (a query string would turn ``"1"`` into 1), by the HTTP client."""
    if revision is not None and seq is not None:
        raise InvalidInput("give revision or seq, not both")
    return check_revision(revision, "revision"), check_revision(seq, "seq")


def check_span(from_revision: Any, to_revision: Any) -> tuple[int, int | None]:
    """A diff's ``from`` (required) and ``to`` revisions, checked (by the diff and the HTTP client)."""
    low = check_revision(from_revision, "from")
    if low is None:
        raise InvalidInput("diff needs the revision to compare from")
    return low, check_revision(to_revision, "to")


class StatesService:
    """The declared-states service: a thin facade over its parts.

    - catalog and records live here: declarations (``declare``, ``get_declaration``, …), record
      reads, as-of reads, diff and revert; every record write runs through the record-write
      pipeline (:mod:`stateflow.states.pipeline`), under the rules of
      :mod:`stateflow.states.regimes` (pure);
    - ``templates`` (:class:`~stateflow.states.template_catalog.TemplateCatalog`): state templates
      and plugin seeds;
    - ``attaching`` (:class:`~stateflow.states.attachments.Attachments`): templates attached on
      states, reconcile, and the attach/detach hooks plugins register;
    - ``programs`` (:class:`~stateflow.states.template_jq.TemplateJq`): template jq programs and
      the jq worker pool;
    - ``listing`` (:class:`~stateflow.states.listing.Listing`): audit trail, subjects, search,
      stats; retention is :func:`stateflow.states.retention.prune`.

    The facade keeps the published method names (``put_template``, ``attach``,
    ``template_jq_update``, …); each delegates to its part. ``acting_as`` gives a copy bound to a
    door context whose parts act for that copy.
    """

    def __init__(self, store: Store, config: Config | None = None) -> None:
        self.store = store
        self.config = config or Config()
        self.default_context = _NO_CONTEXT
        self.validators = ValidatorCache()
        self.consumer_listers: dict[str, ConsumerLister] = {}
        self.templates = TemplateCatalog(self)
        self.attaching = Attachments(self)
        self.programs = TemplateJq(self)
        self.listing = Listing(self)
        self._builtins_installed = False
        self._unstored: dict[str, dict[str, Any]] = {}
        """built-in declarations a read-only store does not hold, served as this version declares
        them (shared with the ``acting_as`` copies: filled in place)"""
        self._last_declaration: tuple[Any, str, dict[str, Any]] | None = None
        self._last_origin: tuple[WriteOrigin, DoorContext, str, dict[str, Any]] | None = None

    def acting_as(self, context: DoorContext) -> StatesService:
        """This service with ``context`` (door, actor) stamped on every write that passes none —
        sharing the store, validators, templates, hooks and jq workers. A door binds its caller's
        identity once instead of passing it to every call."""
        bound = copy.copy(self)
        bound.default_context = context
        for part in ("templates", "attaching", "programs", "listing"):
            rebound = copy.copy(getattr(self, part))  # shares the part's registries and pool
            rebound.svc = bound
            setattr(bound, part, rebound)
        return bound

    def close(self) -> None:
        """Stop the jq workers (the store is the caller's to close)."""
        self.programs.close()

    # ------------------------------------------------------------------ templates (the parts)

    @property
    def seeds(self) -> dict[str, dict[str, Any]]:
        return self.templates.seeds

    @property
    def attach_validators(self) -> list[AttachValidator]:
        return self.attaching.validators

    @property
    def attach_reconcilers(self) -> list[AttachReconciler]:
        return self.attaching.reconcilers

    @property
    def detach_referees(self) -> list[DetachReferee]:
        return self.attaching.referees

    def use_jq(self, runner: JqRunner) -> None:
        """Run jq on ``runner`` (a server sizes and limits its pool from its configuration)."""
        self.programs.use_jq(runner)

    def jq(self) -> JqRunner:
        """The jq worker pool (limits, workers and queue from the service's configuration)."""
        return self.programs.jq()

    def get_template(self, name: str) -> Template:
        return self.templates.get(name)

    def list_templates(self) -> list[TemplateRow]:
        return self.templates.listed()

    def put_template(
        self,
        name: str,
        raw: Any,
        *,
        replace: bool = False,
        context: DoorContext | None = None,
        shipped: bool = False,
    ) -> Template:
        """Upload a template; with ``replace`` every live attachment is re-validated first."""
        return self.templates.put(name, raw, replace=replace, context=context, shipped=shipped)

    def delete_template(self, name: str, *, context: DoorContext | None = None) -> Deleted:
        return self.templates.delete(name, context=context)

    def register_seed(self, raw: dict[str, Any]) -> None:
        """A template a plugin ships; installed at start when the store has none of that name."""
        self.templates.register_seed(raw)

    def install_seeds(self) -> None:
        self.templates.install_seeds()

    def attachments(self, name: str) -> list[StateAttachment]:
        return self.attaching.listed(name)

    def get_attachment(self, name: str, template: str) -> StateAttachment:
        return self.attaching.get(name, template)

    def attach(self, name: str, template: str, body: Any, *, context: DoorContext | None = None) -> Attached:
        return self.attaching.attach(name, template, body, context=context)

    def update_attachment(
        self, name: str, template: str, body: Any, *, context: DoorContext | None = None
    ) -> AttachmentUpdated:
        """New declarations for an attachment; items they no longer cover are closed (reconcile)
        in the same transaction."""
        return self.attaching.update(name, template, body, context=context)

    def detach(self, name: str, template: str, *, context: DoorContext | None = None) -> Detached:
        return self.attaching.detach(name, template, context=context)

    def register_detach_referee(self, referee: DetachReferee) -> None:
        self.attaching.register_detach_referee(referee)

    def register_attach_validator(self, validator: AttachValidator) -> None:
        """``validator(state, template, declarations, effective_schema)`` raises to refuse an attach."""
        self.attaching.register_attach_validator(validator)

    def register_attach_reconciler(self, reconciler: AttachReconciler) -> None:
        """``reconciler(state, template, operation, previous, new, options)`` returns
        ``[(subject, ops)]`` to apply in the same transaction as the attach or declarations
        change; ``operation`` is ``"attach"`` (``previous`` is None) or ``"update_declarations"``."""
        self.attaching.register_attach_reconciler(reconciler)

    def template_jq_purpose(self, name: str, reference: str) -> str:
        """``input`` or ``update``: what the named program is for."""
        return self.programs.purpose(name, reference)

    def template_jq_params(self, name: str, reference: str) -> list[str]:
        """The params the named ``update`` program declares (the keys its input must carry)."""
        return list(self.programs.program(name, reference, "update")[2].get("params", []))

    def template_jq_input(self, name: str, subject: Any, reference: str, params: dict[str, Any]) -> JqInput:
        """Evaluate an ``input`` program over the record's subtree; writes nothing."""
        return self.programs.input(name, subject, reference, params)

    def template_jq_update(
        self,
        name: str,
        subject: Any,
        reference: str,
        input_value: Any = None,
        *,
        op_id: str | None = None,
        origin: Any = None,
        context: DoorContext | None = None,
        expect_revision: Expect = None,
    ) -> JqUpdate:
        """Evaluate an ``update`` program and apply the op batch it returns, as the writer's
        ``origin`` (its meta carries ``template_jq``: the program) and under its compare-and-set."""
        result = self.template_jq_apply(
            name,
            subject,
            reference,
            input_value,
            op_id=op_id,
            origin=origin,
            context=context,
            expect_revision=expect_revision,
        )
        return {"name": reference, **result.to_json()}

    def template_jq_apply(
        self,
        name: str,
        subject: Any,
        reference: str,
        input_value: Any = None,
        *,
        op_id: str | None = None,
        origin: Any = None,
        context: DoorContext | None = None,
        expect_revision: Expect = None,
    ) -> ApplyResult:
        """:meth:`template_jq_update`, answering the batch's :class:`ApplyResult` (with the
        record's ``revision``, which the HTTP route answers as its ETag, as ``…/deltas`` does)."""
        return self.programs.apply(
            name,
            subject,
            reference,
            input_value,
            op_id=op_id,
            origin=origin_of(origin),
            context=context,
            expect_revision=expect_revision,
        )

    def template_jq_ops(self, name: str, subject: Any, reference: str, input_value: Any = None) -> Any:
        """The op batch an ``update`` program returns for the record (nothing is applied)."""
        return self.programs.ops(name, subject, reference, input_value)

    # the write-path rules (pure; :mod:`stateflow.states.regimes`), under the service's names
    check_ops = staticmethod(regimes.check_ops)
    check_document_write = staticmethod(regimes.check_document_write)
    stamp = staticmethod(regimes.stamp)
    stamp_document = staticmethod(regimes.stamp_document)

    # ------------------------------------------------------------------ effective schema

    # what a declaration enforces (pure; :mod:`stateflow.states.regimes`), under the service's names
    effective_schema = staticmethod(regimes.effective_schema)
    _composing = staticmethod(regimes.composing)
    _traced = staticmethod(regimes.traced)
    regimes = staticmethod(regimes.served)  # last: it shadows the module in this class body

    def register_consumer_lister(self, kind: str, lister: ConsumerLister) -> None:
        if kind in self.consumer_listers:
            raise InvalidInput(f"a consumer lister for {kind!r} is already registered")
        self.consumer_listers[kind] = lister

    # ------------------------------------------------------------------ catalog

    def install_builtins(self) -> None:
        """Declare the built-in ``memory`` state and install registered template seeds
        (idempotent)."""
        if self._builtins_installed:
            return
        from stateflow.states.builtin import MEMORY_DECLARATION

        current = self.store.get(DocKey(CATALOG, "memory")).body
        try:
            # (re)declare when missing or when this version's schema only adds to the stored
            # one; an operator's additive extension of the stored declaration is kept
            if current is None or (
                isinstance(current.get("schema"), dict)
                and current["schema"] != MEMORY_DECLARATION["schema"]
                and not narrowing(current["schema"], MEMORY_DECLARATION["schema"])
            ):
                # an operator's retention for memory survives this version's re-declare
                kept = (
                    {"retention_days": current["retention_days"]}
                    if current and current.get("retention_days")
                    else {}
                )
                self.declare(
                    "memory",
                    {**MEMORY_DECLARATION, **kept},
                    context=DoorContext(door="operator", actor="stateflow"),
                )
            self.install_seeds()
            self._give_aliases_rows()
        except StoreReadOnly:
            # a read-only store (medium or ?mode=ro) serves the declarations it holds; one
            # written only through memory tools holds no row for memory, which is still there
            if current is None:
                built_in = Declaration.model_validate({**MEMORY_DECLARATION, "name": "memory"})
                self._unstored["memory"] = built_in.stored()
        self._builtins_installed = True

    def _give_aliases_rows(self) -> None:
        """Make the row of every declared state's aliases document that has none — a state
        declared by an earlier version, which made it at the state's first fold, or ``memory``
        declared by one — before this process writes: a write shares that row, and one that
        found none could miss a fold that made it meanwhile (see ``fold``). Once per store
        (then one query finding none), an absent document's row only: no transition."""
        missing = self.store.missing_rows(ALIASES, CATALOG)
        if missing:
            self.store.update([DocKey(ALIASES, name) for name in missing], _no_writes)

    def _declaration_view(self, body: dict[str, Any], revision: int, at: str | None) -> DeclarationView:
        """The caller's own copy of a declaration (``body`` is the store's cached object)."""
        view = {k: v for k, v in body.items() if k not in ("attachments", "effective")}
        view.setdefault("retention_exempt", False)  # (declarations stored before it existed)
        out: DeclarationView = detach(
            {
                **view,
                "effective_schema": self.effective_schema(body),
                "regimes": self.regimes(body),
                "attachments": [
                    {"template": t, **{k: a[k] for k in ("path", "parameters", "declarations")}}
                    for t, a in sorted(body.get("attachments", {}).items())
                ],
                "updated_at": at,
                "version": revision,
            }
        )
        return out

    def list_declarations(self) -> list[DeclarationView]:
        out = []
        after = None
        while True:
            page = self.store.scan(CATALOG, after=after, limit=PAGE_MAX)
            if not page:
                break
            docs = self.store.read([x.key for x in page])
            for item in page:
                body = docs[item.key].body
                if body is not None:
                    out.append(
                        self._declaration_view(catalog_row(item.key.subject, body), item.revision, item.at)
                    )
            after = page[-1].key.subject
        listed = {view["name"] for view in out}
        missing = [self.get_declaration(name) for name in self._unstored if name not in listed]
        return sorted([*out, *missing], key=lambda view: view["name"]) if missing else out

    def get_declaration(self, name: str) -> DeclarationView:
        doc = self.store.get(DocKey(CATALOG, name))
        if doc.body is None:
            return self._declaration_view(self._declared(None, name), 0, None)
        return self._declaration_view(catalog_row(name, doc.body), doc.revision, doc.at)

    def declare(
        self, name: str, raw: Any, *, replace: bool = True, context: DoorContext | None = None
    ) -> DeclarationView:
        """Create or re-declare a state. Re-declaring is additive-only while records exist (and
        always, for the built-in ``memory`` state); ``replace=False`` only creates: a state
        declared already is refused (``state-exists``), nothing changed. Answers the
        declaration as a read does."""
        decl = parse_declaration(name, raw)
        stored = decl.stored()
        key = DocKey(CATALOG, name)

        def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], dict[str, Any]]:
            old = docs[key].body
            if old is not None and not replace:  # (checked on the row the write locks: two creates, one wins)
                raise StateExists(
                    f"state {name!r} is declared already — to re-declare it (additively), declare it "
                    "with replace (PUT without ?replace=false over HTTP; stateflow states put without "
                    "--create-only; replace=True in Python)"
                )
            if old is not None:
                catalog_row(name, old)
            if old is not None and name in BUILTIN_STATES:
                why = narrowing(old["schema"], stored["schema"])
                removed = sorted(set(old["subject_kinds"]) - set(stored["subject_kinds"]))
                if why or removed or stored["default_subject_kind"] != old["default_subject_kind"]:
                    raise BuiltinState(
                        f"state {name!r} is built in: a re-declare may only add to it "
                        f"({why or (f'removes subject kinds {removed}' if removed else 'changes default_subject_kind')})"
                    )
            kinds: dict[str, int] = {}
            if old is not None:
                kinds = self._kind_counts(name)
                if sum(kinds.values()):
                    why = narrowing(old["schema"], stored["schema"])
                    if why:
                        raise NonAdditiveRedeclare(
                            f"state {name!r} has records: removing or changing a field is refused while "
                            f"records exist ({why}) — erase them first"
                        )
                removed = sorted(
                    k for k in old["subject_kinds"] if k not in stored["subject_kinds"] and kinds.get(k)
                )
                if removed:
                    raise DeclarationInUse(
                        f"state {name!r} still has records under subject kind(s) {removed}; "
                        "erase them before removing the kind(s)"
                    )
            body = dict(stored)
            if decl.retention_exempt is None and old is not None and old.get("retention_exempt"):
                # kept unless declared false: a re-declare that does not name it (a changed
                # description, a full PUT) never exposes records their owner trims to the sweep
                if stored["retention_days"]:
                    raise InvalidInput(f"state {name!r} is retention-exempt: {EXEMPT_WITH_DAYS}")
                body["retention_exempt"] = True
            if decl.record_rule is None and old is not None and old.get("record_rule"):
                # kept, as an exemption is: a re-declare that does not name it (an operator's
                # changed description) never lets records through that their reader refuses
                body["record_rule"] = old["record_rule"]
            if old is not None and old.get("attachments"):
                body["attachments"] = old["attachments"]
                body["effective"] = self.attaching.effective(stored["schema"], old["attachments"])
            if old is not None and any(kinds.values()):
                # additive, yet a record may already hold a new property with a value it refuses
                check_records(
                    self,
                    name,
                    regimes.effective_schema(old),
                    regimes.effective_schema(body),
                    f"re-declaring state {name!r}",
                )
            return [Write.between(key, old, body, docs[key].revision)], body

        # the aliases document's row is made with the declaration (locked, so created if it has
        # none): every write shares it, and a row that exists is one a fold can hold a write on
        # (see ``fold``)
        commit, body = self.store.update(
            [key, DocKey(ALIASES, name)], compute, self._origin(WriteOrigin(), context, "declare")
        )
        if not commit.changed or body is None:
            return self.get_declaration(name)
        return self._declaration_view(body, commit.revisions[key], commit.at)

    def delete_declaration(self, name: str, *, context: DoorContext | None = None) -> Deleted:
        """Delete a state with its records, aliases and audit, unless a consumer still uses it
        (the built-in ``memory`` state is never deleted)."""
        self.get_declaration(name)
        if name in BUILTIN_STATES:
            raise BuiltinState(f"state {name!r} is built in (every agent's memory); it cannot be deleted")
        blocking = [r for r in self.consumers(name) if not r.get("unavailable")]
        if blocking:
            names = ", ".join(f"{r['kind']}:{r.get('name', '?')}" for r in blocking)
            raise DeclarationInUse(f"state {name!r} is still bound by {names} — remove the binding(s) first")
        # the records go with the declaration and the aliases, in one transaction: a write
        # either committed before (and its record goes too) or finds the state gone
        self.store.purge(
            name,
            erase=[DocKey(CATALOG, name), DocKey(ALIASES, name)],
            origin=self._origin(WriteOrigin(), context, "delete-state"),
        )
        return {"deleted": True, "name": name}

    def consumers(self, name: str) -> list[Consumer]:
        """What uses the state (an unknown state is 404)."""
        self.get_declaration(name)
        rows: list[Consumer] = []
        for lister in self.consumer_listers.values():
            rows.extend(r.to_json() for r in lister(name))
        return rows

    def _declaration(self, docs: dict[DocKey, Document], name: str) -> dict[str, Any]:
        return self._declared(docs[DocKey(CATALOG, name)].body, name)

    def _declared(self, body: Any, name: str) -> dict[str, Any]:
        """A declaration as stored (``body``; None: not declared), checked once per object: a
        stored body is one shared, never-mutated object until its declaration changes."""
        if body is None:
            body = self._unstored.get(name)
            if body is None:
                raise StateNotFound(f"no state declared as {name!r}")
        last = self._last_declaration
        if last is not None and last[0] is body and last[1] == name:
            return last[2]
        row = catalog_row(name, body)
        self._last_declaration = (body, name, row)
        return row

    @staticmethod
    def _admit(declaration: dict[str, Any], subject: StateSubject) -> None:
        if subject.kind not in declaration["subject_kinds"]:
            raise SubjectRefused(
                f"subject kind {subject.kind!r} is not declared by state {declaration['name']!r} "
                f"(declared kinds: {declaration['subject_kinds']})"
            )

    # ------------------------------------------------------------------ origins

    def _origin(
        self, origin: WriteOrigin, context: DoorContext | None, action: str, paths: Any = None
    ) -> dict[str, Any]:
        ctx = context or self.default_context
        last = self._last_origin
        if last is not None and last[0] is origin and last[1] is ctx and last[2] == action:
            return dict(last[3])  # the models are frozen: the same objects stamp the same origin
        stamped = {
            "consumer": origin.consumer,
            "meta": origin.meta,
            "run_id": origin.run_id,
            "op_id": origin.op_id,
            "door": ctx.door,
            "actor": ctx.actor,
            "turn_id": ctx.turn_id,
            "inbound_id": ctx.inbound_id,
            "action": action,
        }
        # stored without its unset fields (every transition row holds it; the audit trail
        # shows them again as null, see ``listing.ORIGIN_FIELDS``)
        out = {k: v for k, v in stamped.items() if v is not None}
        self._last_origin = (origin, ctx, action, out)
        return dict(out)

    # ------------------------------------------------------------------ records

    _resolve = staticmethod(pipeline.resolve)

    def _canonical(self, name: str, subject: StateSubject) -> StateSubject:
        """Resolve a subject through the state's fold aliases (one hop)."""
        aliases = self.store.get(DocKey(ALIASES, name), members=[subject.encode()]).body or {}
        return self._resolve(aliases, subject)

    @staticmethod
    def _record(
        name: str,
        asked: StateSubject,
        canonical: StateSubject,
        aliases: dict[str, Any],
        data: dict[str, Any] | None,
        seq: int | None,
        revision: int,
        at: str | None,
    ) -> Record | None:
        if data is None:
            return None
        return StatesService._shown(name, asked, canonical, aliases, data, seq, revision, at)

    @staticmethod
    def _shown(
        name: str,
        asked: StateSubject,
        canonical: StateSubject,
        aliases: dict[str, Any],
        data: dict[str, Any],
        seq: int | None,
        revision: int,
        at: str | None,
    ) -> Record:
        """The view of a record that exists (``data``), as ``subject`` asked for it."""
        folded: list[SubjectRef] = []
        if aliases:
            found = sorted(
                map(StateSubject.decode, pipeline.folded_into(aliases, canonical.encode())),
                key=lambda x: (x.kind, x.key),
            )
            folded = [_plain(f) for f in found]
        return {
            "state": name,
            "subject": _plain(asked),
            "data": data,
            "seq": seq,
            "revision": revision,
            "updated_at": at,
            "canonical_subject": _plain(canonical),
            "folded_from": folded,
        }

    def read(
        self, name: str, subject: Any, *, revision: int | None = None, seq: int | None = None
    ) -> Record | None:
        """The record, or None on a miss (an undeclared state or refused subject is an error).

        One snapshot reads the declaration, the aliases and the record (a second read follows
        only when the subject was folded into another one). Views are kept until anything
        commits, on stores that can tell (the embedded one).

        ``revision=N`` reads the record as it was at its revision N; ``seq=S`` as it was right
        after transition S (None where it did not exist then). The subject is resolved through
        today's fold aliases — except that a folded subject read as of a transition before its
        fold answers its own record as it was then (the revisions its writes list with
        ``folded_from``)."""
        subject = subject_of(subject)
        if revision is not None or seq is not None:
            return self._read_at(name, subject, revision, seq)
        view = self.store.cached(
            ("record", name, subject.target_kind, subject.target_name, subject.kind, subject.key),
            lambda: self._read(name, subject),
        )
        if view is None:
            return None
        record: Record = detach(view)  # the view is shared by every reader of the cache
        return record

    def _read_at(self, name: str, subject: StateSubject, revision: Any, seq: Any) -> Record | None:
        revision, seq = check_as_of(revision, seq)
        decl_key, alias_key = DocKey(CATALOG, name), DocKey(ALIASES, name)
        docs = self.store.read([decl_key, alias_key])
        self._admit(self._declaration(docs, name), subject)
        aliases = docs[alias_key].body or {}
        canonical = self._resolve(aliases, subject)
        if canonical != subject and seq is not None:
            # a folded subject was a record of its own until the fold: as of a transition before
            # it, that record (its writes list its revisions, with ``folded_from``, by their seq)
            own = DocKey(name, subject.encode())
            doc = self.store.read_at(own, seq=seq)
            if doc.body is not None:
                at = self._written_at(own, doc.seq)
                return self._record(name, subject, subject, {}, doc.body, doc.seq, doc.revision, at)
        key = DocKey(name, canonical.encode())
        try:
            doc = self.store.read_at(key, revision=revision, seq=seq)
        except RevisionNotFound as exc:  # (named as the record: thread/t-1 of state 'tickets')
            missing = exc.message
            if canonical == subject:
                raise NotFound(missing) from None
            raise NotFound(
                f"{missing}: {subject.kind}/{subject.key} was folded into {canonical.kind}/"
                f"{canonical.key}, whose revisions a revision names; the revisions of its own record "
                "(listed in its writes with folded_from) are read by their seq"
            ) from None
        at = self._written_at(key, doc.seq) if doc.body is not None else None
        return self._record(name, subject, canonical, aliases, doc.body, doc.seq, doc.revision, at)

    def _written_at(self, key: DocKey, seq: int | None) -> str | None:
        """When the record ``key`` took the revision transition ``seq`` wrote (None where its
        audit row was pruned)."""
        if seq is None:
            return None
        changes = self.store.history([key], limit=1, before_seq=seq + 1, members=())
        return changes[0].at if changes else None

    def diff(self, name: str, subject: Any, from_revision: Any, to_revision: Any = None) -> Diff:
        """What changed in a record between two of its revisions (``to`` defaults to the
        current one): ``{from, to, edits: [[path, value]…], patch}`` — ``edits`` as the audit
        trail shows them (a missing value is a deletion), ``patch`` the same as one merge patch
        (objects merge, null deletes, ``"[N]"`` patches an array element). ``patch`` is left
        out where no merge patch makes the change — a value set to ``null``, an object holding
        ``null`` or a member named like ``"[0]"`` — so it is never one that gives another
        document; ``edits`` always holds the change."""
        subject = subject_of(subject)
        low, high = check_span(from_revision, to_revision)
        if high is None:
            current = self.read(name, subject)
            high = current["revision"] if current else self._revision_of(name, subject)
        old, new = self._read_at(name, subject, low, None), self._read_at(name, subject, high, None)
        before, after = old["data"] if old else MISSING, new["data"] if new else MISSING
        edits = diff(before, after)
        out: Diff = {"from": low, "to": high, "edits": [e.to_json() for e in edits]}
        patch = patch_between(before, after, edits)
        if patch is not MISSING:
            out["patch"] = patch
        return out

    def _revision_of(self, name: str, subject: StateSubject) -> int:
        canonical = self._canonical(name, subject)
        return self.store.get(DocKey(name, canonical.encode()), members=()).revision

    def revert(
        self,
        name: str,
        subject: Any,
        revision: Any,
        *,
        origin: Any = None,
        context: DoorContext | None = None,
        expect_revision: Expect = None,
    ) -> Record | None:
        """Make the record what it was at ``revision`` again, as a new transition (action
        ``revert``) through the same checks as a replace (today's schema decides); reverting to
        a revision where it did not exist erases it (and answers None). The history keeps every
        revision."""
        subject = subject_of(subject)
        target = check_revision(revision, "revision")
        if target is None:
            raise InvalidInput("revert needs the revision to go back to")
        then = self._read_at(name, subject, target, None)
        if then is None:
            self.erase(name, subject, origin=origin, context=context, expect_revision=expect_revision)
            return None
        return self._write_whole(
            name, subject, then["data"], origin, context, "revert", expect_revision=expect_revision
        )

    def _read(self, name: str, subject: StateSubject) -> Record | None:
        encoded = subject.encode()
        decl_key, alias_key, key = DocKey(CATALOG, name), DocKey(ALIASES, name), DocKey(name, encoded)
        docs = self.store.read([decl_key, alias_key, key])
        self._admit(self._declared(docs[decl_key].body, name), subject)
        aliases = docs[alias_key].body or {}
        entry = aliases.get(encoded)
        canonical = StateSubject.decode(entry["canonical"]) if entry else subject
        doc = docs[key] if entry is None else self.store.get(DocKey(name, canonical.encode()))
        return self._record(name, subject, canonical, aliases, doc.body, doc.seq, doc.revision, doc.at)

    def _write(
        self,
        name: str,
        subject: Any,
        transform: Transform,
        origin: WriteOrigin,
        context: DoorContext | None,
        action: str,
        *,
        op_id: str | None = None,
        expect_revision: Expect = None,
        checked: bool = False,
    ) -> Written:
        """One record write: a one-item run of the record-write pipeline
        (:mod:`stateflow.states.pipeline`). ``expect_revision`` makes it a compare-and-set:
        the record (0: absent — never written, or erased) must be at that revision, else
        :class:`RevisionMismatch` and nothing changes. ``checked``: ``transform`` writes a whole
        document checked on its way in (:attr:`RecordWrite.checked`)."""
        item = RecordWrite(
            name, subject_of(subject), transform, op_id, check_revision(expect_revision), checked
        )
        return pipeline.run_one(self, item, self._origin(origin, context, action))

    def _view(self, name: str, subject: Any, written: Written, *, detached: bool = True) -> Record:
        """The record view after a replace, merge or revert (the caller's own copy: ``data`` is
        the body the store now caches; ``detached=False``: not copied, for a result that copies
        it). They always leave a record — none of them takes an ``op_id`` to replay — but for a
        merge of nothing onto an absent record, which writes nothing and answers the empty record
        it would make, at revision 0."""
        asked = subject_of(subject)
        if written.canonical is None or type(written.data) is not dict:
            return {
                "state": name,
                "subject": _plain(asked),
                "data": {},
                "seq": None,
                "revision": 0,
                "updated_at": None,
                "canonical_subject": _plain(asked),
                "folded_from": [],
            }
        at = written.at
        if at is None and not written.written:  # it changed nothing: the record's time, as a read
            at = self._written_at(DocKey(name, written.canonical.encode()), written.seq)
        # the rest of the view is built fresh here: only the data is the store's
        return self._shown(
            name,
            asked,
            written.canonical,
            written.aliases,
            detach(written.data) if detached else written.data,
            written.seq,
            written.revision,
            at,
        )

    def replace(
        self,
        name: str,
        subject: Any,
        document: Any,
        *,
        origin: Any = None,
        context: DoorContext | None = None,
        expect_revision: Expect = None,
    ) -> Record:
        if not isinstance(document, dict):
            raise InvalidInput("a record document must be a JSON object")
        # the place named from the document's root, "$.n": as the HTTP route (whose body it is),
        # the HTTP client and the CLI's --data name it, so each door gives the same refusal
        # (and copied: the store caches what it writes, so the caller's object stays out)
        document = checked_copy(document, "$")
        return self._write_whole(
            name, subject, document, origin, context, "replace", expect_revision=expect_revision
        )

    def replace_from(
        self,
        name: str,
        subject: Any,
        build: Callable[[dict[str, Any] | None], dict[str, Any]],
        *,
        origin: Any = None,
        context: DoorContext | None = None,
    ) -> None:
        """A replace whose document is ``build(current data or None)``, computed inside the
        write (one call: no read before it, nothing lost to a concurrent writer). The same
        checks and audit row as :meth:`replace`; ``build`` may run more than once and must not
        keep state. The caller's objects in the result are copied, as :meth:`replace` does."""

        def transform(decl: dict[str, Any], current: JSON, done: dict[str, Any]) -> Change:
            document = build(current if type(current) is dict else None)
            if not isinstance(document, dict):
                raise InvalidInput("a record document must be a JSON object")
            document = checked_copy(document, "$")  # (as replace names it)
            regimes.check_document_write(decl, current, document)
            return Change(regimes.stamp_document(decl, current, document, done), [[]])

        self._write(name, subject, transform, origin_of(origin), context, "replace")

    def _write_whole(
        self,
        name: str,
        subject: Any,
        document: dict[str, Any],
        origin: Any,
        context: DoorContext | None,
        action: str,
        *,
        expect_revision: Expect,
    ) -> Record:
        """Write ``document`` as the record's whole new body (replace, revert): the same checks
        and ``_trace`` stamp either way, recorded under ``action``."""
        stamped = origin_of(origin)
        subject = subject_of(subject)  # once: the write and the view after it both name it

        def transform(decl: dict[str, Any], current: JSON, done: dict[str, Any]) -> Change:
            regimes.check_document_write(decl, current, document)
            stamped = regimes.stamp_document(decl, current, document, done)
            # checked by replace or read from the store; a `_trace` stamp puts origin values
            # deeper than their own check saw them, so a stamped document is checked again
            return Change(stamped, [[]], checked=stamped is document)

        written = self._write(
            name, subject, transform, stamped, context, action, expect_revision=expect_revision, checked=True
        )
        return self._view(name, subject, written)

    def merge(
        self,
        name: str,
        subject: Any,
        patch: Any,
        *,
        origin: Any = None,
        context: DoorContext | None = None,
        expect_revision: Expect = None,
    ) -> Record:
        """Shallow merge: each top-level key is set (``null`` is stored, not a deletion)."""
        if not isinstance(patch, dict):
            raise InvalidInput("a merge patch must be a JSON object")
        # (as replace names it: the patch is a PATCH request's body; copied, as replace's is)
        patch = checked_copy(patch, "$")

        def transform(decl: dict[str, Any], current: JSON, done: dict[str, Any]) -> Change:
            if not patch:
                return UNCHANGED
            base = current if isinstance(current, dict) else {}
            merged = {**base, **patch}
            regimes.check_document_write(decl, current, merged)
            return Change(regimes.stamp_document(decl, current, merged, done), [[k] for k in patch])

        written = self._write(
            name, subject, transform, origin_of(origin), context, "merge", expect_revision=expect_revision
        )
        return self._view(name, subject, written)

    def apply(
        self,
        name: str,
        subject: Any,
        ops: Any,
        *,
        op_id: str | None = None,
        origin: Any = None,
        context: DoorContext | None = None,
        expect_revision: Expect = None,
    ) -> ApplyResult:
        """An op batch; guard-skipped ops are reported; a replayed ``op_id`` changes nothing
        and says so (``replayed``)."""
        parsed = parse_ops(ops)
        if op_id is not None and (why := op_id_problem(op_id)):
            raise InvalidInput(why)
        check_revision(expect_revision)
        subject = subject_of(subject)  # once: the write and the view after it both name it
        if not parsed:  # nothing to write, but an unknown state or refused subject still says so
            current = self.read(name, subject)
            if expect_revision is not None and (current["revision"] if current else 0) != expect_revision:
                self._write(
                    name,
                    subject,
                    lambda *_: UNCHANGED,
                    _NO_ORIGIN,
                    context,
                    "apply",
                    expect_revision=expect_revision,
                )  # raises the mismatch
            return ApplyResult(False, None, None, [], revision=current["revision"] if current else 0)
        return self.apply_change(
            name,
            subject,
            ops_transform(parsed),
            op_id=op_id,
            origin=origin,
            context=context,
            expect_revision=expect_revision,
        )

    def apply_change(
        self,
        name: str,
        subject: Any,
        change: Transform,
        *,
        op_id: str | None = None,
        origin: Any = None,
        context: DoorContext | None = None,
        expect_revision: Expect = None,
    ) -> ApplyResult:
        """:meth:`apply` of a change computed inside the write, from the record as the write's
        transaction finds it (a template update program's: ``TemplateJq.transform``); :meth:`apply`
        writes through it."""
        if op_id is not None and (why := op_id_problem(op_id)):
            raise InvalidInput(why)
        written = self._write(
            name,
            subject,
            change,
            origin_of(origin),
            context,
            "apply",
            op_id=op_id,
            expect_revision=expect_revision,
        )
        return _applied(written)

    def apply_batch(
        self, items: Any, *, origin: Any = None, context: DoorContext | None = None
    ) -> list[ApplyResult]:
        """Op batches on several records in one transaction (see :mod:`stateflow.states.batch`):
        ``[{"state", "subject", "ops" | "template_jq" (+ "input"), "op_id"?}, …]`` → one
        :class:`ApplyResult` per item, in input order; any refusal writes nothing. At most
        ``batch.MAX_BATCH_ITEMS`` (100) items: a longer batch is refused whole."""
        from stateflow.states.batch import apply_batch  # batch builds on this module

        return apply_batch(self, items, origin=origin, context=context)

    def unit(self, *, origin: Any = None, context: DoorContext | None = None) -> Unit:
        """A unit of work (see :mod:`stateflow.states.unit`): ``with states.unit() as u:``
        stages ``u.apply(...)``, reads through the staging, and commits it all at the end in
        one transaction (or nothing, on an exception)."""
        from stateflow.states.unit import Unit  # the unit builds on this module

        return Unit(self, origin=origin, context=context)

    def erase(
        self,
        name: str,
        subject: Any,
        *,
        origin: Any = None,
        context: DoorContext | None = None,
        expect_revision: Expect = None,
    ) -> Erased:
        """Delete the record and every alias pointing at it; the audit trail stays. ``erased``
        says whether anything was: False for a record never written or erased already, which
        writes nothing (no audit row)."""
        subject = subject_of(subject)
        expect_revision = check_revision(expect_revision)
        canonical = self._canonical(name, subject)

        def check(current: Document) -> bool:
            pipeline.check_expected(current, expect_revision, canonical, name)
            return True

        return {"erased": self._erase(name, subject, canonical, check, origin, context)}

    def erase_unchanged(
        self,
        name: str,
        record: StateSubject,
        revision: int,
        *,
        origin: Any = None,
        context: DoorContext | None = None,
    ) -> bool:
        """Erase the record stored under ``record`` (a record's own subject, not resolved through
        the aliases) only while it is still at ``revision``; False, and nothing changes, when it
        was written, erased or folded since. Retention decides from a listing read before the
        erase: a record written in between is no longer expired and must survive."""

        def check(current: Document) -> bool:
            return current.body is not None and current.revision == revision

        return self._erase(name, record, record, check, origin, context)

    def _erase(
        self,
        name: str,
        subject: StateSubject,
        canonical: StateSubject,
        check: Callable[[Document], bool],
        origin: Any,
        context: DoorContext | None,
    ) -> bool:
        """The one erase path: the record of ``canonical`` and its aliases, in one transaction,
        when ``check`` passes on the locked record (it raises to refuse, or answers False to skip)."""
        key, alias_key, decl_key = (
            DocKey(name, canonical.encode()),
            DocKey(ALIASES, name),
            DocKey(CATALOG, name),
        )

        def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], bool]:
            declaration = self._declaration(docs, name)
            self._admit(declaration, subject)
            if not check(docs[key]):
                return [], False
            writes = []
            if docs[key].body is not None:
                writes.append(Write.between(key, docs[key].body, None, docs[key].revision, paths=[[]]))
            aliases = docs[alias_key].body or {}
            gone = [a for a, e in aliases.items() if e.get("canonical") == canonical.encode()]
            if gone:
                writes.append(Write(alias_key, [Edit((a,)) for a in gone], docs[alias_key].revision))
            return writes, bool(writes)

        _, done = self.store.update(
            [decl_key, alias_key, key], compute, self._origin(origin_of(origin), context, "erase")
        )
        return bool(done)

    def fold(
        self,
        name: str,
        subject: Any,
        into: Any,
        mode: Any,
        *,
        origin: Any = None,
        context: DoorContext | None = None,
        expect_revision: Expect = None,
    ) -> FoldReport:
        """Fold ``subject`` into ``into``: later reads and writes of it land on the survivor;
        ``expect_revision``: only while ``subject``'s record is at that revision (0: absent)."""
        expect = check_revision(expect_revision)
        if mode not in ("switch", "merge"):  # a malformed request (422), not a conflict (409)
            raise InvalidInput(f"unknown fold mode {mode!r} (supported: merge, switch)")
        source, target = subject_of(subject), subject_of(into)
        if source.tenant != target.tenant:
            raise FoldRefused(
                f"cannot fold across targets: {source.target_kind}/{source.target_name} into "
                f"{target.target_kind}/{target.target_name}"
            )
        decl_key, alias_key = DocKey(CATALOG, name), DocKey(ALIASES, name)
        report: dict[str, Any] = {}

        def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
            declaration = self._declaration(docs, name)
            self._admit(declaration, source)
            self._admit(declaration, target)
            aliases = docs[alias_key].body or {}
            into_entry = aliases.get(target.encode())
            canonical = StateSubject.decode(into_entry["canonical"]) if into_entry else target
            existing = aliases.get(source.encode())
            if existing:
                if existing["canonical"] == canonical.encode():
                    report.update(
                        mode=mode,
                        **{"from": _short(source)},
                        into=_short(canonical),
                        already=True,
                        flattened=0,
                    )
                    return [], None
                other = StateSubject.decode(existing["canonical"])
                raise FoldRefused(
                    f"{source.kind}/{source.key} is already folded into {other.kind}/{other.key}; folding it into "
                    f"{canonical.kind}/{canonical.key} would fork its identity"
                )
            if canonical == source:
                raise FoldRefused(
                    f"cannot fold subject {source.kind}/{source.key} of state {name!r} into itself"
                )
            src_key, dst_key = DocKey(name, source.encode()), DocKey(name, canonical.encode())
            loaded = self.store.read([src_key, dst_key])
            src, dst = loaded[src_key], loaded[dst_key]
            pipeline.check_expected(src, expect, source, name)
            writes: list[Write] = []
            if mode == "merge":
                members: list[str] = []
                if src.body is not None:
                    merged = {**src.body, **(dst.body or {})}
                    members = sorted(k for k in src.body if k not in (dst.body or {}))
                    try:
                        self.validators.validate(
                            self.effective_schema(declaration), merged, "the merged record"
                        )
                    except InvalidInput as exc:
                        raise FoldRefused(
                            f"merging {source.kind}/{source.key} would leave an invalid document: {exc}"
                        ) from exc
                    writes.append(Write.between(dst_key, dst.body, merged, dst.revision, paths=[[]]))
                report["merged_members"] = members
            if src.body is not None:
                writes.append(Write.between(src_key, src.body, None, src.revision, paths=[[]]))
            repoint = [a for a, e in aliases.items() if e.get("canonical") == source.encode()]
            entry = {"canonical": canonical.encode(), "mode": mode}
            edits = [Edit((source.encode(),), entry)] + [
                Edit((a, "canonical"), canonical.encode()) for a in repoint
            ]
            writes.append(Write(alias_key, edits, docs[alias_key].revision))
            report.update(
                mode=mode,
                **{"from": _short(source)},
                into=_short(canonical),
                already=False,
                flattened=len(repoint),
            )
            return writes, None

        # A write shares the declaration and the aliases and commits only if neither moved, but
        # a document with no row cannot be locked: on PostgreSQL a write whose statement saw no
        # aliases row, then waited for the declaration this fold holds, would not see the
        # aliases this fold created and would land on the folded record, hidden by its alias.
        # So both rows exist before any write could race a fold: a declaration makes them, and
        # opening the store for writing makes those of states an earlier version declared
        # (``install_builtins``). A write then holds the aliases row shared and either commits
        # before the fold (and is folded) or finds their revision moved and goes again, through
        # the alias. A service that skipped that step still gets the rows made here, committed
        # before the fold takes its locks (only a write whose statement began before this
        # commit, and reached the declaration after the fold, could then miss it).
        self.store.update([decl_key, alias_key], functools.partial(self._rows_of_declared, name))
        self.store.update([decl_key, alias_key], compute, self._origin(origin_of(origin), context, "fold"))
        order = ["mode", "from", "into", "already", "flattened", "merged_members"]
        return cast(FoldReport, {k: report[k] for k in order if k in report})

    def _rows_of_declared(self, name: str, docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
        """A read-modify-write that writes nothing: its locks create the rows of the documents
        it names that had none, and its commit keeps them — for a declared state only (an
        unknown one is refused, and the rollback keeps no row)."""
        self._declaration(docs, name)
        return [], None

    # ------------------------------------------------------------------ listings and retention

    def writes(self, name: str, subject: Any, *, limit: Any = None, cursor: str | None = None) -> WritesPage:
        """The record's audit trail, newest first, keyset-paginated."""
        return self.listing.writes(name, subject, limit=limit, cursor=cursor)

    def subjects(
        self,
        name: str,
        *,
        kind: str | None = None,
        limit: Any = None,
        cursor: str | None = None,
        tenants: set[tuple[str, str]] | None = None,
    ) -> SubjectsPage:
        return self.listing.subjects(name, kind=kind, limit=limit, cursor=cursor, tenants=tenants)

    def search(
        self,
        name: str,
        filters: Any,
        *,
        limit: Any = None,
        cursor: str | None = None,
        tenants: set[tuple[str, str]] | None = None,
        sort: Any = None,
        include_data: bool = False,
        kind: str | None = None,
    ) -> SearchPage:
        """Records matching ``filters`` (see :meth:`stateflow.states.listing.Listing.search`)."""
        return self.listing.search(
            name,
            filters,
            limit=limit,
            cursor=cursor,
            tenants=tenants,
            sort=sort,
            include_data=include_data,
            kind=kind,
        )

    def stats(self, name: str) -> Stats:
        return self.listing.stats(name)

    def _kind_counts(self, state: str) -> dict[str, int]:
        return self.listing.kind_counts(state)

    def prune(
        self,
        *,
        context: DoorContext | None = None,
        now: datetime | None = None,
        progress: Callable[[str, int], None] | None = None,
    ) -> PruneReport:
        """Delete expired records, op_id keys and audit rows (see :func:`stateflow.states.retention.prune`)."""
        return retention.prune(self, context=context, now=now, progress=progress)


def _no_writes(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
    """A read-modify-write that writes nothing: its locks make the rows of the keys it names
    that had none, and its commit keeps them."""
    return [], None


def _short(subject: StateSubject) -> dict[str, str]:
    return {"kind": subject.kind, "key": subject.key}


def _applied(written: Written) -> ApplyResult:
    """An op batch's result from its pipeline write: the record view's data, seq and revision,
    without building the view (``_view``)."""
    if written.replayed:
        return ApplyResult(False, None, None, [], replayed=True, replayed_seq=written.replayed_seq)
    there = written.canonical is not None and written.data is not MISSING
    return ApplyResult(
        True,
        written.data if there else None,
        written.seq if there else None,
        written.skipped,
        written=written.written,
        revision=written.revision if there else 0,  # absent: 0, as a read of it answers
        shared=True,  # copied if and when the caller reads it
    )


__all__: Sequence[str] = ["ApplyResult", "ConsumerRow", "RevisionMismatch", "StatesService"]
