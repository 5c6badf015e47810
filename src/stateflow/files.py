"""Files and folders private to their owner: what stateflow creates for a store or a token."""

from __future__ import annotations

from pathlib import Path
from typing import Final

DIR_MODE: Final = 0o700


def make_private_dirs(directory: Path) -> None:
    """Create ``directory`` and each missing folder above it, every one 0700. (``Path.mkdir``
    with ``parents=True`` gives the folders above the umask's mode, so a private store would sit
    in a folder any user may list.) Folders that already exist are left as they are."""
    missing: list[Path] = []
    level = directory
    while not level.is_dir():
        missing.append(level)
        if level.parent == level:
            break
        level = level.parent
    for level in reversed(missing):
        try:
            level.mkdir(mode=DIR_MODE)
        except FileExistsError:
            if not level.is_dir():
                raise
