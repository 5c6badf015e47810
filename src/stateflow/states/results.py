"""The typed results of the declared-states service: what ``read``, the writes, the listings and
``stats`` answer, as :class:`~typing.TypedDict` s — and :class:`ApplyResult`, an op batch's
outcome, whose ``to_json()`` is its published :class:`ApplyAnswer`.

The typed dicts are plain JSON objects at run time — the HTTP API, the CLI and the tools
serialize them as published, field for field — and mypy checks every producer (the local
service, the HTTP client) and consumer against one definition.
"""

from __future__ import annotations

from typing import Any, Generic, NotRequired, TypedDict, TypeVar

from stateflow.doc.canonical import detach

T = TypeVar("T")


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
    """One transition in a record's audit trail. ``folded_from``, only on the rows of a subject
    folded into the record: that subject (``revision`` is then its record's revision)."""

    seq: int
    at: str
    origin: dict[str, Any]
    action: str | None
    paths: list[list[str | int]]
    revision: int
    folded_from: NotRequired[SubjectRef]


class Page(TypedDict, Generic[T]):
    """One keyset page: ``next_cursor`` only when another page exists. (The subjects and search
    pages keep the item keys they were published with, ``subjects`` and ``matches``.)"""

    items: list[T]
    next_cursor: str | None


WritesPage = Page[WriteEntry]


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
    retention_exempt: bool
    record_rule: NotRequired[str]
    effective_schema: dict[str, Any]
    regimes: list[Regime]
    attachments: list[AttachmentRow]
    updated_at: str | None
    version: int


class Deleted(TypedDict):
    """``delete_declaration`` and ``delete_template``."""

    deleted: bool
    name: str


class Erased(TypedDict):
    erased: bool


class KindKey(TypedDict):
    kind: str
    key: str


FoldReport = TypedDict(
    "FoldReport",
    {
        "mode": str,
        "from": KindKey,
        "into": KindKey,
        "already": bool,
        "flattened": int,
        "merged_members": NotRequired[list[str]],
    },
)
"""What ``fold`` did: ``already`` when the subject was folded there before, ``flattened`` how
many aliases now point at the survivor instead, ``merged_members`` (mode ``merge``) the members
the survivor took over."""

Diff = TypedDict("Diff", {"from": int, "to": int, "edits": list[list[Any]], "patch": NotRequired[Any]})
"""``diff``: ``edits`` as the audit trail shows them, ``patch`` the same as a merge patch
(left out where no merge patch makes the change: a value set to ``null``, a member named like
``"[0]"``)."""


class Consumer(TypedDict):
    """Something that uses a state (guards its deletion); ``unavailable`` when its lister could
    not answer."""

    kind: str
    name: NotRequired[str]
    detail: NotRequired[str]
    unavailable: NotRequired[str]


class PruneReport(TypedDict):
    pruned: dict[str, int]
    """records erased, per state"""
    op_ids: int
    audit_rows: dict[str, int]


class Template(TypedDict):
    """A state template as stored (the uploaded document in canonical form)."""

    kind: str
    name: str
    description: str
    parameters: NotRequired[dict[str, Any]]
    schema: dict[str, Any]
    regimes: NotRequired[list[Any]]
    declarations: NotRequired[Any]
    template_jq: NotRequired[dict[str, Any]]
    reconcile: NotRequired[dict[str, Any]]
    trace: Any


class TemplateRow(Template):
    """A template in the listing: how many states it is attached to, and whether it is a shipped
    default nobody replaced."""

    attached_to: int
    shipped_default: bool


class StateAttachment(AttachmentRow):
    """An attachment as listed for a state."""

    state: str


class Attached(TypedDict):
    attached: bool
    state: str
    template: str


class AttachmentUpdated(TypedDict):
    updated: bool
    state: str
    template: str
    closed: int
    """records the reconcile closed"""


class Detached(TypedDict):
    detached: bool
    state: str
    template: str


class ApplyAnswer(TypedDict):
    """An op batch's published answer (``ApplyResult.to_json``)."""

    applied: bool
    data: dict[str, Any] | None
    seq: int | None
    skipped: list[dict[str, Any]]
    replayed: NotRequired[bool]
    replayed_seq: NotRequired[int | None]
    written: NotRequired[bool]


class JqInput(TypedDict):
    """An input program's value."""

    name: str
    purpose: str
    value: Any


class JqUpdate(ApplyAnswer):
    """An update program's op batch, applied: the batch's answer and the program's name."""

    name: str


class ApplyResult:
    """The published ``{applied, data, seq, skipped}``, plus ``replayed: true`` (and
    ``replayed_seq``, the seq the original write produced, null if it changed nothing) for an
    ``op_id`` seen before, and ``written: false`` when every op was guard-skipped or changed
    nothing (no transition was recorded).

    ``data`` is the caller's own copy, made when it is first read: a write whose result is not
    looked at (most batches of ops on a large record) does not copy the record."""

    __slots__ = (
        "_data",
        "_detached",
        "applied",
        "replayed",
        "replayed_seq",
        "revision",
        "seq",
        "skipped",
        "written",
    )

    def __init__(
        self,
        applied: bool,
        data: dict[str, Any] | None,
        seq: int | None,
        skipped: list[dict[str, Any]] | None = None,
        replayed: bool = False,
        replayed_seq: int | None = None,
        written: bool = True,
        revision: int | None = None,
        *,
        shared: bool = False,
    ) -> None:
        """``shared``: ``data`` is the body the store caches (copied before anyone sees it)."""
        self.applied = applied
        self._data = data
        self._detached = not shared
        self.seq = seq
        self.skipped = [] if skipped is None else skipped
        self.replayed = replayed
        self.replayed_seq = replayed_seq
        self.written = written
        self.revision = revision
        """the record's revision after the batch, 0 if absent (an HTTP ETag; not serialized);
        None for a replay, which reads nothing"""

    @property
    def data(self) -> dict[str, Any] | None:
        if not self._detached:
            self._data = detach(self._data)
            self._detached = True
        return self._data

    @data.setter
    def data(self, value: dict[str, Any] | None) -> None:
        self._data, self._detached = value, True

    def _fields(self) -> tuple[Any, ...]:
        return (
            self.applied,
            self.data,
            self.seq,
            self.skipped,
            self.replayed,
            self.replayed_seq,
            self.written,
            self.revision,
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ApplyResult) and self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        names = ("applied", "data", "seq", "skipped", "replayed", "replayed_seq", "written", "revision")
        return (
            "ApplyResult(" + ", ".join(f"{n}={v!r}" for n, v in zip(names, self._fields(), strict=True)) + ")"
        )

    def to_json(self) -> ApplyAnswer:
        out: ApplyAnswer = {
            "applied": self.applied,
            "data": self.data,
            "seq": self.seq,
            "skipped": self.skipped,
        }
        if self.replayed:
            out["replayed"] = True
            out["replayed_seq"] = self.replayed_seq
        elif self.applied and not self.written:
            out["written"] = False
        return out
