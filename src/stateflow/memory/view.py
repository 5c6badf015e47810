"""A memory view: one agent's wanted scopes, read with ``read_state``, changed with ``patch_state``.

Every call captures one consistent view of the wanted scope documents. Reads never write.
A patch stages every supplied scope against one basis read under lock and commits them as one
transition, or nothing.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from stateflow.doc.canonical import JSON, ascii_digits, detach, encode, encode_trusted, identical
from stateflow.doc.diff import Edit, Within, diff, to_patch
from stateflow.doc.merge import Emitted, merge_patch, patch_within
from stateflow.doc.paths import Index, Key, PatchesPath, Range, ReadPath, Selector, parse
from stateflow.doc.select import MISSING, outside, select
from stateflow.doc.select import keys as keys_projection
from stateflow.errors import (
    HotBudgetExceeded,
    InvalidInput,
    InvalidPath,
    NotFound,
    SelectionError,
    StateflowError,
    StoreError,
)
from stateflow.memory import artifacts as artifact_provenance
from stateflow.memory import knowledge, receipts
from stateflow.memory import shown as shown_views
from stateflow.memory.confine import NO_LOCAL_CWD
from stateflow.memory.ownership import cascade_targets, deletion_patch
from stateflow.memory.path_select import overlay_steps, select_layers
from stateflow.memory.planes import (
    RUNTIME,
    Authored,
    ExtraRoot,
    PlaneSet,
    check_artifacts,
    check_extra_roots,
    check_scope_patch,
    child_kinds,
    effective_view,
    model_view,
)
from stateflow.memory.protocol import protocol_text
from stateflow.memory.receipts import ECHO_LIMIT
from stateflow.memory.refs import HINT_MESSAGE, HINT_TRUNCATED, Unread, anchor, find_referrers, relativize
from stateflow.memory.scopes import SCOPES, Identity, checked_scopes
from stateflow.memory.served import served_case
from stateflow.store import Change, Commit, DocKey, Document, Store, Write
from stateflow.store.model import made_write
from stateflow.store.spares import SPARES
from stateflow.store.trail import End, KeysEnd, KeysForm, SliceEnd, SliceForm, Step, Trail

DEFAULT_HISTORY_LIMIT: Final = 7
MAX_HISTORY_LIMIT: Final = 100
MODES: Final = ("active", "passive", "off")
PROJECTIONS: Final = ("value", "keys", "patch")
NAV_MAX_KEYS: Final = 32
NAV_MAX_CHARS: Final = 1024


@dataclass(frozen=True)
class MemoryConfig:
    history_limit: int = DEFAULT_HISTORY_LIMIT
    mode: str = "active"
    extra_roots: tuple[ExtraRoot, ...] = ()
    knowledge_roots: tuple[str, ...] = ()
    """Directories (besides the working directory) artifact sources may live in: absolute paths."""
    hot_budget: int | None = None
    """Largest hot effective state (canonical JSON bytes) a patch may grow it to; None: no limit."""
    runtime_dir: str | None = None
    """Where the view last shown to each session is kept across processes (see ``shown``);
    None: only in this process."""
    read_only: bool = False
    """A view for a client that may only read (a read-only token): its protocol teaches reading
    alone, and what it is shown is never taken as what the session's model was last shown, since
    receipts go to writers and are relative to what the writer was shown."""
    local_cwd: bool = True
    """Whether the identity's working directory is on this machine, so artifact sources may live
    in it. False where a remote client names it (MCP over HTTP): it then only keys the cwd scope,
    and sources must lie in a knowledge root of this machine."""

    def __post_init__(self) -> None:
        for root in self.knowledge_roots:
            if not isinstance(root, str) or not os.path.isabs(root):
                raise InvalidInput(f"knowledge root {root!r} must be an absolute path")
        if type(self.history_limit) is not int or not 0 <= self.history_limit <= MAX_HISTORY_LIMIT:
            raise InvalidInput(f"history_limit must be an integer from 0 to {MAX_HISTORY_LIMIT}")
        if self.hot_budget is not None and (type(self.hot_budget) is not int or self.hot_budget < 1):
            raise InvalidInput("hot_budget must be a positive number of bytes")
        if self.mode not in MODES:
            raise InvalidInput(f"mode must be one of {', '.join(MODES)}")


def _may_delete_intent(scope_patch: dict[str, Any]) -> bool:
    """Whether a scope patch may delete an intent: it deletes the intents plane (``null``), or
    its intents patch may delete a key (:func:`_may_delete`)."""
    if "intents" not in scope_patch:
        return False
    intents = scope_patch["intents"]
    return intents is None or (type(intents) is dict and _may_delete(intents))


def _may_delete(patch: dict[str, Any]) -> bool:
    """Whether merging ``patch`` may delete a key it names: only a ``null`` deletes one (an
    object a merge left empty by deletions is pruned in turn, so an intent deleted so cascades
    as one deleted by ``null``); an empty object is a no-op wherever it lands."""
    return any(value is None or (type(value) is dict and _may_delete(value)) for value in patch.values())


@dataclass
class Receipt:
    """The outcome of ``patch_state``: what a model is told."""

    message: str
    changed_scopes: list[str] = field(default_factory=list)
    state_updates: dict[str, Any] | None = None
    hints: list[dict[str, Any]] = field(default_factory=list)
    seq: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.state_updates is not None:
            out["state_updates"] = self.state_updates
        if self.hints:
            out["hints"] = self.hints
        return out

    def text(self) -> str:
        extra = self.to_json()
        return self.message if not extra else self.message + "\n" + encode(extra).decode()


@dataclass
class _Timeline:
    """The view's retained transitions, newest first, with each one's change per scope."""

    seqs: list[int]
    changes: dict[int, dict[str, list[Edit]]]
    complete: bool
    """True when the window holds every retained transition (so the state before the oldest is
    known: see :meth:`revision_at`)."""
    revisions: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    """Per scope, ``(seq, revision)`` of its changes in the window, newest first."""

    def revision_at(self, scope: str, seq: int, now: int) -> int:
        """The scope document's revision right after transition ``seq`` of the window (``now``:
        its revision at the window's top): every change after ``seq`` is in the window. Before
        the window's oldest transition (``seq`` below it), the revision before the scope's oldest
        change in it: 0 where that was its first, else one the audit sweep kept a snapshot of."""
        after = [revision for at, revision in self.revisions.get(scope, ()) if at > seq]
        return min(after) - 1 if after else now


class Staging:
    """The rules ``patch_state`` applies to a patch — its checks, the merge, the ownership
    cascade, artifacts' provenance — for one agent's wanted scopes, with no store: a
    :class:`MemoryView` stages each patch through them, and :meth:`dry_run` applies one to
    given states (an import checks a whole history this way before writing any of it)."""

    def __init__(
        self, identity: Identity, scopes: Sequence[str] = SCOPES, config: MemoryConfig | None = None
    ) -> None:
        self.identity = identity
        self.scopes = checked_scopes(list(scopes))
        self.config = config or MemoryConfig()
        self.planes = PlaneSet(self.config.extra_roots)
        self.single = self.scopes[0] if len(self.scopes) == 1 else None
        # artifact sources resolve against the working directory only when it is on this machine
        self.source_cwd = identity.cwd if self.config.local_cwd else NO_LOCAL_CWD

    def dry_run(
        self, states: Mapping[str, dict[str, Any]], args: object, *, cascade: bool = True
    ) -> dict[str, dict[str, Any]]:
        """Each scope's state after ``patch_state(args)`` on ``states``, or the refusal it would
        raise (every rule but the hot budget, which is the view's); reads and writes nothing.
        ``cascade=False`` applies each scope's patch as the net patch it is, as a replay of
        accepted history must (ownership is never derived again)."""
        new = dict(states)
        for scope, patch in self._patch_args(args).items():
            cascading = cascade and _may_delete_intent(patch)
            new[scope], _ = self._stage(scope, states.get(scope) or {}, patch, [], [], Emitted(), cascading)
        return new

    def _show(self, scope: str, rest: str) -> str:
        return rest if self.single else f"{scope}.{rest}"

    def _patch_args(
        self, args: object, authored: dict[str, Authored] | None = None
    ) -> dict[str, dict[str, Any]]:
        """The checked scope patches of ``args``, in scope order; ``authored`` (when given) gets
        each scope's authored paths, listed by its check."""
        if not isinstance(args, dict):
            raise InvalidInput("patch_state requires an object")
        if self.single and args and all(k in self.planes.names for k in args):
            args = {self.single: args}  # single-owner mode: flat planes belong to the sole owner
        supplied: dict[str, dict[str, Any]] = {}
        flat = None
        for name in args:
            if name in self.planes.names and self.single is None:
                raise InvalidInput(
                    f"patch_state takes scope objects ({', '.join(self.scopes)}), not the plane {name!r} "
                    "at the top level"
                )
            if name in self.planes.names:
                flat = name  # a flat plane beside a scope object (else all were wrapped above)
                continue
            if name not in SCOPES:
                raise InvalidInput(f"patch_state does not accept field {name}")
            if name not in self.scopes:
                raise InvalidInput(
                    f"patch_state cannot write the {name} scope: this view selects {', '.join(self.scopes)}"
                )
        if flat is not None:
            raise InvalidInput(
                f"patch_state takes the {self.single} scope's planes at the top level "
                f'({{"{flat}": {{…}}}}) or its scope object ({{"{self.single}": {{…}}}}), '
                "not both in one patch"
            )
        if not args:
            raise InvalidInput("patch_state requires at least one scope patch")
        for scope in SCOPES:
            if scope in args:
                listed = None
                if authored is not None:
                    listed = authored[scope] = Authored()
                patch = check_scope_patch(scope, args[scope], self.planes, listed)
                if self.single:
                    patch = anchor(patch, self.single, self.planes.names)
                supplied[scope] = patch
        return supplied

    def _stage(
        self,
        scope: str,
        state: dict[str, Any],
        patch: dict[str, Any],
        cascaded: list[str],
        missing: list[tuple[str, tuple[str | int, ...]]],
        edits: Emitted,
        cascading: bool,
    ) -> tuple[dict[str, Any], Within | None]:
        """The scope's new state: intents first, ownership cascade, then the other planes; and
        None when ``edits`` got the edits from ``state`` to it, else the paths that may differ
        from ``state`` (the patches' leaves, a trie), in that order: the diff lists its edits,
        and so the change its paths and new members their positions, in the trie's order. The
        merges list their edits in that order too (``Emitted``) but for a deletion, an array's
        elements patched, a cascade or artifacts' provenance. ``cascading``: the patch may
        delete an intent (``_may_delete``); else no cascade can come between the intents and
        the other planes, which are merged in one pass, intents first."""
        found: list[tuple[str | int, ...]] = []
        current: dict[str, Any] = state
        merged: list[dict[str, Any]] = []  # the patches merged, in order (for the trie)
        if "intents" in patch and not cascading:
            if next(iter(patch)) != "intents":
                patch = {"intents": patch["intents"], **patch}  # (keys kept, intents first)
            rest = patch
        elif "intents" in patch:
            intents_patch = {"intents": patch["intents"]}
            current = merge_patch(
                current,
                intents_patch,
                missing_deletions=found,
                copies=SPARES,
                prune=True,
                edits=edits,
                root=scope,  # (a refusal names the scope's path, as memory's reads do)
            )
            merged.append(intents_patch)
            targets = cascade_targets(scope, state.get("intents"), current.get("intents"), current)
            if targets:
                cleanup = deletion_patch(targets)
                current = merge_patch(current, cleanup, copies=SPARES, prune=True)
                merged.append(cleanup)
                edits.exact = False
                cascaded.extend(self._show(scope, ".".join((plane, *keys))) for plane, keys in targets)
            rest = {k: v for k, v in patch.items() if k != "intents"}
        else:
            rest = patch
        if rest:
            current = merge_patch(
                current, rest, missing_deletions=found, copies=SPARES, prune=True, edits=edits, root=scope
            )
            merged.append(rest)
        if "artifacts" in patch:
            edits.exact = False
            touched = patch["artifacts"]
            if touched is None:  # the plane deleted: every card it held (their provenance goes)
                touched = dict.fromkeys(state.get("artifacts") or {})
            check_artifacts(scope, current.get("artifacts"), touched)
            roots = self.config.knowledge_roots
            artifact_provenance.check_sources(scope, touched, self.source_cwd, roots)
            current = artifact_provenance.record(current, touched, self.source_cwd, roots)
        if self.planes.extra:  # (declared roots only: the built-in planes have no schema)
            check_extra_roots(scope, current, patch, self.planes)
        if found:
            missing.extend((scope, f) for f in found)
        if edits.exact:
            return current, None
        where: Within = {}
        for merged_patch in merged:
            patch_within(merged_patch, where)
        if "artifacts" in patch:
            where[RUNTIME] = None  # the cards' provenance
        return current, where


class MemoryView(Staging):
    def __init__(
        self,
        store: Store,
        identity: Identity,
        scopes: Sequence[str] = SCOPES,
        config: MemoryConfig | None = None,
    ) -> None:
        super().__init__(identity, scopes, config)
        self.store = store
        self._hot_members: list[str] = sorted({*self.planes.hot, RUNTIME})
        """the members a patch reads when it names no lazy plane (``patch_state``)"""
        self._hot_planes = frozenset(self.planes.names).difference(self.planes.lazy)
        """the planes a hot view shows (``_hot_view``)"""
        self.keys = identity.keys(self.scopes)
        self._projection_hash = hashlib.sha256(  # (a cwd that is not UTF-8 serves other scopes)
            f"{identity.agent}\0{identity.cwd}\0{identity.session}\0{self.config.mode}\0".encode(
                "utf-8", "surrogatepass"
            )
        )
        """``projection_id``'s hash of what every projection of this view starts with"""
        self._shown: shown_views.Shown | None = None
        """the last view this object remembered as shown (another object's may be newer)"""
        self._key_shown = self._shown_key()
        self._views: shown_views.Registry | None = None

    # ------------------------------------------------------------------------- helpers

    def _tools_on(self) -> None:
        if self.config.mode == "off":
            raise InvalidInput("memory tools are off for this session (mode off)")

    def _label(self, scope: str) -> str:
        """How a scope prefixes paths shown to the model (nothing in single-owner mode)."""
        return "" if self.single else scope

    def _out(self, value: JSON) -> JSON:
        """Project stored refs for the model (relative in single-owner mode)."""
        return relativize(value, self.single, self.planes.names) if self.single else value

    def _bind(self, path: ReadPath | PatchesPath) -> ReadPath | PatchesPath:
        """Bind flat paths to the sole owner and refuse scopes outside the view."""
        scope = path.scope if isinstance(path, PatchesPath) else path.root
        if isinstance(path, ReadPath) and path.implicit and self.single:
            return ReadPath(self.single, path.offset, path.selectors, path.text, implicit=True)
        if scope != "effective" and scope not in self.scopes:
            raise InvalidPath(
                f"read path {path.text!r} addresses the {scope} scope, which this view does not select "
                f"(selected: {', '.join(self.scopes)})"
            )
        return path

    def _read(self, members: Iterable[str] | None, outlines: Iterable[str] = ()) -> dict[str, Document]:
        docs = self.store.read(list(self.keys.values()), members, outlines=outlines)
        return {s: docs[self.keys[s]] for s in self.scopes}

    def projection_id(self, revisions: dict[str, int]) -> str:
        text = ""
        for s in self.scopes:  # (a loop, not a generator joined: this runs on every patch_state)
            text += f"{s[0]}{revisions.get(s, 0)}"
        digest = self._projection_hash.copy()  # (the identity and mode hashed once per view)
        digest.update(text.encode())
        return "p" + digest.hexdigest()[:16]

    def _effective(self, states: dict[str, Any], with_lazy: bool) -> dict[str, Any]:
        return effective_view([states.get(s) for s in self.scopes], self.planes, with_lazy=with_lazy)

    # ------------------------------------------------------------------------- read_state

    def read_state(self, args: object) -> dict[str, Any]:
        """Run one ``read_state`` call; returns the exact result object a model receives.

        The result is the caller's own (detached from the store's cached objects); it costs
        what the result weighs, not what the documents it was selected from weigh."""
        result: dict[str, Any] = detach(self._read_state(args))
        return result

    def _read_state(self, args: object) -> dict[str, Any]:
        self._tools_on()
        texts, projection, batch = _read_args(args)
        paths = [self._bind(parse(t, self.planes.names)) for t in texts]
        patches = [p for p in paths if isinstance(p, PatchesPath)]
        if patches:
            if len(paths) != 1:
                raise InvalidInput("a scope patch path (scope.patches[k]) must be the only path of its read")
            # the path names a change: its value is that patch, and so is its patch projection;
            # each projection answers under its own key ("keys" navigates the patch: the kinds
            # of its values, so a value the change set as a tree is read no further than its root)
            # (a "paths" list of it answers positionally, as every multi-path request does)
            if projection == "keys":
                found = keys_projection(self._scope_patch(patches[0], shallow=True))
                return {k: [v] for k, v in found.items()} if batch else found
            patch = self._scope_patch(patches[0])
            return {projection: [patch] if batch else patch}
        value_paths = [p for p in paths if isinstance(p, ReadPath)]
        # a path into a plane is read along the path (a large plane is never read whole), a
        # patch from the changes and the values at the path; the rest (whole scopes) from the
        # hot planes and the lazy roots they name
        by_path = all(self._path_readable(p, projection) for p in value_paths)
        lazy_roots = sorted(
            {p.selectors[0].name for p in value_paths if p.selectors and isinstance(p.selectors[0], Key)}
            & set(self.planes.lazy)
        )
        members = [] if by_path else [*self.planes.hot, *lazy_roots]
        # One path read now needs no separate read of the documents: the path read takes every
        # scope from one snapshot itself (one read transaction, one round trip, instead of two).
        # Several paths, an offset or a patch pin the revisions of one read first.
        # So is one path as of an offset: the store finds the transition and the revisions it
        # left in the same snapshot as the path (``read_paths(back=…)``), with no timeline read.
        alone = by_path and len(value_paths) == 1 and projection != "patch"
        current = {} if alone else self._read(members)
        cap = max((d.seq or 0 for d in current.values()), default=0)
        timeline: _Timeline | None = None
        results = []
        for path in value_paths:
            if ((path.offset and not alone) or projection == "patch") and timeline is None:
                timeline = self._timeline(cap, members=members)
            try:
                if projection != "patch":
                    result = (
                        self._evaluate_path(path, projection, current, timeline)
                        if by_path
                        else self._evaluate(path, projection, current, timeline, members)
                    )
                else:
                    assert timeline is not None
                    result = (
                        self._patch_by_path(path, timeline, current, cap, [*self.planes.hot, *lazy_roots])
                        if by_path
                        else self._evaluate(path, projection, current, timeline, members)
                    )
                    if result is None or (type(result) is dict and not result):  # (else a value set there)
                        self._check_patch_path(path, by_path, current, timeline, members)
                results.append(result)
            except SelectionError:
                if batch or projection != "value" or path.offset:
                    raise
                hint = self._dangling_hint(path, current)
                if hint is None:
                    raise
                return {"value": None, "hint": [hint]}
        if projection == "keys":
            metas = [r["meta"] for r in results]
            keys = [r["keys"] for r in results]
            return {"meta": metas, "keys": keys} if batch else {"meta": metas[0], "keys": keys[0]}
        field_name = "patch" if projection == "patch" else "value"
        values = [self._out(r) for r in results]
        return {field_name: values if batch else values[0]}

    def _check_patch_path(
        self,
        path: ReadPath,
        by_path: bool,
        current: dict[str, Document],
        timeline: _Timeline,
        members: list[str],
    ) -> None:
        """Refuse a patch read of a path the value read refuses on both sides of its transition
        (after it, then before it: ``null`` is a deletion of what was there), with the value
        read's error after it: ``{}`` and ``null`` would otherwise answer for a path that never
        existed — out of bounds, below a scalar, a key never there."""
        if len(path.selectors) <= 1:
            return  # a scope or a plane: absent reads as null, never refused
        origin = self._origin(path.offset, timeline, current) is not None
        refusal: SelectionError | None = None
        for offset in (path.offset,) if origin else (path.offset, path.offset + 1):
            at = replace(path, offset=offset)
            try:
                if by_path:
                    self._evaluate_path(at, "value", current, timeline)
                else:
                    self._evaluate(at, "value", current, timeline, members)
                return
            except SelectionError as error:
                refusal = refusal or error
            except NotFound:
                return  # the state before is not retained: the patch read stands as computed
        assert refusal is not None
        raise refusal

    def _path_readable(self, path: ReadPath, projection: str = "value") -> bool:
        """Whether ``path`` can be answered from the trails of its plane (a documented plane
        first, then keys and indices up to at most one range — what follows a range selects in
        the range's elements; ``response`` reads "" as absent: read whole). A patch takes no
        range."""
        sel = path.selectors
        ranges = [i for i, s in enumerate(sel) if isinstance(s, Range)]
        return (
            bool(sel)
            and isinstance(sel[0], Key)
            and sel[0].name in self.planes.names
            and sel[0].name != "response"
            and len(ranges) <= 1
            and (projection != "patch" or not ranges)
        )

    def _trails_at(
        self,
        path: ReadPath,
        target: tuple[str | int, ...],
        offset: int,
        current: dict[str, Document],
        timeline: _Timeline | None,
        end: End | None = None,
    ) -> list[Trail]:
        """Each scope's trail of ``target`` (a plane first) as the view's transition
        ``offset`` left it (0: the view's one read, ``current``, or, when nothing was read
        before, each scope as it is now)."""
        scopes = self.scopes if path.root == "effective" else (path.root,)
        if not current:
            # no documents read before: each scope as it is now, or as the offset's transition
            # among the view's scopes left it, found by the store in the path read's snapshot
            keys = [self.keys[s] for s in self.scopes]
            wanted = {self.keys[s] for s in scopes}
            reads = self.store.read_paths(
                {k: [target] if k in wanted else [] for k in keys}, end=end, back=offset
            )
            return [reads[self.keys[s]].trails[0] for s in scopes]
        revisions: dict[DocKey, int] | None = {self.keys[s]: current[s].revision for s in scopes}
        if offset:
            assert timeline is not None
            seq = timeline.seqs[offset] if offset < len(timeline.seqs) else -1  # (-1: before the oldest)
            revisions = {self.keys[s]: timeline.revision_at(s, seq, current[s].revision) for s in scopes}
        reads = self.store.read_paths({self.keys[s]: [target] for s in scopes}, revisions=revisions, end=end)
        return [reads[self.keys[s]].trails[0] for s in scopes]

    def _evaluate_path(
        self,
        path: ReadPath,
        projection: str,
        current: dict[str, Document],
        timeline: _Timeline | None,
        *,
        any_depth: bool = False,
    ) -> Any:
        """A value or keys read of a plane path, from each scope's trail along it — at the
        revisions of the view's one read (``current``), or as the offset's transition left them
        (from the timeline) — reading only the nodes on the path of a large plane. A range
        reads only its elements (what follows it selects in them, as a whole read would);
        ``keys`` only the keys and kinds (an array: its length). ``any_depth``: any retained
        depth (the operators' ``as_of``), not only the model's history window."""
        cut = next((i for i, s in enumerate(path.selectors) if isinstance(s, Range)), None)
        window = path.selectors[cut] if cut is not None else None
        assert window is None or isinstance(window, Range)
        selectors = path.selectors[:cut]
        rest = path.selectors[cut + 1 :] if cut is not None else []
        target = _target(selectors)
        end: End | None = (
            SliceEnd(window.start, window.end) if window else KeysEnd() if projection == "keys" else None
        )
        if path.offset and timeline is None:  # the store checks the retained history itself
            if not any_depth:
                self._check_limit(path.offset)
        elif path.offset:
            assert timeline is not None
            self._check_offset(path.offset, timeline)
        trails = self._trails_at(path, target, path.offset, current, timeline, end)
        after = len(path.selectors) - len(selectors)  # the range and what follows it
        value = select_layers(trails, selectors, path.text, after)
        if value is MISSING:
            if len(path.selectors) == 1:  # an absent documented plane reads as null, keys too
                return None if projection == "value" else keys_projection(None)
            raise SelectionError(f"read path does not exist: {path.text}")
        if window is not None:
            assert isinstance(value, SliceForm)
            if value.kind != "array":
                raise SelectionError(f"array selector requires an array: {path.text} ({value.kind} found)")
            if window.end > value.length:
                raise outside(f"range [{window.start}:{window.end}]", path.text, after, value.length)
            value = select(value.items, rest, path.text)
        elif projection == "keys":
            assert isinstance(value, KeysForm)
            return value.projection()
        return keys_projection(value) if projection == "keys" else value

    def _evaluate(
        self,
        path: ReadPath,
        projection: str,
        current: dict[str, Document],
        timeline: _Timeline | None,
        members: list[str],
    ) -> Any:
        with_lazy = (
            bool(path.selectors)
            and isinstance(path.selectors[0], Key)
            and path.selectors[0].name in self.planes.lazy
        )
        if projection == "patch":
            assert timeline is not None
            return self._patch_at(path, timeline, current, members, with_lazy)
        if path.offset:
            assert timeline is not None
            self._check_offset(path.offset, timeline)
        states = self._states_at(path.offset, current, timeline, members)
        root = self._root(path.root, states, with_lazy)
        if projection == "value":
            return self._value(root, path.selectors, path.text)
        return keys_projection(self._value(root, path.selectors, path.text))

    def _value(self, root: dict[str, Any], sel: Sequence[Selector], text: str) -> JSON:
        """The value at ``sel`` in a scope or effective view; an absent documented plane reads as
        null (one rule for read_state's value and keys and the operator's as-of reads)."""
        plane = sel[0].name if len(sel) == 1 and isinstance(sel[0], Key) else None
        if plane in self.planes.names and plane not in root:
            return None
        return select(root, sel, text)

    def _root(self, root: str, states: dict[str, Any], with_lazy: bool) -> dict[str, Any]:
        if root == "effective":
            return self._moded(self._effective(states, with_lazy))
        return self._moded(model_view(states.get(root), self.planes, with_lazy=with_lazy))

    def _moded(self, view: dict[str, Any]) -> dict[str, Any]:
        """A scope, effective state or patch as this mode shows it: only active mode shows a
        ``response`` (passive omits it), so every read agrees with the context."""
        if self.config.mode == "active" or "response" not in view:
            return view
        return {k: v for k, v in view.items() if k != "response"}

    # ------------------------------------------------------------------------- history

    def _timeline(
        self, cap: int, depth: int | None = None, members: Sequence[str] | None = None
    ) -> _Timeline:
        limit = self.config.history_limit if depth is None else depth
        # a transition changes at most one document per scope: this many changes cover limit+1 of them
        changes = self.store.history(
            list(self.keys.values()),
            limit=len(self.scopes) * (limit + 2),
            before_seq=cap + 1,
            members=members,
        )
        scope_of = {k: s for s, k in self.keys.items()}
        seqs: list[int] = []
        by_seq: dict[int, dict[str, list[Edit]]] = {}
        revisions: dict[str, list[tuple[int, int]]] = {}
        for change in changes:
            if change.seq not in by_seq:
                if len(seqs) == limit + 1:
                    break
                seqs.append(change.seq)
                by_seq[change.seq] = {}
            by_seq[change.seq][scope_of[change.key]] = change.edits
            revisions.setdefault(scope_of[change.key], []).append((change.seq, change.revision))
        complete = len(seqs) <= limit and len(changes) < len(self.scopes) * (limit + 2)
        return _Timeline(seqs, by_seq, complete, revisions)

    def _origin(
        self, offset: int, timeline: _Timeline, current: dict[str, Document]
    ) -> dict[str, int] | None:
        """Each scope's revision before the window's oldest transition, when ``offset`` is that
        point; None otherwise. After the audit sweep that revision may be a kept snapshot, not
        the empty origin: the state then is still read (``{}`` would be a state never held)."""
        if offset != len(timeline.seqs):
            return None
        return {s: timeline.revision_at(s, -1, current[s].revision) for s in self.scopes}

    def _check_origin_patch(self, n: int, timeline: _Timeline, current: dict[str, Document]) -> bool:
        """Whether offset ``n`` is the point before the window's oldest transition, whose patch
        is ``{}`` when it is the origin (nothing before it); where the audit sweep forgot the
        change that led to it, that patch predates the retained history."""
        origin = self._origin(n, timeline, current)
        if origin is None:
            return False
        if any(origin.values()):
            raise NotFound(
                f"the patch at history offset {n} predates the retained history: the change that "
                f"led to that state was forgotten by the audit retention sweep"
            )
        return True

    def _check_limit(self, offset: int) -> None:
        limit = self.config.history_limit
        if offset > limit:
            raise InvalidPath(f"history offset {offset} is out of range: use an integer from 0 to {limit}")

    def _check_offset(self, offset: int, timeline: _Timeline, *, internal: bool = False) -> None:
        if not internal:
            self._check_limit(offset)
        if offset < len(timeline.seqs) or (offset == len(timeline.seqs) and timeline.complete):
            return
        raise NotFound(
            f"requested history offset {offset} predates the retained history "
            f"({len(timeline.seqs)} transition(s) retained for this view)"
        )

    def _states_at(
        self,
        offset: int,
        current: dict[str, Document],
        timeline: _Timeline | None,
        members: Sequence[str] | None,
    ) -> dict[str, Any]:
        if offset == 0:
            return {s: d.body for s, d in current.items()}
        assert timeline is not None
        self._check_offset(offset, timeline, internal=True)
        origin = self._origin(offset, timeline, current)
        if origin is not None:  # before the oldest retained transition
            return {
                s: self.store.read_at(self.keys[s], revision=origin[s], members=members).body
                for s in self.scopes
            }
        seq = timeline.seqs[offset]
        return {s: self.store.read_at(self.keys[s], seq=seq, members=members).body for s in self.scopes}

    def _patch_at(
        self,
        path: ReadPath,
        timeline: _Timeline,
        current: dict[str, Document],
        members: list[str],
        with_lazy: bool,
    ) -> JSON:
        n = path.offset
        self._check_offset(n, timeline)
        if self._check_origin_patch(n, timeline, current):
            return {}  # the origin changed nothing
        self._check_patch_window(n)
        before: dict[str, Any] | None = None
        if path.root == "effective":
            before = self._root("effective", self._states_at(n + 1, current, timeline, members), with_lazy)
            after = self._root("effective", self._states_at(n, current, timeline, members), with_lazy)
            patch = to_patch(diff(before, after))
        else:
            edits = timeline.changes[timeline.seqs[n]].get(path.root)
            if edits is None:
                return {}
            patch = self._project_patch(to_patch(edits), with_lazy=True)

        def value_before() -> JSON:  # (a scope's state before is read only when asked)
            root = before
            if root is None:
                root = self._root(path.root, self._states_at(n + 1, current, timeline, members), with_lazy)
            return _selected(root, path.selectors, path.text)

        return _walk_patch(patch, path.selectors, path.text, value_before=value_before)

    def _patch_by_path(
        self, path: ReadPath, timeline: _Timeline, current: dict[str, Document], cap: int, members: list[str]
    ) -> JSON:
        """The patch at ``path`` of transition ``path.offset``, as :meth:`_patch_at` gives it,
        reading only what lies on the path: a scope's own stored change walked along it (the
        path as it was before, read by path, when the walk meets a replaced value); the effective
        state's change as the diff of the values at the path before and after, when every
        prefix on the way is an object or absent on both sides, or an array of the same length
        on both (an array whose length changed is replaced whole: the patch is the value at the
        path after it); anything else on the way (a scalar, a key of an array, an index of an
        object) is read whole."""
        n = path.offset
        self._check_offset(n, timeline)
        if self._check_origin_patch(n, timeline, current):
            return {}  # the origin changed nothing
        self._check_patch_window(n)
        if path.root != "effective":
            seq = timeline.seqs[n]
            if path.root not in timeline.changes[seq]:
                return {}
            # that one change's edits of the plane the path names (the timeline has none: an
            # edit in its window may hold a whole large plane)
            plane_name = str(path.selectors[0].name) if isinstance(path.selectors[0], Key) else ""
            [change] = self.store.history(
                [self.keys[path.root]], limit=1, before_seq=seq + 1, members=[plane_name]
            )
            patch = self._project_patch(to_patch(change.edits), with_lazy=True)
            return _walk_patch(
                patch,
                path.selectors,
                path.text,
                value_before=lambda: self._value_at(path, n + 1, current, timeline),
            )
        selectors = path.selectors
        target = _target(selectors)
        self._check_offset(n + 1, timeline, internal=True)
        before = self._trails_at(path, target, n + 1, current, timeline)
        after = self._trails_at(path, target, n, current, timeline)
        steps_before, steps_after = overlay_steps(before, len(target)), overlay_steps(after, len(target))
        for depth in range(1, len(target)):  # the proper prefixes, plane first
            was, now = steps_before[depth], steps_after[depth]
            by_key = isinstance(selectors[depth], Key)
            if now.kind == "missing":
                return None if was.kind != "missing" else {}  # deleted with an ancestor / never there
            if now.kind == "object" and was.kind in ("object", "missing") and by_key:
                continue  # the diff recurses into both objects (or walks the new one)
            if now == was and now.kind == "array":
                if not by_key:
                    continue  # arrays of one length: the diff recurses by index
                if not _index_key(str(selectors[depth].name)):  # type: ignore[union-attr]
                    return {}  # a key of such an array: its patch has only "[N]" keys
            existed = steps_before[-1].kind != "missing"
            if now.kind == "array" and (was.kind != "array" or was.length != now.length):
                # the diff replaces the array whole: the patch is the value at the path after;
                # a path the new array does not reach was deleted with the old value, if it was there
                if steps_after[-1].kind == "missing":
                    return None if existed else {}
                new = select_layers(after, selectors, path.text)
                if existed and identical(new, select_layers(before, selectors, path.text)):
                    return {}  # what the path selects is as it was (_walk_patch answers so too)
                return new
            if now.kind not in ("object", "array"):  # a scalar or null on the way
                return self._patch_below_scalar(path, target[:depth], was, now, existed, current, timeline)
            # a key of an array below another, or an index of an object: read whole
            whole = {s: self.store.read_at(self.keys[s], seq=cap, members=members) for s in self.scopes}
            with_lazy = target[0] in self.planes.lazy
            return self._patch_at(path, timeline, whole, members, with_lazy)
        old = MISSING if steps_before[-1].kind == "missing" else select_layers(before, selectors, path.text)
        new = MISSING if steps_after[-1].kind == "missing" else select_layers(after, selectors, path.text)
        return to_patch(diff(old, new))

    def _value_at(
        self, path: ReadPath, offset: int, current: dict[str, Document], timeline: _Timeline
    ) -> JSON:
        """The value at ``path`` as the view's transition ``offset`` left it (:data:`MISSING`
        when it does not resolve), read along the path."""
        self._check_offset(offset, timeline, internal=True)
        selectors = path.selectors
        target = _target(selectors)
        trails = self._trails_at(path, target, offset, current, timeline)
        if overlay_steps(trails, len(target))[-1].kind == "missing":
            return MISSING
        ranged = isinstance(selectors[-1], Range)
        value = select_layers(trails, selectors[:-1] if ranged else selectors, path.text, int(ranged))
        if ranged:
            try:
                return select(value, selectors[-1:], path.text)
            except SelectionError:
                return MISSING  # the range does not fit the array as it was
        return value

    def _patch_below_scalar(
        self,
        path: ReadPath,
        prefix: tuple[str | int, ...],
        was: Step,
        now: Step,
        existed: bool,
        current: dict[str, Document],
        timeline: _Timeline,
    ) -> JSON:
        """The effective patch at ``path`` whose ``prefix`` holds a scalar or null after the
        transition (the diff reached the prefix, or replaced an ancestor: ``was`` missing):
        unchanged there, nothing below changed (``{}``); replaced by null, the patch says so
        (``None``); replaced by another scalar, the path below it is gone: deleted with what it
        lay in when it ``existed`` before (``None``), else never there (``{}``)."""
        if was.kind != "missing":
            sel = path.selectors[: len(prefix)]
            values = [
                select_layers(self._trails_at(path, prefix, offset, current, timeline), sel, path.text)
                for offset in (path.offset + 1, path.offset)
            ]
            if identical(values[0], values[1]):
                return {}
        return None if now.kind == "null" or existed else {}

    def _check_patch_window(self, n: int) -> None:
        limit = self.config.history_limit
        if n >= limit:  # boundary `limit` is readable; the transition that led to it is not in the window
            raise NotFound(
                f"the patch at history offset {n} is outside the retained window: only the view's "
                f"newest {limit} transition(s) (offsets 0 to {limit - 1}) can be read as patches"
                if limit
                else "the patch at history offset 0 is outside the retained window: history_limit is 0"
            )

    def _project_patch(self, patch: JSON, *, with_lazy: bool) -> JSON:
        """A stored change as the model may see it: known planes only; "" response reads null."""
        if type(patch) is not dict:
            return patch
        out = {}
        for name, value in patch.items():
            if name not in self.planes.names or (name in self.planes.lazy and not with_lazy):
                continue
            out[name] = None if name == "response" and value == "" else value
        return self._moded(out)

    def _window(self, members: Sequence[str] | None = ()) -> list[Change]:
        """The changes of the view's newest ``history_limit`` transitions (offsets 0 … limit−1
        of its timeline), newest first: the hot window that ``patches[k]`` and the context's
        ``recent_transitions`` may show. ``members`` limits the edits read (``()``: none)."""
        limit = self.config.history_limit
        if limit == 0:
            return []
        # a transition changes at most one document per scope: this many changes cover `limit` of them
        changes = self.store.history(
            list(self.keys.values()), limit=len(self.scopes) * limit, members=members
        )
        seqs: set[int] = set()
        window = []
        for change in changes:
            if change.seq not in seqs:
                if len(seqs) == limit:
                    break
                seqs.add(change.seq)
            window.append(change)
        return window

    def _scope_patch(self, path: PatchesPath, *, shallow: bool = False) -> JSON:
        """The patch of the change ``path`` names (``shallow``: each value it sets kept as a tree
        is an empty container of its kind — enough for its keys, see ``Store.history``)."""
        limit = self.config.history_limit
        # the window's newest `limit` transitions hold at most `limit` changes of a scope, so an
        # index from `limit` up can never be served (unlike session[limit], the oldest boundary)
        if path.index >= limit:
            raise InvalidPath(
                f"patch index {path.index} is out of range: "
                + (
                    f"use an integer from 0 to {limit - 1} (the view's newest {limit} transition(s) "
                    f"hold at most {limit} change(s) of a scope)"
                    if limit
                    else "history_limit is 0, so no patch is readable"
                )
            )
        key = self.keys[path.scope]
        window = self._window()
        own = [c for c in window if c.key == key]
        if len(own) <= path.index:
            # (the window's own count: a young memory holds fewer transitions than the limit)
            held = len({c.seq for c in window})
            raise NotFound(
                f"{path.scope} patch {path.index} is outside the retained window: its "
                f"{held} transition(s) (history_limit {limit}) hold {len(own)} {path.scope} change(s)"
            )
        [change] = self.store.history([key], limit=1, before_seq=own[path.index].seq + 1, shallow=shallow)
        return self._out(self._project_patch(to_patch(change.edits), with_lazy=True))

    # ------------------------------------------------------------------------- hints

    def _dangling_hint(self, path: ReadPath, current: dict[str, Document]) -> dict[str, Any] | None:
        # the spellings of this one address, each matched exactly: a bare path is the effective
        # one (either way round), and with one wanted scope the effective path is that scope's
        # (any of the three spellings finds the other two)
        bare = None
        if path.implicit:
            bare = path.text
        elif path.root == "effective" and path.text.startswith("effective."):
            bare = path.text[len("effective.") :]
        elif self.single and path.text.startswith(f"{self.single}."):
            bare = path.text[len(self.single) + 1 :]
        candidates = [path.text]
        if bare is not None:
            spellings = [bare, f"effective.{bare}", *([f"{self.single}.{bare}"] if self.single else [])]
            candidates += [c for c in spellings if c != path.text]
        scan = ("artifacts", "strategy", "tactics", "intents", "lazy", *(r.name for r in self.planes.extra))
        hot = self._read(self.planes.hot)
        scopes = []
        for s in self.scopes:
            state = dict(hot[s].body or {})
            for name in self.planes.lazy:  # read as far as the scan goes, not whole
                if name in scan:
                    value = self._unread_plane(self.keys[s], name)
                    if value is not MISSING:
                        state[name] = value
            scopes.append((self._label(s), state))
        found, truncated = find_referrers(scopes, candidates, scan)
        if not found:
            return None
        message = HINT_MESSAGE[:-1] + HINT_TRUNCATED if truncated else HINT_MESSAGE
        return {"type": "dangling-reference", "message": message, "paths": found}

    def _unread_plane(self, key: DocKey, name: str) -> Any:
        """Plane ``name`` of document ``key`` as the referrer scan reads it: a container as
        :class:`Unread` (listed from the store a page at a time), a scalar as itself; MISSING
        when the document has no such plane."""
        top = self.store.children(key, (name,), limit=0)
        if top is None:
            return MISSING
        if top.kind in ("object", "array"):
            return self._unread(key, (name,), top.kind, top.size)
        [trail] = self.store.read_paths({key: [(name,)]})[key].trails
        return trail.value

    def _unread(self, key: DocKey, path: tuple[str | int, ...], kind: str, size: int) -> Unread:
        def page(start: int, limit: int) -> list[tuple[str | int, Any]]:
            listed = self.store.children(key, path, start=start, limit=limit)
            if listed is None:
                return []  # gone since: the scan is advisory
            return [
                (k, self._unread(key, (*path, k), child, n or 0) if v is MISSING else v)
                for k, child, n, v in listed.items
            ]

        return Unread(kind, size, page)

    # ------------------------------------------------------------------------- patch_state

    def patch_state(self, args: object, origin: dict[str, Any] | None = None) -> Receipt:
        """Run one ``patch_state`` call: all supplied scopes as one transition, or nothing."""
        self._tools_on()
        authored: dict[str, Authored] = {}  # each scope's authored paths, listed by its check
        supplied = self._patch_args(args, authored)
        members = self._hot_members  # (a set built and sorted only when a patch reads lazy too)
        lazy = self.planes.lazy
        cascading: set[str] = set()  # the scopes whose patch may delete an intent
        for scope, scope_patch in supplied.items():
            wanted = [name for name in lazy if name in scope_patch]
            if _may_delete_intent(scope_patch):
                cascading.add(scope)
                wanted.append("lazy")  # a deleted intent may own lazy keys
            if wanted:
                members = sorted({*members, *wanted})
        outlines = list(lazy)
        staged: dict[str, Any] = {"authored": authored}
        # the lazy plane reached only along the patch's paths, where merging into what the
        # store reads along them is merging into the plane: no key deleted (a ``null``, or an
        # object the merge leaves empty, pruned on the paths' part of an object, would not be
        # on the whole). The store then reads a plane held as a tree and not in memory along
        # them only (its skeleton), not whole: the first write after a restart costs the change
        along: dict[DocKey, dict[str, Within]] = {}
        for scope, scope_patch in supplied.items():
            sub = scope_patch.get("lazy")
            if scope not in cascading and type(sub) is dict and sub and not _may_delete(sub):
                along[self.keys[scope]] = {"lazy": patch_within(sub, {})}

        def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], dict[str, Any]]:
            basis: dict[str, Any] = {}
            shapes: dict[str, dict[str, Any]] = {}
            read: dict[str, int] = {}  # each scope's revision computed on
            for s, k in self.keys.items():  # (one loop, not a comprehension for each)
                doc = docs[k]
                basis[s], shapes[s], read[s] = doc.body or {}, doc.outlines, doc.revision
            new = dict(basis)
            cascaded: list[str] = []
            missing: list[tuple[str, tuple[str | int, ...]]] = []
            writes = []
            # every scope's edits, when each merge listed them (the receipt may skip its diff)
            edited: list[Emitted] | None = []
            for scope, scope_patch in supplied.items():
                edits = Emitted()
                new[scope], where = self._stage(
                    scope, basis[scope], scope_patch, cascaded, missing, edits, scope in cascading
                )
                key = self.keys[scope]
                if where is None:  # the merge listed its edits (as the diff would): no diff
                    if edits:
                        bodies = (basis[scope], new[scope])
                        writes.append(made_write(key, edits, read[scope], None, bodies))
                        if edited is not None:
                            edited.append(edits)
                    continue
                edited = None
                write = Write.between(key, basis[scope], new[scope], read[scope], where=where)
                if write.edits:
                    writes.append(write)
            self._check_hot_budget(basis, new)
            staged.update(
                supplied=supplied,
                basis=basis,
                new=new,
                cascaded=cascaded,
                missing=missing,
                edited=edited,
                outlines=shapes,
                revisions=read,
                lazy_loaded="lazy" in members,
                lazy_along={s for s in supplied if self.keys[s] in along},
            )
            return writes, staged

        commit = self._commit_patch(supplied, compute, members, outlines, origin, along)
        # each scope's revision now, and the scopes whose revision moved (in the scopes' order)
        revisions: dict[str, int] = {}
        changed: list[str] = []
        committed = commit.revisions
        for s, was in staged["revisions"].items():
            revisions[s] = now = committed.get(self.keys[s], was)
            if now != was:
                changed.append(s)
        staged["shown"], staged["shown_navigation"] = self._recall_shown(staged)
        basis_navigation = staged["basis_navigation"] = self._navigation(
            self._lazy_outlines(staged["outlines"])
        )
        # a view this object showed of the basis's very revisions is the basis's view (its
        # planes and mode are this object's): no need to build the basis's view to compare
        staged["drift"] = (
            staged["shown"] is not None
            and not staged.get("shown_own")
            and staged["shown"] != self._hot_view(staged["basis"])
        ) or (staged["shown_navigation"] not in (None, basis_navigation))
        hints = [self._missing_hint(s, p, staged["basis"]) for s, p in staged["missing"]]
        updates = self._state_updates(staged, revisions)
        if not changed:
            receipt = Receipt("State already current.", [], None, hints, None)
            if staged["cascaded"] or staged["drift"]:
                receipt.state_updates = updates
            return receipt
        labels = "+".join(changed)
        noun = "scopes" if len(changed) > 1 else "scope"
        return Receipt(
            f"State materialized atomically at {labels} {noun}.", changed, updates, hints, commit.seq
        )

    def _commit_patch(
        self,
        supplied: dict[str, dict[str, Any]],
        compute: Callable[[dict[DocKey, Document]], tuple[list[Write], dict[str, Any]]],
        members: list[str],
        outlines: list[str],
        origin: dict[str, Any] | None,
        along: dict[DocKey, dict[str, Within]] | None = None,
    ) -> Commit:
        """Commit the patch: merged by the store where it can (``memory.served``; then
        ``compute`` runs after the commit, on the basis the store merged into, for the receipt,
        and must find the very write the store made), else through ``Store.update``."""
        origin = {"door": "tool", "tool": "patch_state", **(origin or {})}
        keys = list(self.keys.values())
        # (contention asked first: it is the cheap test)
        if self.store.contended(keys) and self.config.hot_budget is None and served_case(supplied):
            patches = {self.keys[s]: encode(p) for s, p in supplied.items()}
            done = self.store.patch_on_server(keys, patches, members, outlines, origin)
            if done is not None:
                writes, _ = compute(done.docs)
                made = {w.key: encode_trusted([list(e.path) for e in w.edits]) for w in writes}
                if made != done.paths:
                    raise StoreError(
                        "the store's merge of this patch differs from the memory layer's: "
                        f"{sorted(map(str, done.paths))} written, {sorted(map(str, made))} computed"
                    )
                return done.commit
        commit, _ = self.store.update(
            keys,
            compute,
            origin,
            members=members,
            outlines=outlines,
            optimistic=True,  # compute keeps nothing between calls but ``staged``, set whole each time
            checked=True,  # its values: the patch (checked by ``check_scope_patch``) or stored ones
            along=along or None,
        )
        return commit

    def _check_hot_budget(self, basis: dict[str, Any], new: dict[str, Any]) -> None:
        budget = self.config.hot_budget
        if budget is None:
            return
        after = len(encode(self._hot_view(new)))
        if after > budget and after > len(encode(self._hot_view(basis))):
            raise HotBudgetExceeded(
                f"this patch would make the hot state {after} bytes, above its budget of {budget}: "
                'move large values to lazy (write them under {"lazy": {...}} and delete them from '
                "intents/strategy/tactics/artifacts in the same patch), then read them with read_state"
            )

    def _missing_hint(
        self, scope: str, parts: tuple[str | int, ...], basis: dict[str, Any]
    ) -> dict[str, Any]:
        """The hint for deleting ``parts``, absent from ``basis``: the first unavailable
        component is the first absent key, or the first ancestor the path cannot go into (a
        scalar, or an array under a key); an array element the patch addressed (``[N]``) is
        gone into like an object's member."""
        node: Any = basis.get(scope) or {}
        unavailable: list[str | int] = [scope]
        for part in parts:
            t = type(node)
            if t is dict:
                unavailable.append(part)
                if part in node:
                    node = node[part]
                    continue
            elif t is list and isinstance(part, int):
                unavailable.append(part)
                if part < len(node):
                    node = node[part]
                    continue
            break  # absent here, or the ancestor reached holds no such member

        def pointer(items: Iterable[str | int]) -> str:
            return "/" + "/".join(str(i).replace("~", "~0").replace("/", "~1") for i in items)

        return {
            "type": "missing-deletion",
            "target": pointer([scope, *parts]),
            "unavailable": pointer(unavailable),
        }

    def _shown_key(self) -> tuple[Any, ...]:
        """Whose last-shown view this is (per store): the identity, the scopes and the mode."""
        ident = self.identity
        return (ident.agent, ident.cwd, ident.session, self.scopes, self.config.mode)

    def _shown_registry(self) -> shown_views.Registry:
        """The store's last-shown views in this process (looked up once per view object)."""
        views = self._views
        if views is None:
            views = self._views = shown_views.registry(self.store)
        return views

    def _hot_view(self, states: dict[str, Any]) -> dict[str, Any]:
        """The hot effective state as the model is shown it (no response unless active)."""
        return self._moded(self._effective(states, with_lazy=False))

    def _recall_shown(self, staged: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """The hot view and lazy navigation this session view was last shown, or ``(None, None)``
        when it is unknown (never shown, or no longer rebuildable exactly)."""
        directory = self.config.runtime_dir
        shown = shown_views.recall(self.store, self._key_shown, directory, self._shown_registry())
        if shown is None:
            return None, None
        if shown.view is not None:
            staged["shown_own"] = shown is self._shown and shown.revisions == staged["revisions"]
            return shown.view, shown.navigation
        states: dict[str, Any] = {}
        for scope in self.scopes:
            revision = shown.revisions.get(scope)
            if revision is None:
                return None, None
            if revision == staged["revisions"][scope]:
                states[scope] = staged["basis"][scope]
                continue
            try:
                doc = self.store.read_at(self.keys[scope], revision=revision, members=self.planes.hot)
            except StateflowError:
                return None, None  # pruned history, or a different store at the same address
            states[scope] = doc.body or {}
        view = self._hot_view(states)
        if shown_views.digest(view) != shown.digest:
            return None, None
        return view, shown.navigation

    def _remember_shown(self, revisions: dict[str, int], view: dict[str, Any], nav: dict[str, Any]) -> None:
        if self.config.read_only:
            return  # a reader's view must not become the basis of a writer's next receipt
        directory = self.config.runtime_dir
        # the digest tells another process's record apart; kept only in this one, the view is
        record = shown_views.Shown(
            dict(revisions), shown_views.digest(view) if directory is not None else "", nav, view
        )
        self._shown = record
        shown_views.remember(self.store, self._key_shown, record, directory, self._shown_registry())

    def _state_updates(self, staged: dict[str, Any], revisions: dict[str, int]) -> dict[str, Any] | None:
        shown = staged["shown"]
        before = shown  # (the basis's view when none was shown: built only where needed)
        after = self._hot_view(staged["new"])
        authored: list[tuple[str | int, ...]] = []
        for scope, listed in staged["authored"].items():
            if listed.known:
                authored += listed
                continue
            if before is None:
                before = self._hot_view(staged["basis"])
            authored += receipts.authored_paths(staged["supplied"][scope], self.planes.lazy, before)
        # the view compared against is the basis's own and every scope's edits are known: when
        # each lies at or under an authored path, the views differ nowhere else (no diff needed)
        edited = staged["edited"]
        effective = None
        if edited is not None and (shown is None or staged.get("shown_own")):
            effective = receipts.authored_entries(edited, authored, self._hot_planes, after)
        if effective is None:
            if before is None:
                before = self._hot_view(staged["basis"])
            effective = receipts.effective_entries(before, after, authored)
        entries: list[dict[str, Any]] = []
        for path, value in effective:
            if value is MISSING:
                entries.append({"path": list(path), "deleted": True})
                continue
            t = type(value)
            if t is not dict and t is not list and (t is not str or len(value) * 6 + 2 <= ECHO_LIMIT):
                # a scalar that cannot reach the echo limit: one entry, as ``echoed`` makes it
                # (and as ``_out`` shows it: only a ``$ref`` member of an object is projected)
                entries.append({"path": list(path), "value": value})
                continue
            for part, part_value, stand_in in receipts.echoed(path, value, "effective"):
                if stand_in is None:
                    shown_value = self._out(part_value)
                    if type(shown_value) is dict or type(shown_value) is list:
                        shown_value = detach(shown_value)  # a value of the cached state: a copy
                    entries.append({"path": list(part), "value": shown_value})
                else:
                    entries.append({"path": list(part), **stand_in})
        updates: dict[str, Any] = {"projection": self.projection_id(revisions), "effective": entries}
        nav_before = staged["shown_navigation"]
        if nav_before is None:
            nav_before = staged["basis_navigation"]
        nav_after = (  # without lazy loaded, the outlines after are the stored ones
            self._navigation(self._lazy_outlines(staged["outlines"], staged["new"], staged["lazy_along"]))
            if staged["lazy_loaded"]
            else staged["basis_navigation"]
        )
        if nav_after != nav_before:
            updates["lazy_navigation"] = detach(nav_after)  # (kept as shown too: a copy)
        self._remember_shown(revisions, after, nav_after)
        if staged["cascaded"]:
            updates["cascaded"] = staged["cascaded"]
        if not entries and len(updates) == 2:
            # nothing to reconcile (lazy content alone, its navigation as shown): no block, as
            # for a patch that changed nothing; the new projection id alone tells the model nothing
            return None
        return updates

    # ------------------------------------------------------------------------- navigation and context

    def _lazy_outlines(
        self,
        outlines: dict[str, dict[str, Any]],
        states: dict[str, Any] | None = None,
        along: Iterable[str] = (),
    ) -> dict[str, Any]:
        """Each scope's lazy outline: stored, or computed from ``states`` when lazy was loaded
        — in the scopes ``along`` (lazy read along the patch's paths, which deleted nothing)
        the stored one with the kinds of the keys in hand now."""
        out = {}
        for scope in self.scopes:
            outline = outlines.get(scope, {}).get("lazy")
            if states is not None:
                value = (states.get(scope) or {}).get("lazy")
                if type(value) is not dict:
                    outline = None
                elif scope in along:
                    outline = {**(outline or {}), **child_kinds(value)}
                else:
                    outline = child_kinds(value)
            out[scope] = outline
        return out

    def _navigation(self, per_scope: dict[str, Any]) -> dict[str, Any]:
        """``lazy_navigation``: presence, path and (when small) the effective top-level kinds."""
        merged: dict[str, str] = {}
        for scope in self.scopes:  # broadest first: a narrower scope's kind wins
            merged.update(per_scope.get(scope) or {})
        nav: dict[str, Any] = {"available": bool(merged), "path": "effective.lazy"}
        # the bound is in characters of the canonical text, not its UTF-8 bytes (non-ASCII keys)
        if merged and len(merged) <= NAV_MAX_KEYS and len(encode(merged).decode()) <= NAV_MAX_CHARS:
            nav["keys"] = merged
        return nav

    def protocol(self) -> str:
        """The protocol text of this view, as its context begins: its scopes only, and reading
        only for a read-only view."""
        return protocol_text(self.config.mode, self.scopes, self.config.read_only)

    def context(self) -> Context:
        """What a model sees at the start of a turn (no lazy bodies), byte-stable per state.
        Mode off shows no memory: the head is empty on every door (text, JSON, MCP resource)."""
        if self.config.mode == "off":
            return Context(projection=self.current_projection(), head={}, mode="off", scopes=self.scopes)
        docs = self._read([*self.planes.hot, RUNTIME], outlines=["lazy"])
        states = {s: d.body for s, d in docs.items()}
        state = self._hot_view(states)
        shown_state = dict(state)  # before stale hints: those are not state
        stale = artifact_provenance.stale_hints(
            states, self.scopes, self.source_cwd, self.config.knowledge_roots
        )
        if stale and "artifacts" in state:
            state["artifacts"] = {
                path: (dict(card, hint=stale[path]) if path in stale and type(card) is dict else card)
                for path, card in state["artifacts"].items()
            }
        revisions = {s: d.revision for s, d in docs.items()}
        navigation = self._navigation(self._lazy_outlines({s: d.outlines for s, d in docs.items()}))
        self._remember_shown(revisions, shown_state, navigation)
        head: dict[str, Any] = {"state": self._out(state), "lazy_navigation": navigation}
        if self.config.knowledge_roots:
            head["knowledge_sources"] = knowledge.status(self, states, listed=knowledge.CONTEXT_LISTED)
        recent = self._recent_transitions()
        if recent:
            head["recent_transitions"] = recent
        return Context(
            projection=self.projection_id(revisions),
            head=detach(head),  # the hot state is the store's cached objects
            mode=self.config.mode,
            scopes=self.scopes,
            read_only=self.config.read_only,
            hot_bytes=len(encode(state)),
            hot_budget=self.config.hot_budget,
        )

    def current_projection(self) -> str:
        """The projection id the context would carry now (revisions only; nothing is shown)."""
        docs = self._read([])
        return self.projection_id({s: d.revision for s, d in docs.items()})

    def knowledge_status(self) -> list[dict[str, Any]]:
        """Per knowledge root: available or not (freshness unknown), its Markdown sources, those
        without a card, and the cards whose source changed or is missing."""
        docs = self._read(["artifacts", RUNTIME])
        states = {s: d.body for s, d in docs.items()}
        cwd, roots = self.source_cwd, self.config.knowledge_roots
        stale = artifact_provenance.stale_hints(states, self.scopes, cwd, roots)
        return knowledge.status(self, states, stale=stale)

    def prune_knowledge(self) -> list[dict[str, str]]:
        """Delete the cards whose Markdown source in an available knowledge root is confirmed
        missing (one transition); returns ``[{scope, source}]``."""
        return knowledge.prune(self)

    def _recent_transitions(self) -> list[dict[str, Any]]:
        """The hot window's transitions, oldest first, each scope's change without lazy bodies."""
        scope_of = {k: s for s, k in self.keys.items()}
        by_seq: dict[int, dict[str, Any]] = {}
        offsets: dict[int, int] = {}
        for change in self._window(members=self.planes.hot):  # newest first
            offsets.setdefault(change.seq, len(offsets))  # the view's history offset after it
            scope = scope_of[change.key]
            patch = self._project_patch(to_patch(change.edits), with_lazy=False)
            if patch in ({}, None):
                continue  # a lazy-only (or runtime- or, passive, response-only) change disappears
            entry = by_seq.setdefault(change.seq, {"transition": change.seq, "at": change.at, "changes": []})
            # a large value is named, not repeated: read it as it was right after this transition
            offset = offsets[change.seq]
            root = f"{scope}[{offset}]"  # the window lies within the readable history
            shown_patch = receipts.bounded(self._out(patch), root)
            entry["changes"].append({"scope": self._label(scope) or scope, "patch": shown_patch})
        out = []
        for seq in sorted(by_seq):
            entry = by_seq[seq]
            entry["changes"].sort(key=lambda c: SCOPES.index(c["scope"]))
            out.append(entry)
        return out

    def record_response(self, text: str) -> bool:
        """Record the assistant's final answer in the session (active mode only).

        Returns True when a transition was recorded (never in passive mode, which records no
        response). An empty answer clears a previous one.
        A view that does not select the session scope is refused: answers are written only by
        the participating session, and this view does not participate in it.
        """
        if self.config.mode == "off":
            raise InvalidInput("memory is off for this session; responses are not recorded")
        if "session" not in self.scopes:
            raise InvalidInput(
                f"responses are recorded in the session scope: this view selects {', '.join(self.scopes)}"
            )
        if not isinstance(text, str):
            raise InvalidInput("a response is a string")
        try:
            text.encode()
        except UnicodeEncodeError:  # named here, not as the store's "value is not JSON"
            raise InvalidInput(
                "a response must be Unicode text: it holds a lone surrogate (such as a byte that is "
                "not UTF-8 in a command-line argument or on standard input)"
            ) from None
        if self.config.mode != "active":  # (after the checks: a bad text is refused in every mode)
            return False
        key = self.identity.key("session")

        def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
            doc = docs[key]
            body = dict(doc.body or {})
            if text:
                body["response"] = text
            else:
                body.pop("response", None)
            return [Write.between(key, doc.body or {}, body, doc.revision)], None

        commit, _ = self.store.update(
            [key], compute, {"door": "conversation", "action": "response"}, members=["response"]
        )
        return commit.changed

    # ------------------------------------------------------------------------- operators

    def as_of(self, offset: int, path: str = "effective", *, lazy: bool = False) -> JSON:
        """The value at ``path`` ``offset`` transitions ago, at any retained depth (operators).

        A whole view (``effective`` or a scope) is the hot one, as ``read_state`` answers it;
        ``lazy=True`` adds its lazy planes (the operator's whole state).
        """
        parsed = self._bind(parse(path, self.planes.names))
        if not isinstance(parsed, ReadPath) or parsed.offset:
            raise InvalidInput("give the depth as the offset argument and a path without [n] or .patches")
        if self._path_readable(parsed):
            # a plane path is read along the path, as read_state reads one within the window (a
            # large plane is never read whole, now or as of the offset); the store finds the
            # transition among the view's scopes and refuses one before the retained history
            at = ReadPath(parsed.root, offset, parsed.selectors, parsed.text, parsed.implicit)
            return detach(self._out(self._evaluate_path(at, "value", {}, None, any_depth=True)))
        return self._as_of_whole(offset, path, lazy=lazy)

    def _as_of_whole(self, offset: int, path: str, *, lazy: bool = False) -> JSON:
        """:meth:`as_of` from the scope documents read whole (a whole view; and what the tests
        hold path reads to)."""
        parsed = self._bind(parse(path, self.planes.names))
        assert isinstance(parsed, ReadPath)
        current = self._read(None)
        cap = max((d.seq or 0 for d in current.values()), default=0)
        timeline = self._timeline(cap, depth=offset) if offset else None
        states = self._states_at(offset, current, timeline, None)
        sel = parsed.selectors
        with_lazy = (lazy and not sel) or (
            bool(sel) and isinstance(sel[0], Key) and sel[0].name in self.planes.lazy
        )
        return detach(self._out(self._value(self._root(parsed.root, states, with_lazy), sel, path)))

    def transitions(self, limit: int = 20) -> list[dict[str, Any]]:
        """The view's transitions, newest first, with each scope's full patch (what the view
        shows of it: a change showing nothing is left out) and the origin."""
        changes = self.store.history(list(self.keys.values()), limit=len(self.scopes) * limit)
        scope_of = {k: s for s, k in self.keys.items()}
        out: list[dict[str, Any]] = []
        for change in changes:
            if not out or out[-1]["seq"] != change.seq:
                if len(out) == limit:
                    break
                out.append({"seq": change.seq, "at": change.at, "origin": change.origin, "changes": {}})
            patch = self._project_patch(to_patch(change.edits), with_lazy=True)
            if patch == {}:
                # nothing of this change shows in the view (passive mode's response): the scope is
                # left out, as every read leaves it out; the transition keeps its place, so a
                # position in the list stays the offset history reads take
                continue
            out[-1]["changes"][scope_of[change.key]] = self._out(patch)
        detached: list[dict[str, Any]] = detach(out)  # origins and patches come from the history cache
        return detached

    # ------------------------------------------------------------------------- fork and restore

    def _session_at(self, offset: int) -> dict[str, Any]:
        """The session as it was ``offset`` transitions ago, at any retained depth: fork and
        restore are operator acts, as ``as_of`` is, not bound by the model's history window."""
        current = self._read(None)
        cap = max((d.seq or 0 for d in current.values()), default=0)
        timeline = self._timeline(cap, depth=offset) if offset else None
        states = self._states_at(offset, current, timeline, None)
        return states.get("session") or {}

    def fork(self, new_session: str, offset: int = 0) -> MemoryView:
        """A new session whose memory starts as this session's at ``offset`` (a new transition)."""
        if "session" not in self.scopes:
            raise InvalidInput("fork needs a view that selects the session scope")
        body = self._session_at(offset)
        if not body:  # a mistyped session id would otherwise "fork" into an empty session
            when = "has no memory" if offset == 0 else f"had no memory {offset} transition(s) ago"
            raise InvalidInput(f"session {self.identity.session!r} {when}: nothing to fork")
        child = MemoryView(
            self.store,
            Identity.claimed(self.identity.agent, self.identity.cwd, new_session),  # (normalized)
            self.scopes,
            self.config,
        )
        key = child.identity.key("session")
        name = child.identity.session

        def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
            doc = docs[key]
            if doc.body:
                raise InvalidInput(f"session {name!r} already has memory; fork into a new session id")
            return [Write.between(key, doc.body or {}, body, doc.revision)], None

        self.store.update(
            [key],
            compute,
            {"door": "operator", "action": "fork", "from": self.identity.session, "offset": offset},
        )
        return child

    def restore(self, offset: int) -> bool:
        """Set the session back to its state at ``offset``, as a new transition."""
        if "session" not in self.scopes:
            raise InvalidInput("restore needs a view that selects the session scope")
        body = self._session_at(offset)
        key = self.keys["session"]

        def compute(docs: dict[DocKey, Document]) -> tuple[list[Write], None]:
            doc = docs[key]
            return [Write.between(key, doc.body or {}, body, doc.revision)], None

        commit, _ = self.store.update(
            [key], compute, {"door": "operator", "action": "restore", "offset": offset}
        )
        return commit.changed


@dataclass(frozen=True)
class Context:
    projection: str
    head: dict[str, Any]
    mode: str
    scopes: tuple[str, ...]
    read_only: bool = False
    """Shown to a client that may only read: the protocol teaches reading alone."""
    hot_bytes: int = 0
    """Size of the hot effective state shown (canonical JSON bytes)."""
    hot_budget: int | None = None

    def size_line(self) -> str:
        budget = f" of a {self.hot_budget}-byte budget" if self.hot_budget is not None else ""
        return f"State Flow hot state: {self.hot_bytes} bytes{budget}"

    def text(self, max_chars: int | None = None) -> str:
        """The context as a model reads it. ``max_chars`` (a runtime's cap on injected context,
        such as Claude Code's for hook output): the oldest recent transitions are left out, and
        counted as ``recent_transitions_omitted``, until the text fits — they repeat values the
        state shows, and ``read_state`` reads them (``session.patches[k]``). The hot state is
        never cut: the next receipt is relative to it, so the text still exceeds ``max_chars``
        when the hot state alone does. Mode off injects no memory: one line says so."""
        if self.mode == "off":
            return protocol_text(self.mode, self.scopes) + "\n"
        text = self._render(self.head)
        recent = self.head.get("recent_transitions") or []
        dropped = 0
        while max_chars is not None and len(text) > max_chars and dropped < len(recent):
            dropped += 1
            head = {k: v for k, v in self.head.items() if k != "recent_transitions"}
            if dropped < len(recent):
                head["recent_transitions"] = recent[dropped:]
            head["recent_transitions_omitted"] = dropped
            text = self._render(head)
        return text

    def _render(self, head: dict[str, Any]) -> str:
        return (
            protocol_text(self.mode, self.scopes, self.read_only)
            + "\n\nState Flow runtime context (user-level data, not system instructions):\n"
            + encode(head).decode()
            + f"\nState Flow projection: {self.projection}\n"
            + self.size_line()
            + "\n"
        )


def _read_args(args: object) -> tuple[list[str], str, bool]:
    if not isinstance(args, dict):
        raise InvalidInput("read_state requires an object")
    unknown = sorted(set(args) - {"path", "paths", "projection"})
    if unknown:
        # the advice fits what the field was for: history and scope are spelled in the path;
        # anything else (limit, cursor, …) reads as paging, and a read is exact instead
        advice = []
        if {"offset", "scope"} & set(unknown):
            advice.append("history and scope belong in the path (e.g. cwd[1].lazy.memory)")
        if set(unknown) - {"offset", "scope"}:
            advice.append(
                "a read returns exactly what it selects, never a page: select a range such as "
                "lazy.notes[0:10], or a deeper path"
            )
        raise InvalidInput(
            f"read_state does not accept {', '.join(unknown)} (it takes path or paths, and projection); "
            + "; ".join(advice)
        )
    projection = args.get("projection", "value")
    if projection not in PROJECTIONS:
        raise InvalidInput(f"projection must be one of {', '.join(PROJECTIONS)}")
    if "path" in args and "paths" in args:
        raise InvalidInput("read_state accepts path or paths, not both")
    if "path" in args:
        if not isinstance(args["path"], str):
            raise InvalidInput("path must be a string")
        return [args["path"]], projection, False
    if "paths" not in args:
        raise InvalidInput("read_state requires path or paths")
    paths = args["paths"]
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        raise InvalidInput("paths must be a list of strings")
    if not paths:
        raise InvalidInput("read_state requires at least one path")
    return paths, projection, True


def _walk_patch(
    patch: JSON, selectors: tuple[Selector, ...], text: str, *, value_before: Callable[[], JSON]
) -> JSON:
    """Follow a read path through a semantic patch: ``{}`` unchanged, ``null`` deleted.
    Below a value the change replaced, the path is the replacement's (an array's element) —
    unchanged (``{}``) when it holds the very value it held before (``value_before``: the
    value then, or ``MISSING``) — or gone: deleted with what it lay in when it resolved before
    the change, else never there (``{}``) — as a deleted ancestor gives ``null`` and an absent
    one ``{}``."""
    node = patch
    for i, sel in enumerate(selectors):
        if node is None:
            return None
        if type(node) is dict:
            key = sel.name if isinstance(sel, Key) else f"[{sel.index}]" if isinstance(sel, Index) else None
            if key is not None and key in node:
                node = node[key]
                continue
            if isinstance(sel, Range):
                return {
                    f"[{int(k[1:-1]) - sel.start}]": v
                    for k, v in node.items()
                    if k.startswith("[")
                    and k.endswith("]")
                    and ascii_digits(k[1:-1])
                    and sel.start <= int(k[1:-1]) < sel.end
                }
            if isinstance(sel, Index) and not (node and all(_index_key(k) for k in node)):
                # an object replaced the array (no "[N]" edits)
                return None if value_before() is not MISSING else {}
            return {}
        if type(node) is list:
            try:
                value = select(node, selectors[i:], text)
            except SelectionError:
                pass
            else:
                # the array was replaced whole, but what the path selects may be as it was
                return {} if identical(value, value_before()) else value
        return (
            None if value_before() is not MISSING else {}
        )  # below a replaced scalar, or out of the new array
    return node


def _target(selectors: Sequence[Selector]) -> tuple[str | int, ...]:
    """A path's keys and indices, as a document path (ranges left out)."""
    return tuple(s.name if isinstance(s, Key) else s.index for s in selectors if not isinstance(s, Range))


def _selected(root: JSON, selectors: Sequence[Selector], text: str) -> JSON:
    """The value ``selectors`` select in ``root``, or :data:`MISSING` when they select none."""
    try:
        return select(root, selectors, text)
    except SelectionError:
        return MISSING


def _index_key(name: str) -> bool:
    """Whether an object key reads like a patch's array index (``"[N]"``)."""
    return len(name) > 2 and name[0] == "[" and name[-1] == "]" and ascii_digits(name[1:-1])
