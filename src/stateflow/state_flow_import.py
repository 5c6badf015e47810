"""Import an existing State Flow store (its canonical per-scope files) into agent memory.

All or nothing, in three steps:

1. :func:`read_tree` reads the whole tree and checks its layout: one this importer does not
   know (a ``state.json``, checkpoint envelopes, another ``meta.json`` version, a boundary count
   that does not match the patch lines, a scope with only some of its files, a live writer's
   lock) is refused. Old plane names are renamed (``contract`` → ``strategy``, ``working`` →
   ``tactics``), and so are the references that name them (``{"$ref": "session.working.x"}``,
   ``$session.working.x`` in text), so that intents keep owning what they owned.
2. :func:`check_tree` replays every scope's history in memory through memory's own rules (the
   staging ``patch_state`` uses, :meth:`~stateflow.memory.view.Staging.dry_run`, without the
   ownership cascade: each patch is the net patch State Flow accepted) and refuses two scopes
   that are one memory scope. Nothing has been opened yet.
3. :func:`import_tree` writes each scope's checkpoint, then every patch of its tail in order,
   each its own transition holding the state the replay computed — so the tail stays history
   (``history list``, as-of reads). A write cannot then be refused by memory's rules; a run cut
   short (a lost connection, a killed process) is finished by running the same import again.

A State Flow ``response`` (the latest answer, written by the runtime) is kept as memory's
``response`` of the same scope; ``""`` clears it, as an empty answer does. A session's relative
artifact source is made absolute in the session's working directory.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from stateflow.doc.canonical import JSON, decode, identical
from stateflow.errors import Conflict, InvalidInput, InvalidJSON, PatchError, StateflowError
from stateflow.store import DocKey, Document, Store, Write

if TYPE_CHECKING:
    from stateflow.memory.view import Staging


class UnsupportedFormat(InvalidInput):
    code = "unsupported-format"


LOCK: Final = ".state-flow-publication.lock"
FILES: Final = ("checkpoint.json", "patches.jsonl", "meta.json")
RENAMED: Final = {"contract": "strategy", "working": "tactics"}
_ROOT: Final = r"(?:(?:effective|global|cwd|session)(?:\[\d+\])?\.)?"
_OLD_PLANE: Final = "(" + "|".join(RENAMED) + ")"
# a read path whose plane is an old one: a whole ``$ref`` value, or a ``$`` mention in text (the
# boundaries State Flow's own reference scan uses)
_REF_PLANE: Final = re.compile(rf"\A({_ROOT}){_OLD_PLANE}(?=[.\[]|\Z)", re.ASCII)
_TEXT_PLANE: Final = re.compile(
    rf"(?<![A-Za-z0-9_$.\[\]:-])\$({_ROOT}){_OLD_PLANE}(?![A-Za-z0-9_$-])", re.ASCII
)
_SESSION_KEY: Final = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?\Z")


@dataclass
class ScopeTree:
    scope: str
    directory: Path
    checkpoint: dict[str, Any]
    patches: list[dict[str, Any]]
    revision: int
    cwd: str | None = None
    session: str | None = None
    result: dict[str, Any] = field(default_factory=dict)
    key: DocKey | None = None
    """The memory document it becomes (set by :func:`check_tree`)."""
    states: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    """Per step (0: the checkpoint, N: patch N), the scope's memory right after it (the replay
    of :func:`check_tree`)."""


def cwd_key(cwd: str) -> str:
    """State Flow's directory key of a working directory."""
    stripped = cwd[1:] if cwd[:1] in ("/", "\\") else cwd
    return "--" + re.sub(r"[/\\:]", "-", stripped) + "--"


def read_tree(root: Path) -> list[ScopeTree]:
    """Every scope of the State Flow store at ``root``, checked; reads only."""
    root = root.resolve()  # (a scope's origin names its directory, the same from any spelling)
    if not root.is_dir():
        raise UnsupportedFormat(f"{root} is not a State Flow store directory")
    if (root / LOCK).exists():
        raise UnsupportedFormat(f"{root / LOCK} exists: a State Flow writer is live; stop it and retry")
    for found in [root / "state.json", *root.glob("*/state.json"), *root.glob("*/*/state.json")]:
        if found.exists():
            raise UnsupportedFormat(f"{found}: the older state.json layout is not supported")
    scopes: list[ScopeTree] = []
    top = _scope(root, "global")
    if top is not None:
        scopes.append(top)
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        cwd_scope = _scope(folder, "cwd")
        sessions = [p for p in sorted(folder.iterdir()) if p.is_dir() and _has_files(p)]
        if cwd_scope is None and not sessions:
            continue  # not a scope directory (nothing of State Flow's in it)
        if not (folder.name.startswith("--") and folder.name.endswith("--")):
            raise UnsupportedFormat(f"{folder}: scope files in a directory that is not a cwd key (--…--)")
        if cwd_scope is None:
            raise UnsupportedFormat(f"{folder}: sessions without their cwd scope (no meta.json owner)")
        if cwd_key(cwd_scope.cwd or "") != folder.name:
            raise UnsupportedFormat(
                f"{folder}: meta.json owner.cwd {cwd_scope.cwd!r} does not match the directory key"
            )
        scopes.append(cwd_scope)
        for session_dir in sessions:
            if not _SESSION_KEY.match(session_dir.name):
                raise UnsupportedFormat(f"{session_dir}: {session_dir.name!r} is not a session key")
            session = _scope(session_dir, "session")
            assert session is not None
            session.cwd, session.session = cwd_scope.cwd, session_dir.name
            scopes.append(session)
    if not scopes:
        raise UnsupportedFormat(
            f"{root} holds no State Flow scope (checkpoint.json, patches.jsonl, meta.json)"
        )
    return scopes


def _has_files(folder: Path) -> bool:
    return any((folder / name).exists() for name in FILES)


def _json(path: Path, what: str) -> Any:
    try:
        return decode(path.read_bytes())
    except InvalidJSON as exc:
        raise UnsupportedFormat(f"{path}: {what} is not JSON ({exc})") from None


def _scope(folder: Path, scope: str) -> ScopeTree | None:
    present = [name for name in FILES if (folder / name).exists()]
    if not present:
        return None
    if len(present) != len(FILES):
        missing = sorted(set(FILES) - set(present))
        raise UnsupportedFormat(f"{folder}: {', '.join(missing)} missing next to {', '.join(present)}")
    checkpoint = _json(folder / "checkpoint.json", "the checkpoint")
    if not isinstance(checkpoint, dict):
        raise UnsupportedFormat(f"{folder / 'checkpoint.json'}: a checkpoint must be a JSON object")
    if set(checkpoint) == {"through", "state"}:
        raise UnsupportedFormat(f"{folder / 'checkpoint.json'}: checkpoint envelopes are not supported")
    patches = []
    for number, line in enumerate((folder / "patches.jsonl").read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        try:
            patch = decode(line)
        except InvalidJSON as exc:
            raise UnsupportedFormat(f"{folder / 'patches.jsonl'} line {number} is not JSON ({exc})") from None
        if not isinstance(patch, dict):
            raise UnsupportedFormat(f"{folder / 'patches.jsonl'} line {number} is not a JSON object")
        patches.append(_renamed(patch, folder))
    meta = _json(folder / "meta.json", "the metadata")
    if not isinstance(meta, dict) or meta.get("version") != 2:
        version = meta.get("version") if isinstance(meta, dict) else None
        raise UnsupportedFormat(f"{folder / 'meta.json'}: version {version!r} is not supported (2 is)")
    temporal = meta.get("temporal")
    if not isinstance(temporal, dict) or not isinstance(temporal.get("patches"), list):
        raise UnsupportedFormat(f"{folder / 'meta.json'}: no temporal.patches list")
    if len(temporal["patches"]) != len(patches):
        raise UnsupportedFormat(
            f"{folder}: meta.json names {len(temporal['patches'])} patch boundaries, patches.jsonl "
            f"holds {len(patches)} patches"
        )
    revision = temporal.get("revision")
    if type(revision) is not int or revision < 0:
        raise UnsupportedFormat(f"{folder / 'meta.json'}: temporal.revision must be an integer ≥ 0")
    tree = ScopeTree(scope, folder, _renamed(checkpoint, folder), patches, revision)
    if scope == "cwd":
        owner = meta.get("owner")
        cwd = owner.get("cwd") if isinstance(owner, dict) else None
        if not isinstance(cwd, str) or not cwd.startswith("/"):
            raise UnsupportedFormat(f"{folder / 'meta.json'}: a cwd scope needs owner.cwd (an absolute path)")
        tree.cwd = cwd
    return tree


def _renamed(value: dict[str, Any], folder: Path) -> dict[str, Any]:
    out = {k: _renamed_refs(v) for k, v in value.items()}
    for old, new in RENAMED.items():
        if old in out:
            if new in out:
                raise UnsupportedFormat(f"{folder}: both {old!r} and its new name {new!r} are present")
            out[new] = out.pop(old)
    return out


def _renamed_refs(value: JSON) -> JSON:
    """``value`` with the old plane names renamed in the references it holds: a structured
    ``$ref`` (what an intent's names, it owns) and ``$path`` mentions in text."""
    if type(value) is dict:
        return {
            k: _REF_PLANE.sub(_new_plane, v) if k == "$ref" and type(v) is str else _renamed_refs(v)
            for k, v in value.items()
        }
    if type(value) is list:
        return [_renamed_refs(v) for v in value]
    if type(value) is str and "$" in value:
        return _TEXT_PLANE.sub(lambda m: "$" + _new_plane(m), value)
    return value


def _new_plane(match: re.Match[str]) -> str:
    return match[1] + RENAMED[match[2]]


def check_tree(scopes: list[ScopeTree], agent: str, knowledge_roots: Sequence[str] = ()) -> None:
    """Replay every scope's history through memory's own rules, in memory (no store is read or
    written): a step memory would refuse is refused here, naming its file and the patch's number;
    two scopes that become one memory scope (one directory spelt two ways) are refused with
    ``conflict``. Each scope's memory after each step is kept for :func:`import_tree`.
    ``knowledge_roots``: where artifact sources may live besides a scope's working directory."""
    from stateflow.memory import Identity, MemoryConfig
    from stateflow.memory.view import Staging

    targets: dict[DocKey, ScopeTree] = {}
    for tree in scopes:
        identity = Identity.of(agent, tree.cwd or "/", tree.session or "default")
        tree.key = identity.key(tree.scope)
        other = targets.setdefault(tree.key, tree)
        if other is not tree:
            raise Conflict(
                f"{other.directory} and {tree.directory} both become the {_where(tree, identity.cwd)} "
                f"memory of agent {agent!r}; nothing was imported"
            )
        staging = Staging(
            identity, (tree.scope,), MemoryConfig(mode="active", knowledge_roots=tuple(knowledge_roots))
        )
        state: dict[str, Any] = {}
        steps = [(0, tree.checkpoint)] if tree.checkpoint else []
        tree.states = []
        for n, step in [*steps, *enumerate(tree.patches, 1)]:
            try:
                if tree.scope == "session":
                    step = _anchored_artifacts(step, identity.cwd)
                state = _replayed(staging, tree.scope, state, step)
            except StateflowError as exc:
                at = (
                    tree.directory / "checkpoint.json"
                    if n == 0
                    else f"{tree.directory / 'patches.jsonl'}, patch {n}"
                )
                raise type(exc)(f"{at}: {exc.message}") from exc
            tree.states.append((n, state))


def _where(tree: ScopeTree, cwd: str) -> str:
    return {"global": "global", "cwd": f"cwd ({cwd})", "session": f"session ({tree.session})"}[tree.scope]


def _anchored_artifacts(step: dict[str, Any], cwd: str) -> dict[str, Any]:
    """A session step with its relative artifact sources made absolute in its working directory:
    State Flow resolves them against the one directory a session belongs to, while memory's
    session scope may be seen from another (and so takes absolute sources only)."""
    from stateflow.memory.confine import anchored

    cards = step.get("artifacts")
    if type(cards) is not dict or all(anchored("session", source) for source in cards):
        return step
    out: dict[str, Any] = {}
    for source, card in cards.items():
        absolute = source if anchored("session", source) else os.path.normpath(os.path.join(cwd, source))
        if absolute in out:
            raise PatchError(f"artifact sources {source!r} and {absolute!r} name one file in {cwd}")
        out[absolute] = card
    return {**step, "artifacts": out}


def _replayed(staging: Staging, scope: str, state: dict[str, Any], step: dict[str, Any]) -> dict[str, Any]:
    """The scope's memory after one accepted State Flow step: its planes as ``patch_state``
    stages them, but as the net patch it is (State Flow recorded what its cascade deleted; a
    second cascade would delete what the source still holds), and its ``response`` as the
    runtime records one (``patch_state`` refuses that plane)."""
    rest = {k: v for k, v in step.items() if k != "response"}
    if rest:
        state = staging.dry_run({scope: state}, {scope: rest}, cascade=False)[scope]
    if "response" in step:
        response = step["response"]
        if response is not None and type(response) is not str:
            raise PatchError("response must be a string (the latest answer) or null")
        state = {k: v for k, v in state.items() if k != "response"}
        if response:  # "" (or null) clears it: an empty answer is an absent one
            state["response"] = response
    return state


def import_tree(
    store: Store, scopes: list[ScopeTree], agent: str, knowledge_roots: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """Write ``scopes`` into ``agent``'s memory (checked with :func:`check_tree` first, when not
    yet). A target scope that already holds memory is refused with ``conflict`` before anything
    is written — unless what it holds is exactly this import of this source up to one of its
    steps (a run cut short): the import then continues after that step."""
    if any(tree.key is None for tree in scopes):
        check_tree(scopes, agent, knowledge_roots)
    keys = [tree.key for tree in scopes if tree.key is not None]
    docs = store.read(keys)
    starts = [_start(store, tree, docs[key], agent) for tree, key in zip(scopes, keys, strict=True)]
    for tree, key, start in zip(scopes, keys, starts, strict=True):
        doc = docs[key]
        body, revision, written = doc.body, doc.revision, 0
        for n, state in tree.states[start:]:
            write = Write.between(key, body, state, revision)
            if not write.edits:
                continue  # a step that changes nothing (e.g. a patch deleting what was absent)
            try:
                commit = store.commit([write], _origin(tree, n))
            except StateflowError as exc:
                raise type(exc)(f"{tree.directory}: {exc.message}") from exc
            body, revision, written = state, commit.revisions[key], written + 1
        tree.result = {
            "scope": tree.scope,
            "cwd": tree.cwd,
            "session": tree.session,
            "patches": len(tree.patches),
            "transitions": written,
        }
    return [tree.result for tree in scopes]


def _origin(tree: ScopeTree, step: object) -> dict[str, Any]:
    return {"door": "import", "source": "state-flow", "from": str(tree.directory), "step": step}


def _start(store: Store, tree: ScopeTree, doc: Document, agent: str) -> int:
    """Where ``tree``'s import starts: 0 for a scope without memory; after the step its memory
    is exactly, when its last transition is that step of this import; else ``conflict``."""
    if not doc.exists:
        return 0
    last = store.history([doc.key], limit=1)
    origin = last[0].origin if last else {}
    if origin == _origin(tree, origin.get("step")):
        for i, (n, state) in enumerate(tree.states):
            if n == origin["step"] and identical(doc.body, state):
                return i + 1
    raise Conflict(
        f"agent {agent!r} already has {_where(tree, tree.cwd or '/')} memory; nothing was imported"
    )
