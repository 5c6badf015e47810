"""Retention: expired records (per-state ``retention_days`` or the configured default), expired
``op_id`` keys and, when configured, old audit rows."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from stateflow.states.listing import PAGE_MAX
from stateflow.states.models import DoorContext, StateSubject
from stateflow.states.results import PruneReport
from stateflow.store.clock import utc_text

if TYPE_CHECKING:
    from stateflow.states.service import StatesService


def prune(
    svc: StatesService,
    *,
    context: DoorContext | None = None,
    now: datetime | None = None,
    progress: Callable[[str, int], None] | None = None,
) -> PruneReport:
    """Delete expired records (per-state ``retention_days`` or the configured default),
    expired op_id keys and, when audit retention is configured, audit rows older than that.

    ``progress(state, records erased so far)`` is called as the sweep goes (each erase is
    its own write)."""
    retention = svc.config.retention
    default_days, op_days, audit_days = retention.default_days, retention.op_days, retention.audit_days
    now = now or datetime.now(UTC)
    pruned: dict[str, int] = {}
    ctx = context or DoorContext(door="operator", actor="retention")
    for decl in svc.list_declarations():
        days = decl.get("retention_days") or default_days
        if not days:
            continue
        cutoff = utc_text(now - timedelta(days=days))
        count = 0
        after = None
        while page := svc.store.scan(decl["name"], after=after, limit=PAGE_MAX):
            expired = [x for x in page if x.at is not None and x.at < cutoff]
            for item in expired:
                svc.erase(
                    decl["name"],
                    StateSubject.decode(item.key.subject),
                    origin={"consumer": "retention"},
                    context=ctx,
                )
                count += 1
                if progress is not None:
                    progress(decl["name"], count)
            after = page[-1].key.subject
        pruned[decl["name"]] = count
    op_cutoff = utc_text(now - timedelta(days=op_days))
    ops = svc.store.prune_ops(op_cutoff)
    audit: dict[str, int] = {}
    if audit_days:
        audit_cutoff = utc_text(now - timedelta(days=audit_days))
        for decl in svc.list_declarations():
            audit[decl["name"]] = svc.store.prune_history(decl["name"], audit_cutoff)
    return {"pruned": pruned, "op_ids": ops, "audit_rows": audit}
