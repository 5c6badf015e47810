"""The states layer's part of ``stateflow check`` (registered with :mod:`stateflow.store.check`
on import: the store layer knows no state's rules)."""

from __future__ import annotations

from collections.abc import Iterator

from stateflow.doc.canonical import JSON
from stateflow.states.builtin import RECORD_RULES, RecordRule, record_rule
from stateflow.states.models import StateSubject
from stateflow.states.pipeline import CATALOG
from stateflow.store.check import CheckReport, register
from stateflow.store.model import DocKey
from stateflow.store.protocol import Store

PAGE = 500


def _pages(store: Store, state: str) -> Iterator[list[tuple[DocKey, JSON]]]:
    """Every current record of ``state`` with its body, ``PAGE`` at a time."""
    after = None
    while page := store.scan(state, after=after, limit=PAGE):
        after = page[-1].key.subject
        docs = store.read([item.key for item in page])
        yield [(item.key, docs[item.key].body) for item in page]


def _ruled(store: Store) -> dict[str, RecordRule]:
    """The states with a record rule: by name, and those whose declaration names one."""
    rules = dict(RECORD_RULES)
    for page in _pages(store, CATALOG):
        for key, body in page:
            if isinstance(body, dict) and body.get("record_rule") is not None:
                rule = record_rule(key.subject, body)
                if rule is not None:
                    rules[key.subject] = rule
    return rules


def _records(store: Store, report: CheckReport) -> None:
    """Every current record of a state with a record rule (:func:`~stateflow.states.builtin.record_rule`)
    keeps it: one an earlier version let through the operator's door before the rule existed — a
    ``null`` or a key of index form in memory, an item the LangGraph store cannot read back — is
    named with the rule's reason, which gives the path. It is not damage: the operator rewrites
    it (``stateflow states replace``)."""
    for state, rule in _ruled(store).items():
        for page in _pages(store, state):
            for key, body in page:
                why = None if body is None else rule(body, StateSubject.decode(key.subject).key)
                if why is not None:
                    report.refused_record(f"{key}: {why}")
            report.count("records", len(page))


register("records", _records)
