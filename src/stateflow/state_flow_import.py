"""Import an existing State Flow store (its canonical per-scope files) into agent memory.

The whole tree is read and checked before anything is written: a layout this importer does not
know (a ``state.json``, checkpoint envelopes, another ``meta.json`` version, a boundary count that
does not match the patch lines, a scope with only some of its files, a live writer's lock) is
refused and nothing is written. Each scope then becomes the matching memory scope of one agent:
its checkpoint first, then every patch of its tail, in order, each its own transition — so the
tail stays history (``history list``, as-of reads). Old plane names are renamed (``contract`` →
``strategy``, ``working`` → ``tactics``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from stateflow.doc.canonical import decode
from stateflow.doc.merge import merge_patch
from stateflow.doc.select import MISSING
from stateflow.errors import Conflict, InvalidInput, InvalidJSON, StateflowError
from stateflow.store import Store


class UnsupportedFormat(InvalidInput):
    code = "unsupported-format"


LOCK: Final = ".state-flow-publication.lock"
FILES: Final = ("checkpoint.json", "patches.jsonl", "meta.json")
RENAMED: Final = {"contract": "strategy", "working": "tactics"}
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


def cwd_key(cwd: str) -> str:
    """State Flow's directory key of a working directory."""
    stripped = cwd[1:] if cwd[:1] in ("/", "\\") else cwd
    return "--" + re.sub(r"[/\\:]", "-", stripped) + "--"


def read_tree(root: Path) -> list[ScopeTree]:
    """Every scope of the State Flow store at ``root``, checked; reads only."""
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
    state: Any = tree.checkpoint
    for n, patch in enumerate(patches, 1):  # every patch must replay before anything is written
        try:
            state = merge_patch(state, patch)
        except StateflowError as exc:  # (e.g. a literal "[N]" key, which memory reserves for indexes)
            raise type(exc)(f"{folder / 'patches.jsonl'}, patch {n}: {exc.message}") from exc
        if state is MISSING:
            state = {}
    return tree


def _renamed(value: dict[str, Any], folder: Path) -> dict[str, Any]:
    out = dict(value)
    for old, new in RENAMED.items():
        if old in out:
            if new in out:
                raise UnsupportedFormat(f"{folder}: both {old!r} and its new name {new!r} are present")
            out[new] = out.pop(old)
    return out


def import_tree(store: Store, scopes: list[ScopeTree], agent: str) -> list[dict[str, Any]]:
    """Write ``scopes`` into ``agent``'s memory; refuses (before writing) when any target scope
    already holds memory."""
    from stateflow.memory import Identity, MemoryConfig, MemoryView
    from stateflow.memory.scopes import parse_scopes

    views = []
    for tree in scopes:
        identity = Identity.of(agent, tree.cwd or "/", tree.session or "default")
        view = MemoryView(store, identity, parse_scopes(tree.scope), MemoryConfig(mode="active"))
        if store.get(identity.key(tree.scope)).exists:
            where = tree.cwd if tree.scope == "cwd" else tree.session if tree.scope == "session" else "global"
            raise Conflict(f"agent {agent!r} already has {tree.scope} memory ({where}); nothing was imported")
        views.append(view)
    for tree, view in zip(scopes, views, strict=True):
        origin = {"door": "import", "source": "state-flow", "from": str(tree.directory)}
        steps = [tree.checkpoint, *tree.patches] if tree.checkpoint else list(tree.patches)
        written = 0
        for step in steps:
            try:
                receipt = view.patch_state({tree.scope: step}, origin)
            except StateflowError as exc:
                raise type(exc)(f"{tree.directory}: {exc.message}") from exc
            written += receipt.seq is not None
        tree.result = {
            "scope": tree.scope,
            "cwd": tree.cwd,
            "session": tree.session,
            "patches": len(tree.patches),
            "transitions": written,
        }
    return [tree.result for tree in scopes]
