"""``python -m stateflow.skills [DIRECTORY]``: write the skills (default: into this package)."""

import sys
from pathlib import Path

from stateflow.skills import HERE, write

for written in write(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE):
    print(written)
