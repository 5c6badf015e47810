"""Templates, attachments, regimes, ``_trace`` and template jq — the part of the declared-states
service that composes templates into states.

Templates are documents of the reserved state ``_templates``. An attachment lives inside its
state's declaration document (``attachments``), together with the composed ``effective``
schema, served regimes and traced paths, so a record write finds everything it enforces in the
one declaration it already reads.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import orjson

from stateflow.doc.canonical import JSON
from stateflow.doc.ops import parse_ops
from stateflow.errors import Conflict, InvalidInput, NotFound
from stateflow.states import pipeline, regimes
from stateflow.states.models import DoorContext, StateSubject, WriteOrigin
from stateflow.states.pipeline import RecordWrite, ops_transform
from stateflow.states.schema import SchemaInvalid, check_base_schema
from stateflow.states.templates import (
    AttachConflict,
    TemplateInvalid,
    build_prelude,
    compose,
    defaults,
    served_regimes,
    substitute,
    unknown_keys,
    validate_template,
)
from stateflow.store import DocKey, Document, Write
from stateflow.store.clock import utc_now

if TYPE_CHECKING:
    from stateflow.jq import JqRunner
    from stateflow.states.service import StatesService

TEMPLATES: Final = "_templates"

AttachValidator = Callable[[str, dict[str, Any], dict[str, Any], dict[str, Any]], None]
DetachReferee = Callable[[str, str], list[str]]
AttachReconciler = Callable[
    [str, dict[str, Any], str, dict[str, Any], dict[str, Any], dict[str, Any]],
    list[tuple[StateSubject, list[Any]]],
]


class TemplateNotFound(NotFound):
    code = "template-not-found"


class TemplateInUse(Conflict):
    code = "template-in-use"


class ReconcileNeeded(InvalidInput):
    code = "reconcile-needed"

    def __init__(self, message: str, orphans: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.orphans = orphans


def _hash(doc: dict[str, Any]) -> str:
    return hashlib.sha256(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)).hexdigest()


class TemplatesMixin:
    """Mixed into :class:`StatesService`."""

    attach_validators: list[AttachValidator]
    attach_reconcilers: list[AttachReconciler]
    detach_referees: list[DetachReferee]
    seeds: dict[str, dict[str, Any]]
    _jq: JqRunner | None

    # ------------------------------------------------------------------ templates

    def _svc(self) -> StatesService:
        return self  # type: ignore[return-value]

    def use_jq(self, runner: JqRunner) -> None:
        """Run jq on ``runner`` (a server sizes and limits its pool from its configuration)."""
        if self._jq is not None:
            self._jq.close()
        self._jq = runner

    def jq(self) -> JqRunner:
        """The jq worker pool (limits, workers and queue from the service's configuration)."""
        if self._jq is None:
            from stateflow.jq import JqRunner

            limits = self._svc().config.jq
            self._jq = JqRunner(
                workers=limits.workers,
                timeout=limits.timeout_seconds,
                memory=limits.memory_mb * 1024 * 1024,
                queue=limits.queue,
            )
        return self._jq

    def get_template(self, name: str) -> dict[str, Any]:
        body = self._svc().store.get(DocKey(TEMPLATES, name)).body
        if body is None:
            raise TemplateNotFound(f"no state template named {name!r}")
        return {k: v for k, v in body.items() if k != "_shipped_hash"}

    def _template_docs(self, names: list[str]) -> dict[str, dict[str, Any]]:
        docs = self._svc().store.read([DocKey(TEMPLATES, n) for n in names])
        out = {}
        for n in names:
            body = docs[DocKey(TEMPLATES, n)].body
            if body is None:
                raise TemplateNotFound(f"no state template named {n!r}")
            out[n] = body
        return out

    def _attached_states(self, template: str) -> list[str]:
        return sorted(
            d["name"]
            for d in self._svc().list_declarations()
            if any(a["template"] == template for a in d["attachments"])
        )

    def list_templates(self) -> list[dict[str, Any]]:
        svc = self._svc()
        counts: dict[str, int] = {}
        for decl in svc.list_declarations():
            for a in decl["attachments"]:
                counts[a["template"]] = counts.get(a["template"], 0) + 1
        out = []
        after = None
        while page := svc.store.scan(TEMPLATES, after=after, limit=500):
            docs = svc.store.read([x.key for x in page])
            for item in page:
                body = docs[item.key].body or {}
                view = {k: v for k, v in body.items() if k != "_shipped_hash"}
                out.append(
                    {
                        **view,
                        "attached_to": counts.get(item.key.subject, 0),
                        "shipped_default": "_shipped_hash" in body,
                    }
                )
            after = page[-1].key.subject
        return out

    def put_template(
        self,
        name: str,
        raw: Any,
        *,
        replace: bool = False,
        context: DoorContext | None = None,
        shipped: bool = False,
    ) -> dict[str, Any]:
        """Upload a template; with ``replace`` every live attachment is re-validated first."""
        svc = self._svc()
        doc = validate_template(name, raw)
        key = DocKey(TEMPLATES, name)
        existing = svc.store.get(key).body
        if existing is not None and not replace:
            raise Conflict(f"template {name!r} already exists — upload with replace=true to overwrite it")
        states = self._attached_states(name) if existing is not None else []
        catalog = [DocKey("_states", s) for s in states]
        stored = {**doc, **({"_shipped_hash": _hash(doc)} if shipped else {})}

        def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
            writes = [Write.between(key, docs[key].body, stored, docs[key].revision)]
            for ck in catalog:
                decl = docs[ck].body
                if decl is None or name not in decl.get("attachments", {}):
                    continue
                attachments = dict(decl["attachments"])
                att = dict(attachments[name])
                att["parameters"] = {**defaults(doc), **att.get("supplied", att["parameters"])}
                try:
                    self._check_values(doc, att["parameters"], att["declarations"])
                    attachments[name] = att
                    effective = self._effective(decl["schema"], attachments, {name: doc})
                    for validator in self.attach_validators:
                        validator(ck.subject, doc, att["declarations"], effective["schema"])
                except (TemplateInvalid, AttachConflict, SchemaInvalid) as exc:
                    raise TemplateInUse(
                        f"template {name!r} cannot be replaced: its attach on state {ck.subject!r} no longer validates: {exc.message}"
                    ) from exc
                new = {**decl, "attachments": attachments, "effective": effective}
                writes.append(Write.between(ck, decl, new, docs[ck].revision))
            return writes, None

        svc.store.update([key, *catalog], compute, svc._origin(WriteOrigin(), context, "put-template"))
        return doc

    def delete_template(self, name: str, *, context: DoorContext | None = None) -> dict[str, Any]:
        svc = self._svc()
        self.get_template(name)
        states = self._attached_states(name)
        if states:
            raise TemplateInUse(
                f"template {name!r} is attached on state(s) {', '.join(states)} — detach it first"
            )
        key = DocKey(TEMPLATES, name)
        svc.store.update(
            [key],
            lambda docs: ([Write.between(key, docs[key].body, None, docs[key].revision)], None),
            svc._origin(WriteOrigin(), context, "delete-template"),
        )
        return {"deleted": True, "name": name}

    def register_seed(self, raw: dict[str, Any]) -> None:
        """A template a plugin ships; installed at start when the store has none of that name."""
        name = raw.get("name")
        if not isinstance(name, str):
            raise TemplateInvalid("a seed template needs its name")
        self.seeds[name] = raw

    def install_seeds(self) -> None:
        for name, raw in sorted(self.seeds.items()):
            if self._svc().store.get(DocKey(TEMPLATES, name)).body is not None:
                continue
            try:
                self.put_template(
                    name, raw, context=DoorContext(door="operator", actor="stateflow"), shipped=True
                )
            except InvalidInput as exc:
                raise TemplateInvalid(
                    f"state-template seed {name!r} does not validate: {exc.message}"
                ) from exc

    # ------------------------------------------------------------------ composition

    def _effective(
        self,
        base: dict[str, Any],
        attachments: dict[str, Any],
        overrides: dict[str, dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        overrides = overrides or {}
        names = [n for n in attachments if n not in overrides]
        templates = {**(self._template_docs(names) if names else {}), **overrides}
        parts = [(templates[n], a["path"], a["parameters"]) for n, a in attachments.items()]
        schema = compose(base, parts)
        try:
            check_base_schema(schema)
        except SchemaInvalid as exc:
            raise TemplateInvalid(f"the composed effective schema is invalid: {exc.message}") from exc
        return {
            "schema": schema,
            "regimes": served_regimes([(templates[n], a["path"]) for n, a in attachments.items()]),
            "traced": sorted(
                a["path"] for n, a in attachments.items() if templates[n].get("trace", {}).get("enabled")
            ),
        }

    def _check_values(
        self, template: dict[str, Any], parameters: dict[str, Any], declarations: dict[str, Any]
    ) -> None:
        svc = self._svc()
        name = template["name"]
        declared = template.get("parameters", {})
        for pname, value in parameters.items():
            if pname not in declared:
                raise TemplateInvalid(f"attach supplies unknown parameter {pname!r} for template {name!r}")
            try:
                svc.validators.validate(declared[pname]["schema"], value, f"attach parameter {pname!r}")
            except InvalidInput as exc:
                raise TemplateInvalid(exc.message) from exc
        for pname, spec in declared.items():
            if "default" not in spec and pname not in parameters:
                raise TemplateInvalid(
                    f"attach of template {name!r} must supply parameter {pname!r} (it has no default)"
                )
        section = template.get("declarations")
        if section is None:
            if declarations:
                raise TemplateInvalid(
                    f"template {name!r} declares no declarations section, so none may be supplied"
                )
            return
        try:
            svc.validators.validate(
                substitute(section["schema"], parameters),
                declarations,
                f"attach declarations of template {name!r}",
            )
        except InvalidInput as exc:
            raise TemplateInvalid(
                f"attach declarations are invalid under template {name!r}: {exc.message}"
            ) from exc
        if "check" in section:
            verdict = self._eval(
                section["check"]["content"],
                declarations,
                {"parameters": parameters},
                f"template {name!r} declarations check",
            )
            if verdict is not True:
                message = (
                    verdict
                    if isinstance(verdict, str)
                    else "the declarations violate the template's check rule"
                )
                raise TemplateInvalid(f"attach declarations rejected by template {name!r}: {message}")

    def _eval(self, program: str, value: JSON, variables: dict[str, JSON], what: str) -> JSON:
        from stateflow.jq import JqError

        try:
            return self.jq().first(program, value, variables)
        except JqError as exc:
            raise TemplateInvalid(f"{what} failed to evaluate: {exc.message}") from exc

    # ------------------------------------------------------------------ attach / detach

    def attachments(self, name: str) -> list[dict[str, Any]]:
        decl = self._svc().get_declaration(name)
        return [{"state": name, **a} for a in decl["attachments"]]

    def get_attachment(self, name: str, template: str) -> dict[str, Any]:
        for row in self.attachments(name):
            if row["template"] == template:
                return row
        raise NotFound(f"template {template!r} is not attached on state {name!r}")

    def attach(
        self, name: str, template: str, body: Any, *, context: DoorContext | None = None
    ) -> dict[str, Any]:
        if not isinstance(body, dict) or set(body) - {"path", "parameters", "declarations", "options"}:
            raise InvalidInput(
                "invalid attach body: it takes path, parameters, declarations and options"
                + unknown_keys(body, {"path", "parameters", "declarations", "options"})
            )
        path, supplied = body.get("path", []), body.get("parameters", {})
        declarations = body.get("declarations", {})
        if not isinstance(path, list) or not all(isinstance(s, str) and s for s in path):
            raise InvalidInput(
                f"attach path {path!r} must be a list of non-empty object keys (an attach never sits on a list index)"
            )
        if not isinstance(supplied, dict) or not isinstance(declarations, dict):
            raise InvalidInput("attach parameters and declarations must be objects")
        svc = self._svc()
        svc.get_declaration(name)
        doc = self._template_docs([template])[template]
        parameters = {**defaults(doc), **supplied}
        self._check_values(doc, parameters, declarations)
        key = DocKey("_states", name)

        def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
            decl = svc._declaration(docs, name)
            attachments = dict(decl.get("attachments", {}))
            if template in attachments:
                raise Conflict(
                    f"template {template!r} is already attached on state {name!r} — detach it to change path/parameters"
                )
            attachments[template] = {
                "path": path,
                "parameters": parameters,
                "supplied": supplied,
                "declarations": declarations,
                "updated_at": utc_now(),
            }
            effective = self._effective(decl["schema"], attachments, {template: doc})
            for validator in self.attach_validators:
                validator(name, doc, declarations, effective["schema"])
            new = {**decl, "attachments": attachments, "effective": effective}
            return [Write.between(key, decl, new, docs[key].revision)], None

        svc.store.update([key], compute, svc._origin(WriteOrigin(), context, "attach"))
        return {"attached": True, "state": name, "template": template}

    def update_attachment(
        self, name: str, template: str, body: Any, *, context: DoorContext | None = None
    ) -> dict[str, Any]:
        if (
            not isinstance(body, dict)
            or not isinstance(body.get("declarations"), dict)
            or set(body) - {"declarations", "options"}
        ):
            raise InvalidInput(
                'the body is {"declarations": {...}, "options"?: {...}}'
                + unknown_keys(body, {"declarations", "options"})
            )
        options = body.get("options") or {}
        if not isinstance(options, dict):
            raise InvalidInput("options must be an object")
        svc = self._svc()
        current = self.get_attachment(name, template)
        doc = self._template_docs([template])[template]
        new_declarations = body["declarations"]
        self._check_values(doc, current["parameters"], new_declarations)
        closes = self._reconcile(name, doc, current, new_declarations, options)
        for reconciler in self.attach_reconcilers:
            closes.extend(
                reconciler(
                    name, doc, "update_declarations", current["declarations"], new_declarations, options
                )
            )
        origin = svc._origin(
            WriteOrigin(consumer="attach-reconcile", meta={"origin": "reconcile"}),
            context,
            "update-attachment",
        )

        def redeclared(decl: dict[str, Any]) -> dict[str, Any]:
            attachments = dict(decl["attachments"])
            if template not in attachments:
                raise NotFound(f"template {template!r} is not attached on state {name!r}")
            attachments[template] = {**attachments[template], "declarations": new_declarations}
            effective = self._effective(decl["schema"], attachments, {template: doc})
            for validator in self.attach_validators:
                validator(name, doc, new_declarations, effective["schema"])
            return {**decl, "attachments": attachments, "effective": effective}

        # The declaration and every reconciled record commit together, or not at all; the
        # records answer to the new declaration (its regimes, stamps and schema).
        pipeline.run(
            svc,
            [RecordWrite(name, subject, ops_transform(parse_ops(ops))) for subject, ops in closes],
            origin,
            redeclare={name: redeclared},
            canonical=[subject for subject, _ in closes],
        )
        return {"updated": True, "state": name, "template": template, "closed": len(closes)}

    def _reconcile(
        self,
        name: str,
        doc: dict[str, Any],
        current: dict[str, Any],
        new: dict[str, Any],
        options: dict[str, Any],
    ) -> list[tuple[StateSubject, list[Any]]]:
        """The built-in reconcile flow: items the new declarations no longer cover must be closed."""
        programs = doc.get("reconcile")
        if programs is None:
            return []
        svc = self._svc()
        orphans: list[dict[str, Any]] = []
        after = None
        while page := svc.store.scan(name, after=after, limit=200):
            docs = svc.store.read([x.key for x in page])
            for item in page:
                subtree = _subtree(docs[item.key].body, current["path"])
                found = self._eval(
                    programs["orphans"]["content"],
                    subtree,
                    {"previous": current["declarations"], "new": new},
                    "reconcile.orphans",
                )
                if not isinstance(found, list):
                    raise TemplateInvalid("reconcile.orphans must return a list of {id, label}")
                subject = StateSubject.decode(item.key.subject)
                orphans.extend(
                    {"subject": subject, "id": o.get("id"), "label": o.get("label")}
                    for o in found
                    if isinstance(o, dict)
                )
            after = page[-1].key.subject
        if not orphans:
            return []
        directive = options.get("orphans")
        if directive is None:
            listed = "; ".join(
                f"[{o['subject'].kind}:{o['subject'].key}] {o['label']} (id {o['id']})" for o in orphans[:20]
            )
            more = f" … and {len(orphans) - 20} more" if len(orphans) > 20 else ""
            raise ReconcileNeeded(
                f"re-attaching template {doc['name']!r} on state {name!r} would orphan {len(orphans)} open record "
                f"item(s) the new declarations no longer cover: {listed}{more}. Re-attach with options "
                '{"orphans": "close", "resolution": "<not-done resolution>"} to close them.',
                [
                    {
                        "subject": o["subject"].key,
                        "kind": o["subject"].kind,
                        "id": o["id"],
                        "label": o["label"],
                    }
                    for o in orphans
                ],
            )
        if directive != "close":
            raise TemplateInvalid(
                f'unknown reconcile directive options.orphans={directive!r}; the only directive is "close"'
            )
        resolution = options.get("resolution")
        allowed = self._eval(programs["resolutions"]["content"], new, {}, "reconcile.resolutions")
        if (
            not isinstance(resolution, str)
            or not resolution.strip()
            or not isinstance(allowed, list)
            or resolution not in allowed
        ):
            raise TemplateInvalid(f"options.resolution must be one of {allowed}")
        closes = []
        for orphan in orphans:
            record = svc.read(name, orphan["subject"])
            subtree = _subtree(record["data"] if record else None, current["path"])
            ops = self._eval(
                programs["close"]["content"],
                subtree,
                {"id": orphan["id"], "resolution": resolution},
                "reconcile.close",
            )
            closes.append((orphan["subject"], _rebase(ops, current["path"], "reconcile.close")))
        return closes

    def register_detach_referee(self, referee: DetachReferee) -> None:
        self.detach_referees.append(referee)

    def register_attach_validator(self, validator: AttachValidator) -> None:
        """``validator(state, template, declarations, effective_schema)`` raises to refuse an attach."""
        self.attach_validators.append(validator)

    def register_attach_reconciler(self, reconciler: AttachReconciler) -> None:
        """``reconciler(state, template, operation, previous, new, options)`` returns
        ``[(subject, ops)]`` to apply in the same transaction as the declarations change."""
        self.attach_reconcilers.append(reconciler)

    def detach(self, name: str, template: str, *, context: DoorContext | None = None) -> dict[str, Any]:
        svc = self._svc()
        references = [r for referee in self.detach_referees for r in referee(name, template)]
        if references:
            raise Conflict(
                f"template {template!r} on state {name!r} cannot be detached — referenced by: {'; '.join(references)}"
            )
        self.get_attachment(name, template)
        key = DocKey("_states", name)

        def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
            decl = svc._declaration(docs, name)
            attachments = {t: a for t, a in decl.get("attachments", {}).items() if t != template}
            new = {k: v for k, v in decl.items() if k not in ("attachments", "effective")}
            if attachments:
                new["attachments"] = attachments
                new["effective"] = self._effective(decl["schema"], attachments)
            return [Write.between(key, decl, new, docs[key].revision)], None

        svc.store.update([key], compute, svc._origin(WriteOrigin(), context, "detach"))
        return {"detached": True, "state": name, "template": template}

    # ------------------------------------------------------------------ write-path enforcement

    # The rules live in :mod:`stateflow.states.regimes` (pure); these keep the service's names.
    check_ops = staticmethod(regimes.check_ops)
    check_document_write = staticmethod(regimes.check_document_write)
    stamp = staticmethod(regimes.stamp)
    stamp_document = staticmethod(regimes.stamp_document)

    # ------------------------------------------------------------------ template jq

    def _program(
        self, name: str, reference: str, purpose: str
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        decl = self._svc().get_declaration(name)
        rows = {a["template"]: a for a in decl["attachments"]}
        docs = self._template_docs(sorted(rows)) if rows else {}
        if "." in reference:
            tname, pname = reference.split(".", 1)
            if tname not in rows:
                raise NotFound(f"template {tname!r} is not attached on state {name!r}")
            if pname not in (docs[tname].get("template_jq") or {}):
                raise NotFound(
                    f"template {tname!r} attached on state {name!r} declares no template_jq {pname!r}"
                )
        else:
            pname = reference
            owners = [t for t in sorted(rows) if pname in (docs[t].get("template_jq") or {})]
            if not owners:
                raise NotFound(f"no template_jq {pname!r} on any template attached on state {name!r}")
            if len(owners) > 1:
                raise InvalidInput(
                    f"template_jq {pname!r} is declared by more than one template attached on state {name!r} "
                    f"({', '.join(owners)}); qualify it as <template>.{pname}"
                )
            tname = owners[0]
        program = docs[tname]["template_jq"][pname]
        if program["purpose"] != purpose:
            raise InvalidInput(
                f"template_jq {pname!r} on template {tname!r} has purpose {program['purpose']!r}, needs {purpose!r}"
            )
        return docs[tname], rows[tname], program

    def template_jq_purpose(self, name: str, reference: str) -> str:
        """``input`` or ``update``: what the named program is for."""
        for purpose in ("input", "update"):
            try:
                self._program(name, reference, purpose)
                return purpose
            except NotFound:
                raise
            except InvalidInput:
                continue
        raise InvalidInput(f"template_jq {reference!r} cannot be resolved on state {name!r}")

    def template_jq_input(
        self, name: str, subject: Any, reference: str, params: dict[str, Any]
    ) -> dict[str, Any]:
        """Evaluate an ``input`` program over the record's subtree; writes nothing."""
        template, attachment, program = self._program(name, reference, "input")
        declared = program.get("params", [])
        missing, unknown = sorted(set(declared) - set(params)), sorted(set(params) - set(declared))
        if missing or unknown:
            raise InvalidInput(
                f"template_jq {reference!r} on template {template['name']!r} takes params {declared}, missing {missing}, got unknown {unknown}"
            )
        value = self._run_program(name, subject, template, attachment, program, reference, {"params": params})
        return {"name": reference, "purpose": "input", "value": value}

    def _run_program(
        self,
        name: str,
        subject: Any,
        template: dict[str, Any],
        attachment: dict[str, Any],
        program: dict[str, Any],
        reference: str,
        variables: dict[str, Any],
    ) -> JSON:
        """Evaluate a program (with its sibling prelude) over the record's attachment subtree."""
        record = self._svc().read(name, subject)
        subtree = _subtree(record["data"] if record else None, attachment["path"])
        return self._eval(
            build_prelude(template["template_jq"]) + program["jq"]["content"],
            subtree,
            {"parameters": attachment["parameters"], "declarations": attachment["declarations"], **variables},
            f"template_jq {reference!r} on template {template['name']!r}",
        )

    def template_jq_update(
        self,
        name: str,
        subject: Any,
        reference: str,
        input_value: Any = None,
        *,
        op_id: str | None = None,
        context: DoorContext | None = None,
    ) -> dict[str, Any]:
        """Evaluate an ``update`` program and apply the op batch it returns (rebased under the
        attachment path, guard paths included) through the ordinary apply door."""
        rebased = self.template_jq_ops(name, subject, reference, input_value)
        result = self._svc().apply(
            name, subject, rebased, op_id=op_id, origin={"meta": {"template_jq": reference}}, context=context
        )
        return {"name": reference, **result.to_json()}

    def template_jq_ops(self, name: str, subject: Any, reference: str, input_value: Any = None) -> Any:
        """The op batch an ``update`` program returns for the record, rebased under the
        attachment path (guard paths included); nothing is applied."""
        template, attachment, program = self._program(name, reference, "update")
        declared = program.get("params", [])
        if declared:
            if not isinstance(input_value, dict):
                raise InvalidInput(
                    f"template_jq {reference!r} declares params {declared}, so its input must be an object, got {input_value!r}"
                )
            missing, extra = (
                sorted(set(declared) - set(input_value)),
                sorted(set(input_value) - set(declared)),
            )
            if missing or extra:
                raise InvalidInput(
                    f"template_jq {reference!r} input missing {missing}, has undeclared {extra}"
                )
        ops = self._run_program(
            name, subject, template, attachment, program, reference, {"input": input_value}
        )
        return _rebase(ops, attachment["path"], f"template_jq {reference!r}")


# ------------------------------------------------------------------------------ helpers


def _subtree(data: JSON, path: list[str]) -> JSON:
    node = data
    for seg in path:
        if type(node) is not dict or seg not in node:
            return {}
        node = node[seg]
    return node if type(node) is dict else {}


def _rebase(ops: Any, base: list[str], what: str) -> list[Any]:
    if not isinstance(ops, list):
        raise TemplateInvalid(
            f"{what} is an update program, so its jq must return an op batch (a list of ops), got {ops!r}"
        )
    out = []
    for op in ops:
        if not isinstance(op, dict) or not isinstance(op.get("path"), list):
            raise TemplateInvalid(f"an update-program op must be an object carrying a list path, got {op!r}")
        rebased = {**op, "path": [*base, *op["path"]]}
        guard = op.get("guard")
        if isinstance(guard, dict) and isinstance(guard.get("path"), list):
            rebased["guard"] = {**guard, "path": [*base, *guard["path"]]}  # guards are template-relative too
        out.append(rebased)
    return out
