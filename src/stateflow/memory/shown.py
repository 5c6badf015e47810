"""The view a model was last shown, per session view: remembered in the process and, when a
directory is configured, on disk so that the next process compares against it too.

A context (or a receipt) shows the hot effective state of the scope documents at some revisions.
What is kept is exactly that: the revision of each scope document, a digest of the view, and
the ``lazy_navigation`` shown. A later process rebuilds the view from the store at those
revisions and uses it only when its digest matches — a pruned history, a store replaced at
the same address, or a damaged file all fall back to comparing against the patch's own basis
(the behaviour of a process that was never told what the model saw).

One small JSON file per store and session view, overwritten in place in a single write and
padded with spaces to its previous length (truncating or renaming over a file makes ext4 flush
it — milliseconds per receipt); a reader that meets a torn file cannot parse it, or finds a
digest that does not match, and falls back like one that finds none. Nothing in it is needed for correctness of the state itself, so
a lost or stale file costs only a less precise receipt.
"""

from __future__ import annotations

import hashlib
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import orjson

DIR_ENV: Final = "STATEFLOW_RUNTIME_DIR"
MAX_REMEMBERED: Final = 4096


@dataclass(frozen=True)
class Shown:
    """What one session view was last shown."""

    revisions: dict[str, int]
    """Scope → revision of its document when the view was shown."""
    digest: str
    """sha256 of the shown hot view's canonical JSON."""
    navigation: dict[str, Any]
    view: dict[str, Any] | None = None
    """The view itself, kept only in the process that showed it."""


def digest(view: dict[str, Any]) -> str:
    # the view is stored JSON already checked on its way in: sorted keys suffice, no re-check
    return hashlib.sha256(orjson.dumps(view, option=orjson.OPT_SORT_KEYS)).hexdigest()


def default_dir() -> str:
    """``$STATEFLOW_RUNTIME_DIR``, else ``$XDG_STATE_HOME/stateflow``, else ``~/.local/state/stateflow``."""
    explicit = os.environ.get(DIR_ENV)
    if explicit:
        return explicit
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "stateflow")


_lock = threading.Lock()
# per store object (weakly: a closed, collected store takes its views along, and a new store at
# the same address never inherits them), then per session view, least recently shown first
Registry = OrderedDict[Hashable, Shown]
_memory: weakref.WeakKeyDictionary[object, Registry] = weakref.WeakKeyDictionary()


def _file(directory: str, url: str, key: Hashable) -> Path:
    if url.startswith("sqlite:///") and not url.startswith("sqlite:////"):
        url = "sqlite:///" + os.path.abspath(url.removeprefix("sqlite:///"))  # a relative store path
    name = hashlib.sha256(f"{url}\0{key!r}".encode()).hexdigest()[:32]
    return Path(directory) / "shown" / f"{name}.json"


def registry(store: Any) -> Registry:
    """``store``'s last-shown views in this process (made on first use): a caller that keeps
    the store alive may keep this and hand it to :func:`remember` and :func:`recall`, which
    then skip the lookup by store (a weak reference made per call)."""
    with _lock:
        return _memory.setdefault(store, OrderedDict())


def remember(
    store: Any, key: Hashable, shown: Shown, directory: str | None, views: Registry | None = None
) -> None:
    with _lock:
        if views is None:
            views = _memory.setdefault(store, OrderedDict())
        views[key] = shown
        views.move_to_end(key)
        while len(views) > MAX_REMEMBERED:
            views.popitem(last=False)
    if directory is None:
        return
    path = _file(directory, store.url, key)
    record = {"revisions": shown.revisions, "digest": shown.digest, "navigation": shown.navigation}
    data = orjson.dumps(record)
    try:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        except FileNotFoundError:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            size = os.fstat(fd).st_size
            os.pwrite(fd, data + b" " * max(0, size - len(data)), 0)  # JSON allows trailing spaces
        finally:
            os.close(fd)
    except OSError:
        pass  # an unwritable directory costs only receipt precision in the next process


def recall(store: Any, key: Hashable, directory: str | None, views: Registry | None = None) -> Shown | None:
    """The last view shown for ``key``: from disk when a directory is configured (another
    process may have shown a newer one), else from this process."""
    with _lock:
        if views is None:
            views = _memory.get(store)
        local = None if views is None else views.get(key)
    if directory is None:
        return local
    try:
        record = orjson.loads(_file(directory, store.url, key).read_bytes())
        revisions = {str(s): int(r) for s, r in record["revisions"].items()}
        shown = Shown(revisions, str(record["digest"]), dict(record["navigation"]))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # orjson's error is a ValueError
        return local
    if local is not None and local.digest == shown.digest and local.revisions == shown.revisions:
        return local  # this process showed it: no need to rebuild the view
    return shown
