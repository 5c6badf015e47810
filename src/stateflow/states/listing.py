"""Listings of declared states: a record's audit trail, subjects, search, stats.

Pages are keyset-paginated by subject (a sorted search by its sort values, then subject);
cursors are opaque base64 text.
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from stateflow.doc.canonical import ascii_digits, json_contains, utf8_text
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
    sort_value,
    split_filters,
    value_key,
)
from stateflow.store import DocKey, Listed
from stateflow.store.listing import prefix_end
from stateflow.store.model import listed_row
from stateflow.subjects import Subject, subject_prefix

if TYPE_CHECKING:
    from stateflow.states.service import StatesService

PAGE_DEFAULT: Final = 200
PAGE_MAX: Final = 500
_SORTED: Final = "\x00sorted:"  # a sorted search's cursor text (its position), never a subject
_EXACT: Final = 2**53  # numbers SQL sorts exactly are smaller (``store.listing.Listing.search_sorted``)
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
    # a subject never holds a raw U+0000 (its JSON escapes it), nor does a sorted search's
    # position after its marker: such text is no cursor a page returned (and no store compares it)
    if not text or "\x00" in (text[len(_SORTED) :] if text.startswith(_SORTED) else text):
        raise malformed
    return text


def check_kind(name: str, declared: Sequence[str], kind: str | None) -> None:
    """Refuse a listing by a subject kind the state does not declare (a typo would otherwise
    read as "no records"); a declared kind no record has lists nothing."""
    if kind is not None and kind not in declared:
        raise InvalidInput(f"state {name!r} declares no subject kind {kind!r}")


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
            if raw is None or not ascii_digits(raw) or str(int(raw)) != raw:
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
                entry["folded_from"] = _plain(StateSubject.decode(c.key.subject))
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
        check_kind(name, self.svc.get_declaration(name)["subject_kinds"], kind)
        none = self._none_of(name, kind)
        scan = self.svc.store.scan
        fetch = _across(
            _ranges(tenants, kind),
            lambda after, size, within: scan(name, after=after, limit=size, within=within),
        )
        items, next_cursor = self.page(
            lambda after, size: [] if none else fetch(after, size),
            lambda subj, _item: kind is None or subj.kind == kind,
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
        :mod:`stateflow.states.search`), in subject order — or in ``sort`` order (sorted by the
        store a page at a time; where it cannot, here, over at most ``SORT_MAX`` matches; a
        cursor resumes after the last match's sort values and subject). ``include_data`` adds each match's document as ``data``; ``kind`` keeps
        only subjects of that kind (a page is still full: the filter runs before paging);
        ``tenants`` limits the search to those targets' records, in the store's queries (other
        tenants' records are never read: nothing in a page depends on them)."""
        check_kind(name, self.svc.get_declaration(name)["subject_kinds"], kind)
        containment, predicates = split_filters(filters)
        order = parse_sort(sort)
        if type(include_data) is not bool:
            raise InvalidInput("include_data must be true or false")
        bodies: dict[str, Any] = {}
        with_bodies = bool(predicates or include_data)
        none = self._none_of(name, kind)
        store = self.svc.store

        candidates = candidate_filters(containment, predicates)
        bounds = member_bounds(predicates)
        ranges = _ranges(tenants, kind)

        moved: set[str] = set()  # candidates of the page that no longer match as read now

        def load(page: list[Listed], whole: bool, placed: Sequence[tuple[Any, ...]] = ()) -> list[Listed]:
            """The page's candidates, each as its document is read now (one read for the page):
            a record written since the candidate query matched it is checked again — against
            the containment here, the operators in ``keep``, and (``placed``: its sort values
            as the store ordered it) its place — and listed at the revision read, so no row
            shows data that contradicts its filter, revision or place. (One read transaction
            around both would do the same, but would hold the connection for the whole page
            and bypass SQLite's commit-keyed cache of whole documents.)"""
            bodies.clear()
            moved.clear()
            if not ((whole or with_bodies) and page):
                return page
            docs = store.read([x.key for x in page])
            out: list[Listed] = []
            for i, x in enumerate(page):
                doc = docs[x.key]
                bodies[x.key.subject] = doc.body
                if doc.revision != x.revision or doc.seq != x.seq:
                    if (
                        doc.body is None
                        or not json_contains(doc.body, containment)
                        or (placed and _place(_values(doc.body, order), order) != _place(placed[i], order))
                    ):
                        moved.add(x.key.subject)
                    x = listed_row(x.key.state, x.key.subject, doc.revision, doc.seq, doc.at)
                out.append(x)
            return out

        def read(after: str | None, size: int, within: str | None) -> list[Listed]:
            if len(candidates) > 1:
                # the union of keyset pages is the union's keyset page: the first ``size`` of
                # them all hold its first ``size``, and it is short only when every one is
                found = {
                    x.key.subject: x
                    for c in candidates
                    for x in store.search(name, c, after=after, limit=size, bounds=bounds, within=within)
                }
                return [found[k] for k in sorted(found)[:size]]
            if candidates and (candidates[0] or bounds):
                return store.search(
                    name, candidates[0], after=after, limit=size, bounds=bounds, within=within
                )
            if candidates:
                return store.scan(name, after=after, limit=size, within=within)
            return []

        fetch_ranges = _across(ranges, read)

        def fetch(after: str | None, size: int, whole: bool = False) -> list[Listed]:
            return load([] if none else fetch_ranges(after, size), whole)

        def fetch_sorted(after: After | None, size: int) -> list[tuple[Listed, tuple[Any, ...]]] | None:
            """A page of candidates in sort order, sorted by the store; None where it cannot."""
            if none or not candidates:
                return []
            found: dict[str, tuple[Listed, tuple[Any, ...]]] = {}
            # a union, as ``read``'s: of each candidate's page in each range, in sort order, merged
            for c in candidates:
                for within in ranges:
                    part = store.search_sorted(
                        name, c, order, after=after, limit=size, bounds=bounds, within=within
                    )
                    if part is None:
                        return None
                    found.update((x.key.subject, (x, values)) for x, values in part)
            page = sorted(found.values(), key=lambda f: (_place(f[1], order), f[0].key.subject))[:size]
            values = [v for _, v in page]
            return list(zip(load([x for x, _ in page], False, values), values, strict=True))

        def keep(subj: StateSubject, item: Listed) -> bool:
            if (kind is not None and subj.kind != kind) or item.key.subject in moved:
                return False
            return not predicates or matches(bodies.get(item.key.subject), predicates)

        def data_of(item: Listed) -> Any:
            return bodies.get(item.key.subject)

        extra = data_of if include_data else None

        n = page_limit(limit)
        # every candidate the store returns is kept when nothing is checked here (the ranges
        # of a target-limited caller hold the kind asked for): a page and one more (to know
        # whether more follow) is all there is to read
        batch = n + 1 if (kind is None or tenants is not None) and not predicates else PAGE_MAX
        if order:
            after = _sorted_cursor(cursor, len(order))
            items, next_cursor = None, None
            if _sql_sortable(after):
                page = self.sorted_by_store(fetch_sorted, keep, extra, n, after, min(batch, 2 * (n + 1)))
                if page is not None:
                    items, next_cursor = page
            if items is None:
                items, next_cursor = self.sorted_page(fetch, keep, extra, order, bodies, n, after)
        else:
            items, next_cursor = self.page(fetch, keep, n, cursor, extra, batch)
        return {"matches": items, "next_cursor": next_cursor}

    def sorted_by_store(
        self,
        fetch: Callable[[After | None, int], list[tuple[Listed, tuple[Any, ...]]] | None],
        keep: Callable[[StateSubject, Listed], bool],
        extra: Callable[[Listed], Any] | None,
        n: int,
        after: After | None,
        batch: int,
    ) -> tuple[list[SubjectRow], str | None] | None:
        """One page of a sorted search the store sorts, read in batches of candidates in sort
        order (a page and one more when nothing is checked here), as :meth:`page` reads by
        subject: a cursor only when more follow, past one more batch of look-ahead the
        cursor resumes after the last candidate looked at. None where the store cannot sort
        (the caller sorts every match then)."""
        out: list[SubjectRow] = []
        end: After | None = None
        extra_batches = 0
        while True:
            page = fetch(after, batch)
            if page is None:
                return None
            for item, values in page:
                after = (values, item.key.subject)
                subject = StateSubject.decode(item.key.subject)
                if not keep(subject, item):
                    continue
                if len(out) == n:  # one more exists
                    return out, _encode_sorted(end)
                out.append(_row(subject, item, extra))
                end = after
            if len(page) < batch:
                return out, None
            if len(out) == n:
                extra_batches += 1
                if extra_batches > 1:
                    return out, _encode_sorted(after)
            batch = min(2 * batch, PAGE_MAX)

    def sorted_page(
        self,
        fetch: Callable[..., list[Listed]],
        keep: Callable[[StateSubject, Listed], bool],
        extra: Callable[[Listed], Any] | None,
        order: list[tuple[tuple[str, ...], bool]],
        bodies: dict[str, Any],
        n: int,
        after: After | None,
    ) -> tuple[list[SubjectRow], str | None]:
        """Every match sorted here, then the page after ``after``: for sorts the store cannot
        do (values SQL cannot order exactly, paths it cannot spell), over at most ``SORT_MAX``
        matches."""
        start = None if after is None else (_place(after[0], order), after[1])
        found: list[tuple[tuple[Any, ...], str, tuple[Any, ...], SubjectRow]] = []
        seen = 0
        cursor = None
        while page := fetch(cursor, PAGE_MAX, True):
            for item in page:
                subject = StateSubject.decode(item.key.subject)
                if not keep(subject, item):
                    continue
                seen += 1
                if seen > SORT_MAX:
                    raise InvalidInput(
                        f"a sorted search covers at most {SORT_MAX} matches; narrow the filters"
                    )
                values = _values(bodies.get(item.key.subject), order)
                place = _place(values, order)
                if start is not None and not start < (place, item.key.subject):
                    continue
                found.append((place, item.key.subject, values, _row(subject, item, extra)))
            if len(page) < PAGE_MAX:
                break
            cursor = page[-1].key.subject
        found.sort(key=lambda f: (f[0], f[1]))
        rows = [row for _, _, _, row in found[:n]]
        if len(found) <= n:
            return rows, None
        return rows, _encode_sorted((found[n - 1][2], found[n - 1][1]))

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
        subjects at a time (a target-limited caller's: only its targets' records, so a cursor
        never names another tenant's)."""
        after = _decode_cursor(cursor)
        if after is not None and after.startswith(_SORTED):
            # (read as a subject it sorts before every one: the walk would restart unnoticed)
            raise InvalidInput(
                "cursor is malformed: it is a sorted search's cursor; give it with the sort it was "
                "returned with"
            )
        if after is not None and not _issued_subject(after):
            # (any other text would be read as a position: a garbled cursor ending the walk
            # early or starting it again, unnoticed)
            raise InvalidInput("cursor is malformed; use only a cursor returned by a prior page")
        out: list[SubjectRow] = []
        last = None  # the last subject looked at
        end = None  # the page's last subject
        extra_batches = 0
        while True:
            page = fetch(after, batch)
            for item in page:
                last = item.key.subject
                subject = StateSubject.decode(last)
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
            # (the effective schema's members: an attached template's fragment is one too)
            "per_field": {
                p: fields.get(p, 0)
                for p in (decl.get("effective_schema") or decl["schema"]).get("properties", {})
            },
            "per_kind": {k: per_kind.get(k, 0) for k in decl["subject_kinds"]},
            "consumers": len([r for r in self.svc.consumers(name) if not r.get("unavailable")]),
        }


After = tuple[tuple[Any, ...], str]
"""Where a sorted search resumes: the sort values and subject of the last match listed."""


def _place(values: tuple[Any, ...], order: list[tuple[tuple[str, ...], bool]]) -> tuple[Any, ...]:
    return tuple(value_key(v, desc) for v, (_, desc) in zip(values, order, strict=True))


def _values(body: Any, order: list[tuple[tuple[str, ...], bool]]) -> tuple[Any, ...]:
    return tuple(sort_value(body, path) for path, _ in order)


def _row(subject: StateSubject, item: Listed, extra: Callable[[Listed], Any] | None) -> SubjectRow:
    row: SubjectRow = {"subject": _plain(subject), "updated_at": item.at, "revision": item.revision}
    if extra is not None:
        row["data"] = extra(item)
    return row


def _encode_sorted(after: After | None) -> str | None:
    if after is None:
        return None
    return _encode_cursor(_SORTED + json.dumps([list(after[0]), after[1]], ensure_ascii=False))


def _issued_subject(text: str) -> bool:
    """Whether an unsorted cursor's text is a subject as the store encodes it, the only text
    a page's cursor holds."""
    try:
        return Subject.decode(text).encode() == text
    except InvalidInput:
        return False


def _sorted_cursor(cursor: str | None, keys: int) -> After | None:
    """A sorted search's position from its cursor (its last match's sort values and subject)."""
    text = _decode_cursor(cursor)
    if text is None:
        return None
    malformed = InvalidInput("cursor is malformed; use only a cursor returned by a prior page")
    if not text.startswith(_SORTED):
        raise InvalidInput(
            "cursor is malformed: it is not a sorted search's cursor; give it without a sort, as "
            "it was returned, or start the sorted search again without a cursor"
        )
    try:
        raw = json.loads(text[len(_SORTED) :])
    except ValueError as exc:
        raise malformed from exc
    if not (type(raw) is list and len(raw) == 2 and type(raw[0]) is list and type(raw[1]) is str):
        raise malformed
    values, subject = raw
    if len(values) != keys or not all(_a_sort_value(v) for v in values) or not utf8_text(subject):
        raise malformed
    return tuple(values), subject


def _a_sort_value(value: Any) -> bool:
    """What ``search.sort_value`` gives: a finite number, a string, a boolean, ``{}`` or None."""
    if type(value) is float:
        return math.isfinite(value)
    if type(value) is str:
        return utf8_text(value)  # (JSON's \\ud800 decodes to a lone surrogate)
    return value is None or value == {} or type(value) in (int, bool)


def _sql_sortable(after: After | None) -> bool:
    """Whether a position is one the store can resume from: no value it cannot compare in SQL
    (a cursor the store made never has one)."""
    if after is None:
        return True
    return "\x00" not in after[1] and all(
        "\x00" not in v
        if type(v) is str
        else type(v) is bool or not isinstance(v, int | float) or abs(v) < _EXACT
        for v in after[0]
    )


def _ranges(tenants: set[tuple[str, str]] | None, kind: str | None) -> Sequence[str | None]:
    """The subject prefixes a listing reads, in subject order: None (every subject) for a
    caller with every target; else one per tenant (and ``kind``, where one is asked for), so
    that the store's queries read the caller's targets' records and no other tenant's — no
    page, cursor or end then depends on another tenant's records."""
    if tenants is None:
        return [None]
    return sorted(subject_prefix(*tenant, *(() if kind is None else (kind,))) for tenant in tenants)


def _across(
    ranges: Sequence[str | None], read: Callable[[str | None, int, str | None], list[Listed]]
) -> Callable[[str | None, int], list[Listed]]:
    """A keyset page of the union of ``ranges`` (disjoint, in subject order): each one's
    ``read(after, size, within)`` in turn, from the one ``after`` is in, until ``size``."""
    if len(ranges) == 1:  # (every subject, or one target's: the store's range is the page's)
        only = ranges[0]
        return lambda after, size: read(after, size, only)

    def fetch(after: str | None, size: int) -> list[Listed]:
        out: list[Listed] = []
        for within in ranges:
            if within is not None and after is not None and after >= prefix_end(within):
                continue  # (a range the walk is past)
            out += read(after, size - len(out), within)
            if len(out) == size:
                break
        return out

    return fetch


def _declared_kinds(kinds: dict[str | None, int]) -> dict[str, int]:
    """The kinds' counters of encoded subjects only (a subject that is not one counts under
    None in the store: no kind a state declares)."""
    return {k: n for k, n in kinds.items() if k is not None}
