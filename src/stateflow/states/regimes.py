"""What a declaration enforces on a record write, computed from the declaration alone (no I/O).

A declaration carries its composed ``effective`` part (schema, served regimes, traced paths; see
:mod:`stateflow.states.attachments`). ``composing`` paths admit only keyed ops or an append
``set``; objects written under ``traced`` paths get a ``_trace`` stamp naming their origin.
"""

from __future__ import annotations

from typing import Any, Final

from stateflow.doc.canonical import JSON, equality_key, json_equal
from stateflow.doc.diff import diff
from stateflow.doc.ops import Op
from stateflow.doc.select import MISSING
from stateflow.errors import InvalidInput
from stateflow.states.templates import governing_rule, paths_overlap
from stateflow.store.clock import utc_now

KEYED_OPS: Final = frozenset(
    {"set_by_key", "remove_by_key", "merge_by_key", "unset_by_key", "set_by_key_each"}
)


class RegimeViolation(InvalidInput):
    code = "regime-violation"


def effective_schema(declaration: dict[str, Any]) -> dict[str, Any]:
    """The schema every write validates against: the base with every attachment composed in."""
    effective = declaration.get("effective")
    schema: dict[str, Any] = effective["schema"] if effective else declaration["schema"]
    return schema


def served(declaration: dict[str, Any]) -> list[dict[str, Any]]:
    """The regimes a declaration serves, as reads show them (``[{path, regime}]``)."""
    effective = declaration.get("effective")
    return [{"path": r["path"], "regime": r["regime"]} for r in (effective["regimes"] if effective else [])]


def composing(declaration: dict[str, Any]) -> list[dict[str, Any]]:
    effective = declaration.get("effective")
    return [r for r in (effective["regimes"] if effective else []) if r["regime"] == "composing"]


def traced(declaration: dict[str, Any]) -> list[list[str]]:
    effective = declaration.get("effective")
    return list(effective["traced"]) if effective else []


def refusing_rule(rules: list[dict[str, Any]], path: list[Any]) -> dict[str, Any] | None:
    """The ``composing`` rule of ``rules`` (served regimes) a write at ``path`` would break,
    ``None`` where it breaks none.

    ``path`` is governed by its longest matching rule (a ``single`` or ``free`` rule under a
    ``composing`` one wins); a write above a ``composing`` path replaces it wholesale, so every
    ``composing`` rule below ``path`` refuses it as well.
    """
    governing = governing_rule(rules, path)
    if governing is not None and governing["regime"] == "composing":
        return governing
    for rule in rules:
        if (
            rule["regime"] == "composing"
            and len(rule["path"]) > len(path)
            and paths_overlap(path, rule["path"])
        ):
            return rule
    return None


def check_ops(declaration: dict[str, Any], ops: list[Op]) -> None:
    """``composing`` paths admit only keyed ops or an append ``set`` (path ending ``-``); no op
    may address a ``_trace`` stamp under a traced path."""
    effective = declaration.get("effective")
    if not effective:
        return  # (no attachment: the common case pays one lookup, not one per op)
    rules = effective["regimes"] if composing(declaration) else []
    paths = effective["traced"]
    if not rules and not paths:
        return
    for op in ops:
        for p in paths:
            # The stamp is the platform's provenance: a value carrying one is restamped (as
            # replace and merge restamp), but an op aimed at the stamp itself has nothing else
            # to keep, so it is refused rather than silently turned into a restamp.
            if list(op.path[: len(p)]) == p and "_trace" in op.path[len(p) :]:
                raise RegimeViolation(
                    f"_trace under traced path {p} is stamped by the platform; an op may not set or "
                    f"remove it ({op.kind!r} at {list(op.path)})"
                )
        if not rules or op.kind in KEYED_OPS or (op.kind == "set" and op.path and op.path[-1] == "-"):
            continue
        rule = refusing_rule(rules, list(op.path))
        if rule is not None:
            raise RegimeViolation(
                f"composing path {rule['path']} of template {rule['template']!r} admits only keyed ops or an "
                f"append set (path ending '-'); this write uses {op.kind!r} at {list(op.path)}"
            )


def check_document_write(declaration: dict[str, Any], old: JSON, new: JSON) -> None:
    """Replace and merge may not change anything under a ``composing`` path."""
    if not composing(declaration):
        return
    rules = declaration["effective"]["regimes"]
    for edit in diff(old, new):
        rule = refusing_rule(rules, list(edit.path))
        if rule is not None and not json_equal(value_at(old, rule["path"]), value_at(new, rule["path"])):
            raise RegimeViolation(
                f"composing path {rule['path']} of template {rule['template']!r} admits only keyed ops or an "
                "append set; replace and merge may not change it — use an op batch"
            )


def stamp(declaration: dict[str, Any], ops: list[Op], origin: dict[str, Any]) -> list[Op]:
    """Stamp ``_trace`` into what ops write under traced attachment paths: a ``set``'s object
    value, each object item of a keyed op's value or of an array a ``set`` writes, and the
    attachment's object a ``set`` above its path writes (see :func:`_restamped` for what lies
    deeper)."""
    paths = traced(declaration)
    if not paths:
        return ops
    out = []
    for op in ops:
        value = _stamped_value(op, paths, origin)
        if value is op.value:
            out.append(op)
        else:
            out.append(
                Op(op.kind, op.path, {**op.raw, "value": value}, value, op.key_field, op.keys, op.guard)
            )
    return out


def _stamped_value(op: Op, paths: list[list[str]], origin: dict[str, Any]) -> Any:
    if op.kind in ("remove", "remove_by_key", "unset_by_key"):
        return op.value
    value = op.value
    where = list(op.path)
    for p in paths:
        if op.kind == "set" and len(where) < len(p) and where == p[: len(where)]:
            # a set above a traced path writes the attachment's object inside its value
            inner = p[len(where) :]
            attached = value_at(value, inner)
            if type(attached) is dict:
                value = _put(value, inner, _restamped(attached, MISSING, origin, stamp=True, in_item=False))
            continue
        if where[: len(p)] != p:
            continue
        # written inside an array's item (an index or '-' below the traced path): arrays there
        # are not the traced object's own
        in_item = any(type(seg) is int or seg == "-" for seg in where[len(p) :])
        if op.kind == "set":
            if type(value) is dict or type(value) is list:
                value = _restamped(value, MISSING, origin, stamp=type(value) is dict, in_item=in_item)
        elif op.kind in ("set_by_key", "merge_by_key"):
            value = [_item(v, origin) for v in value] if type(value) is list else _item(value, origin)
        elif op.kind == "set_by_key_each":
            value = {k: [_item(v, origin) for v in items] for k, items in value.items()}
        break  # (attachments do not overlap: one traced path holds the op)
    return value


def _item(value: Any, origin: dict[str, Any]) -> Any:
    """A keyed op's item as written: an object stamped."""
    if type(value) is dict:
        return _restamped(value, MISSING, origin, stamp=True, in_item=True)
    return value


def stamp_document(declaration: dict[str, Any], old: JSON, new: JSON, origin: dict[str, Any]) -> JSON:
    """Stamp ``_trace`` where a whole-document write (replace, merge, revert) changes what lies
    under a traced path: the attachment's object, and each object item of its arrays that is
    not one of the stored array's items (see :func:`_restamped`)."""
    paths = traced(declaration)
    if not paths or type(new) is not dict:
        return new
    for path in paths:
        value = value_at(new, path)
        if type(value) is dict:
            stamped = _restamped(value, value_at(old, path), origin, stamp=True, in_item=False)
            if stamped is not value:
                new = _put(new, path, stamped)
    return new


def _restamped(value: JSON, old: Any, origin: dict[str, Any], *, stamp: bool, in_item: bool) -> JSON:
    """``value`` written under a traced path where ``old`` was (:data:`MISSING`: nothing).

    Whatever equals ``old`` is kept as stored, stamps included. Where it differs: an object gets
    the platform's stamp if it is a stamp position (``stamp``: the attachment's object, a keyed
    op's item, a ``set``'s object value) or if it carries a ``_trace`` (never kept as supplied);
    an array's object items that are not among ``old``'s items (matched by JSON equality, one
    set lookup each) are stamp positions — as keyed ops stamp them — unless the array lies
    inside an item (``in_item``), where only the ``_trace`` they carry is replaced."""
    kind = type(value)
    if kind is dict:
        if old is not MISSING and json_equal(value, old):
            return value
        prior = old if type(old) is dict else {}
        out: dict[str, Any] = {}
        for key, member in value.items():
            if key == "_trace":
                out[key] = _trace(origin)
            elif type(member) is dict or type(member) is list:
                out[key] = _restamped(member, prior.get(key, MISSING), origin, stamp=False, in_item=in_item)
            else:
                out[key] = member
        if stamp and "_trace" not in out:
            out["_trace"] = _trace(origin)
        return out
    if kind is list:
        kept = {equality_key(item) for item in old} if type(old) is list and old else None
        items: list[JSON] = []
        for item in value:
            if (type(item) is dict or type(item) is list) and (
                kept is None or equality_key(item) not in kept
            ):
                is_position = type(item) is dict and not in_item
                items.append(_restamped(item, MISSING, origin, stamp=is_position, in_item=True))
            else:
                items.append(item)
        return items
    return value


def value_at(doc: JSON, path: list[Any]) -> JSON:
    """The value at ``path`` (``*`` stops there), :data:`MISSING` where there is none."""
    node = doc
    for seg in path:
        if seg == "*" or type(node) is not dict or seg not in node:
            return MISSING if seg != "*" else node
        node = node[seg]
    return node


def _put(doc: dict[str, Any], path: list[str], value: Any) -> dict[str, Any]:
    if not path:
        return value  # type: ignore[no-any-return]
    out = dict(doc)
    out[path[0]] = _put(doc.get(path[0], {}), path[1:], value) if len(path) > 1 else value
    return out


def _trace(origin: dict[str, Any]) -> dict[str, Any]:
    # a builtin state tool (the ``tool`` door, stamped by the platform) has no run: the run id
    # its origin carries is the session, kept in the audit trail, not stamped as a run
    return {
        "meta": origin.get("meta"),
        "run": None if origin.get("door") == "tool" else origin.get("run_id"),
        "turn": origin.get("turn_id"),
        "inbound": origin.get("inbound_id"),
        "at": utc_now(),
    }
