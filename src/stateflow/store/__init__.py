"""Durable documents, cohorts and history over SQLite (embedded default) or PostgreSQL."""

from stateflow.store.base import OpIdTaken, SqlStore
from stateflow.store.model import HEAD, Change, Commit, DocKey, Document, Transition, Write
from stateflow.store.open import default_store_path, open_store, resolve_store_url

Store = SqlStore

__all__ = [
    "HEAD",
    "Change",
    "Commit",
    "DocKey",
    "Document",
    "OpIdTaken",
    "SqlStore",
    "Store",
    "Transition",
    "Write",
    "default_store_path",
    "open_store",
    "resolve_store_url",
]
