"""Search filters beyond containment: operators on paths, sort (pure; no I/O).

A filter is a containment document (``{"status": "open", "tags": ["a"]}``: objects by keys,
arrays by "each pattern element is in some element", scalars by JSON equality) in which any
object whose keys all start with ``$`` is an operator expression on that path instead:

    {"priority": {"$gte": 2}, "owner": {"$in": ["ana", "bo"]}, "closed_at": {"$exists": false}}

``$eq $ne $gt $gte $lt $lte $in $exists`` (the LangGraph store's set plus ``$in`` and
``$exists``). The containment part still runs in the store (indexed), with each ``$eq`` and
``$in`` of scalars added as the containment it implies (:func:`candidate_filters`) and the ranges
on top-level members as bounds it narrows by in SQL (:func:`member_bounds`); operators are
checked on the candidates. An unknown operator, or an object mixing ``$`` keys with field names,
is refused.
"""

from __future__ import annotations

from typing import Any, Final

from stateflow.doc.canonical import JSON, check, equality_key, json_equal
from stateflow.errors import InvalidInput

OPERATORS: Final = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$exists")
SORT_MAX: Final = 10_000
"""The most matches a sort done in Python covers (one the store cannot do: its values SQL
cannot order exactly); the store's sort has no such bound, it returns a page."""
SORT_KEYS_MAX: Final = 16
"""The most keys a sort may have: every match's key is made of all of them (in Python up to
:data:`SORT_MAX` matches; in SQL three columns a key), so a sort of 100,000 keys kept a server
busy for hours."""
FILTER_ARRAY_ELEMENTS_MAX: Final = 256
"""The most elements a filter's containment part may hold in its arrays, all counted together
(``$in`` values are not: they are looked up in a set). Each such element is looked for among
every element of a record's array — by PostgreSQL's ``jsonb @>``, which does not stop for the
statement timeout or a cancel while it compares, and in Python on SQLite — so a filter of
100,000 elements kept a database busy for minutes per record; this many cost at most a couple
of seconds against the largest record."""
_ABSENT: Final = object()

Path = tuple[str, ...]
Predicate = tuple[Path, str, Any]


def split_filters(filters: Any) -> tuple[dict[str, Any], list[Predicate]]:
    """``(containment document, operator predicates)``; refuses malformed operators."""
    if not isinstance(filters, dict) or not filters:
        raise InvalidInput("search needs a non-empty filters object (a containment document)")
    # a filter is held to what a document may be (plain JSON, 254 levels from its top): one
    # deeper could never match a stored record, and every walk of it is bounded by that depth
    check(filters, "filters")
    predicates: list[Predicate] = []
    containment = _split(filters, (), predicates)
    elements = _array_elements(containment)
    if elements > FILTER_ARRAY_ELEMENTS_MAX:
        raise InvalidInput(
            f"filters hold {elements:,} array elements; a filter's arrays may hold at most "
            f"{FILTER_ARRAY_ELEMENTS_MAX} in all (each is looked for among every element of a "
            "record's array; an $in's values are not counted)"
        )
    return containment, predicates


def _array_elements(node: JSON) -> int:
    """How many elements the arrays in ``node`` hold, nested ones included."""
    count = 0
    stack = [node]
    while stack:
        item = stack.pop()
        if type(item) is dict:
            stack.extend(item.values())
        elif type(item) is list:
            count += len(item)
            stack.extend(item)
    return count


def _split(node: dict[str, Any], path: Path, out: list[Predicate]) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    for key, value in node.items():
        here = (*path, key)
        if isinstance(value, dict) and value and any(k.startswith("$") for k in value):
            out.extend(_operators(value, here))
        elif isinstance(value, dict) and value:
            inner = _split(value, here, out)
            if inner or not any(p[0][: len(here)] == here for p in out):
                kept[key] = inner
        else:
            if isinstance(value, list) and _holds_operator(value):
                raise InvalidInput(
                    f"filter at {'.'.join(here)!r} holds an operator inside an array, which would match "
                    "only a record holding it as a literal key: operators apply to an object path "
                    '(an array element is matched whole, {"items": [{"id": 2}]})'
                )
            kept[key] = value
    return kept


def _holds_operator(value: Any) -> bool:
    """Whether ``value`` holds, at any depth, an object with a key starting with ``$``."""
    if isinstance(value, dict):
        return any(k.startswith("$") or _holds_operator(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds_operator(v) for v in value)
    return False


def _operators(expr: dict[str, Any], path: Path) -> list[Predicate]:
    where = ".".join(path)
    plain = sorted(k for k in expr if not k.startswith("$"))
    if plain:
        raise InvalidInput(
            f"filter at {where!r} mixes operators with field names {plain}; nest one or the other"
        )
    out: list[Predicate] = []
    for op, operand in expr.items():
        if op not in OPERATORS:
            raise InvalidInput(
                f"unknown filter operator {op!r} at {where!r} (supported: {', '.join(OPERATORS)})"
            )
        if op == "$in" and not isinstance(operand, list):
            raise InvalidInput(f"$in at {where!r} takes a JSON array")
        if op == "$exists" and type(operand) is not bool:
            raise InvalidInput(f"$exists at {where!r} takes true or false")
        if op in ("$gt", "$gte", "$lt", "$lte") and not _orderable(operand):
            raise InvalidInput(f"{op} at {where!r} takes a number or a string")
        out.append((path, op, _InValues(operand) if op == "$in" else operand))
    return out


class _InValues(list):  # type: ignore[type-arg]
    """An ``$in``'s values, with their equality keys: a record's value is looked up among them
    at once. Compared one by one, an ``$in`` of 100,000 values took 20 s over 300 records."""

    def __init__(self, values: list[Any]) -> None:
        super().__init__(values)
        self.keys = frozenset(equality_key(v) for v in values)


IN_UNION_MAX: Final = 32
"""The most values of an ``$in`` the store is searched for one by one (a union of containment
searches, each by the value index); an ``$in`` of more is checked on every record."""


def candidate_filters(containment: dict[str, Any], predicates: list[Predicate]) -> list[dict[str, Any]]:
    """Containment documents whose matches together hold every match of the filters: an
    ``$eq`` (or an ``$in``) of a scalar implies that the document contains the scalar at its
    path (containment of a scalar is JSON equality), which the store finds by its value index
    instead of every record being checked here. Each ``$eq`` is added to ``containment``; the
    ``$in`` of fewest scalars (at most :data:`IN_UNION_MAX`) makes one document per value. The
    predicates are still checked on what these find. No document: nothing can match (``$in``
    of nothing); one empty document: every record is a candidate."""
    base: dict[str, Any] = dict(containment)
    best: tuple[Path, list[Any]] | None = None
    for path, op, operand in predicates:
        if op == "$eq" and _scalar(operand):
            base = _implied(base, path, operand)
        elif op == "$in" and all(_scalar(v) for v in operand):
            values = list({equality_key(v): v for v in operand}.values())
            if len(values) <= IN_UNION_MAX and (best is None or len(values) < len(best[1])):
                best = (path, values)
    if best is None:
        return [base]
    path, values = best
    return [_implied(base, path, v) for v in values]


def member_bounds(predicates: list[Predicate]) -> list[tuple[str, str, Any]]:
    """The range operators on top-level members, as the store narrows its candidates by them
    (``store.listing.Bound``: a superset; they are still checked on what it finds)."""
    return [(path[0], op, operand) for path, op, operand in predicates if op in _RANGES and len(path) == 1]


_RANGES: Final = ("$gt", "$gte", "$lt", "$lte")


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float)


def _implied(doc: dict[str, Any], path: Path, value: Any) -> dict[str, Any]:
    """``doc`` also containing ``value`` at ``path``; ``doc`` as it is where it already has
    something else there (a pattern of its own: still a superset of the matches)."""
    head, rest = path[0], path[1:]
    if not rest:
        return doc if head in doc else {**doc, head: value}
    inner = doc.get(head, {})
    if type(inner) is not dict:
        return doc
    return {**doc, head: _implied(inner, rest, value)}


def _orderable(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int | float) and not isinstance(value, bool))


def _at(doc: JSON, path: Path) -> Any:
    node: Any = doc
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return _ABSENT
        node = node[key]
    return node


def matches(doc: JSON, predicates: list[Predicate]) -> bool:
    """Whether ``doc`` satisfies every predicate (comparisons need the same kind of value:
    number with number, string with string; anything else does not match)."""
    for path, op, operand in predicates:
        value = _at(doc, path)
        if op == "$exists":
            ok = (value is not _ABSENT) is operand
        elif op == "$ne":
            ok = value is _ABSENT or not json_equal(value, operand)
        elif value is _ABSENT:
            ok = False
        elif op == "$eq":
            ok = json_equal(value, operand)
        elif op == "$in":
            ok = equality_key(value) in operand.keys
        else:
            ok = _compare(value, op, operand)
        if not ok:
            return False
    return True


def _compare(value: Any, op: str, operand: Any) -> bool:
    if not _orderable(value) or isinstance(value, str) != isinstance(operand, str):
        return False
    if op == "$gt":
        return bool(value > operand)
    if op == "$gte":
        return bool(value >= operand)
    if op == "$lt":
        return bool(value < operand)
    return bool(value <= operand)


def parse_sort(sort: Any) -> list[tuple[Path, bool]]:
    """``[{"path": ["a", "b"], "order": "asc"|"desc"}, …]`` (or one such object) → ``[(path,
    descending)]``."""
    if sort is None:
        return []
    items = [sort] if isinstance(sort, dict) else sort
    if not isinstance(items, list) or not items:
        raise InvalidInput('sort is {"path": [...], "order": "asc"|"desc"} or a non-empty list of them')
    if len(items) > SORT_KEYS_MAX:
        raise InvalidInput(f"a sort has at most {SORT_KEYS_MAX} keys, got {len(items)}")
    out = []
    for item in items:
        if not isinstance(item, dict) or set(item) - {"path", "order"} or "path" not in item:
            raise InvalidInput('each sort key is {"path": [...], "order"?: "asc"|"desc"}')
        path = item["path"]
        if not isinstance(path, list) or not path or not all(isinstance(p, str) and p for p in path):
            raise InvalidInput("a sort path is a non-empty list of field names")
        order = item.get("order", "asc")
        if order not in ("asc", "desc"):
            raise InvalidInput(f"sort order must be 'asc' or 'desc', got {order!r}")
        out.append((tuple(path), order == "desc"))
    return out


def sort_value(doc: JSON, path: Path) -> Any:
    """The value at ``path`` as the sort tells values apart: a number, a string or a boolean as
    it is, ``{}`` for any object or array, None for null or no value."""
    value = _at(doc, path)
    if value is _ABSENT or value is None:
        return None
    if isinstance(value, dict | list):
        return {}
    return value


def value_key(value: Any, descending: bool) -> tuple[int, Any]:
    """A :func:`sort_value`'s place: numbers, then strings, then booleans, then objects and
    arrays, then null and missing values; descending reverses the first three (and the values
    within each), objects, arrays and missing values staying last in either order."""
    if value is None:
        return (9, 0)
    v: Any
    if isinstance(value, bool):
        rank, v = 2, int(value)
    elif isinstance(value, int | float):
        rank, v = 0, value
    elif isinstance(value, str):
        rank, v = 1, value
    else:
        return (8, 0)
    if descending:
        return (-rank + 3, _Reverse(v))
    return (rank, v)


def sort_key(doc: JSON, path: Path, descending: bool) -> tuple[int, Any]:
    """``doc``'s place at one sort key (:func:`value_key` of its :func:`sort_value`)."""
    return value_key(sort_value(doc, path), descending)


class _Reverse:
    """Inverts comparison, so one ascending sort serves descending keys too."""

    __slots__ = ("v",)

    def __init__(self, v: Any) -> None:
        self.v = v

    def __lt__(self, other: _Reverse) -> bool:
        return bool(other.v < self.v)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Reverse) and bool(self.v == other.v)

    def __hash__(self) -> int:
        return hash(self.v)
