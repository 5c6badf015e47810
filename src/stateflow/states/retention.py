"""Retention: expired records (per-state ``retention_days`` or the configured default), expired
``op_id`` keys and, when configured, old audit rows.

The deployment default applies to declared states only: the built-in ``memory`` state is agents'
durable memory, swept only when its own declaration carries a ``retention_days``; a
``retention_exempt`` state is never swept by age."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from stateflow.states.builtin import BUILTIN_STATES
from stateflow.states.langgraph_items import CHECKPOINT_KINDS, CHECKPOINTS_DESCRIPTION
from stateflow.states.listing import PAGE_MAX
from stateflow.states.models import DoorContext, StateSubject
from stateflow.states.pipeline import CATALOG
from stateflow.states.results import PruneReport
from stateflow.store.clock import utc_text
from stateflow.store.model import DocKey

if TYPE_CHECKING:
    from stateflow.states.service import StatesService


def retention_days(decl: Mapping[str, Any], default_days: int | None) -> int | None:
    """The days ``decl``'s records are kept: its own ``retention_days``, else the deployment
    default — never for a built-in state (memory is not erased by a setting meant for records),
    nor for a ``retention_exempt`` one (records that hold values for each other, such as the
    LangGraph saver's checkpoints: erased one by one by age, a kept record would lose values
    an erased one held; their owner trims them)."""
    if decl.get("retention_exempt"):
        return None
    own: int | None = decl.get("retention_days")
    if own or decl["name"] in BUILTIN_STATES:
        return own
    return default_days


def _checkpoints_declared_before_exemption(svc: StatesService, decl: Mapping[str, Any]) -> bool:
    """Whether ``decl`` is the LangGraph saver's state as an earlier version declared it, before
    a state could be ``retention_exempt`` (its stored row has no such field): the saver marks
    it exempt at its first open, and until then — a sweep by a process that never opens a
    saver, the CLI or the server — its checkpoints are not erased by age either (one holds
    values for the others)."""
    if decl.get("description") != CHECKPOINTS_DESCRIPTION or tuple(decl["subject_kinds"]) != CHECKPOINT_KINDS:
        return False
    stored = svc.store.get(DocKey(CATALOG, decl["name"])).body
    return isinstance(stored, dict) and "retention_exempt" not in stored


def prune(
    svc: StatesService,
    *,
    context: DoorContext | None = None,
    now: datetime | None = None,
    progress: Callable[[str, int], None] | None = None,
) -> PruneReport:
    """Delete expired records (per-state ``retention_days`` or, for declared states, the configured default),
    expired op_id keys and, when audit retention is configured, audit rows older than that.

    ``progress(state, records erased so far)`` is called as the sweep goes (each erase is
    its own write)."""
    retention = svc.config.retention
    default_days, op_days, audit_days = retention.default_days, retention.op_days, retention.audit_days
    now = now or datetime.now(UTC)
    pruned: dict[str, int] = {}
    ctx = context or DoorContext(door="operator", actor="retention")
    for decl in svc.list_declarations():
        days = retention_days(decl, default_days)
        if not days or _checkpoints_declared_before_exemption(svc, decl):
            continue
        cutoff = _cutoff(now, days)
        count = 0
        after = None
        while cutoff is not None and (page := svc.store.scan(decl["name"], after=after, limit=PAGE_MAX)):
            expired = [x for x in page if x.at is not None and x.at < cutoff]
            for item in expired:
                before = count
                try:
                    # conditional on the revision listed: a record written (or folded) since the
                    # listing is no longer expired, and is kept
                    if not svc.erase_unchanged(
                        decl["name"],
                        StateSubject.decode(item.key.subject),
                        item.revision,
                        origin={"consumer": "retention"},
                        context=ctx,
                    ):
                        continue
                    count = before + 1
                    if progress is not None:
                        progress(decl["name"], count)
                except KeyboardInterrupt:
                    # a Ctrl-C lands mostly inside an erase, often after its commit: the record
                    # counts if it is gone, and is reported, so what is said erased was erased
                    count = before + (svc.store.get(item.key).body is None)
                    if progress is not None:
                        progress(decl["name"], count)
                    raise
            after = page[-1].key.subject
        pruned[decl["name"]] = count
    op_cutoff = _cutoff(now, op_days)
    ops = 0 if op_cutoff is None else svc.store.prune_ops(op_cutoff)
    audit: dict[str, int] = {}
    audit_cutoff = _cutoff(now, audit_days) if audit_days else None
    if audit_cutoff is not None:
        for decl in svc.list_declarations():
            audit[decl["name"]] = svc.store.prune_history(decl["name"], audit_cutoff)
    return {"pruned": pruned, "op_ids": ops, "audit_rows": audit}


def _cutoff(now: datetime, days: int) -> str | None:
    """The time ``days`` before ``now``; None where that is before the calendar's first day —
    nothing is that old (a retention of up to 2^31 - 1 days is accepted)."""
    try:
        return utc_text(now - timedelta(days=days))
    except OverflowError:
        return None
