"""Attachments: templates attached on a state at a path, with parameters and declarations.

An attachment lives inside its state's declaration document (``attachments``), together with
the composed ``effective`` schema, served regimes and traced paths, so a record write finds
everything it enforces in the one declaration it already reads. Changing an attachment's
declarations may close the record items it no longer covers (reconcile): those writes and the
new declaration commit together through the record-write pipeline.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from stateflow.doc.ops import parse_ops
from stateflow.errors import Conflict, InvalidInput, NotFound, StateflowError
from stateflow.states import pipeline
from stateflow.states.models import DoorContext, StateSubject, WriteOrigin
from stateflow.states.pipeline import RecordWrite, ops_transform
from stateflow.states.recheck import check_records
from stateflow.states.regimes import effective_schema
from stateflow.states.results import Attached, AttachmentUpdated, Detached, StateAttachment
from stateflow.states.schema import SchemaInvalid, check_base_schema
from stateflow.states.template_jq import _rebase, _subtree
from stateflow.states.templates import (
    TemplateInvalid,
    compose,
    defaults,
    served_regimes,
    substitute,
    unknown_keys,
)
from stateflow.store import DocKey, Document, Write
from stateflow.store.clock import utc_now

if TYPE_CHECKING:
    from stateflow.states.service import StatesService

AttachValidator = Callable[[str, dict[str, Any], dict[str, Any], dict[str, Any]], None]
DetachReferee = Callable[[str, str], list[str]]
AttachReconciler = Callable[
    [str, dict[str, Any], str, dict[str, Any] | None, dict[str, Any], dict[str, Any]],
    list[tuple[StateSubject, list[Any]]],
]


_RESERVED_SEGMENTS: dict[str, str] = {
    "*": 'in a regime path "*" is the wildcard for any one key or index',
    "-": 'in an op path "-" is the append position of an array',
    "_trace": "_trace is the platform's stamp under a traced attachment",
}
"""Object keys an attach path may not hold, and why."""

_UPDATING = "update of the declarations"


class ReconcileNeeded(InvalidInput):
    code = "reconcile-needed"

    def __init__(self, message: str, orphans: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.orphans = orphans


class Attachments:
    """Attachments of one service (``service.attaching``) and the hooks plugins register."""

    def __init__(self, svc: StatesService) -> None:
        self.svc = svc
        self.validators: list[AttachValidator] = []
        self.reconcilers: list[AttachReconciler] = []
        self.referees: list[DetachReferee] = []

    def effective(
        self,
        base: dict[str, Any],
        attachments: dict[str, Any],
        overrides: dict[str, dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        overrides = overrides or {}
        names = [n for n in attachments if n not in overrides]
        templates = {**(self.svc.templates.docs(names) if names else {}), **overrides}
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

    def check_values(
        self,
        template: dict[str, Any],
        parameters: dict[str, Any],
        declarations: dict[str, Any],
        doing: str = "attach",
    ) -> None:
        """Refuse the caller's parameters or declarations (``invalid-input``: the caller's to
        fix); a template whose own check program fails is ``invalid-template``."""
        name = template["name"]
        declared = template.get("parameters", {})
        for pname, value in parameters.items():
            if pname not in declared:
                raise InvalidInput(f"attach supplies unknown parameter {pname!r} for template {name!r}")
            self._valid(
                declared[pname]["schema"],
                value,
                f"attach parameter {pname!r}",
                f"its schema in template {name!r}",
            )
        for pname, spec in declared.items():
            if "default" not in spec and pname not in parameters:
                raise InvalidInput(
                    f"attach of template {name!r} must supply parameter {pname!r} (it has no default)"
                )
        given = (
            "the declarations object of this attach" if doing == "attach" else "the new declarations object"
        )
        section = template.get("declarations")
        if section is None:
            if declarations:
                raise InvalidInput(
                    f"template {name!r} declares no declarations section, so none may be supplied"
                )
            return
        self._valid(
            substitute(section["schema"], parameters),
            declarations,
            given,
            f"the declarations schema of template {name!r}",
        )
        if "check" in section:
            verdict = self.svc.programs.eval(
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
                raise InvalidInput(f"{given} is rejected by template {name!r}: {message}")

    def _valid(self, schema: dict[str, Any], value: Any, what: str, under: str) -> None:
        """The caller's value against a template's schema: its refusal is ``invalid-input``
        (``invalid-document`` names a record that does not match its state)."""
        try:
            self.svc.validators.validate(schema, value, what, under)
        except InvalidInput as exc:
            raise InvalidInput(exc.message) from exc

    # ------------------------------------------------------------------ attach / detach

    def listed(self, name: str) -> list[StateAttachment]:
        decl = self.svc.get_declaration(name)
        return [{"state": name, **a} for a in decl["attachments"]]

    def get(self, name: str, template: str) -> StateAttachment:
        for row in self.listed(name):
            if row["template"] == template:
                return row
        raise NotFound(f"template {template!r} is not attached on state {name!r}")

    def attach(self, name: str, template: str, body: Any, *, context: DoorContext | None = None) -> Attached:
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
        for seg in path:
            # an attachment's path is a literal place, but its regimes are served under it, where
            # these segments mean something else: a regime rule would read "*" as a wildcard
            # over every key, and no op path can reach a member named "-" or "_trace"
            if seg in _RESERVED_SEGMENTS:
                raise InvalidInput(
                    f"attach path {path!r}: segment {seg!r} cannot name an attachment's place — "
                    f"{_RESERVED_SEGMENTS[seg]}"
                )
        if not isinstance(supplied, dict) or not isinstance(declarations, dict):
            raise InvalidInput("attach parameters and declarations must be objects")
        options = body.get("options") or {}
        if not isinstance(options, dict):
            raise InvalidInput("options must be an object")
        svc = self.svc
        if any(a["template"] == template for a in svc.get_declaration(name)["attachments"]):
            raise self._attached_already(name, template)
        doc = self.svc.templates.docs([template])[template]
        parameters = {**defaults(doc), **supplied}
        self.check_values(doc, parameters, declarations)
        # Records may already hold data at the path (a template attached again after a detach):
        # the reconcile flow and the registered reconcilers see the attach as they see a
        # declarations update, with no previous declarations.
        closes = self.reconcile(name, doc, {"path": path, "declarations": None}, declarations, options)
        for reconciler in self.reconcilers:
            closes.extend(reconciler(name, doc, "attach", None, declarations, options))
        origin = svc._origin(
            WriteOrigin(consumer="attach-reconcile", meta={"origin": "reconcile"})
            if closes
            else WriteOrigin(),
            context,
            "attach",
        )
        reconciled = {subject.encode() for subject, _ in closes}

        def redeclared(decl: dict[str, Any]) -> dict[str, Any]:
            attachments = dict(decl.get("attachments", {}))
            if template in attachments:
                raise self._attached_already(name, template)
            attachments[template] = {
                "path": path,
                "parameters": parameters,
                "supplied": supplied,
                "declarations": declarations,
                "updated_at": utc_now(),
            }
            effective = self.effective(decl["schema"], attachments, {template: doc})
            for validator in self.validators:
                validator(name, doc, declarations, effective["schema"])
            check_records(
                svc,
                name,
                effective_schema(decl),
                effective["schema"],
                f"attaching template {template!r} at {path}",
                reconciled,
            )
            return {**decl, "attachments": attachments, "effective": effective}

        self._commit_reconciled(name, closes, origin, redeclared)
        return {"attached": True, "state": name, "template": template}

    @staticmethod
    def _attached_already(name: str, template: str) -> Conflict:
        return Conflict(
            f"template {template!r} is already attached on state {name!r} — detach it to change path/parameters"
        )

    def update(
        self, name: str, template: str, body: Any, *, context: DoorContext | None = None
    ) -> AttachmentUpdated:
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
        svc = self.svc
        current = self.get(name, template)
        doc = self.svc.templates.docs([template])[template]
        new_declarations = body["declarations"]
        self.check_values(doc, current["parameters"], new_declarations, _UPDATING)
        closes = self.reconcile(name, doc, dict(current), new_declarations, options, _UPDATING)
        for reconciler in self.reconcilers:
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
            effective = self.effective(decl["schema"], attachments, {template: doc})
            for validator in self.validators:
                validator(name, doc, new_declarations, effective["schema"])
            return {**decl, "attachments": attachments, "effective": effective}

        self._commit_reconciled(name, closes, origin, redeclared)
        return {"updated": True, "state": name, "template": template, "closed": len(closes)}

    def _commit_reconciled(
        self,
        name: str,
        closes: list[tuple[StateSubject, list[Any]]],
        origin: Any,
        redeclared: Callable[[dict[str, Any]], dict[str, Any]],
    ) -> None:
        """The new declaration and every reconciled record, committed together or not at all;
        the records answer to the new declaration (its regimes, stamps and schema)."""
        pipeline.run(
            self.svc,
            [RecordWrite(name, subject, ops_transform(parse_ops(ops))) for subject, ops in closes],
            origin,
            redeclare={name: redeclared},
            canonical=[subject for subject, _ in closes],
        )

    def reconcile(
        self,
        name: str,
        doc: dict[str, Any],
        current: dict[str, Any],
        new: dict[str, Any],
        options: dict[str, Any],
        doing: str = "attach",
    ) -> list[tuple[StateSubject, list[Any]]]:
        """The built-in reconcile flow: items the new declarations no longer cover must be closed.
        ``doing`` names the operation in a refusal (``attach``, or the declarations update)."""
        programs = doc.get("reconcile")
        if programs is None:
            return []
        svc = self.svc
        if current["path"] and not svc.store.member_counts(name).get(current["path"][0]):
            return []  # no record holds data at the path: nothing to orphan, no scan
        orphans: list[dict[str, Any]] = []
        after = None
        while page := svc.store.scan(name, after=after, limit=200):
            docs = svc.store.read([x.key for x in page])
            for item in page:
                subtree = _subtree(docs[item.key].body, current["path"])
                found = self.svc.programs.eval(
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
            # (each named with its tenant: the same kind and key may be open under two)
            listed = "; ".join(
                f"[{o['subject'].target_kind}/{o['subject'].target_name} {o['subject'].kind}:"
                f"{o['subject'].key}] {o['label']} (id {o['id']})"
                for o in orphans[:20]
            )
            more = f" … and {len(orphans) - 20} more" if len(orphans) > 20 else ""
            again = "Attach again" if doing == "attach" else "Send the declarations again"
            raise ReconcileNeeded(
                f"this {doing} of template {doc['name']!r} on state {name!r} would orphan {len(orphans)} open record "
                f"item(s) the new declarations no longer cover: {listed}{more}. {again} with options "
                f'{{"orphans": "close", "resolution": R}} to close them, R {self._resolutions_named(programs, new)}.',
                [
                    {
                        "target_kind": o["subject"].target_kind,
                        "target_name": o["subject"].target_name,
                        "subject": o["subject"].key,
                        "kind": o["subject"].kind,
                        "id": o["id"],
                        "label": o["label"],
                    }
                    for o in orphans
                ],
            )
        if directive != "close":
            raise InvalidInput(
                f'unknown reconcile directive options.orphans={directive!r}; the only directive is "close"'
            )
        resolution = options.get("resolution")
        allowed = self.svc.programs.eval(programs["resolutions"]["content"], new, {}, "reconcile.resolutions")
        if (
            not isinstance(resolution, str)
            or not resolution.strip()
            or not isinstance(allowed, list)
            or resolution not in allowed
        ):
            if not isinstance(allowed, list):
                raise TemplateInvalid(f"reconcile.resolutions of template {doc['name']!r} must return a list")
            raise InvalidInput(f"options.resolution must be one of {allowed}, got {resolution!r}")
        closes = []
        for orphan in orphans:
            record = svc.read(name, orphan["subject"])
            subtree = _subtree(record["data"] if record else None, current["path"])
            ops = self.svc.programs.eval(
                programs["close"]["content"],
                subtree,
                {"id": orphan["id"], "resolution": resolution},
                "reconcile.close",
            )
            closes.append((orphan["subject"], _rebase(ops, current["path"], "reconcile.close")))
        return closes

    def _resolutions_named(self, programs: dict[str, Any], new: Any) -> str:
        """The resolutions a close of orphans may name, as the refusal that asks for one says
        them (the template's ``reconcile.resolutions`` on the new declarations)."""
        try:
            allowed = self.svc.programs.eval(
                programs["resolutions"]["content"], new, {}, "reconcile.resolutions"
            )
        except StateflowError:  # (its own failure is the close's to report)
            allowed = None
        if not isinstance(allowed, list) or not allowed:
            return "one of the resolutions the template's reconcile.resolutions lists"
        return "one of " + ", ".join(orjson.dumps(r).decode() for r in allowed)

    def register_detach_referee(self, referee: DetachReferee) -> None:
        self.referees.append(referee)

    def register_attach_validator(self, validator: AttachValidator) -> None:
        """``validator(state, template, declarations, effective_schema)`` raises to refuse an attach."""
        self.validators.append(validator)

    def register_attach_reconciler(self, reconciler: AttachReconciler) -> None:
        """``reconciler(state, template, operation, previous, new, options)`` returns
        ``[(subject, ops)]`` to apply in the same transaction as the declarations change;
        ``operation`` is ``"attach"`` (``previous`` is None) or ``"update_declarations"``."""
        self.reconcilers.append(reconciler)

    def detach(self, name: str, template: str, *, context: DoorContext | None = None) -> Detached:
        svc = self.svc
        references = [r for referee in self.referees for r in referee(name, template)]
        if references:
            raise Conflict(
                f"template {template!r} on state {name!r} cannot be detached — referenced by: {'; '.join(references)}"
            )
        self.get(name, template)
        key = DocKey("_states", name)

        def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
            decl = svc._declaration(docs, name)
            attachments = {t: a for t, a in decl.get("attachments", {}).items() if t != template}
            new = {k: v for k, v in decl.items() if k not in ("attachments", "effective")}
            if attachments:
                new["attachments"] = attachments
                new["effective"] = self.effective(decl["schema"], attachments)
            check_records(
                svc, name, effective_schema(decl), effective_schema(new), f"detaching template {template!r}"
            )
            return [Write.between(key, decl, new, docs[key].revision)], None

        svc.store.update([key], compute, svc._origin(WriteOrigin(), context, "detach"))
        return {"detached": True, "state": name, "template": template}
