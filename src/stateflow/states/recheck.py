"""Existing records against a state's new effective schema.

A template replace, an attach, a detach or an additive re-declare changes the schema every
later write validates against. A record holding data the new schema refuses could then never be
written again (every write validates the whole record), so such a change is refused while one
exists. Only records holding a top-level member whose subschema changed can flip from valid to
invalid (unless a root keyword changed too), and the store keeps a counter per member, so a
state where no record holds one is answered without a scan.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

import orjson

from stateflow.errors import Conflict
from stateflow.states.schema import DocumentInvalid
from stateflow.validators import compiled

if TYPE_CHECKING:
    from stateflow.states.service import StatesService


class RecordsInvalid(Conflict):
    code = "records-invalid"


def check_records(
    svc: StatesService,
    state: str,
    old_schema: dict[str, Any],
    new_schema: dict[str, Any],
    change: str,
    rewritten: Collection[str] = (),
) -> None:
    """Refuse ``change`` (409 ``records-invalid``, naming the first such record) when a record of
    ``state`` is valid under ``old_schema`` but not under ``new_schema``.

    Run it inside the transaction that writes the declaration: record writes lock the
    declaration, so none lands between the check and the change. Records ``rewritten`` in that
    transaction (encoded subjects) are skipped: their new documents are validated as written.
    """
    if old_schema is new_schema:
        return
    members = _changed_members(old_schema, new_schema)
    if members is not None and not members:
        return
    counts = svc.store.counts(state)
    if not any(counts.kinds.values()) or (
        members is not None and not any(counts.members.get(m) for m in members)
    ):
        return
    old_valid, new_valid = compiled(old_schema).is_valid, compiled(new_schema).is_valid
    after = None
    while page := svc.store.scan(state, after=after, limit=200):
        docs = svc.store.read([item.key for item in page])
        for item in page:
            body = docs[item.key].body
            if (
                type(body) is not dict
                or (members is not None and members.isdisjoint(body))
                or item.key.subject in rewritten
            ):
                continue
            # a record the old schema refused already (a raw repair write) is not this change's doing
            if new_valid(body) or not old_valid(body):
                continue
            try:
                svc.validators.validate(new_schema, body, str(item.key))
            except DocumentInvalid as exc:
                raise RecordsInvalid(
                    f"{change} would leave existing records of state {state!r} invalid: {exc.message} — "
                    "repair or erase such records first"
                ) from exc
        after = page[-1].key.subject


def _changed_members(old: dict[str, Any], new: dict[str, Any]) -> set[str] | None:
    """The top-level members whose subschema differs; ``None`` (every member) when a root
    keyword differs."""
    if _encoded({k: v for k, v in old.items() if k != "properties"}) != _encoded(
        {k: v for k, v in new.items() if k != "properties"}
    ):
        return None
    before, after = old.get("properties", {}), new.get("properties", {})
    return {m for m in before.keys() | after.keys() if _encoded(before.get(m)) != _encoded(after.get(m))}


def _encoded(value: Any) -> bytes:
    # compared encoded: == on decoded JSON takes true for 1 and 1 for 1.0
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
