"""The states layer's part of ``stateflow check`` (registered with :mod:`stateflow.store.check`
on import: the store layer knows no state's rules)."""

from __future__ import annotations

from stateflow.states.builtin import RECORD_RULES
from stateflow.states.models import StateSubject
from stateflow.store.check import CheckReport, register
from stateflow.store.protocol import Store

PAGE = 500


def _records(store: Store, report: CheckReport) -> None:
    """Every current record of a state with a record rule (``RECORD_RULES``) keeps it: one an
    earlier version let through the operator's door before the rule existed — a ``null`` or a
    key of index form in memory, an item the LangGraph store cannot read back — is named with
    the rule's reason, which gives the path. It is not damage: the operator rewrites it
    (``stateflow states replace``)."""
    for state, rule in RECORD_RULES.items():
        after = None
        while page := store.scan(state, after=after, limit=PAGE):
            after = page[-1].key.subject
            docs = store.read([item.key for item in page])
            for item in page:
                body = docs[item.key].body
                subject = StateSubject.decode(item.key.subject)
                why = None if body is None else rule(body, subject.key)
                if why is not None:
                    report.refused_record(
                        f"{state} record {subject.kind}/{subject.key} of {subject.target_kind} "
                        f"{subject.target_name!r}: {why}"
                    )
            report.count("records", len(page))


register("records", _records)
