"""The builtin LLM tools over declared states: state_read, state_replace, state_merge, state_apply."""

from __future__ import annotations

import functools
from typing import Any, Final

from stateflow.doc.ops import MAX_OPS_PER_BATCH, OP_KINDS, op_schema
from stateflow.errors import Forbidden, InvalidInput, NotFound, ReadOnlyState
from stateflow.states.models import DoorContext, StateSubject, subject_schema_properties
from stateflow.states.service import StatesService, SubjectRefused, origin_of, subject_of

STATE_TOOLS: Final = ("state_read", "state_replace", "state_merge", "state_apply", "state_template_jq")
WRITING_TOOLS: Final = frozenset(("state_replace", "state_merge", "state_apply"))
"""The state tools that always write; ``state_template_jq`` writes only for an ``update`` program
(an ``input`` program reads, as ``GET …/template-jq/{program}`` does)."""
MEMORY_STATE: Final = "memory"
MEMORY_WRITE_REFUSAL: Final = (
    "agent memory is never written through the state tools: change it with patch_state "
    "(the response plane is written by the runtime only)"
)


_SUBJECT_TYPES: Final[dict[str, dict[str, Any]]] = {
    "target_kind": {"type": "string", "enum": ["agent", "tool"]},
    "target_name": {"type": "string"},
    "kind": {"type": "string"},
    "key": {"type": "string"},
}
"""A subject's parts by type alone: what a tool's arguments are checked against, the bounds left
to the subject model, whose refusal (``subject-refused``; a key bounded after trimming) is
every door's."""


def _subject_schema(parts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "description": (
            "Whose record: {target_kind, target_name, kind, key}, or {kind, key} for the current target, "
            "or a bare key for the state's default kind. Omit it to use the subject in scope."
        ),
        "anyOf": [
            {
                "type": "object",
                "properties": parts,
                "required": ["kind", "key"],
                "additionalProperties": False,
            },
            parts["key"],
        ],
    }


def state_tool_schemas() -> dict[str, tuple[str, dict[str, Any], bool, bool]]:
    """name → (description, input schema, read_only, destructive)."""
    state = {"type": "string", "description": "The declared state's name."}
    # each part as the subject model advertises it (its length limits, the kind's pattern)
    subject = _subject_schema(subject_schema_properties())
    expect = {
        "expect_revision": {
            "type": "integer",
            "minimum": 0,
            "description": "Write only if the record is still at this revision (from a read; 0: absent). "
            "Otherwise the write is refused and nothing changes.",
        }
    }

    def obj(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {"state": state, "subject": subject, **props},
            "required": ["state", *required],
            "additionalProperties": False,
        }

    return {
        "state_read": ("Read a declared state's record (null when there is none).", obj({}, []), True, False),
        "state_replace": (
            "Replace a record's whole document (validated against the state's JSON Schema).",
            obj({"data": {"type": "object"}, **expect}, ["data"]),
            False,
            True,
        ),
        "state_merge": (
            "Shallow-merge top-level fields into a record; a null value is stored as null.",
            obj({"patch": {"type": "object"}, **expect}, ["patch"]),
            False,
            True,
        ),
        "state_template_jq": (
            "Run a template jq program on a record: an input program returns a value (pass its params); "
            "an update program turns input into an op batch and applies it (pass input, and op_id for safe retries).",
            obj(
                {
                    "program": {"type": "string", "description": "program or template.program"},
                    "params": {"type": "object"},
                    "input": {},
                    "op_id": {"type": "string"},
                },
                ["program"],
            ),
            False,
            True,
        ),
        "state_apply": (
            f"Apply an op batch, in order, all or nothing ({', '.join(OP_KINDS)}; optional guards). "
            'A path is a list of segments: {"op": "set", "path": ["todo", "items", 0, "done"], '
            '"value": true}. Pass op_id to make a retry safe.',
            obj(
                {
                    "ops": {"type": "array", "items": op_schema(), "maxItems": MAX_OPS_PER_BATCH},
                    "op_id": {"type": "string"},
                    **expect,
                },
                ["ops"],
            ),
            False,
            True,
        ),
    }


def resolve_subject(
    service: StatesService, state: str, raw: Any, context: DoorContext | None
) -> StateSubject:
    """The published resolution rules: explicit subject, {kind, key} + ambient target, ambient
    default kind — or a clear refusal."""
    decl = service.get_declaration(state)
    ambient = context if context and context.target_kind and context.target_name else None
    if raw is None:
        if context is None:
            raise SubjectRefused(f"state {state!r}: no subject in scope: pass subject explicitly")
        kind = decl["default_subject_kind"]
        key = context.candidates.get(kind)
        if ambient is None or key is None:
            raise SubjectRefused(
                f"state {state!r}: the ambient {context.door!r} door resolved no subject of kind {kind!r} "
                "(the state's default_subject_kind) — pass subject explicitly"
            )
        raw = {"kind": kind, "key": key}
    if isinstance(raw, str):
        raw = {"kind": decl["default_subject_kind"], "key": raw}
    if not isinstance(raw, dict):
        raise SubjectRefused(f"state {state!r}: a subject is an object or a key string")
    has_kind, has_name = "target_kind" in raw, "target_name" in raw
    if has_kind != has_name:
        raise SubjectRefused(
            f"state {state!r}: an explicit subject must give both target_kind and target_name or neither"
        )
    if not has_kind:
        if ambient is None:
            raise SubjectRefused(
                f"state {state!r}: the subject names no target and no ambient context is in scope to supply "
                "one — pass target_kind and target_name"
            )
        raw = {**raw, "target_kind": ambient.target_kind, "target_name": ambient.target_name}
    return subject_of(raw)


@functools.cache
def _argument_validator(name: str) -> Any:
    # jsonschema-rs, the one JSON Schema library the package depends on (imported on first use).
    import jsonschema_rs

    schema = state_tool_schemas()[name][1]
    if name == "state_apply":
        # each op is checked by the op engine, as at every other door (its messages and the
        # invalid-ops code): the published op shapes describe it, they do not replace it
        ops = {"type": "array", "items": {"type": "object"}}
        schema = {**schema, "properties": {**schema["properties"], "ops": ops}}
    # the subject's bounds are the model's to refuse, in its words, as at every other door
    schema = {**schema, "properties": {**schema["properties"], "subject": _subject_schema(_SUBJECT_TYPES)}}
    return jsonschema_rs.Draft202012Validator(schema)


def _most_telling(errors: list[Any]) -> tuple[Any, str]:
    """The problem to name and its message: the shallowest argument that is wrong, and inside
    an ``anyOf`` / ``oneOf`` the deepest problem of its alternatives (the alternative the caller
    meant got further before failing: ``subject.kind`` rather than "subject matches no
    alternative"). Where none got further — a value of none of the alternatives' types —, every
    alternative is named (``5 is not of type "object" or "string"``), not the first alone."""
    error = min(errors, key=lambda e: len(e.instance_path))
    message = error.message
    while branches := getattr(error.kind, "context", None):
        inner = [e for branch in branches for e in branch]
        if not inner:
            break
        deepest = max(inner, key=lambda e: len(e.instance_path))
        if len(deepest.instance_path) == len(error.instance_path) and all(
            type(e.kind).__name__ == "Type" for e in inner
        ):
            kinds = " or ".join(dict.fromkeys(e.message.rpartition(" is not of type ")[2] for e in inner))
            return error, f"{inner[0].message.rpartition(' is not of type ')[0]} is not of type {kinds}"
        error, message = deepest, deepest.message
    return error, message


def check_tool_arguments(name: str, args: Any) -> None:
    """Refuse arguments that break the tool's published input schema, naming the first problem
    (a model reads this message and retries), before anything is resolved or written."""
    if not isinstance(args, dict) or not isinstance(args.get("state"), str):
        raise InvalidInput(f"{name} needs an object with a 'state' name")
    unknown = sorted(set(args) - set(state_tool_schemas()[name][1]["properties"]))
    if unknown:
        raise InvalidInput(f"{name} does not accept {', '.join(unknown)}")
    errors = list(_argument_validator(name).iter_errors(args))
    if errors:
        error, message = _most_telling(errors)
        where = ".".join(str(p) for p in error.instance_path) or "arguments"
        raise InvalidInput(f"{name}: {where}: {message}")


def call_state_tool(
    service: StatesService,
    name: str,
    args: Any,
    context: DoorContext | None,
    run_id: str | None,
    *,
    read_only: bool = False,
) -> Any:
    """Run the state tool ``name``; ``read_only`` (a read-only token) refuses every write: the
    writing tools at once, ``state_template_jq`` once its program is known to be an update."""
    if read_only and name in WRITING_TOOLS:
        raise Forbidden(f"{name} writes, and this token is read-only")
    check_tool_arguments(name, args)
    state = args["state"]
    if state == MEMORY_STATE and _writes(service, name, args):
        raise ReadOnlyState(MEMORY_WRITE_REFUSAL)
    subject = resolve_subject(service, state, args.get("subject"), context)
    # (the run id comes from the caller: checked as every door's origin is; an op id is the
    # write's own, checked and stamped into the origin by the write)
    origin = origin_of({"consumer": name, "run_id": run_id})
    if name == "state_read":
        return service.read(state, subject)
    if name == "state_replace":
        return service.replace(
            state,
            subject,
            args.get("data"),
            origin=origin,
            context=context,
            expect_revision=args.get("expect_revision"),
        )
    if name == "state_merge":
        return service.merge(
            state,
            subject,
            args.get("patch"),
            origin=origin,
            context=context,
            expect_revision=args.get("expect_revision"),
        )
    if name == "state_template_jq":
        program = args.get("program")
        if not isinstance(program, str):
            raise InvalidInput("state_template_jq needs a program name")
        # an argument the program's purpose does not take is refused by name, not dropped: a
        # model that put an update's input under params would otherwise be told it gave none
        if service.template_jq_purpose(state, program) == "input":
            misplaced = [a for a in ("input", "op_id") if a in args]
            if misplaced:
                raise InvalidInput(
                    f"template_jq {program!r} is an input program: it takes params, not "
                    f"{' or '.join(misplaced)} (pass its values as params: {{...}})"
                )
            params = args.get("params") or {}
            if not isinstance(params, dict):
                raise InvalidInput("params must be an object")
            return service.template_jq_input(state, subject, program, params)
        if "params" in args:
            raise InvalidInput(
                f"template_jq {program!r} is an update program: it takes input, not params "
                "(pass its values as input: {...}, and op_id for safe retries)"
            )
        if read_only:
            raise Forbidden(
                f"template_jq {program!r} is an update program: it writes, and this token is read-only"
            )
        return service.template_jq_update(
            state,
            subject,
            program,
            args.get("input"),
            op_id=args.get("op_id"),
            origin=origin,
            context=context,
        )
    return service.apply(
        state,
        subject,
        args.get("ops"),
        op_id=args.get("op_id"),
        origin=origin,
        context=context,
        expect_revision=args.get("expect_revision"),
    ).to_json()


def _writes(service: StatesService, name: str, args: dict[str, Any]) -> bool:
    """Whether this call could change a record (a template input program only reads)."""
    if name == "state_read":
        return False
    if name == "state_template_jq" and isinstance(args.get("program"), str):
        try:
            return service.template_jq_purpose(args["state"], args["program"]) != "input"
        except (NotFound, InvalidInput):  # an unknown program: refuse as a write, never run it
            return True
    return True
