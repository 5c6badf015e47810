"""Template jq: the ``input`` and ``update`` programs a template declares, run over the
attachment's subtree of a record on the service's jq worker pool. An update program's op batch
is rebased under the attachment path and applied through the record-write pipeline."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal

from stateflow.doc.canonical import JSON, decode, identical, shown
from stateflow.doc.ops import parse_ops
from stateflow.doc.select import MISSING
from stateflow.errors import BadRequest, InvalidInput, InvalidJSON, NotFound, OpError, StateflowError
from stateflow.states.models import DoorContext, WriteOrigin
from stateflow.states.pipeline import Change, Transform, ops_transform
from stateflow.states.results import AttachmentRow, JqInput
from stateflow.states.templates import JqSource, TemplateInvalid, program_source

if TYPE_CHECKING:
    from stateflow.jq import JqRunner
    from stateflow.states.results import ApplyResult
    from stateflow.states.service import StatesService


def template_jq_params(given: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """An input program's params as a door receives them, ``(name, JSON text)`` each (HTTP query
    parameters, the CLI's ``--param name=JSON``): one refusal for a value that is not JSON,
    naming the parameter, whichever door it came through; so for a name given twice (which
    value was meant is not for the door to guess)."""
    params: dict[str, Any] = {}
    for name, raw in given:
        if name in params:
            raise InvalidInput(
                f"template_jq param {name!r} is given more than once: give each parameter once"
            )
        try:
            params[name] = decode(raw)
        except InvalidJSON as exc:
            raise BadRequest(f"template_jq param {name!r} must be a JSON value: {exc.message}") from exc
    return params


class _Pool:
    """The jq worker pool of a service, shared by its bound copies (``StatesService.bound``
    copies each part): one pool, and once closed, closed for every copy."""

    def __init__(self) -> None:
        self.runner: JqRunner | None = None
        self.closed = False


class TemplateJq:
    """Template jq programs of one service (``service.programs``), and its jq worker pool."""

    def __init__(self, svc: StatesService) -> None:
        self.svc = svc
        self._pool = _Pool()

    def close(self) -> None:
        """Stop the jq workers. The closed pool is kept: a later program is refused
        ``jq-busy`` (as the running ones were) instead of starting a fresh pool."""
        self._pool.closed = True
        if self._pool.runner is not None:
            self._pool.runner.close()

    def use_jq(self, runner: JqRunner) -> None:
        """Run jq on ``runner`` (a server sizes and limits its pool from its configuration)."""
        if self._pool.runner is not None:
            self._pool.runner.close()
        self._pool.runner = runner
        if self._pool.closed:
            runner.close()

    def jq(self) -> JqRunner:
        """The jq worker pool (limits, workers and queue from the service's configuration)."""
        pool = self._pool
        if pool.runner is None:
            from stateflow.jq import JqRunner

            limits = self.svc.config.jq
            pool.runner = JqRunner(
                workers=limits.workers,
                timeout=limits.timeout_seconds,
                memory=limits.memory_mb * 1024 * 1024,
                queue=limits.queue,
            )
            if pool.closed:  # (closed before first use: it refuses, as a closed one does)
                pool.runner.close()
        return pool.runner

    def eval(
        self,
        program: str,
        value: JSON,
        variables: dict[str, JSON],
        what: str,
        source: JqSource | None = None,
    ) -> JSON:
        """The one value ``program`` yields. One that yields none or several (a stream: which
        was meant?) is refused, never cut to its first; ``source`` maps jq's line numbers back
        to the author's program."""
        from stateflow.jq import JqError

        try:
            outputs = self.svc.programs.jq().run(program, value, variables)
        except JqError as exc:
            message = source.explain(exc.message) if source is not None else exc.message
            raise TemplateInvalid(f"{what} failed to evaluate: {message}") from exc
        if len(outputs) != 1:
            got = (
                "no value (the jq program produced no output)"
                if not outputs
                else f"{len(outputs)} values ({shown(outputs[:3])[:200]}{' …' if len(outputs) > 3 else ''})"
            )
            raise TemplateInvalid(f"{what} must yield exactly one value, it yielded {got}")
        return outputs[0]

    # ------------------------------------------------------------------ template jq

    def program(
        self, name: str, reference: str, purpose: str
    ) -> tuple[dict[str, Any], AttachmentRow, dict[str, Any]]:
        decl = self.svc.get_declaration(name)
        rows = {a["template"]: a for a in decl["attachments"]}
        docs = self.svc.templates.docs(sorted(rows)) if rows else {}
        if "." in reference:
            tname, pname = reference.split(".", 1)
            if tname not in rows:
                raise NotFound(f"template {tname!r} is not attached on state {name!r}")
            if pname not in (docs[tname].get("template_jq") or {}):
                raise NotFound(
                    f"template {tname!r} attached on state {name!r} declares no template_jq {pname!r}"
                )
        else:
            pname = reference
            owners = [t for t in sorted(rows) if pname in (docs[t].get("template_jq") or {})]
            if not owners:
                raise NotFound(f"no template_jq {pname!r} on any template attached on state {name!r}")
            if len(owners) > 1:
                raise InvalidInput(
                    f"template_jq {pname!r} is declared by more than one template attached on state {name!r} "
                    f"({', '.join(owners)}); qualify it as <template>.{pname}"
                )
            tname = owners[0]
        program = docs[tname]["template_jq"][pname]
        if program["purpose"] != purpose:
            raise InvalidInput(
                f"template_jq {pname!r} on template {tname!r} has purpose {program['purpose']!r}, needs {purpose!r}"
            )
        return docs[tname], rows[tname], program

    def purpose(self, name: str, reference: str) -> str:
        """``input`` or ``update``: what the named program is for."""
        for purpose in ("input", "update"):
            try:
                self.program(name, reference, purpose)
                return purpose
            except NotFound:
                raise
            except InvalidInput:
                continue
        raise InvalidInput(f"template_jq {reference!r} cannot be resolved on state {name!r}")

    def input(self, name: str, subject: Any, reference: str, params: dict[str, Any]) -> JqInput:
        """Evaluate an ``input`` program over the record's subtree; writes nothing."""
        template, attachment, program = self.program(name, reference, "input")
        declared = program.get("params", [])
        missing, unknown = sorted(set(declared) - set(params)), sorted(set(params) - set(declared))
        if missing or unknown:
            raise InvalidInput(
                f"template_jq {reference!r} on template {template['name']!r} takes params {declared}, missing {missing}, got unknown {unknown}"
            )
        value = self.run_program(name, subject, template, attachment, program, reference, {"params": params})
        return {"name": reference, "purpose": "input", "value": value}

    def run_program(
        self,
        name: str,
        subject: Any,
        template: dict[str, Any],
        attachment: AttachmentRow,
        program: dict[str, Any],
        reference: str,
        variables: dict[str, Any],
    ) -> JSON:
        """Evaluate a program (with its sibling prelude) over the record's attachment subtree."""
        record = self.svc.read(name, subject)
        subtree = _subtree(record["data"] if record else None, attachment["path"])
        source = program_source(template["template_jq"], program["jq"]["content"])
        return self.eval(
            source.text,
            subtree,
            {"parameters": attachment["parameters"], "declarations": attachment["declarations"], **variables},
            f"template_jq {reference!r} on template {template['name']!r}",
            source,
        )

    def apply(
        self,
        name: str,
        subject: Any,
        reference: str,
        input_value: Any = None,
        *,
        op_id: str | None = None,
        origin: WriteOrigin | None = None,
        context: DoorContext | None = None,
        expect_revision: int | Literal["*"] | None = None,
    ) -> ApplyResult:
        """Evaluate an ``update`` program and apply the op batch it returns (rebased under the
        attachment path, guard paths included) as one record write: as the writer's
        ``origin``, its meta naming the program, and under its ``expect_revision`` (checked in
        the write's transaction, as every write's); the batch's result (its ``revision`` is the
        record's, what a door's ETag names)."""
        given = origin.model_dump(exclude_none=True) if origin is not None else {}
        stamped = {**given, "meta": {**given.get("meta", {}), "template_jq": reference}}
        return self.svc.apply_change(
            name,
            subject,
            self.transform(name, reference, input_value),
            op_id=op_id,
            origin=stamped,
            context=context,
            expect_revision=expect_revision,
        )

    def ops(self, name: str, subject: Any, reference: str, input_value: Any = None) -> Any:
        """The op batch an ``update`` program returns for the record as it is now, rebased under
        the attachment path (guard paths included); nothing is applied. (A write evaluates the
        program again inside its transaction: :meth:`transform`.)"""
        record = self.svc.read(name, subject)
        return self.program_ops(name, reference, input_value)(record["data"] if record else None)

    def program_ops(self, name: str, reference: str, input_value: Any = None) -> Callable[[JSON], list[Any]]:
        """``record data (None: no record) → the rebased op batch`` of an ``update`` program;
        the program is looked up and its params checked here, once."""
        template, attachment, program = self.program(name, reference, "update")
        declared = program.get("params", [])
        # the input is the object of the declared params, each key named; a program that
        # declares none takes no input (absent, null or {}), so a mistyped key is never dropped
        takes = (
            f"takes params {declared}"
            if declared
            else "declares no params, so it takes no input (none, null or {})"
        )
        if declared or input_value is not None:
            if not isinstance(input_value, dict):
                raise InvalidInput(
                    f"template_jq {reference!r} {takes}: its input must be an object of them, "
                    f"got {shown(input_value)}"
                    if declared
                    else f"template_jq {reference!r} {takes}, got {shown(input_value)}"
                )
            missing, extra = (
                sorted(set(declared) - set(input_value)),
                sorted(set(input_value) - set(declared)),
            )
            if missing or extra:
                raise InvalidInput(
                    f"template_jq {reference!r} {takes}: its input misses {missing}, has undeclared {extra}"
                    if declared
                    else f"template_jq {reference!r} {takes}, got undeclared {extra}"
                )
        source = program_source(template["template_jq"], program["jq"]["content"])
        variables = {
            "parameters": attachment["parameters"],
            "declarations": attachment["declarations"],
            "input": input_value,
        }
        what = f"template_jq {reference!r} on template {template['name']!r}"
        path = attachment["path"]

        # A write may compute its change more than once (on the documents as last seen, then as
        # read under its locks): a program that failed on a subtree is not run again on the same
        # subtree — its failure is the answer, and a runaway program holds its caller, a worker
        # (and, under the locks, the record's writers) for one time limit, not one per attempt.
        failed: list[tuple[JSON, StateflowError]] = []

        def ops_for(data: JSON) -> list[Any]:
            subtree = _subtree(data, path)
            if failed and identical(failed[0][0], subtree):
                raise failed[0][1]
            try:
                value = self.eval(source.text, subtree, variables, what, source)
            except StateflowError as exc:
                failed[:] = [(subtree, exc)]
                raise
            return _rebase(value, path, f"template_jq {reference!r}")

        return ops_for

    def transform(self, name: str, reference: str, input_value: Any = None) -> Transform:
        """An ``update`` program as a record write's change: the program runs inside the write,
        over the record as the write's transaction finds it (after the batch's earlier items),
        so a write committed between a read and this one is built on, never overwritten."""
        ops_for = self.program_ops(name, reference, input_value)

        def change(declaration: dict[str, Any], current: JSON, origin: dict[str, Any]) -> Change:
            made = ops_for(None if current is MISSING else current)
            try:
                ops = parse_ops(made)
            except OpError as exc:  # (the caller sent no ops: the program made them)
                raise OpError(
                    f"template_jq {reference!r} returned an invalid op batch: {exc.message}"
                ) from exc
            return ops_transform(ops)(declaration, current, origin)

        return change


def _subtree(data: JSON, path: list[str]) -> JSON:
    node = data
    for seg in path:
        if type(node) is not dict or seg not in node:
            return {}
        node = node[seg]
    return node if type(node) is dict else {}


def _rebase(ops: Any, base: list[str], what: str) -> list[Any]:
    if not isinstance(ops, list):
        raise TemplateInvalid(
            f"{what} is an update program, so its jq must return an op batch (a list of ops), got {shown(ops)}"
        )
    out = []
    for n, op in enumerate(ops):
        if not isinstance(op, dict) or not isinstance(op.get("path"), list):
            raise TemplateInvalid(
                f"{what} returned ops[{n}] = {shown(op)}: an update program's op must be an "
                "object carrying a list path"
            )
        rebased = {**op, "path": [*base, *op["path"]]}
        guard = op.get("guard")
        if isinstance(guard, dict) and isinstance(guard.get("path"), list):
            rebased["guard"] = {**guard, "path": [*base, *guard["path"]]}  # guards are template-relative too
        out.append(rebased)
    return out
