"""Listings of declared states: a record's audit trail, subjects, search, stats.

Pages are keyset-paginated by subject (a sorted search pages by offset over at most
``SORT_MAX`` matches); cursors are opaque base64 text.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from pydantic import ValidationError

from stateflow.doc.canonical import ascii_digits
from stateflow.errors import InvalidInput
from stateflow.states.models import StateSubject
from stateflow.states.pipeline import ALIASES, folded_into, resolve
from stateflow.states.results import (
    SearchPage,
    Stats,
    SubjectRef,
    SubjectRow,
    SubjectsPage,
    WriteEntry,
    WritesPage,
)
from stateflow.states.search import (
    SORT_MAX,
    candidate_filters,
    matches,
    member_bounds,
    parse_sort,
    sort_key,
    split_filters,
)
from stateflow.store import DocKey, Listed
from stateflow.subjects import Subject

if TYPE_CHECKING:
    from stateflow.states.service import StatesService

PAGE_DEFAULT: Final = 200
PAGE_MAX: Final = 500
_SORTED: Final = "\x00sorted:"  # a sorted search's cursor text (an offset), never a subject
ORIGIN_FIELDS: Final[dict[str, Any]] = dict.fromkeys(
    ("consumer", "meta", "run_id", "op_id", "door", "actor", "turn_id", "inbound_id")
)
"""The origin fields an audit entry always shows: a write stores only those it set."""


def page_limit(limit: Any) -> int:
    if limit is None:
        return PAGE_DEFAULT
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        raise InvalidInput(f"limit must be a positive integer, got {limit!r}")
    return min(limit, PAGE_MAX)


def _encode_cursor(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def check_cursor(cursor: Any) -> str | None:
    """A page cursor's type: text a prior page returned, or None (checked by the listings and,
    before a query string would turn anything into text, by the HTTP client)."""
    if cursor is not None and not isinstance(cursor, str):
        raise InvalidInput("cursor is malformed; use only a cursor returned by a prior page")
    return cursor


def _decode_cursor(given: str | None) -> str | None:
    cursor = check_cursor(given)
    if cursor is None or cursor == "":
        return None
    malformed = InvalidInput("cursor is malformed; use only a cursor returned by a prior page")
    if not re.fullmatch(r"[A-Za-z0-9_-]+", cursor):
        raise malformed
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (ValueError, UnicodeDecodeError) as exc:
        raise malformed from exc
    if not text:
        raise malformed
    return text


def _stored(text: str) -> StateSubject:
    """The subject a listed record is stored under, as it is: a key the model now refuses (one
    written before a rule it breaks was enforced) is listed, not a failure of every listing."""
    try:
        return StateSubject.decode(text)
    except ValidationError:
        s = Subject.decode(text)
        return StateSubject.model_construct(
            target_kind=s.target_kind, target_name=s.target_name, kind=s.kind, key=s.key
        )


def _plain(subject: StateSubject) -> SubjectRef:
    return {
        "target_kind": subject.target_kind,
        "target_name": subject.target_name,
        "kind": subject.kind,
        "key": subject.key,
    }


class Listing:
    """The listings of one service (``service.listing``)."""

    def __init__(self, svc: StatesService) -> None:
        self.svc = svc

    def kind_counts(self, state: str) -> dict[str, int]:
        return _declared_kinds(self.svc.store.kind_counts(state))

    def _none_of(self, state: str, kind: str | None) -> bool:
        """Whether ``state`` holds no record of ``kind`` (a listing by kind then reads nothing):
        subjects are ordered by tenant first, so a scan for a kind walks the whole state, and
        the maintained per-kind counter answers for an absent kind in a read of a few rows."""
        return kind is not None and not self.svc.store.kind_counts(state).get(kind)

    def writes(self, name: str, subject: Any, *, limit: Any = None, cursor: str | None = None) -> WritesPage:
        """The record's audit trail, newest first, keyset-paginated: the revisions of the
        record the subject resolves to, and those of every subject folded into it (up to and
        including the fold that erased it), each such row naming that subject in
        ``folded_from``. A transition's rows are never split across pages."""
        from stateflow.states.service import subject_of  # the service builds on this module

        self.svc.get_declaration(name)
        subject = subject_of(subject)
        aliases = self.svc.store.get(DocKey(ALIASES, name)).body or {}
        canonical = resolve(aliases, subject).encode()
        folded = folded_into(aliases, canonical)
        keys = [DocKey(name, s) for s in (canonical, *folded)]
        n = page_limit(limit)
        before = None
        if check_cursor(cursor):
            raw = _decode_cursor(cursor)
            if raw is None or not ascii_digits(raw):
                raise InvalidInput("writes cursor is malformed; use only a cursor returned by a prior page")
            before = int(raw)
        history = self.svc.store.history
        # one change more than the page: a cursor only when another page exists (not after an
        # exactly full last page, which would lead to an empty one)
        changes = history(keys, limit=n + 1, before_seq=before, members=())
        more = len(changes) > n
        if more and changes[n].seq == changes[n - 1].seq:
            # a transition that wrote the record and a folded subject (a fold by merge): the
            # cursor is a seq, so its rows end this page together or start the next one
            cut = changes[n].seq
            changes = [c for c in changes[:n] if c.seq != cut]
            if not changes:  # (the page is that one transition: all of its rows)
                changes = [
                    c for c in history(keys, limit=len(keys), before_seq=cut + 1, members=()) if c.seq == cut
                ]
                more = bool(history(keys, limit=1, before_seq=cut, members=()))
        else:
            changes = changes[:n]
        items: list[WriteEntry] = []
        for c in changes:
            entry: WriteEntry = {
                "seq": c.seq,
                "at": c.at,
                "origin": {**ORIGIN_FIELDS, **{k: v for k, v in c.origin.items() if k != "action"}},
                "action": c.origin.get("action"),
                "paths": c.paths,
                "revision": c.revision,
            }
            if c.key.subject != canonical:
                entry["folded_from"] = _plain(_stored(c.key.subject))
            items.append(entry)
        next_cursor = _encode_cursor(str(changes[-1].seq)) if more and changes else None
        return {"items": items, "next_cursor": next_cursor}

    def subjects(
        self,
        name: str,
        *,
        kind: str | None = None,
        limit: Any = None,
        cursor: str | None = None,
        tenants: set[tuple[str, str]] | None = None,
    ) -> SubjectsPage:
        self.svc.get_declaration(name)
        none = self._none_of(name, kind)
        items, next_cursor = self.page(
            lambda after, size: [] if none else self.svc.store.scan(name, after=after, limit=size),
            lambda subj, _item: (
                (kind is None or subj.kind == kind) and (tenants is None or subj.tenant in tenants)
            ),
            page_limit(limit),
            cursor,
        )
        return {"subjects": items, "next_cursor": next_cursor}

    def search(
        self,
        name: str,
        filters: Any,
        *,
        limit: Any = None,
        cursor: str | None = None,
        tenants: set[tuple[str, str]] | None = None,
        sort: Any = None,
        include_data: bool = False,
        kind: str | None = None,
    ) -> SearchPage:
        """Records matching ``filters`` (containment plus ``$`` operators, see
        :mod:`stateflow.states.search`), in subject order — or in ``sort`` order, over at most
        10,000 matches. ``include_data`` adds each match's document as ``data``; ``kind`` keeps
        only subjects of that kind (a page is still full: the filter runs before paging)."""
        self.svc.get_declaration(name)
        containment, predicates = split_filters(filters)
        order = parse_sort(sort)
        if type(include_data) is not bool:
            raise InvalidInput("include_data must be true or false")
        bodies: dict[str, Any] = {}
        with_bodies = bool(predicates or order or include_data)
        none = self._none_of(name, kind)

        candidates = candidate_filters(containment, predicates)
        bounds = member_bounds(predicates)

        def fetch(after: str | None, size: int) -> list[Listed]:
            if none:
                return []
            store = self.svc.store
            if len(candidates) > 1:
                # the union of keyset pages is the union's keyset page: the first ``size`` of
                # them all hold its first ``size``, and it is short only when every one is
                found = {
                    x.key.subject: x
                    for c in candidates
                    for x in store.search(name, c, after=after, limit=size, bounds=bounds)
                }
                page = [found[k] for k in sorted(found)[:size]]
            elif candidates and (candidates[0] or bounds):
                page = store.search(name, candidates[0], after=after, limit=size, bounds=bounds)
            elif candidates:
                page = store.scan(name, after=after, limit=size)
            else:
                page = []
            bodies.clear()
            if with_bodies and page:
                docs = self.svc.store.read([x.key for x in page])
                bodies.update((x.key.subject, docs[x.key].body) for x in page)
            return page

        def keep(subj: StateSubject, item: Listed) -> bool:
            if tenants is not None and subj.tenant not in tenants:
                return False
            if kind is not None and subj.kind != kind:
                return False
            return not predicates or matches(bodies.get(item.key.subject), predicates)

        def data_of(item: Listed) -> Any:
            return bodies.get(item.key.subject)

        extra = data_of if include_data else None

        n = page_limit(limit)
        if order:
            items, next_cursor = self.sorted_page(fetch, keep, extra, order, bodies, n, cursor)
        else:
            # every candidate the store returns is kept when nothing is checked here: a page
            # and one more (to know whether more follow) is all there is to read
            batch = n + 1 if tenants is None and kind is None and not predicates else PAGE_MAX
            items, next_cursor = self.page(fetch, keep, n, cursor, extra, batch)
        return {"matches": items, "next_cursor": next_cursor}

    def sorted_page(
        self,
        fetch: Callable[[str | None, int], list[Listed]],
        keep: Callable[[StateSubject, Listed], bool],
        extra: Callable[[Listed], Any] | None,
        order: list[tuple[tuple[str, ...], bool]],
        bodies: dict[str, Any],
        n: int,
        cursor: str | None,
    ) -> tuple[list[SubjectRow], str | None]:
        """Every match, sorted, then one page of it by offset (the cursor names the offset)."""
        offset = 0
        text = _decode_cursor(cursor)
        if text is not None:
            if not text.startswith(_SORTED) or not ascii_digits(text[len(_SORTED) :]):
                raise InvalidInput("cursor is malformed; use only a cursor returned by a prior page")
            offset = int(text[len(_SORTED) :])
        found: list[tuple[tuple[Any, ...], str, SubjectRow]] = []
        after = None
        while page := fetch(after, PAGE_MAX):
            for item in page:
                subject = _stored(item.key.subject)
                if not keep(subject, item):
                    continue
                if len(found) == SORT_MAX:
                    raise InvalidInput(
                        f"a sorted search covers at most {SORT_MAX} matches; narrow the filters"
                    )
                body = bodies.get(item.key.subject)
                key = tuple(sort_key(body, path, desc) for path, desc in order)
                row: SubjectRow = {
                    "subject": _plain(subject),
                    "updated_at": item.at,
                    "revision": item.revision,
                }
                if extra is not None:
                    row["data"] = extra(item)
                found.append((key, item.key.subject, row))
            if len(page) < PAGE_MAX:
                break
            after = page[-1].key.subject
        found.sort(key=lambda f: (f[0], f[1]))
        rows = [row for _, _, row in found[offset : offset + n]]
        more = offset + n < len(found)
        return rows, _encode_cursor(f"{_SORTED}{offset + n}") if more else None

    @staticmethod
    def page(
        fetch: Callable[[str | None, int], list[Listed]],
        keep: Callable[[StateSubject, Listed], bool],
        n: int,
        cursor: str | None,
        extra: Callable[[Listed], Any] | None = None,
        batch: int = PAGE_MAX,
    ) -> tuple[list[SubjectRow], str | None]:
        """One keyset page of at most ``n`` kept subjects, and a cursor only when more follow.

        Once the page is full the scan looks ahead for one more kept subject: found, the cursor
        resumes after the page's last subject; the scan ran out, there is no cursor (no empty
        last page). The look-ahead reads at most one more batch; past that (filters that keep
        little) the cursor resumes after the last subject looked at, so they are not scanned
        again — and that one page may come back empty. ``fetch`` is asked for ``batch``
        subjects at a time."""
        after = _decode_cursor(cursor)
        out: list[SubjectRow] = []
        last = None  # the last subject looked at
        end = None  # the page's last subject
        extra_batches = 0
        while True:
            page = fetch(after, batch)
            for item in page:
                last = item.key.subject
                subject = _stored(last)
                if not keep(subject, item):
                    continue
                if len(out) == n:  # one more exists
                    return out, _encode_cursor(end) if end else None
                row: SubjectRow = {
                    "subject": _plain(subject),
                    "updated_at": item.at,
                    "revision": item.revision,
                }
                if extra is not None:
                    row["data"] = extra(item)
                out.append(row)
                end = last
            if len(page) < batch:
                return out, None
            if len(out) == n:
                extra_batches += 1
                if extra_batches > 1:
                    return out, _encode_cursor(last) if last else None
            after = last

    def stats(self, name: str) -> Stats:
        decl = self.svc.get_declaration(name)
        counted = self.svc.store.counts(name)  # (both counters in one read)
        fields, per_kind = counted.members, _declared_kinds(counted.kinds)
        return {
            "records": sum(per_kind.values()),
            "per_field": {p: fields.get(p, 0) for p in decl["schema"].get("properties", {})},
            "per_kind": {k: per_kind.get(k, 0) for k in decl["subject_kinds"]},
            "consumers": len([r for r in self.svc.consumers(name) if not r.get("unavailable")]),
        }


def _declared_kinds(kinds: dict[str | None, int]) -> dict[str, int]:
    """The kinds' counters of encoded subjects only (a subject that is not one counts under
    None in the store: no kind a state declares)."""
    return {k: n for k, n in kinds.items() if k is not None}
