"""The template catalog: state templates are documents of the reserved state ``_templates``.

Replacing a template re-validates every live attachment of it (through the service's
attachments component) in the same transaction; templates a plugin ships are registered as
seeds and installed when the store has none of that name.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, Final, cast

import orjson

from stateflow.errors import Conflict, InvalidInput, NotFound
from stateflow.states.models import DoorContext, WriteOrigin
from stateflow.states.recheck import check_records
from stateflow.states.regimes import effective_schema
from stateflow.states.results import Deleted, Template, TemplateRow
from stateflow.states.schema import SchemaInvalid
from stateflow.states.templates import AttachConflict, TemplateInvalid, defaults, validate_template
from stateflow.store import DocKey, Document, Write

if TYPE_CHECKING:
    from stateflow.states.service import StatesService

TEMPLATES: Final = "_templates"


class TemplateNotFound(NotFound):
    code = "template-not-found"


class TemplateInUse(Conflict):
    code = "template-in-use"


def _hash(doc: dict[str, Any]) -> str:
    return hashlib.sha256(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)).hexdigest()


class TemplateCatalog:
    """Templates of one service (``service.templates``)."""

    def __init__(self, svc: StatesService) -> None:
        self.svc = svc
        self.seeds: dict[str, dict[str, Any]] = {}

    def get(self, name: str) -> Template:
        body = self.svc.store.get(DocKey(TEMPLATES, name)).body
        if body is None:
            raise TemplateNotFound(f"no state template named {name!r}")
        return cast(Template, {k: v for k, v in body.items() if k != "_shipped_hash"})

    def docs(self, names: list[str]) -> dict[str, dict[str, Any]]:
        docs = self.svc.store.read([DocKey(TEMPLATES, n) for n in names])
        out = {}
        for n in names:
            body = docs[DocKey(TEMPLATES, n)].body
            if body is None:
                raise TemplateNotFound(f"no state template named {n!r}")
            out[n] = body
        return out

    def attached_states(self, template: str) -> list[str]:
        return sorted(
            d["name"]
            for d in self.svc.list_declarations()
            if any(a["template"] == template for a in d["attachments"])
        )

    def listed(self) -> list[TemplateRow]:
        svc = self.svc
        counts: dict[str, int] = {}
        for decl in svc.list_declarations():
            for a in decl["attachments"]:
                counts[a["template"]] = counts.get(a["template"], 0) + 1
        out: list[TemplateRow] = []
        after = None
        while page := svc.store.scan(TEMPLATES, after=after, limit=500):
            docs = svc.store.read([x.key for x in page])
            for item in page:
                body = docs[item.key].body or {}
                view = {k: v for k, v in body.items() if k != "_shipped_hash"}
                row = {
                    **view,
                    "attached_to": counts.get(item.key.subject, 0),
                    "shipped_default": "_shipped_hash" in body,
                }
                out.append(cast(TemplateRow, row))
            after = page[-1].key.subject
        return out

    def put(
        self,
        name: str,
        raw: Any,
        *,
        replace: bool = False,
        context: DoorContext | None = None,
        shipped: bool = False,
    ) -> Template:
        """Upload a template; with ``replace`` every live attachment is re-validated first."""
        svc = self.svc
        doc = validate_template(name, raw, svc.jq().compile)
        key = DocKey(TEMPLATES, name)
        existing = svc.store.get(key).body
        if existing is not None and not replace:
            raise Conflict(  # every door's spelling: each caller reads this one message
                f"template {name!r} already exists — to overwrite it, upload it with replace "
                "(stateflow state-templates put --replace; ?replace=true over HTTP; replace=True in Python)"
            )
        states = self.attached_states(name) if existing is not None else []
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
                    self.svc.attaching.check_values(doc, att["parameters"], att["declarations"])
                    attachments[name] = att
                    effective = self.svc.attaching.effective(decl["schema"], attachments, {name: doc})
                    for validator in self.svc.attaching.validators:
                        validator(ck.subject, doc, att["declarations"], effective["schema"])
                except (InvalidInput, AttachConflict, SchemaInvalid) as exc:  # (the template's or values')
                    raise TemplateInUse(
                        f"template {name!r} cannot be replaced: its attach on state {ck.subject!r} no longer validates: {exc.message}"
                    ) from exc
                new = {**decl, "attachments": attachments, "effective": effective}
                check_records(
                    svc,
                    ck.subject,
                    effective_schema(decl),
                    effective["schema"],
                    f"replacing template {name!r} (attached on state {ck.subject!r})",
                )
                writes.append(Write.between(ck, decl, new, docs[ck].revision))
            return writes, None

        svc.store.update([key, *catalog], compute, svc._origin(WriteOrigin(), context, "put-template"))
        return cast(Template, doc)

    def delete(self, name: str, *, context: DoorContext | None = None) -> Deleted:
        svc = self.svc
        self.get(name)
        states = self.attached_states(name)
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
            if self.svc.store.get(DocKey(TEMPLATES, name)).body is not None:
                continue
            try:
                self.put(name, raw, context=DoorContext(door="operator", actor="stateflow"), shipped=True)
            except InvalidInput as exc:
                raise TemplateInvalid(
                    f"state-template seed {name!r} does not validate: {exc.message}"
                ) from exc
