"""Durable documents, cohorts and history over SQLite (embedded default) or PostgreSQL.

Services type against :class:`Store` (the protocol); :class:`SqlStore` is the algorithm both
backends share, and :class:`~stateflow.store.backend.Backend` declares what a backend supplies.
"""

from stateflow.store.base import SqlStore
from stateflow.store.ledger import OpIdTaken
from stateflow.store.model import (
    HEAD,
    Change,
    Commit,
    DocKey,
    Document,
    Listed,
    RevisionNotFound,
    Transition,
    Whole,
    Write,
)
from stateflow.store.open import StoreLocation, default_store_path, open_store, resolve_store_url
from stateflow.store.protocol import Store

__all__ = [
    "HEAD",
    "Change",
    "Commit",
    "DocKey",
    "Document",
    "Listed",
    "OpIdTaken",
    "RevisionNotFound",
    "SqlStore",
    "Store",
    "StoreLocation",
    "Transition",
    "Whole",
    "Write",
    "default_store_path",
    "open_store",
    "resolve_store_url",
]
