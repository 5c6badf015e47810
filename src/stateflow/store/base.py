"""The store algorithm, shared by every SQL backend: :class:`SqlStore`.

It is assembled from one module per job, each a layer over :class:`~stateflow.store.core.StoreCore`
(construction, caches, schema, current reads, row and member access):

- :mod:`~stateflow.store.writes` — commits, read-modify-write, the optimistic path, the planner
  (its structures in :mod:`~stateflow.store.plan`);
- :mod:`~stateflow.store.history` — as-of reads, change pages, transitions;
- :mod:`~stateflow.store.path_reads` — what paths meet inside documents, now or as of a
  transition, reading only what they reach (a collaborator the store holds, not a layer:
  it sees the store only through its declared :class:`~stateflow.store.path_reads.PathSource`);
- :mod:`~stateflow.store.listing` — scans, counts, containment search;
- :mod:`~stateflow.store.retention` — history pruning, purge, the ledger's upkeep.

Below them: the clock (:mod:`~stateflow.store.clock`), the transaction facade
(:mod:`~stateflow.store.tx`), row codecs (:mod:`~stateflow.store.rows`) and the idempotency
claims (:mod:`~stateflow.store.ledger`). A backend subclasses :class:`SqlStore` and implements
the hooks declared in :class:`~stateflow.store.backend.Backend`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

from stateflow.store.clock import utc_now, utc_text
from stateflow.store.ledger import OpIdTaken
from stateflow.store.listing import Listing
from stateflow.store.model import DocKey
from stateflow.store.path_reads import Children, PathReads, PathsRead
from stateflow.store.plan import INLINE_EDITS_MAX, SNAPSHOT_MAX_CHAIN, SNAPSHOT_MIN_BYTES
from stateflow.store.retention import Retention
from stateflow.store.rows import key_filter, outline_of
from stateflow.store.trail import End, PathT
from stateflow.store.tx import Tx
from stateflow.store.writes import Writes

__all__ = [
    "INLINE_EDITS_MAX",
    "SNAPSHOT_MAX_CHAIN",
    "SNAPSHOT_MIN_BYTES",
    "OpIdTaken",
    "SqlStore",
    "Tx",
    "key_filter",
    "outline_of",
    "utc_now",
    "utc_text",
]


class SqlStore(Writes, Retention, Listing):
    """Documents, cohorts, history and the idempotency ledger over a SQL database."""

    @functools.cached_property
    def _paths(self) -> PathReads:
        return PathReads(self)

    def read_paths(
        self,
        paths: Mapping[DocKey, Sequence[PathT]],
        *,
        seq: int | None = None,
        revisions: Mapping[DocKey, int] | None = None,
        end: End | None = None,
        back: int = 0,
    ) -> dict[DocKey, PathsRead]:
        """See :meth:`stateflow.store.path_reads.PathReads.read_paths`."""
        return self._paths.read_paths(paths, seq=seq, revisions=revisions, end=end, back=back)

    def children(self, key: DocKey, path: PathT, *, start: int = 0, limit: int = 200) -> Children | None:
        """See :meth:`stateflow.store.path_reads.PathReads.children`."""
        return self._paths.children(key, path, start=start, limit=limit)
