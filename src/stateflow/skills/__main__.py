"""``python -m stateflow.skills [DIRECTORY]``: write the skills (default: into this package).

Parsed with argparse so that ``--help`` (or any other option) prints usage instead of being
taken for a directory name and written into."""

import argparse
from pathlib import Path

from stateflow.skills import HERE, write

parser = argparse.ArgumentParser(
    prog="python3 -m stateflow.skills",
    description="Write the packaged Agent Skills as DIRECTORY/<name>/SKILL.md "
    "(state-flow-memory, state-flow-curation) and print each file written.",
    epilog="Example: python3 -m stateflow.skills .claude/skills",
)
parser.add_argument(
    "directory",
    nargs="?",
    type=Path,
    default=HERE,
    metavar="DIRECTORY",
    help="where to write them, created if missing (default: the installed package's own copies)",
)
directory = parser.parse_args().directory
try:
    for written in write(directory):
        print(written)
except OSError as exc:  # a file in the way, no permission, a read-only file system
    parser.exit(1, f"{parser.prog}: error: cannot write {exc.filename or directory}: {exc.strerror or exc}\n")
