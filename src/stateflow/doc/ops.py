"""The op-batch engine of the declared-states contract.

A batch is validated whole before any op runs: a malformed batch changes nothing. Guards are
read from the document as it was before the batch; a guard that does not hold skips its op
(reported, not an error). Ops apply in order, copy-on-write: the input is never mutated.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from stateflow.doc.canonical import JSON, check, checked_copy, json_equal, kind, shown
from stateflow.doc.copies import APPEND_STEP, Copies, list_copy, made
from stateflow.doc.select import MISSING
from stateflow.errors import InvalidJSON, OpError

MAX_PATH_SEGMENTS: Final = 128
MAX_OPS_PER_BATCH: Final = 1000
MAX_KEYED_ITEMS: Final = 200
APPEND: Final = "-"

_KEYS: Final[dict[str, frozenset[str]]] = {
    "set": frozenset({"op", "path", "value", "guard"}),
    "remove": frozenset({"op", "path", "guard"}),
    "set_by_key": frozenset({"op", "path", "key_field", "value", "guard"}),
    "merge_by_key": frozenset({"op", "path", "key_field", "value", "guard"}),
    "unset_by_key": frozenset({"op", "path", "key_field", "value", "guard"}),
    "remove_by_key": frozenset({"op", "path", "key_field", "key", "guard"}),
    "set_by_key_each": frozenset({"op", "path", "key_field", "value", "guard"}),
}
OP_KINDS: Final = tuple(_KEYS)

_VALUES: Final[dict[str, str]] = {
    "set": "the JSON value stored at path (null allowed); a last path segment '-' appends to a list",
    "set_by_key": "an object, or a list of objects, each holding key_field: it replaces the list item "
    "with the same key, or is appended",
    "merge_by_key": "a list of partial objects, each holding key_field: merged into the item with "
    "the same key (null fields are ignored; an absent key changes nothing)",
    "unset_by_key": 'a list of {"<key_field>": key, "fields": [field names]}: those fields are '
    "removed from the item with that key",
    "set_by_key_each": '{"<fan-out key>": [objects holding key_field]}: set_by_key into the list at '
    "path + [fan-out key] (created when absent)",
}


def op_schema() -> dict[str, Any]:
    """The JSON Schema of one op, one alternative per kind, generated from the fields each kind
    takes (``_KEYS``) so that a tool's input schema cannot drift from what ``parse_op`` accepts."""
    segments = {
        "type": "array",
        "items": {"type": ["string", "integer"]},
        "minItems": 1,
        "maxItems": MAX_PATH_SEGMENTS,
        "description": "segments from the document's root: object keys (strings) and list indices "
        '(integers >= 0), e.g. ["todo", "items", 0] — never a "/a/b" or "a.b" string',
    }
    fields: dict[str, dict[str, Any]] = {
        "path": segments,
        "key_field": {
            "type": "string",
            "minLength": 1,
            "description": "the field that identifies the items of the list at path",
        },
        "key": {
            "type": ["string", "integer", "array"],
            "items": {"type": ["string", "integer"]},
            "description": "the key of the item to remove, or a list of keys",
        },
        "guard": {
            "type": "object",
            "properties": {"path": segments, "expected": {}},
            "required": ["path", "expected"],
            "additionalProperties": False,
            "description": "apply the op only if the value at guard.path, before the batch, equals "
            "expected (otherwise it is skipped and reported)",
        },
    }
    alternatives = []
    for name, allowed in _KEYS.items():
        properties: dict[str, Any] = {"op": {"const": name}}
        for field_name in ("path", "key_field", "key", "value", "guard"):
            if field_name in allowed:
                value = {"description": _VALUES[name]} if field_name == "value" else fields[field_name]
                properties[field_name] = value
        alternatives.append(
            {
                "type": "object",
                "properties": properties,
                "required": [f for f in properties if f != "guard"],
                "additionalProperties": False,
            }
        )
    return {"oneOf": alternatives}


Path = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class Guard:
    path: Path
    expected: JSON


class Op(NamedTuple):
    """One validated op. ``raw`` is the op as given, without its guard. (A tuple: built for
    every op of every batch, and a tuple is the cheapest immutable record to build.)"""

    kind: str
    path: Path
    raw: dict[str, Any]
    value: JSON = None
    key_field: str = ""
    keys: tuple[str | int, ...] = ()
    guard: Guard | None = None


@dataclass(slots=True)
class BatchResult:
    document: JSON
    """The new document (:data:`MISSING` if there was none and no op created it)."""
    applied: list[Op] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)

    @property
    def paths(self) -> list[list[str | int]]:
        return [list(op.path) for op in self.applied]


# ---------------------------------------------------------------------------------- validation


def parse_ops(ops: object) -> list[Op]:
    """Validate a whole batch; raise :class:`OpError` naming the first bad op."""
    if not isinstance(ops, list):
        raise OpError("ops must be a list of operations")
    if len(ops) > MAX_OPS_PER_BATCH:
        raise OpError(f"ops batch has {len(ops)} operations — the cap is {MAX_OPS_PER_BATCH}")
    out = []
    for i, raw in enumerate(ops):
        try:
            out.append(parse_op(raw))
        except (OpError, InvalidJSON) as exc:
            raise OpError(f"ops[{i}]: {exc.message}") from exc
    return out


def parse_op(raw: object) -> Op:
    if not isinstance(raw, dict):
        raise OpError("an op must be a JSON object")
    name = raw.get("op")
    if not isinstance(name, str) or name not in _KEYS:
        raise OpError(f"unknown op {name!r} (supported: {list(OP_KINDS)})")
    allowed = _KEYS[name]
    if name == "remove" and "value" in raw:
        raise OpError("a remove op takes no 'value'")
    if not allowed.issuperset(raw):
        raise OpError(f"op carries unknown keys {sorted(set(raw) - allowed)}")
    if "path" not in raw:
        raise OpError(f"a {name} op needs a 'path'")
    path = _parse_path(raw["path"], name == "set", "path")
    if "guard" in raw:
        guard: Guard | None = _parse_guard(raw["guard"])
        body = {k: v for k, v in raw.items() if k != "guard"}
    else:
        guard = None
        body = dict(raw)
    if name == "set":
        if "value" not in raw:
            raise OpError("a set op needs a 'value' (null is allowed)")
        value = raw["value"]
        t = type(value)
        if t is str:
            if not value.isascii():  # (constant time) a lone surrogate is refused as the op's
                check(value, "value")  # own, as one nested in a value is, not by the store later
        elif t is not bool and value is not None:  # (those are plain and immutable)
            # (as deep in the document as its path goes); values are copied: applied, they
            # become part of a stored document the caller must not reach
            value = checked_copy(value, "value", len(path))
        return _new_op(Op, (name, path, body, value, "", (), guard))
    if name == "remove":
        return _new_op(Op, (name, path, body, None, "", (), guard))
    key_field = raw.get("key_field")
    if not isinstance(key_field, str) or not key_field:
        raise OpError(f"a {name} op needs 'key_field', a non-empty string")
    if name == "remove_by_key":
        if "key" not in raw:
            raise OpError("a remove_by_key op needs 'key' (a key or a list of keys)")
        keys = raw["key"] if isinstance(raw["key"], list) else [raw["key"]]
        _check_count(keys, "keys")
        for k in keys:
            _check_key(k, "key")
        _check_unique(keys, "key")
        return _new_op(Op, (name, path, body, None, key_field, tuple(keys), guard))
    if "value" not in raw:
        raise OpError(f"a {name} op needs a 'value'")
    value = raw["value"]
    value = checked_copy(value, "value", len(path))
    if name == "set_by_key":
        _check_items(value if isinstance(value, list) else [value], key_field, "value")
    elif name == "merge_by_key":
        if not isinstance(value, list):
            raise OpError("merge_by_key takes a list of partial objects as 'value'")
        _check_items(value, key_field, "value")
    elif name == "unset_by_key":
        _check_unset_entries(value, key_field)
    else:  # set_by_key_each
        if not isinstance(value, dict):
            raise OpError("set_by_key_each takes an object {fan-out key: [items]} as 'value'")
        _check_count(list(value), "fan-out keys")
        for fan_key, items in value.items():
            if not fan_key or fan_key == APPEND:
                raise OpError(f"fan-out key {fan_key!r} must be a non-empty string other than '-'")
            if not isinstance(items, list):
                raise OpError(f"value.{fan_key} must be a list of objects")
            _check_items(items, key_field, f"value.{fan_key}")
    return _new_op(Op, (name, path, body, value, key_field, (), guard))


_new_op: Final = tuple.__new__
"""``_new_op(Op, fields)``: the very tuple ``Op(...)`` makes, without the keyword-taking
``__new__`` a named tuple is given (every op of every batch is built here)."""


def _parse_path(raw: object, allow_append: bool, what: str) -> Path:
    if not isinstance(raw, list) or not raw:
        raise OpError(f'{what} must be a non-empty list of segments, such as ["todo", "items", 0]')
    if len(raw) > MAX_PATH_SEGMENTS:
        raise OpError(f"{what} has {len(raw)} segments — the cap is {MAX_PATH_SEGMENTS}")
    for seg in raw:
        if type(seg) is str:  # (most segments: the checks below for a key, without the others)
            if seg == "":
                raise OpError(f"empty-string {what} segment")
            if seg == APPEND and not allow_append:
                raise OpError(f"'-' (append) is not allowed in this {what}")
            continue
        if type(seg) is not int and (isinstance(seg, bool) or not isinstance(seg, str | int)):
            raise OpError(f"{what} segment {shown(seg)} must be a string key or a list index")
        if isinstance(seg, int):
            if seg < 0:
                raise OpError(f"negative list index {seg} is not supported")
        elif seg == "":
            raise OpError(f"empty-string {what} segment")
        elif seg == APPEND and not allow_append:
            raise OpError(f"'-' (append) is not allowed in this {what}")
    return tuple(raw)


def _parse_guard(raw: object) -> Guard:
    if not isinstance(raw, dict) or set(raw) != {"path", "expected"}:
        raise OpError('guard must be exactly {"path": [...], "expected": <JSON>}')
    check(raw["expected"], "guard.expected")
    return Guard(_parse_path(raw["path"], False, "guard path"), raw["expected"])


def _check_count(items: Sequence[Any], what: str) -> None:
    if len(items) > MAX_KEYED_ITEMS:
        raise OpError(f"{len(items)} {what} — the cap is {MAX_KEYED_ITEMS}")


def _check_key(key: object, where: str) -> None:
    if isinstance(key, bool) or not isinstance(key, str | int):
        raise OpError(f"{where} {shown(key)} must be a string or an integer")


def _check_unique(keys: Sequence[Any], where: str) -> None:
    # keys of exactly ``str`` or ``int`` are JSON-equal exactly when Python-equal (an int and
    # a str never are): a set answers for them; any other key takes the pairwise loop
    seen: set[Any] = set()
    for k in keys:
        t = type(k)
        if t is not str and t is not int:
            break
        if k in seen:
            raise OpError(f"duplicate {where} {k!r} in one payload")
        seen.add(k)
    else:
        return
    for i, k in enumerate(keys):
        if any(json_equal(k, other) for other in keys[:i]):
            raise OpError(f"duplicate {where} {k!r} in one payload")


def _check_items(items: Sequence[Any], key_field: str, where: str) -> None:
    if len(items) > MAX_KEYED_ITEMS:
        raise OpError(f"{len(items)} items — the cap is {MAX_KEYED_ITEMS}")
    keys = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise OpError(f"{where}[{i}] must be an object")
        if key_field not in item:
            raise OpError(f"{where}[{i}] has no key field {key_field!r}")
        key = item[key_field]
        t = type(key)
        if t is not str and t is not int:  # (a key of exactly these types passes: no call)
            _check_key(key, f"{where}[{i}].{key_field}")
        keys.append(key)
    _check_unique(keys, key_field)


def _check_unset_entries(value: object, key_field: str) -> None:
    if key_field == "fields":
        raise OpError("unset_by_key cannot use 'fields' as its key_field")
    if not isinstance(value, list):
        raise OpError('unset_by_key takes a list of {key_field: key, "fields": [...]} entries')
    _check_count(value, "entries")
    keys = []
    for i, entry in enumerate(value):
        if not isinstance(entry, dict) or set(entry) != {key_field, "fields"}:
            raise OpError(f"value[{i}] must be exactly {{{key_field!r}: key, 'fields': [names]}}")
        _check_key(entry[key_field], f"value[{i}].{key_field}")
        keys.append(entry[key_field])
        names = entry["fields"]
        if not isinstance(names, list):
            raise OpError(f"value[{i}].fields must be a list of field names")
        _check_count(names, "fields")
        for name in names:
            if not isinstance(name, str) or not name:
                raise OpError(f"value[{i}].fields holds {name!r}; field names are non-empty strings")
            if name == key_field:
                raise OpError(f"value[{i}].fields cannot unset the key field {key_field!r}")
        if len(set(names)) != len(names):
            raise OpError(f"value[{i}].fields names a field twice")
    _check_unique(keys, key_field)


# ------------------------------------------------------------------------------------ applying


def apply_ops(document: JSON, ops: Sequence[Op], copies: Copies | None = None) -> BatchResult:
    """Apply validated ops to ``document`` (a dict, or :data:`MISSING` when there is none).

    Guards are evaluated against ``document`` before any op runs. ``copies``: where a ``set``
    copies the containers it changes (see :mod:`stateflow.doc.copies`).
    """
    result = BatchResult(document)
    survivors: list[Op] = []
    for index, op in enumerate(ops):
        if op.guard is not None:
            actual = value_at(document, op.guard.path)
            if not json_equal(actual, op.guard.expected):
                result.skipped.append(
                    {
                        "index": index,
                        "op": op.raw,
                        "reason": "guard",
                        "expected": op.guard.expected,
                        "actual": actual,
                    }
                )
                continue
        survivors.append(op)
    doc = document
    try:
        for op in survivors:
            doc = _set(doc, op.path, 0, op.value, copies) if op.kind == "set" else _APPLY[op.kind](doc, op)
    except OpError as exc:
        # an op that cannot run is named as a malformed one is (``parse_ops``): by its index in
        # the batch, and by its path, which the message below it names only in part
        index = next(i for i, given in enumerate(ops) if given is op)
        raise OpError(f"ops[{index}] at {_shown(op.path)}: {exc.message}") from exc
    result.document = doc
    result.applied = survivors
    return result


def _shown(path: Path) -> str:
    """A path in a message, as an op gives it (a JSON list)."""
    return json.dumps(list(path), ensure_ascii=False)


def value_at(document: JSON, path: Path) -> JSON:
    """The value at ``path``; a missing path or a wrong-type traversal reads as ``null``."""
    node = document
    for seg in path:
        found = (type(node) is list and isinstance(seg, int) and seg < len(node)) or (
            type(node) is dict and isinstance(seg, str) and seg in node
        )
        if not found:
            return None
        node = node[seg]
    return None if node is MISSING else node


def _mismatch(seg: str | int, node: JSON) -> OpError:
    found = "list" if type(node) is list else ("object" if type(node) is dict else kind(node))
    if seg == APPEND:
        return OpError(f"'-' requires a list, found {found}")
    if isinstance(seg, int):
        return OpError(f"index {seg} requires a list, found {found}")
    return OpError(f"key {seg!r} requires an object, found {found}")


def _set(node: JSON, path: Path, i: int, value: JSON, copies: Copies | None = None) -> JSON:
    seg = path[i]
    last = i == len(path) - 1
    if node is MISSING:
        node = [] if isinstance(seg, int) or seg == APPEND else {}
    if seg == APPEND:
        if type(node) is not list:
            raise _mismatch(seg, node)
        if copies is None:
            return [*node, value if last else _set(MISSING, path, i + 1, value)]
        child = value if last else _set(MISSING, path, i + 1, value, copies)
        out = list_copy(copies, node)
        out.append(child)
        made(copies, out, node, [(APPEND_STEP, child)])
        return out
    if isinstance(seg, int):
        if type(node) is not list:
            raise _mismatch(seg, node)
        if seg >= len(node):
            raise OpError(f"index {seg} is past the end of the list (len {len(node)}); use '-' to append")
        child = value if last else _set(node[seg], path, i + 1, value, copies)
        out = list_copy(copies, node)
        out[seg] = child
        made(copies, out, node, [(seg, child)])
        return out
    if type(node) is not dict:
        raise _mismatch(seg, node)
    child = value if last else _set(node.get(seg, MISSING), path, i + 1, value, copies)
    if copies is None or len(node) < copies.min_elements:
        # what ``dict_copy`` and ``made`` do with a small object, without their calls and the
        # step built for a copier that is not told (most objects a set copies)
        obj = dict(node)
        obj[seg] = child
        return obj
    obj = copies.dict_copy(node)
    obj[seg] = child
    copies.made(obj, node, [(seg, child)])
    return obj


def _get_loud(node: JSON, path: Path) -> JSON:
    """Follow ``path``; absent → MISSING, a wrong container type on the way → OpError."""
    for seg in path:
        if node is MISSING:
            return MISSING
        if isinstance(seg, int):
            if type(node) is not list:
                raise _mismatch(seg, node)
            node = node[seg] if seg < len(node) else MISSING
        else:
            if type(node) is not dict:
                raise _mismatch(seg, node)
            node = node.get(seg, MISSING)
    return node


def _remove(node: JSON, path: Path, i: int = 0) -> JSON:
    if node is MISSING:
        return node
    seg = path[i]
    last = i == len(path) - 1
    if isinstance(seg, int):
        if type(node) is not list:
            raise _mismatch(seg, node)
        if seg >= len(node):
            return node
        if last:
            return node[:seg] + node[seg + 1 :]
        child = _remove(node[seg], path, i + 1)
        if child is node[seg]:
            return node
        out = list(node)
        out[seg] = child
        return out
    if type(node) is not dict:
        raise _mismatch(seg, node)
    if seg not in node:
        return node
    if last:
        return {k: v for k, v in node.items() if k != seg}
    child = _remove(node[seg], path, i + 1)
    if child is node[seg]:
        return node
    obj = dict(node)
    obj[seg] = child
    return obj


def _first_match(items: list[Any], key_field: str, key: JSON) -> int:
    for i, el in enumerate(items):
        if type(el) is dict and key_field in el and json_equal(el[key_field], key):
            return i
    return -1


def _update_list(doc: JSON, op: Op, update: Callable[[list[Any]], list[Any]], *, create: bool) -> JSON:
    current = _get_loud(doc, op.path)
    if current is MISSING:
        if not create:
            return doc
        current = []
    elif type(current) is not list:
        raise OpError(f"{op.kind} needs a list there, found {kind(current)}")
    return _set(doc, op.path, 0, update(current))


def _upsert(items: list[Any], key_field: str, payload: list[Any]) -> list[Any]:
    out = list(items)
    for item in payload:
        at = _first_match(out, key_field, item[key_field])
        if at < 0:
            out.append(item)
        else:
            out[at] = item
    return out


def _op_set(doc: JSON, op: Op) -> JSON:
    return _set(doc, op.path, 0, op.value)


def _op_remove(doc: JSON, op: Op) -> JSON:
    return _remove(doc, op.path)


def _op_set_by_key(doc: JSON, op: Op) -> JSON:
    payload = op.value if isinstance(op.value, list) else [op.value]
    if not payload:
        return doc
    return _update_list(doc, op, lambda items: _upsert(items, op.key_field, payload), create=True)


def _op_merge_by_key(doc: JSON, op: Op) -> JSON:
    if not op.value:
        return doc

    def merge(items: list[Any]) -> list[Any]:
        out = list(items)
        for partial in op.value:
            at = _first_match(out, op.key_field, partial[op.key_field])
            if at >= 0:
                out[at] = {**out[at], **{k: v for k, v in partial.items() if v is not None}}
        return out

    return _update_list(doc, op, merge, create=False)


def _op_unset_by_key(doc: JSON, op: Op) -> JSON:
    if not op.value:
        return doc

    def unset(items: list[Any]) -> list[Any]:
        out = list(items)
        for entry in op.value:
            at = _first_match(out, op.key_field, entry[op.key_field])
            if at >= 0:
                gone = set(entry["fields"])
                out[at] = {k: v for k, v in out[at].items() if k not in gone}
        return out

    return _update_list(doc, op, unset, create=False)


def _op_remove_by_key(doc: JSON, op: Op) -> JSON:
    if not op.keys:
        return doc

    def drop(items: list[Any]) -> list[Any]:
        return [
            el
            for el in items
            if not (
                type(el) is dict
                and op.key_field in el
                and any(json_equal(el[op.key_field], k) for k in op.keys)
            )
        ]

    return _update_list(doc, op, drop, create=False)


def _op_set_by_key_each(doc: JSON, op: Op) -> JSON:
    fanout = {k: v for k, v in op.value.items() if v}
    if not fanout:
        return doc
    container = _get_loud(doc, op.path)
    if container is MISSING:
        container = {}
    elif type(container) is not dict:
        raise OpError(f"set_by_key_each needs an object there, found {kind(container)}")
    out = dict(container)
    for fan_key, items in fanout.items():
        current = out.get(fan_key, MISSING)
        if current is MISSING:
            current = []
        elif type(current) is not list:
            raise OpError(
                f"set_by_key_each needs a list at {_shown((*op.path, fan_key))}, found {kind(current)}"
            )
        out[fan_key] = _upsert(current, op.key_field, items)
    return _set(doc, op.path, 0, out)


_APPLY: Final[dict[str, Callable[[JSON, Op], JSON]]] = {
    "set": _op_set,
    "remove": _op_remove,
    "set_by_key": _op_set_by_key,
    "merge_by_key": _op_merge_by_key,
    "unset_by_key": _op_unset_by_key,
    "remove_by_key": _op_remove_by_key,
    "set_by_key_each": _op_set_by_key_each,
}
