"""The typed results of the declared-states service: what ``read``, the writes, the listings and
``stats`` answer, as :class:`~typing.TypedDict` s.

They are plain JSON objects at run time — the HTTP API, the CLI and the tools serialize them as
published, field for field — and mypy checks every producer (the local service, the HTTP client)
and consumer against one definition.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict


class SubjectRef(TypedDict):
    target_kind: str
    target_name: str
    kind: str
    key: str


class Record(TypedDict):
    """A record as read (or as a write left it). ``subject`` is the subject asked for,
    ``canonical_subject`` the one it resolves to through fold aliases; ``folded_from`` lists the
    subjects folded into it."""

    state: str
    subject: SubjectRef
    data: dict[str, Any]
    seq: int | None
    revision: int
    updated_at: str | None
    canonical_subject: SubjectRef
    folded_from: list[SubjectRef]


class WriteEntry(TypedDict):
    """One transition in a record's audit trail."""

    seq: int
    at: str
    origin: dict[str, Any]
    action: str | None
    paths: list[list[str | int]]
    revision: int


class WritesPage(TypedDict):
    items: list[WriteEntry]
    next_cursor: str | None


class SubjectRow(TypedDict):
    subject: SubjectRef
    updated_at: str | None
    revision: int
    data: NotRequired[dict[str, Any] | None]
    """with ``include_data`` only"""


class SubjectsPage(TypedDict):
    subjects: list[SubjectRow]
    next_cursor: str | None


class SearchPage(TypedDict):
    matches: list[SubjectRow]
    next_cursor: str | None


class Stats(TypedDict):
    records: int
    per_field: dict[str, int]
    per_kind: dict[str, int]
    consumers: int


class Regime(TypedDict):
    path: list[str]
    regime: str


class AttachmentRow(TypedDict):
    template: str
    path: list[str]
    parameters: dict[str, Any]
    declarations: dict[str, Any]


class DeclarationView(TypedDict):
    """A declaration as read (and as ``declare`` answers it): what was declared, plus the
    computed ``effective_schema``, ``regimes`` and ``attachments``, ``updated_at`` and the
    catalog row's ``version``."""

    name: str
    description: str
    schema: dict[str, Any]
    subject_kinds: list[str]
    default_subject_kind: str
    retention_days: int | None
    effective_schema: dict[str, Any]
    regimes: list[Regime]
    attachments: list[AttachmentRow]
    updated_at: str | None
    version: int
