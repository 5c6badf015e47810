"""Files and folders private to their owner: what stateflow creates for a store or a token."""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from stateflow.errors import TargetUnwritable

DIR_MODE: Final = 0o700
FILE_MODE: Final = 0o600


def missing_folders(directory: Path) -> list[Path]:
    """``directory`` and the folders above it that do not exist yet, deepest first (empty: it
    exists)."""
    missing: list[Path] = []
    level = directory
    while not level.is_dir():
        missing.append(level)
        if level.parent == level:
            break
        level = level.parent
    return missing


def make_private_dirs(directory: Path) -> None:
    """Create ``directory`` and each missing folder above it, every one 0700. (``Path.mkdir``
    with ``parents=True`` gives the folders above the umask's mode, so a private store would sit
    in a folder any user may list.) Folders that already exist are left as they are."""
    for level in reversed(missing_folders(directory)):
        try:
            level.mkdir(mode=DIR_MODE)
        except FileExistsError:
            if not level.is_dir():
                raise


def private_beside(path: Path) -> tuple[int, Path]:
    """A new, empty file (0600) beside ``path`` that is to replace it, and its open descriptor.

    Its name is random and it is created exclusively, never through a link: at a name anyone
    could guess, another user who may write in the directory could plant a link there (or a
    file of their own), and the secret or dump written into it would land in their file."""
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    return fd, Path(name)


_KINDS: Final = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISSOCK, "a socket"),
)


def refuse_unreplaceable(path: Path) -> None:
    """Refuse (``target-unwritable``) a ``path`` that exists and is not a regular file.

    A finished file is renamed over its target, and a rename replaces whatever the name holds:
    a device node (as root, ``/dev/full`` itself), a named pipe its reader waits on, a symbolic
    link such as ``/dev/stdout`` would each become a regular file. Following a link instead
    would let whoever planted it choose the file written."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise unwritable(path, exc) from exc
    if stat.S_ISREG(mode):
        return
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    raise TargetUnwritable(
        f"cannot write {path}: it is {kind}, not a regular file, and writing it whole would replace it"
    )


def put_in_place(partial: Path, path: Path) -> None:
    """Rename the finished ``partial`` over ``path``, checked again just before (the name may
    have changed while the file was written)."""
    refuse_unreplaceable(path)
    os.replace(partial, path)


def replace_private(path: Path, chunks: Iterable[bytes]) -> None:
    """Write ``chunks`` to ``path`` (0600) whole or not at all: into a file beside it that
    replaces ``path`` once every chunk is written and on disk. A refusal while the chunks are
    made leaves no file, and an existing ``path`` as it was (an ``OSError`` passes through);
    a ``path`` that is not a regular file is refused (:func:`refuse_unreplaceable`)."""
    refuse_unreplaceable(path)
    fd, partial = private_beside(path)
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        put_in_place(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def write_private(path: Path, chunks: Iterable[bytes]) -> None:
    """:func:`replace_private` for a command's output file (a dump): a file that cannot be
    written is ``target-unwritable`` naming it and why (the store is not at fault)."""
    try:
        replace_private(path, chunks)
    except OSError as exc:
        raise unwritable(path, exc) from exc


def unwritable(path: Path, exc: OSError) -> TargetUnwritable:
    """The refusal of an output file the operating system would not let us write."""
    return TargetUnwritable(f"cannot write {path}: {exc.strerror or exc}")
