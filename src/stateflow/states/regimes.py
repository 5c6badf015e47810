"""What a declaration enforces on a record write, computed from the declaration alone (no I/O).

A declaration carries its composed ``effective`` part (schema, served regimes, traced paths; see
:mod:`stateflow.states.attachments`). ``composing`` paths admit only keyed ops or an append
``set``; objects written under ``traced`` paths get a ``_trace`` stamp naming their origin.
"""

from __future__ import annotations

from typing import Any, Final

from stateflow.doc.canonical import JSON, json_equal
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
    """Stamp ``_trace`` into the objects written under traced attachment paths."""
    paths = traced(declaration)
    if not paths:
        return ops
    out = []
    for op in ops:
        if op.kind == "set" and type(op.value) is dict:
            # a set above a traced path writes the attachment's object inside its value
            value = op.value
            for p in paths:
                inner = p[len(op.path) :]
                if inner and list(op.path) == p[: len(op.path)] and type(value_at(value, inner)) is dict:
                    value = _put(value, inner, {**value_at(value, inner), "_trace": _trace(origin)})
            if value is not op.value:
                out.append(
                    Op(op.kind, op.path, {**op.raw, "value": value}, value, op.key_field, op.keys, op.guard)
                )
                continue
        if not any(list(op.path[: len(p)]) == p for p in paths) or op.kind in (
            "remove",
            "remove_by_key",
            "unset_by_key",
        ):
            out.append(op)
            continue
        value = _stamped(op.value, op.kind, origin)
        raw = {**op.raw, "value": value}
        out.append(Op(op.kind, op.path, raw, value, op.key_field, op.keys, op.guard))
    return out


def stamp_document(declaration: dict[str, Any], old: JSON, new: JSON, origin: dict[str, Any]) -> JSON:
    """Stamp ``_trace`` into the traced objects a whole-document write changes."""
    paths = traced(declaration)
    if not paths or type(new) is not dict:
        return new
    for path in paths:
        value = value_at(new, path)
        if type(value) is dict and not json_equal(value, value_at(old, path)):
            new = _put(new, path, {**value, "_trace": _trace(origin)})
    return new


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
    return {
        "meta": origin.get("meta"),
        "run": origin.get("run_id"),
        "turn": origin.get("turn_id"),
        "inbound": origin.get("inbound_id"),
        "at": utc_now(),
    }


def _stamped(value: Any, kind: str, origin: dict[str, Any]) -> Any:
    def stamp_one(item: Any) -> Any:
        return {**item, "_trace": _trace(origin)} if type(item) is dict else item

    if kind == "set":
        return stamp_one(value)
    if kind in ("set_by_key", "merge_by_key"):
        return [stamp_one(v) for v in value] if type(value) is list else stamp_one(value)
    if kind == "set_by_key_each":
        return {k: [stamp_one(v) for v in items] for k, items in value.items()}
    return value
