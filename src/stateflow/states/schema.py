"""Base-schema checks, the additive re-declare rule, and compiled validators."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote

import jsonschema_rs
import orjson

from stateflow.doc.canonical import ascii_digits
from stateflow.errors import InvalidInput
from stateflow.validators import UNEXPLAINED, compiled, first_error


class SchemaInvalid(InvalidInput):
    code = "invalid-schema"


class RecordTooLarge(InvalidInput):
    """A write would leave a record with more top-level members than the configured limit."""

    code = "record-too-large"


class DocumentInvalid(InvalidInput):
    code = "invalid-document"


def check_base_schema(schema: Any) -> None:
    """A declaration's base schema: a draft 2020-12 object schema with ≥ 1 property, local refs."""
    if not isinstance(schema, dict):
        raise SchemaInvalid("schema must be a JSON object")
    if schema.get("type") != "object":
        raise SchemaInvalid('schema must declare "type": "object"')
    props = schema.get("properties")
    if not isinstance(props, dict) or not props:
        raise SchemaInvalid("schema must declare at least one property")
    anchors = {n.get("$anchor") for n in _nodes(schema) if isinstance(n.get("$anchor"), str)}
    for node in _nodes(schema):
        if "$dynamicRef" in node:
            raise SchemaInvalid("$dynamicRef is not supported")
        ref = node.get("$ref")
        if not isinstance(ref, str):
            continue
        if not ref.startswith("#"):
            raise SchemaInvalid(f"remote $ref {ref!r} is not supported; use local references (#/...)")
        fragment = unquote(ref[1:])
        if not fragment:
            continue
        if fragment.startswith("/"):
            if not _resolves(schema, fragment):
                raise SchemaInvalid(f"$ref {ref!r} does not resolve inside the schema")
        elif fragment not in anchors:
            raise SchemaInvalid(f"$ref {ref!r} names no $anchor in the schema")
    # Compiling checks the schema against the draft 2020-12 meta-schema (and its regexes); the
    # references were checked first, so compiling never reaches outside the schema.
    try:
        jsonschema_rs.Draft202012Validator(schema)
    except jsonschema_rs.ValidationError as exc:
        reason = getattr(exc, "message", None) or str(exc)
        raise SchemaInvalid(f"schema is not a valid JSON Schema (draft 2020-12): {reason}") from exc


def _nodes(schema: Any) -> Iterator[dict[str, Any]]:
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            yield node
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def _resolves(schema: Any, pointer: str) -> bool:
    node = schema
    for raw in pointer.split("/")[1:]:
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and ascii_digits(part) and int(part) < len(node):
            node = node[int(part)]
        else:
            return False
    return True


def _canonical(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def narrowing(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """Why ``new`` is not an additive change of ``old`` (None when it only adds properties)."""
    old_props, new_props = old.get("properties", {}), new.get("properties", {})
    for name, sub in old_props.items():
        if name not in new_props:
            return f"property {name!r} was removed"
        if _canonical(sub) != _canonical(new_props[name]):
            return f"property {name!r} was changed"
    rest_old = {k: v for k, v in old.items() if k != "properties"}
    rest_new = {k: v for k, v in new.items() if k != "properties"}
    if _canonical(rest_old) != _canonical(rest_new):
        changed = sorted(k for k in set(rest_old) | set(rest_new) if rest_old.get(k) != rest_new.get(k))
        return f"root keyword(s) {changed} changed"
    return None


class ValidatorCache:
    """A service's view of the process-wide validator cache (:mod:`stateflow.validators`),
    remembering the schema object it was last asked for.

    Documents are validated on every write; declarations are meta-validated by compiling them
    (:func:`check_base_schema`).
    """

    def __init__(self) -> None:
        self._last: tuple[dict[str, Any], Any] | None = None
        """The schema object last asked for, with its validator: a declaration read from the
        store is one shared, never-mutated object until it changes, so asking again with the
        same object skips encoding it (which grows with the schema)."""

    def get(self, schema: dict[str, Any]) -> Any:
        last = self._last
        if last is not None and last[0] is schema:
            return last[1]
        validator = self._compiled(schema)
        self._last = (schema, validator)
        return validator

    def _compiled(self, schema: dict[str, Any]) -> Any:
        return compiled(schema)

    def valid(self, schema: dict[str, Any], document: Any) -> bool:
        """Whether ``document`` is valid (:meth:`validate` says why not)."""
        return bool(self.get(schema).is_valid(document))

    def validate(
        self, schema: dict[str, Any], document: Any, what: str, under: str = "the state schema"
    ) -> None:
        """Refuse ``document`` (``what``) unless valid under ``schema`` (named ``under``)."""
        validator = self.get(schema)
        if validator.is_valid(document):
            return
        first = first_error(schema, document)
        if first is None:
            raise DocumentInvalid(f"{what} is invalid under {under} ({UNEXPLAINED})")
        raise DocumentInvalid(f"{what} is invalid under {under} at ${first.at()}: {first.message}")
