"""What the store speaks: document keys, documents, writes, commits, history records."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from stateflow.doc.canonical import JSON, utf8_text
from stateflow.doc.diff import Edit, Segment, Within, diff, diff_within, within
from stateflow.doc.select import MISSING
from stateflow.errors import InvalidInput, NotFound
from stateflow.subjects import record_name


class _Key(NamedTuple):
    state: str
    subject: str


class DocKey(_Key):
    """A document's address: the state it belongs to and an opaque subject string.

    A tuple underneath, so hashing and comparing (done on every read) stay in C.
    """

    __slots__ = ()

    def __new__(cls, state: str, subject: str) -> DocKey:
        # (the tuple made here, not by the named tuple's generated ``__new__``: every write
        # names its documents, a call less each)
        if type(state) is str and type(subject) is str and state and subject:
            # (the common key at once: ASCII, no NUL — each a scan in C)
            if state.isascii() and subject.isascii() and "\x00" not in state and "\x00" not in subject:
                return _new_tuple(cls, (state, subject))
        elif not isinstance(state, str) or not state:
            raise InvalidInput("a document key needs a non-empty state name")
        elif not isinstance(subject, str) or not subject:
            raise InvalidInput("a document key needs a non-empty subject")
        # a lone surrogate (a byte that is not UTF-8 in a file name or a command-line argument)
        # can be neither stored nor named in an answer: refused here, whatever the door
        for part, text in (("state name", state), ("subject", subject)):
            if not utf8_text(text):
                raise InvalidInput(
                    f"a document key's {part} must be Unicode text: it holds a lone surrogate (such as "
                    "a byte that is not UTF-8 in a command-line argument)"
                )
            # a PostgreSQL text cannot hold U+0000, so no store holds such a key: one answer on
            # every backend, before any SQL (an encoded subject escapes it: only a state or
            # template name given as it was can hold one)
            if "\x00" in text:
                raise InvalidInput(f"the name {text!r} holds U+0000 (NUL), which no stored name may hold")
        return _new_tuple(cls, (state, subject))

    def __str__(self) -> str:
        # (every message names a document through here: a record as users know it)
        return record_name(self.state, self.subject)

    def __repr__(self) -> str:
        return f"DocKey(state={self.state!r}, subject={self.subject!r})"


def doc_keys(keys: Iterable[DocKey], call: str) -> list[DocKey]:
    """``keys`` as a list, each a :class:`DocKey`; anything else refused (``invalid-input``,
    naming ``call``) before any SQL — a string or a lone key given for the list would reach the
    database as parameters of the wrong number and kind."""
    given: object = keys  # (typed as asked for; checked as given)
    if isinstance(given, (DocKey, str)):
        raise InvalidInput(
            f"{call} takes a list of DocKey, got one {type(given).__name__}: wrap it in a list"
        )
    listed = list(keys)
    for key in listed:
        item: object = key
        if type(item) is not DocKey and not isinstance(item, DocKey):
            shown = repr(item)
            shown = shown if len(shown) <= 80 else shown[:80] + "…"
            raise InvalidInput(
                f"{call}: a key is a DocKey(state, subject), got {type(item).__name__} {shown}"
            )
    return listed


class RevisionNotFound(NotFound):
    """A read as of a revision the document has not reached (named as every message names a
    document; a layer above may say more, as why a folded record has no such revision)."""

    def __init__(self, key: DocKey, revision: int, current: int) -> None:
        super().__init__(f"{key} has no revision {revision} (current revision {current})")
        self.key, self.revision, self.current = key, revision, current


@dataclass(frozen=True, slots=True)
class Document:
    """A document as read. ``body`` is ``None`` when the document does not exist (yet or any
    more); ``revision`` still says how many changes it has seen."""

    key: DocKey
    revision: int
    body: dict[str, Any] | None
    seq: int | None = None
    """The seq of the transition that produced this revision (``None`` at revision 0)."""
    outlines: dict[str, Any] = field(default_factory=dict)
    """Requested member outlines: ``{member: {key: kind} | None}`` (None: not an object)."""
    at: str | None = None
    """When the revision was written (from ``read``; not filled inside ``update``)."""

    @property
    def exists(self) -> bool:
        return self.body is not None

    @property
    def value(self) -> JSON:
        """The body, or :data:`MISSING` when absent (the form ``doc/`` functions take)."""
        return MISSING if self.body is None else self.body


HEAD = None
"""``Write.expect`` value meaning "apply to whatever the current head is"."""


@dataclass(frozen=True, slots=True)
class Write:
    """One document's part of a cohort.

    ``expect`` is the revision the edits were computed against (compare-and-set; ``0`` means
    "must never have been written"), or :data:`HEAD` to apply the edits to the current head.
    ``paths`` are the touched paths recorded in history (by default the edits' paths).
    ``bodies`` (set by :meth:`between`): the body the edits were computed from and the body
    they make. Where the store holds the very member objects of the first, it takes the
    second's members as the result instead of applying the edits again — copying a large
    container once per write, not twice.
    """

    key: DocKey
    edits: Sequence[Edit]
    expect: int | None = HEAD
    paths: Sequence[Sequence[str | int]] | None = None
    bodies: tuple[dict[str, Any], dict[str, Any] | None] | None = field(
        default=None, compare=False, repr=False
    )

    @staticmethod
    def between(
        key: DocKey,
        old: JSON,
        new: JSON,
        expect: int | None = HEAD,
        *,
        changed: Iterable[Sequence[Segment]] | None = None,
        where: Within | None = None,
        paths: Sequence[Sequence[str | int]] | None = None,
        **kw: Any,
    ) -> Write:
        """The write that turns document body ``old`` into ``new``.

        ``None`` or :data:`MISSING` on either side means "no document" (a body is never null).
        ``changed``: the paths the caller changed (``new`` is ``old`` everywhere else, sharing
        its unchanged containers); only below them are the bodies compared, so a small change
        in a large document costs what the change costs. ``None`` compares the whole bodies.
        ``where``: the same paths as a trie already built (``doc.diff.within``'s), instead; a
        caller passing both is refused rather than one of them silently ignored.
        """
        if old is None:  # (no document: every write of a record comes here)
            old = MISSING
        if new is None:
            new = MISSING
        if where is None:
            where = None if changed is None else within(changed)
        elif changed is not None:
            raise TypeError("Write.between takes the changed paths once: changed= or where=, not both")
        edits = diff(old, new) if where is None else diff_within(old, new, where)
        if type(old) is dict and (type(new) is dict or new is MISSING):
            bodies: tuple[dict[str, Any], dict[str, Any] | None] | None = (
                old,
                None if new is MISSING else new,
            )
        else:
            bodies = None
        if kw:  # ``bodies`` given, or another of ``Write``'s fields (which it refuses)
            if "bodies" in kw:
                bodies = kw.pop("bodies")
            return Write(key, edits, expect, paths=paths, bodies=bodies, **kw)
        return made_write(key, edits, expect, paths, bodies)


class Whole(NamedTuple):
    """A document as its writer builds it whole (``Store.write_whole``): the new ``body``, the
    ``paths`` the write records in history, and — when the writer has them — each member's
    encoding (``encoded``: name → the bytes ``orjson.dumps`` gives for ``body[name]``, which
    the writer vouches for). With them a new document's rows are made straight from the bytes:
    no diff, no staging, no second encoding. ``edits``, when the writer has them: the edits
    ``diff(current, body)`` gives against the current body ``build`` was handed, grouped by
    top-level member in first-touched order, each as its JSON (``[path]`` or ``[path, value]``)
    — a replaced body's rows are planned from them without a diff (the writer vouches for them
    too, exactly: they are the change's history). ``rewritten``: the writer expects to write
    the document again (an item, a checkpoint's writes), so a whole-form creation keeps its body
    in its change instead of the mark (``rows.CHANGE_MARK``): the mark saves the copy at the
    creation and pays it back, dearer, at the first rewrite — a gain only for records written
    once (a checkpoint)."""

    body: dict[str, Any]
    paths: list[list[str]]
    encoded: dict[str, bytes] | None = None
    edits: dict[str, list[Any]] | None = None
    rewritten: bool = False


@dataclass(frozen=True, slots=True)
class Commit:
    """The outcome of a commit.

    ``applied`` is False for an idempotent replay (the ``op_id`` was seen before) — nothing was
    written. ``seq`` is None when nothing changed (no transition is recorded for a no-op).
    """

    applied: bool
    seq: int | None = None
    at: str | None = None
    revisions: dict[DocKey, int] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return self.seq is not None


@dataclass(frozen=True, slots=True)
class Change:
    """What one transition did to one document."""

    seq: int
    at: str
    origin: dict[str, Any]
    key: DocKey
    revision: int
    edits: list[Edit]
    paths: list[list[str | int]]


@dataclass(frozen=True, slots=True)
class Transition:
    seq: int
    at: str
    origin: dict[str, Any]
    changes: list[Change]


# Frozen dataclasses set each field through ``object.__setattr__`` in ``__init__``: several
# times what setting the slots directly costs. Every write builds a ``Write`` and a ``Commit``;
# these build them the direct way, with the fields ``__init__`` would set (nothing to check).
_WRITE_SLOTS = tuple(getattr(Write, name).__set__ for name in ("key", "edits", "expect", "paths", "bodies"))
_COMMIT_SLOTS = tuple(getattr(Commit, name).__set__ for name in ("applied", "seq", "at", "revisions"))
_DOCUMENT_SLOTS = tuple(
    getattr(Document, name).__set__ for name in ("key", "revision", "body", "seq", "outlines", "at")
)


def made_write(
    key: DocKey,
    edits: Sequence[Edit],
    expect: int | None,
    paths: Sequence[Sequence[str | int]] | None,
    bodies: tuple[dict[str, Any], dict[str, Any] | None] | None,
) -> Write:
    """``Write(key, edits, expect, paths, bodies)``, built without the frozen ``__init__``."""
    write = _new_object(Write)
    set_key, set_edits, set_expect, set_paths, set_bodies = _WRITE_SLOTS
    set_key(write, key)
    set_edits(write, edits)
    set_expect(write, expect)
    set_paths(write, paths)
    set_bodies(write, bodies)
    return write


def made_document(
    key: DocKey,
    revision: int,
    body: dict[str, Any] | None,
    seq: int | None,
    outlines: dict[str, Any],
    at: str | None = None,
) -> Document:
    """``Document(key, revision, body, seq, outlines, at)``, built without the frozen
    ``__init__`` (every write hands its computation a document per key it names, and
    PostgreSQL's keeps the body it wrote as one: the generated ``__init__`` costs ~1.7 times
    this)."""
    doc = _new_object(Document)
    set_key, set_revision, set_body, set_seq, set_outlines, set_at = _DOCUMENT_SLOTS
    set_key(doc, key)
    set_revision(doc, revision)
    set_body(doc, body)
    set_seq(doc, seq)
    set_outlines(doc, outlines)
    set_at(doc, at)
    return doc


def made_commit(applied: bool, seq: int | None, at: str | None, revisions: dict[DocKey, int]) -> Commit:
    """``Commit(applied, seq, at, revisions)``, built without the frozen ``__init__``."""
    commit = _new_object(Commit)
    set_applied, set_seq, set_at, set_revisions = _COMMIT_SLOTS
    set_applied(commit, applied)
    set_seq(commit, seq)
    set_at(commit, at)
    set_revisions(commit, revisions)
    return commit


class StateCounts(NamedTuple):
    """A state's maintained counters, read together (one statement, one snapshot)."""

    members: dict[str, int]
    """How many present documents have each top-level member."""
    kinds: dict[str | None, int]
    """How many present documents have each subject kind (None: not an encoded subject)."""


@dataclass(frozen=True, slots=True)
class Listed:
    """A present document in a listing: its key, revision and last write."""

    key: DocKey
    revision: int
    seq: int | None
    at: str | None


_LISTED_SLOTS = tuple(getattr(Listed, name).__set__ for name in ("key", "revision", "seq", "at"))


def listed_row(state: str, subject: str, revision: int, seq: int | None, at: str | None) -> Listed:
    """``Listed(DocKey(state, subject), revision, seq, at)`` for a row read back from the
    database (its key was checked when written), built without the per-field
    ``object.__setattr__`` of a frozen dataclass's ``__init__`` or the key's checks: a listing
    page builds up to 200 of these, and those steps were most of its cost."""
    item = _new_object(Listed)
    set_key, set_revision, set_seq, set_at = _LISTED_SLOTS
    set_key(item, _new_tuple(DocKey, (state, subject)))
    set_revision(item, revision)
    set_seq(item, seq)
    set_at(item, at)
    return item


_new_object = object.__new__
_new_tuple = tuple.__new__
