"""Packaged Agent Skills (``SKILL.md``: YAML front matter, then Markdown), generated from the
same text as the tool descriptions and the protocol, so the two cannot drift.

``render()`` returns every skill's file text; ``write(directory)`` writes them as
``<directory>/<name>/SKILL.md``. The copies shipped in this package are checked against
``render()`` by the tests; regenerate them with ``python -m stateflow.skills``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final

from stateflow.memory.protocol import _PLANES, _READ, _SCOPES, _WRITE
from stateflow.memory.receipts import ECHO_LIMIT
from stateflow.tools import PATCH_STATE_DESCRIPTION, READ_STATE_DESCRIPTION

HERE: Final = Path(__file__).resolve().parent


def _skill(name: str, description: str, body: str) -> str:
    # a JSON string is a valid YAML scalar: the description may hold ': ' safely
    return f"---\nname: {name}\ndescription: {json.dumps(description)}\n---\n\n{body.strip()}\n"


def render() -> dict[str, str]:
    """Skill name → the full text of its SKILL.md."""
    memory = f"""
# State Flow memory: reads, patches, ownership and recovery

Use this skill whenever the `read_state` and `patch_state` tools are available.

## read_state

{READ_STATE_DESCRIPTION}

## patch_state

{PATCH_STATE_DESCRIPTION}

## The protocol

{_PLANES}

{_SCOPES}

{_READ}

{_WRITE}

## Recovery

- A refused call changes nothing; its text is `error[code]: message`. Fix what the message names
  and retry (`path-not-found`: navigate with the `keys` projection; `invalid-patch`: read the
  current value, then patch it; `hot-budget`: move the large value under `lazy`).
- A read of a missing path may answer `{{"value": null, "hint": [...]}}`: those paths reference the
  missing one; repair them only if the task needs it.
- A receipt entry with `omitted_bytes` names a value too large to repeat (over {ECHO_LIMIT} bytes):
  read it with the `read_state` call it gives, only if you need it.
"""
    curation = f"""
# Curating State Flow memory

Use this skill at the end of a piece of work, or when the context grows large.

{_PLANES}

- Keep `intents` to the commitments that are still active; delete finished ones (their
  `{{"$ref"}}`-owned strategy, tactics and lazy keys are cleared with them).
- Keep `tactics` to what the next correct action needs; move supporting detail to `lazy` in the
  same `patch_state` (write it under `lazy`, delete it from `tactics`).
- Put durable decisions and constraints in `strategy`, in the narrowest scope that is true:
  session (this conversation), cwd (this directory), global (every project).
- Artifact cards route a future reader to a source: a `description` that says what is there and
  when to read it.
- Values over {ECHO_LIMIT} bytes are shown in the context but never repeated in receipts or recent
  transitions; prefer `lazy` for them.
"""
    return {
        "state-flow-memory": _skill(
            "state-flow-memory",
            "How to read and change State Flow memory with read_state and patch_state: paths, "
            "projections, semantic patches, intent ownership and recovery from refusals.",
            memory,
        ),
        "state-flow-curation": _skill(
            "state-flow-curation",
            "How to keep State Flow memory small and current: which plane and scope a fact "
            "belongs in, when to move detail to lazy, and how to retire finished intents.",
            curation,
        ),
    }


def write(directory: Path) -> list[Path]:
    out = []
    for name, text in render().items():
        path = directory / name / "SKILL.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        out.append(path)
    return out
