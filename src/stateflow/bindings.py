"""Bindings around a run: a callable's inputs resolve a record, the record feeds the run, the run
updates the record — all of the run's writes in one unit of work.

A :class:`Binding` names a state and

- ``subject_expr`` (required, non-empty jq over the run's inputs): a full subject object
  ``{target_kind, target_name, kind, key}`` or a bare key string — a bare key takes the
  state's default subject kind and the run's ambient target;
- ``scope_expr`` (optional jq over the run's inputs, evaluated first): ``true`` engages the
  binding, ``false`` skips the state for this run (no injections, no updates); anything else
  — no output at all, or a jq error, included — is refused. No expression means engaged;
- ``inputs``: ``{argument: {"template_jq": program, "params": {...}}}`` — before the run, the
  template's ``input`` program is evaluated on the record and its value given to the run as
  that argument (a dotted argument such as ``"state.memory"`` sets a field inside one);
- ``updates``: ``[{"template_jq": program, "adapter": jq}]`` — after the run, the adapter
  (jq over ``{"input": the run's inputs, "output": its result}``; default ``.output``, and none
  for a program that declares no params: it takes no input) gives the ``update`` program its
  input, and the op batch the program returns is staged.

:func:`bound` wraps any callable (a LangGraph node, a tool function; sync or async; not a
generator, whose body would run as it is iterated, after the run committed); :func:`run` is the
same as a context manager, :func:`arun` as an async one (for async code: its states work on a
worker thread, so on an async PostgreSQL store too). The run's own writes join the unit through
``current_run().unit``; the unit commits after the updates are staged — one transaction, with
the run's origin (consumer = the callable, ``run_id``) on every audit row — or, if the run
raises, writes nothing. A bound call made inside a bound run on the same service is a sub-tool of
that run's dispatch: its own binding is a no-op (no scope, subject, injection or update: a binding
fires only on the outermost dispatch), and its own writes commit with the outer run's, or not at
all (only its own are dropped when it raises and the outer run goes on).
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import functools
import inspect
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any, Final, ParamSpec, TypeVar, cast

import orjson
from pydantic import BaseModel

from stateflow.aio import on_thread
from stateflow.errors import InvalidInput
from stateflow.jq.runner import JqError
from stateflow.states import StatesService
from stateflow.states.models import DoorContext
from stateflow.states.service import subject_of
from stateflow.states.unit import Unit

P = ParamSpec("P")
R = TypeVar("R")


class BindingInvalid(InvalidInput):
    """A binding's definition is malformed (caught before any run)."""

    code = "binding-invalid"


class BindingRefused(InvalidInput):
    """A binding's expression gave what the run cannot use: nothing is written (the callable
    does not run, unless it is an update's adapter that failed after it)."""

    code = "binding-refused"


@dataclass(frozen=True)
class Binding:
    state: str
    subject_expr: str
    scope_expr: str | None = None
    inputs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    updates: Sequence[Mapping[str, Any]] = ()

    def __post_init__(self) -> None:
        where = f"binding of state {self.state!r}"
        if not isinstance(self.state, str) or not self.state:
            raise BindingInvalid("a binding names a state")
        if not isinstance(self.subject_expr, str) or not self.subject_expr.strip():
            raise BindingInvalid(
                f"{where}: subject_expr is required (a jq program yielding a subject or a key)"
            )
        if self.scope_expr is not None and (
            not isinstance(self.scope_expr, str) or not self.scope_expr.strip()
        ):
            raise BindingInvalid(f"{where}: scope_expr, when given, is a non-empty jq program")
        if not isinstance(self.inputs, Mapping):
            raise BindingInvalid(
                f"{where}: inputs is an object {{argument: {{'template_jq': program, 'params': {{...}}}}}}, "
                f"got {type(self.inputs).__name__}"
            )
        if isinstance(self.updates, str | bytes | Mapping) or not isinstance(self.updates, Sequence):
            raise BindingInvalid(
                f"{where}: updates is a list of {{'template_jq': program, 'adapter': jq}}, "
                f"got {type(self.updates).__name__}"
            )
        for name, spec in self.inputs.items():
            if not name or not isinstance(spec, Mapping) or not isinstance(spec.get("template_jq"), str):
                raise BindingInvalid(
                    f"{where}: inputs[{name!r}] needs 'template_jq', an input program's name"
                )
            if set(spec) - {"template_jq", "params"} or not isinstance(spec.get("params", {}), Mapping):
                raise BindingInvalid(f"{where}: inputs[{name!r}] takes 'template_jq' and an object 'params'")
        for n, spec in enumerate(self.updates):
            if not isinstance(spec, Mapping) or not isinstance(spec.get("template_jq"), str):
                raise BindingInvalid(f"{where}: updates[{n}] needs 'template_jq', an update program's name")
            if set(spec) - {"template_jq", "adapter"} or not isinstance(spec.get("adapter", ".output"), str):
                raise BindingInvalid(f"{where}: updates[{n}] takes 'template_jq' and a jq 'adapter'")

    @classmethod
    def parse(cls, raw: Any) -> Binding:
        """A binding from its JSON form (``{"state", "subject_expr", "scope_expr"?, "inputs"?, "updates"?}``)."""
        if not isinstance(raw, dict):
            raise BindingInvalid("a binding is a JSON object")
        unknown = sorted(set(raw) - {"state", "subject_expr", "scope_expr", "inputs", "updates"})
        if unknown:
            raise BindingInvalid(f"a binding carries unknown keys {unknown}")
        return cls(
            state=raw.get("state", ""),
            subject_expr=raw.get("subject_expr", ""),
            scope_expr=raw.get("scope_expr"),
            # only an absent or null member means none: a falsy value of another type ([] for
            # inputs, {} for updates, "", 0, false) is refused as any other wrong type is
            inputs={} if raw.get("inputs") is None else raw["inputs"],
            updates=() if raw.get("updates") is None else raw["updates"],
        )


@dataclass
class Run:
    """One bound run: its (injected) inputs, the subjects each engaged state resolved to, the
    unit of work its writes join, and — set by the caller of :func:`run` — its output."""

    run_id: str
    inputs: dict[str, Any]
    unit: Unit
    subjects: dict[str, dict[str, str]]
    output: Any = None
    outer: Run | None = None
    """the bound run (on the same service) this one was called inside: its writes commit with
    that run's, or not at all"""
    origin: dict[str, Any] = field(default_factory=dict, repr=False)
    """the origin the outermost run commits under (shared by the runs called inside it)"""


_CURRENT: contextvars.ContextVar[Run | None] = contextvars.ContextVar("stateflow_bound_run", default=None)


def current_run() -> Run:
    """The bound run the caller executes in (its ``unit`` stages writes into the run's commit)."""
    found = _CURRENT.get()
    if found is None:
        raise InvalidInput("not inside a bound run")
    return found


_DEPTH: Final = 64
"""How deep :func:`_jsonable` walks an input that is not plain JSON (deeper parts are left out)."""
_LEFT_OUT: Final = object()


def _json_view(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """What jq sees of the inputs: each as JSON, pydantic models and dataclasses as their
    fields, and only the parts that have no JSON form left out (a LangGraph config's
    callbacks, say: its ``configurable.thread_id`` stays visible)."""
    out = {}
    for name, value in inputs.items():
        try:
            out[name] = orjson.loads(orjson.dumps(value))  # (the common case: plain JSON)
            continue
        except TypeError:
            pass
        made = _jsonable(value, 0)
        if made is not _LEFT_OUT:
            out[name] = made
    return out


def _jsonable(value: Any, depth: int) -> Any:
    """``value``'s JSON form with what has none left out (an object's member dropped, an
    array's element made null, so that the other elements keep their indexes)."""
    if value is None or type(value) in (str, bool, float):
        return value
    if type(value) is int:
        return value if -(2**63) <= value < 2**64 else _LEFT_OUT
    if depth >= _DEPTH:
        return _LEFT_OUT
    if isinstance(value, BaseModel):
        value = {name: getattr(value, name) for name in type(value).model_fields}
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        members = ((k, _jsonable(v, depth + 1)) for k, v in value.items() if type(k) is str)
        return {k: v for k, v in members if v is not _LEFT_OUT}
    if isinstance(value, list | tuple):
        return [None if (v := _jsonable(e, depth + 1)) is _LEFT_OUT else v for e in value]
    try:  # another scalar orjson writes (a str or int subclass, an enum, a datetime, a UUID)
        return orjson.loads(orjson.dumps(value))
    except TypeError:
        return _LEFT_OUT


def _shape(view: dict[str, Any]) -> str:
    """The inputs jq saw, for a refusal: their names and top-level keys."""
    parts = []
    for name, value in view.items():
        keys = f" {{{', '.join(sorted(value)[:12])}}}" if isinstance(value, dict) else ""
        parts.append(f".{name}{keys}")
    return "; ".join(parts) or "no input with a JSON form"


def _one(states: StatesService, binding: Binding, name: str, program: str, view: dict[str, Any]) -> Any:
    """The one output of a binding's ``scope_expr``, ``subject_expr`` or an update's
    ``adapter``: one that yields nothing or several values (a stream, ``.ids[]``: which one
    was meant?), or fails (or does not compile), is the binding's refusal, naming its state,
    the expression and the inputs it read — a bare jq error names none of them."""
    try:
        outputs = states.jq().run(program, view)
    except JqError as exc:
        raise BindingRefused(
            f"binding of state {binding.state!r}: {name} {program!r} gave no value: {exc.message} "
            f"(the inputs it read: {_shape(view)})"
        ) from exc
    if len(outputs) != 1:
        got = (
            "no value: the jq program produced no output"
            if not outputs
            else f"{len(outputs)} values ({orjson.dumps(outputs).decode()[:200]}), not one"
        )
        raise BindingRefused(
            f"binding of state {binding.state!r}: {name} {program!r} gave {got} "
            f"(the inputs it read: {_shape(view)})"
        )
    return outputs[0]


def _resolve(
    states: StatesService, binding: Binding, view: dict[str, Any], target: tuple[str, str]
) -> dict[str, str] | None:
    """The binding's subject for this run, or None when its scope says skip."""
    where = f"binding of state {binding.state!r}"
    if binding.scope_expr is not None:
        engaged = _one(states, binding, "scope_expr", binding.scope_expr, view)
        if type(engaged) is not bool:
            raise BindingRefused(
                f"{where}: scope_expr must yield true or false, got {orjson.dumps(engaged).decode()[:200]} "
                f"from {binding.scope_expr!r} (the inputs it read: {_shape(view)})"
            )
        if not engaged:
            return None
    found = _one(states, binding, "subject_expr", binding.subject_expr, view)
    declaration = states.get_declaration(binding.state)
    if isinstance(found, str):
        if not found.strip():
            raise BindingRefused(
                f"{where}: subject_expr yielded an empty key from {binding.subject_expr!r} "
                f"(the inputs it read: {_shape(view)})"
            )
        kind = declaration["default_subject_kind"]
        subject = {"target_kind": target[0], "target_name": target[1], "kind": kind, "key": found}
    elif isinstance(found, dict):
        subject = found
    else:
        raise BindingRefused(
            f"{where}: subject_expr must yield a subject object or a key string, got "
            f"{orjson.dumps(found).decode()[:200]} from {binding.subject_expr!r} (the inputs it read: {_shape(view)})"
        )
    try:
        resolved = subject_of(subject).model_dump()
    except InvalidInput as exc:
        raise BindingRefused(
            f"{where}: {exc.message}, from subject_expr {binding.subject_expr!r} (the inputs it read: {_shape(view)})"
        ) from exc
    if resolved["kind"] not in declaration["subject_kinds"]:
        raise BindingRefused(
            f"{where}: subject kind {resolved['kind']!r} is not declared by the state "
            f"(declared kinds: {declaration['subject_kinds']})"
        )
    return resolved


def _inject(inputs: dict[str, Any], name: str, value: Any) -> None:
    """Set ``name`` (dotted: a field inside an argument) to ``value`` in ``inputs``. What the
    path goes through is copied, never changed in place: a mapping as a dict, a dataclass by
    ``dataclasses.replace``, a pydantic model by ``model_copy`` — each keeps its type and its
    other fields."""
    head, *rest = name.split(".")
    inputs[head] = _set(inputs.get(head), rest, value, name) if rest else value


def _set(container: Any, path: list[str], value: Any, name: str) -> Any:
    """A copy of ``container`` with ``path`` set to ``value`` (None: a new object)."""
    field_name, rest = path[0], path[1:]
    if container is None or isinstance(container, Mapping):
        current = None if container is None else container.get(field_name)
        made = dict(container or {})
        made[field_name] = _set(current, rest, value, name) if rest else value
        return made
    if isinstance(container, BaseModel):
        if field_name not in type(container).model_fields:
            raise BindingRefused(
                f"cannot inject {name!r}: {type(container).__name__} has no field {field_name!r}"
            )
        new = _set(getattr(container, field_name), rest, value, name) if rest else value
        return container.model_copy(update={field_name: new})
    if dataclasses.is_dataclass(container) and not isinstance(container, type):
        fields = {f.name: f for f in dataclasses.fields(container)}
        if field_name not in fields or not fields[field_name].init:
            raise BindingRefused(
                f"cannot inject {name!r}: {type(container).__name__} has no field {field_name!r} set at init"
            )
        new = _set(getattr(container, field_name), rest, value, name) if rest else value
        return dataclasses.replace(container, **{field_name: new})
    raise BindingRefused(
        f"cannot inject {name!r}: the value at {field_name!r}'s parent is a {type(container).__name__}, "
        "which takes no field (a mapping, a dataclass or a pydantic model does)"
    )


DEFAULT_TARGET: Final = ("agent", "stateflow")
"""The target a bare key takes when neither the call nor its context names one."""


def _target(target: tuple[str, str] | None, context: DoorContext | None) -> tuple[str, str]:
    """The run's target for a bare key: the one given, else the context's (the door's
    ambient target), else :data:`DEFAULT_TARGET`. A context naming half a target is refused."""
    if target is not None:
        return target
    if context is None or (context.target_kind is None and context.target_name is None):
        return DEFAULT_TARGET
    if context.target_kind is None or context.target_name is None:
        raise BindingInvalid(
            f"the run's context names target_kind {context.target_kind!r} and target_name "
            f"{context.target_name!r}: give both, or neither (then a bare key's target is "
            f"{DEFAULT_TARGET[0]}/{DEFAULT_TARGET[1]})"
        )
    return (context.target_kind, context.target_name)


def _outer(states: StatesService) -> Run | None:
    """The bound run the caller runs inside, when it is on ``states``: a run called inside
    another joins it (its writes are part of that run: they commit with it, or not at all)."""
    found = _CURRENT.get()
    return found if found is not None and found.unit.service is states else None


def _prepare(
    states: StatesService,
    bindings: Sequence[Binding],
    inputs: Mapping[str, Any],
    target: tuple[str, str],
    consumer: str | None,
    run_id: str | None,
    context: DoorContext | None,
    outer: Run | None = None,
) -> tuple[Run, list[tuple[Binding, dict[str, str]]]]:
    """Before the run: scopes, subjects, injections, and the unit its writes will join."""
    if outer is not None:
        # a bound call inside another bound run (a tool a node calls) is a sub-tool of that
        # dispatch: its binding is a no-op (seed 004: a binding fires only on the outermost
        # dispatch) — no scope, subject, injection or update of its own; its own writes join
        # the outer run's, and it sees the outer run's subjects
        the_run = Run(
            run_id=outer.run_id,
            inputs=dict(inputs),
            unit=states.unit(origin=outer.origin, context=context),
            subjects=dict(outer.subjects),
            outer=outer,
            origin=outer.origin,
        )
        return the_run, []
    view = _json_view(inputs)
    engaged = [(b, _resolve(states, b, view, target)) for b in bindings]
    active = [(b, s) for b, s in engaged if s is not None]
    injected = dict(inputs)
    for binding, subject in active:
        for name, spec in binding.inputs.items():
            value = states.template_jq_input(
                binding.state, subject, spec["template_jq"], dict(spec.get("params", {}))
            )
            _inject(injected, name, value["value"])
    origin: dict[str, Any] = {"consumer": consumer, "run_id": run_id or uuid.uuid4().hex}
    _name_programs(origin, [spec["template_jq"] for b, _ in active for spec in b.updates])
    the_run = Run(
        run_id=origin["run_id"],
        inputs=injected,
        unit=states.unit(origin=origin, context=context),
        subjects={b.state: s for b, s in active},
        outer=outer,
        origin=origin,
    )
    return the_run, active


def _name_programs(origin: dict[str, Any], programs: Sequence[str]) -> None:
    """Name the update programs in ``origin``'s meta, after those it names: the ops commit in the
    run's one transaction, so its origin names them as a lone template_jq_update's names its
    program (one name, or the list of several). The meta is replaced, never changed in place."""
    named = origin.get("meta", {}).get("template_jq", [])
    every = list(dict.fromkeys([*([named] if isinstance(named, str) else named), *programs]))
    if every:
        origin["meta"] = {"template_jq": every[0] if len(every) == 1 else every}


def _finish(states: StatesService, the_run: Run, active: list[tuple[Binding, dict[str, str]]]) -> None:
    """After a clean run: stage each update program's ops, then commit the unit — or, for a run
    inside another, hand its staging to the outer run's unit, to commit with it."""
    after = {"input": _json_view(the_run.inputs), "output": _json_view({"o": the_run.output}).get("o")}
    for binding, subject in active:
        for spec in binding.updates:
            adapter = spec.get("adapter")
            if adapter is None and not states.template_jq_params(binding.state, spec["template_jq"]):
                # a program that declares no params takes no input: only one that declares
                # params needs an adapter to fill them (else the run's output, ``.output``)
                update_input = None
            else:
                update_input = _one(
                    states,
                    binding,
                    f"the adapter of update {spec['template_jq']!r}",
                    ".output" if adapter is None else adapter,
                    after,
                )
            # run at commit, inside its transaction: over the record as the callable's own
            # staged writes and any write committed since the run began leave it
            the_run.unit.template_jq(binding.state, subject, spec["template_jq"], update_input)
    if the_run.outer is not None:  # (its binding a no-op: only its own writes to hand on)
        the_run.outer.unit.absorb(the_run.unit)
    else:
        the_run.unit.commit()


@contextmanager
def run(
    states: StatesService,
    bindings: Sequence[Binding],
    inputs: Mapping[str, Any],
    *,
    target: tuple[str, str] | None = None,
    consumer: str | None = None,
    run_id: str | None = None,
    context: DoorContext | None = None,
) -> Iterator[Run]:
    """Resolve the bindings over ``inputs``, inject, yield the run; on a clean exit stage the
    updates (computed from ``run.output``) and commit the unit; on an exception write nothing.
    ``target``: a bare key's target (default: ``context``'s, else :data:`DEFAULT_TARGET`)."""
    the_run, active = _prepare(
        states, bindings, inputs, _target(target, context), consumer, run_id, context, _outer(states)
    )
    token = _CURRENT.set(the_run)
    try:
        try:
            yield the_run
            _finish(states, the_run, active)
        except BaseException:
            the_run.unit.discard()
            raise
    finally:
        _CURRENT.reset(token)


@asynccontextmanager
async def arun(
    states: StatesService,
    bindings: Sequence[Binding],
    inputs: Mapping[str, Any],
    *,
    target: tuple[str, str] | None = None,
    consumer: str | None = None,
    run_id: str | None = None,
    context: DoorContext | None = None,
) -> AsyncIterator[Run]:
    """:func:`run` for async code (``async with arun(…) as r:``): the resolution, the updates and
    the commit on a worker thread, the event loop free meanwhile. A caller cancelled while the
    unit commits stops waiting, and the commit — with the calls ``unit.defer`` queued — runs to
    its end on its thread: nothing of it is dropped under it."""
    the_run, active = await on_thread(
        states.store,
        _prepare,
        states,
        bindings,
        inputs,
        _target(target, context),
        consumer,
        run_id,
        context,
        _outer(states),
    )
    token = _CURRENT.set(the_run)
    try:
        try:
            yield the_run
        except BaseException:
            the_run.unit.discard()
            raise
        try:
            await on_thread(states.store, _finish, states, the_run, active)
        except asyncio.CancelledError:
            raise  # (the finish goes on, on its thread: the unit is its own until it is done)
        except BaseException:
            the_run.unit.discard()
            raise
    finally:
        _CURRENT.reset(token)


def _unwrapped(fn: Callable[..., Any]) -> tuple[Any, Any]:
    """What calling ``fn`` runs: through any ``functools.partial``, the callable itself and
    what Python calls of it (an object's class ``__call__``; else the callable again)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.isroutine(fn) or isinstance(fn, type) or not callable(fn):
        return fn, fn
    return fn, type(fn).__call__


def _is_async(fn: Callable[..., Any]) -> bool:
    """Whether calling ``fn`` starts a coroutine: an ``async def`` (through any
    ``functools.partial``) or an object whose ``__call__`` is one."""
    # (the object itself first: one that says it is a coroutine function, an ``AsyncMock``, is)
    made, called = _unwrapped(fn)
    return inspect.iscoroutinefunction(made) or inspect.iscoroutinefunction(called)


def _generates(fn: Callable[..., Any]) -> bool:
    """Whether calling ``fn`` makes a generator or an async generator (its body runs as it is
    iterated: after a run around the call would have committed, and outside it)."""
    called = _unwrapped(fn)[1]
    return inspect.isgeneratorfunction(called) or inspect.isasyncgenfunction(called)


def bound(
    states: StatesService,
    *bindings: Binding,
    target: tuple[str, str] | None = None,
    context: DoorContext | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a callable so every call runs bound (see the module documentation). The
    callable's arguments, by parameter name, are the run's inputs; injected values replace
    or fill arguments (an injected argument may be left out of the call). ``target``: a bare
    key's target (default: ``context``'s, else :data:`DEFAULT_TARGET`)."""
    run_target = _target(target, context)

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        signature = inspect.signature(fn)
        consumer = getattr(fn, "__qualname__", None) or getattr(type(fn), "__qualname__", None) or repr(fn)
        if _generates(fn):
            raise BindingInvalid(
                f"{consumer} is a generator: its body runs as it is iterated, after a run around the "
                "call would have committed; bind a function that returns its result"
            )

        open_ended = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
        for binding in bindings:
            for name in binding.inputs:
                if name.split(".")[0] not in signature.parameters and not open_ended:
                    raise BindingInvalid(
                        f"binding of state {binding.state!r} injects {name!r}, which {consumer} does not take"
                    )

        injected = {name.split(".")[0] for binding in bindings for name in binding.inputs}

        def arguments(args: Any, kwargs: Any) -> inspect.BoundArguments:
            # an argument a binding injects may be left out (the run fills it); any other one
            # missing is the call's own TypeError, raised before the run begins
            call = signature.bind_partial(*args, **kwargs)
            for name, parameter in signature.parameters.items():
                if (
                    name not in call.arguments
                    and name not in injected
                    and parameter.default is parameter.empty
                    and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)
                ):
                    raise TypeError(f"{consumer}() missing a required argument: {name!r}")
            call.apply_defaults()
            return call

        def with_inputs(call: inspect.BoundArguments, inputs: dict[str, Any]) -> inspect.BoundArguments:
            extra = {k: v for k, v in inputs.items() if k not in signature.parameters}
            for name in signature.parameters:
                if name in inputs and signature.parameters[name].kind is not inspect.Parameter.VAR_KEYWORD:
                    call.arguments[name] = inputs[name]
            if extra:
                var = next(p.name for p in signature.parameters.values() if p.kind is p.VAR_KEYWORD)
                call.arguments[var] = {**call.arguments.get(var, {}), **extra}
            return call

        if _is_async(fn):

            @functools.wraps(fn)
            async def call_async(*args: Any, **kwargs: Any) -> Any:
                call = arguments(args, kwargs)
                # the states work runs on a worker thread: the event loop keeps going meanwhile
                async with arun(
                    states, bindings, call.arguments, target=run_target, consumer=consumer, context=context
                ) as r:
                    final = with_inputs(call, r.inputs)
                    result = await cast(Callable[..., Awaitable[Any]], fn)(*final.args, **final.kwargs)
                    r.output = result
                return result

            return cast(Callable[P, R], call_async)

        @functools.wraps(fn)
        def call_sync(*args: Any, **kwargs: Any) -> Any:
            call = arguments(args, kwargs)
            with run(
                states, bindings, call.arguments, target=run_target, consumer=consumer, context=context
            ) as r:
                final = with_inputs(call, r.inputs)
                result = fn(*final.args, **final.kwargs)
                if inspect.isgenerator(result) or inspect.isasyncgen(result):
                    if inspect.isgenerator(result):
                        result.close()  # (never started: nothing of its body ran)
                    raise BindingInvalid(
                        f"{consumer} returned a generator: its body runs as it is iterated, after "
                        "this run would have committed; bind a function that returns its result; "
                        "nothing was written"
                    )
                if inspect.isawaitable(result):
                    # a sync callable that hands back an awaitable: its body runs only when
                    # awaited, after this run would have committed (and outside it)
                    if inspect.iscoroutine(result):
                        result.close()
                    raise BindingInvalid(
                        f"{consumer} returned an awaitable from a synchronous call: bind the async "
                        "function itself (an `async def`, or an object whose `__call__` is one); nothing was written"
                    )
                r.output = result
            return result

        return cast(Callable[P, R], call_sync)

    return wrap


__all__ = [
    "DEFAULT_TARGET",
    "Binding",
    "BindingInvalid",
    "BindingRefused",
    "Run",
    "arun",
    "bound",
    "current_run",
    "run",
]
