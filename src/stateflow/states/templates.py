"""State templates: reusable schema fragments with parameters, regimes, declarations, jq programs.

Pure functions over template documents: validation on upload, parameter substitution, effective
schema composition, ``_trace`` injection, regime matching, and the jq prelude. The service stores
templates and attachments; jq runs through :class:`stateflow.jq.JqRunner`.
"""

from __future__ import annotations

import copy
import heapq
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final

from stateflow.errors import Conflict, InvalidInput
from stateflow.states.models import renamed
from stateflow.states.schema import SchemaInvalid, check_base_schema

TEMPLATE_NAME: Final = re.compile(r"[a-z](?:[a-z0-9]|-(?=[a-z0-9])){0,62}\Z")
IDENT: Final = re.compile(r"[a-z][a-z0-9_]*\Z")
REGIMES: Final = ("single", "composing", "free")
PURPOSES: Final = ("input", "update")
TRACE_SCHEMA: Final = {
    "type": "object",
    "properties": {
        "meta": {"type": ["object", "null"]},
        "run": {"type": ["string", "null"]},
        "turn": {"type": ["string", "null"]},
        "inbound": {"type": ["string", "null"]},
        "at": {"type": "string"},
    },
}
_TOP_KEYS: Final = {
    "kind", "name", "description", "parameters", "schema", "regimes", "declarations", "trace",
    "template_jq", "reconcile",
}  # fmt: skip


class TemplateInvalid(InvalidInput):
    code = "invalid-template"


class AttachConflict(Conflict):
    code = "attach-conflict"


# ------------------------------------------------------------------------------ markers


def markers(node: Any) -> Iterator[str]:
    """Every ``{"$parameter": name}`` marker name inside ``node``."""
    if isinstance(node, dict):
        if "$parameter" in node:
            yield node["$parameter"]
            return
        for v in node.values():
            yield from markers(v)
    elif isinstance(node, list):
        for v in node:
            yield from markers(v)


def _check_markers(node: Any) -> None:
    if isinstance(node, dict):
        if "$parameter" in node:
            if (
                set(node) != {"$parameter"}
                or not isinstance(node["$parameter"], str)
                or not node["$parameter"]
            ):
                raise TemplateInvalid('a parameter marker is exactly {"$parameter": "<name>"}')
            return
        for v in node.values():
            _check_markers(v)
    elif isinstance(node, list):
        for v in node:
            _check_markers(v)


def substitute(node: Any, values: dict[str, Any]) -> Any:
    """A copy of ``node`` with every marker named in ``values`` replaced by (a copy of) its value."""
    if isinstance(node, dict):
        if "$parameter" in node and node["$parameter"] in values:
            return copy.deepcopy(values[node["$parameter"]])
        return {k: substitute(v, values) for k, v in node.items()}
    if isinstance(node, list):
        return [substitute(v, values) for v in node]
    return node


def defaults(template: dict[str, Any]) -> dict[str, Any]:
    return {n: p["default"] for n, p in template.get("parameters", {}).items() if "default" in p}


# ------------------------------------------------------------------------------ validation


def unknown_keys(raw: Any, allowed: set[str]) -> str:
    """`` (unknown keys [...])`` naming what a body carries beyond ``allowed`` (or nothing), so a
    shape error says which key to drop."""
    extra = sorted(set(raw) - allowed) if isinstance(raw, dict) else []
    return f" (unknown keys {extra})" if extra else ""


def _jq_body(raw: Any, where: str) -> str:
    if not isinstance(raw, dict) or set(raw) - {"content", "kwargs"} or "content" not in raw:
        if isinstance(raw, dict) and "id" in raw:
            raise TemplateInvalid(
                f'{where}: by-id jq bodies are not supported; give the program as {{"content": ...}}'
            )
        raise TemplateInvalid(
            f'{where} must be {{"content": "<jq program>"}}{unknown_keys(raw, {"content", "kwargs"})}'
        )
    if not isinstance(raw["content"], str) or not raw["content"].strip():
        raise TemplateInvalid(f"{where} must be a non-blank jq program")
    return raw["content"]


Compile = Callable[[str, Sequence[str]], None]
"""Refuses a jq program that does not compile with the named variables (``JqRunner.compile``:
in a worker, under its limits — never in the process serving requests)."""


def _compile(
    compile_jq: Compile, program: str, variables: list[str], where: str, source: JqSource | None = None
) -> None:
    from stateflow.jq.runner import JqError, JqLimitExceeded  # (the runner's, on first use)

    try:
        compile_jq(program, variables)
    except JqError as exc:
        message = source.explain(exc.message) if source is not None else exc.message
        raise TemplateInvalid(f"{where} does not compile: {message}") from exc
    except JqLimitExceeded as exc:
        raise TemplateInvalid(f"{where} could not be compiled: {exc.message}") from exc


def validate_template(name: str, raw: Any, compile_jq: Compile) -> dict[str, Any]:
    """Validate an uploaded template document; return its canonical stored form."""
    if not isinstance(raw, dict):
        raise TemplateInvalid("a template document must be a JSON object")
    unknown = sorted(set(raw) - _TOP_KEYS)
    if unknown:
        raise TemplateInvalid(f"invalid template document: unknown keys {unknown}")
    if raw.get("kind", "state-template") != "state-template":
        raise TemplateInvalid(f"template kind must be 'state-template', got {raw.get('kind')!r}")
    if said := renamed(raw, name, "template"):
        raise TemplateInvalid(said)
    if not TEMPLATE_NAME.match(name):
        raise TemplateInvalid(
            "a template name is a slug: lowercase letters, digits and single hyphens, starting with a letter, ≤ 63 characters"
        )
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise TemplateInvalid("description must be a string")
    parameters = raw.get("parameters", {})
    if not isinstance(parameters, dict):
        raise TemplateInvalid("parameters must be an object {name: {schema, default?}}")
    for pname, spec in parameters.items():
        if not IDENT.match(pname):
            raise TemplateInvalid(f"parameter name {pname!r} must match ^[a-z][a-z0-9_]*$")
        if (
            not isinstance(spec, dict)
            or set(spec) - {"schema", "default"}
            or not isinstance(spec.get("schema"), dict)
        ):
            raise TemplateInvalid(
                f'parameter {pname!r} must be {{"schema": {{...}}, "default"?: <JSON>}}'
                f"{unknown_keys(spec, {'schema', 'default'})}"
            )
    fragment = raw.get("schema")
    if not isinstance(fragment, dict):
        raise TemplateInvalid("schema (the fragment) must be a JSON object")
    _check_markers(fragment)
    used = set(markers(fragment))
    undeclared = sorted(used - set(parameters))
    if undeclared:
        raise TemplateInvalid(f"schema references undeclared parameter(s) {undeclared}")
    for pname, spec in parameters.items():
        if "default" not in spec and pname not in used:
            raise TemplateInvalid(
                f"parameter {pname!r} has no default, so it must appear as a $parameter marker in the fragment"
            )
    substituted = substitute(fragment, {n: p["default"] for n, p in parameters.items() if "default" in p})
    try:
        check_base_schema(_without_markers(substituted))
    except SchemaInvalid as exc:
        raise TemplateInvalid(
            f"template {name!r} schema fragment is not a valid object schema: {exc.message}"
        ) from exc
    regimes = raw.get("regimes", [])
    if not isinstance(regimes, list):
        raise TemplateInvalid("regimes must be a list of {path, regime}")
    for rule in regimes:
        if not isinstance(rule, dict) or set(rule) != {"path", "regime"}:
            raise TemplateInvalid(
                f"a regime rule is exactly {{path, regime}}{unknown_keys(rule, {'path', 'regime'})}"
            )
        if rule["regime"] not in REGIMES:
            raise TemplateInvalid(f"regime must be one of {list(REGIMES)}, got {rule['regime']!r}")
        _check_path(rule["path"], "regime path")
        walk_fragment(substituted, rule["path"], "regime path")
    trace = raw.get("trace", {"enabled": False})
    if not isinstance(trace, dict) or set(trace) != {"enabled"} or type(trace["enabled"]) is not bool:
        raise TemplateInvalid(f'trace must be {{"enabled": true|false}}{unknown_keys(trace, {"enabled"})}')
    declarations = raw.get("declarations")
    if declarations is not None:
        if (
            not isinstance(declarations, dict)
            or set(declarations) - {"schema", "check"}
            or not isinstance(declarations.get("schema"), dict)
        ):
            raise TemplateInvalid(
                'declarations must be {"schema": {...}, "check"?: {"content": "<jq>"}}'
                + unknown_keys(declarations, {"schema", "check"})
            )
        if "check" in declarations:
            _compile(
                compile_jq,
                _jq_body(declarations["check"], "declarations.check"),
                ["parameters"],
                "declarations.check",
            )
    programs = raw.get("template_jq")
    if programs is not None:
        _check_programs(programs, substituted, compile_jq)
    reconcile = raw.get("reconcile")
    if reconcile is not None:
        if not isinstance(reconcile, dict) or set(reconcile) != {"orphans", "close", "resolutions"}:
            raise TemplateInvalid(
                "reconcile needs exactly the programs orphans, close and resolutions"
                + unknown_keys(reconcile, {"orphans", "close", "resolutions"})
            )
        for part, variables in (
            ("orphans", ["previous", "new"]),
            ("close", ["id", "resolution"]),
            ("resolutions", []),
        ):
            _compile(
                compile_jq, _jq_body(reconcile[part], f"reconcile.{part}"), variables, f"reconcile.{part}"
            )
    doc: dict[str, Any] = {"kind": "state-template", "name": name, "description": description}
    if parameters:
        doc["parameters"] = parameters
    doc["schema"] = fragment
    if regimes:
        doc["regimes"] = regimes
    if declarations is not None:
        doc["declarations"] = declarations
    if programs is not None:
        doc["template_jq"] = programs
    if reconcile is not None:
        doc["reconcile"] = reconcile
    doc["trace"] = trace
    return doc


def _without_markers(node: Any) -> Any:
    """Leftover no-default markers are opaque subschemas for the structural check."""
    if isinstance(node, dict):
        if "$parameter" in node:
            return {}
        return {k: _without_markers(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_without_markers(v) for v in node]
    return node


def _check_path(path: Any, what: str) -> None:
    if not isinstance(path, list) or not all(isinstance(s, str) and s for s in path):
        raise TemplateInvalid(f"{what} {path!r} must be a list of non-empty strings")


def walk_fragment(fragment: dict[str, Any], path: list[str], what: str) -> None:
    """A path is valid when it follows the fragment's declared structure (``*`` = one segment)."""
    node: Any = fragment
    for seg in path:
        if isinstance(node, dict) and "$parameter" in node:
            return
        if not isinstance(node, dict):
            raise TemplateInvalid(f"{what} {path} descends past the fragment's structure at {seg!r}")
        if seg == "*":
            if isinstance(node.get("items"), dict):
                node = node["items"]
            elif isinstance(node.get("additionalProperties"), dict):
                node = node["additionalProperties"]
            elif node.get("additionalProperties") is True or "patternProperties" in node:
                return
            else:
                raise TemplateInvalid(
                    f"{what} {path} uses '*' where the fragment has no items or additionalProperties"
                )
            continue
        props = node.get("properties", {})
        if isinstance(props, dict) and seg in props:
            node = props[seg]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        elif node.get("additionalProperties") is True:
            return
        else:
            raise TemplateInvalid(f"{what} segment {seg!r} in {path} is not a property of the fragment")


def _check_programs(programs: Any, fragment: dict[str, Any], compile_jq: Compile) -> None:
    if not isinstance(programs, dict):
        raise TemplateInvalid("template_jq must be an object {program name: {purpose, jq, ...}}")
    for pname, spec in programs.items():
        where = f"template_jq {pname!r}"
        if not IDENT.match(pname):
            raise TemplateInvalid(f"{where}: a program name must match ^[a-z][a-z0-9_]*$")
        if not isinstance(spec, dict) or set(spec) - {
            "purpose",
            "jq",
            "description",
            "params",
            "reads",
            "writes",
        }:
            raise TemplateInvalid(
                f"{where} must be {{purpose, jq, description?, params?, reads?, writes?}}"
                + unknown_keys(spec, {"purpose", "jq", "description", "params", "reads", "writes"})
            )
        if spec.get("purpose") not in PURPOSES:
            raise TemplateInvalid(f"{where}: purpose must be 'input' or 'update'")
        _jq_body(spec.get("jq"), f"{where}.jq")
        params = spec.get("params", [])
        if not isinstance(params, list) or not all(isinstance(p, str) and IDENT.match(p) for p in params):
            raise TemplateInvalid(f"{where}: params must be a list of identifiers")
        if len(set(params)) != len(params):
            raise TemplateInvalid(f"{where}: params must be unique")
        if spec["purpose"] == "input" and (spec.get("reads") or spec.get("writes")):
            raise TemplateInvalid("an 'input' template_jq program declares no reads or writes")
        for key in ("reads", "writes"):
            for path in spec.get(key, []):
                _check_path(path, f"{where}.{key} path")
                walk_fragment(fragment, path, f"{where}.{key} path")
    # each input program after the ones it may call (dependency order): a compile error is then
    # its own, named with its own line numbers; the update programs after the whole prelude
    order = [*input_order(programs), *sorted(n for n, s in programs.items() if s["purpose"] == "update")]
    for pname in order:
        spec = programs[pname]
        variables = ["parameters", "declarations", "params" if spec["purpose"] == "input" else "input"]
        source = program_source(
            programs, spec["jq"]["content"], pname if spec["purpose"] == "input" else None
        )
        _compile(compile_jq, source.text, variables, f"template_jq {pname!r}", source)
    if any(spec["purpose"] == "input" for spec in programs.values()):
        # and every input program as the definition each run has (with no update program to
        # follow the whole prelude, none of the compiles above holds the last one)
        source = program_source(programs, ".")
        _compile(compile_jq, source.text, ["parameters", "declarations"], "template_jq", source)


# ------------------------------------------------------------------------------ jq prelude


def _calls(programs: dict[str, Any]) -> dict[str, set[str]]:
    """Each input program's calls of input programs (``tjq_<name>``), itself included."""
    inputs = {n: s for n, s in programs.items() if s["purpose"] == "input"}
    return {
        n: {
            m
            for m in re.findall(r"(?<![A-Za-z0-9_])tjq_([a-z][a-z0-9_]*)", s["jq"]["content"])
            if m in inputs
        }
        for n, s in inputs.items()
    }


def input_cycle(programs: dict[str, Any]) -> list[str] | None:
    """A cycle of input programs calling each other (``[x, y, x]``; ``[x, x]``: one calling
    itself), or None. jq compiles a recursive definition, which then runs until its limit."""
    calls = _calls(programs)
    done: set[str] = set()
    for start in sorted(calls):
        path: list[str] = []
        on_path: set[str] = set()
        # depth-first, iteratively: (program, its callees not yet walked)
        stack: list[tuple[str, list[str]]] = [(start, sorted(calls[start]))]
        path.append(start)
        on_path.add(start)
        while stack:
            node, todo = stack[-1]
            if not todo:
                stack.pop()
                path.pop()
                on_path.discard(node)
                done.add(node)
                continue
            nxt = todo.pop()
            if nxt in on_path:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in done:
                stack.append((nxt, sorted(calls[nxt])))
                path.append(nxt)
                on_path.add(nxt)
    return None


def input_order(programs: dict[str, Any]) -> list[str]:
    """Input programs in dependency-first order (smallest name first among ready ones); names
    left in a cycle come last, sorted, so compiling them fails loudly."""
    inputs = {n: s for n, s in programs.items() if s["purpose"] == "input"}
    deps = {n: called - {n} for n, called in _calls(programs).items()}
    waiting = {n: set(d) for n, d in deps.items()}
    ready = [n for n, d in waiting.items() if not d]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        n = heapq.heappop(ready)
        order.append(n)
        for m, d in waiting.items():
            if n in d:
                d.discard(n)
                if not d and m not in order and m not in ready:
                    heapq.heappush(ready, m)
    return order + sorted(n for n in inputs if n not in order)


_LINE: Final = re.compile(r"(at <top-level>, line )(\d+)")


class JqSource:
    """A program as jq runs it — the prelude of input programs, then ``body`` — and where each
    program's lines sit in it, so a message from jq names the author's own lines."""

    def __init__(self, text: str, spans: list[tuple[int, int, str | None]]) -> None:
        self.text = text
        self.spans = spans
        """``(first line, line count, program name)`` of each body in ``text`` (from line 1;
        None names the program run after the prelude)."""

    def explain(self, message: str) -> str:
        """``message`` with ``line N`` of the source made the line of the program it falls in
        (``line N of template_jq 'x'`` when that is a sibling in the prelude)."""

        def mapped(m: re.Match[str]) -> str:
            line = int(m[2])
            for first, count, name in self.spans:
                # a definition's lines: its header, the body, then the ';' that ends it
                if first - 1 <= line <= first + count:
                    own = min(max(line - first + 1, 1), count)
                    return f"{m[1]}{own}" + (f" of template_jq {name!r}" if name is not None else "")
            return m[0]

        return _LINE.sub(mapped, message)


def program_source(programs: dict[str, Any], body: str, upto: str | None = None) -> JqSource:
    """``body`` after the prelude: every input program (those before ``upto`` in dependency
    order, when given) as ``def tjq_<name>($params):``. Each body sits on lines of its own: a
    comment on its last line ends at the newline, never taking the ``;`` that closes the
    definition with it. A cycle is refused (on upload, and for a template stored before cycles
    through a program itself were: at once, not after running to its limit)."""
    cycle = input_cycle(programs)
    if cycle:
        raise TemplateInvalid(
            f"template_jq input programs call each other in a cycle: {' → '.join(f'tjq_{n}' for n in cycle)} "
            "(a program may call its siblings, never itself, directly or through others)"
        )
    parts: list[str] = []
    spans: list[tuple[int, int, str | None]] = []
    line = 1
    for name in input_order(programs):
        if name == upto:
            break
        content = programs[name]["jq"]["content"]
        count = content.count("\n") + 1
        parts.append(f"def tjq_{name}($params):\n{content}\n;\n")
        spans.append((line + 1, count, name))
        line += count + 2
    parts.append(body)
    spans.append((line, body.count("\n") + 1, None))
    return JqSource("".join(parts), spans)


# ------------------------------------------------------------------------------ composition


def _overlap(a: list[str], b: list[str]) -> bool:
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def inject_trace(node: Any) -> Any:
    """A copy of a fragment where every ``"type": "object"`` node admits a ``_trace`` property."""
    if isinstance(node, list):
        return [inject_trace(v) for v in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("properties", "patternProperties", "$defs", "definitions") and isinstance(value, dict):
            out[key] = {k: inject_trace(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "contains", "propertyNames") and isinstance(
            value, dict
        ):
            out[key] = inject_trace(value)
        elif key in ("prefixItems", "allOf", "anyOf", "oneOf", "propertyNames") and isinstance(value, list):
            out[key] = [inject_trace(v) for v in value]
        else:
            out[key] = value
    if out.get("type") == "object":
        props = dict(out.get("properties", {}))
        props["_trace"] = copy.deepcopy(TRACE_SCHEMA)
        out["properties"] = props
    return out


def compose(
    base: dict[str, Any], attachments: list[tuple[dict[str, Any], list[str], dict[str, Any]]]
) -> dict[str, Any]:
    """The effective schema: the base with every ``(template, path, effective parameters)`` placed."""
    ordered = sorted(attachments, key=lambda a: a[0]["name"])
    for i, (ta, pa, _) in enumerate(ordered):
        for tb, pb, _ in ordered[i + 1 :]:
            if _overlap(pa, pb):
                raise AttachConflict(
                    f"attach of template {ta['name']!r} at {pa} overlaps attach of template {tb['name']!r} at {pb}"
                )
    schema = copy.deepcopy(base)
    for template, path, params in ordered:
        name = template["name"]
        fragment = substitute(template["schema"], {**defaults(template), **params})
        left = sorted(set(markers(fragment)))
        if left:
            raise AttachConflict(
                f"attach of template {name!r} leaves parameter(s) {left} unsupplied at {path}"
            )
        if template.get("trace", {}).get("enabled"):
            fragment = inject_trace(fragment)
        if not path:
            props = schema.setdefault("properties", {})
            for key, sub in fragment.get("properties", {}).items():
                if key in props:
                    raise AttachConflict(
                        f"attach of template {name!r} at the root collides with existing property {key!r}"
                    )
                props[key] = sub
            required = schema.setdefault("required", [])
            required.extend(r for r in fragment.get("required", []) if r not in required)
            if not required:
                schema.pop("required")
            continue
        node = schema
        for seg in path[:-1]:
            props = node.setdefault("properties", {})
            child = props.get(seg)
            if child is None:
                child = props[seg] = {"type": "object", "properties": {}}
            if not isinstance(child, dict) or child.get("type") != "object":
                raise AttachConflict(
                    f"attach of template {name!r} at {path} passes through non-object property {seg!r}"
                )
            node = child
        props = node.setdefault("properties", {})
        if path[-1] in props:
            raise AttachConflict(
                f"attach of template {name!r} at {path} collides with existing property {path[-1]!r}"
            )
        props[path[-1]] = fragment
    return schema


def served_regimes(attachments: list[tuple[dict[str, Any], list[str]]]) -> list[dict[str, Any]]:
    out = []
    for template, path in sorted(attachments, key=lambda a: a[0]["name"]):
        for rule in template.get("regimes", []):
            out.append(
                {"path": [*path, *rule["path"]], "regime": rule["regime"], "template": template["name"]}
            )
    return out


def regime_for(rules: list[dict[str, Any]], path: list[str]) -> str:
    """The regime of the longest rule path matching a prefix of ``path`` (``*`` = any segment)."""
    rule = governing_rule(rules, path)
    return "free" if rule is None else str(rule["regime"])


def governing_rule(rules: list[dict[str, Any]], path: list[Any]) -> dict[str, Any] | None:
    """The rule that governs ``path``: the longest rule path matching a prefix of it (``*`` = any
    segment; at equal length a literal segment beats a wildcard), ``None`` where none matches."""
    best: dict[str, Any] | None = None
    best_rank = (-1, 0)
    for rule in rules:
        rp = rule["path"]
        if len(rp) <= len(path) and all(r == "*" or r == p for r, p in zip(rp, path, strict=False)):
            rank = (len(rp), -rp.count("*"))
            if rank > best_rank:
                best, best_rank = rule, rank
    return best


def paths_overlap(a: list[Any], b: list[Any]) -> bool:
    n = min(len(a), len(b))
    return all(x == "*" or y == "*" or x == y for x, y in zip(a[:n], b[:n], strict=True))
