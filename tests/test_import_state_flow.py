"""`stateflow import-state-flow`: a State Flow store's canonical per-scope files become agent
memory, patch order kept as history; unknown layouts are refused with nothing written."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from stateflow.state_flow_import import cwd_key


def canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":")) + "\n"


def write_scope(
    folder: Path, checkpoint: dict[str, object], patches: list[dict[str, object]], **meta: object
) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "checkpoint.json").write_text(canonical(checkpoint))
    (folder / "patches.jsonl").write_text("".join(canonical(p) for p in patches))
    temporal = {"revision": len(patches) + 3, "checkpoint": 3, "patches": list(range(4, 4 + len(patches)))}
    (folder / "meta.json").write_text(canonical({"version": 2, "temporal": temporal, **meta}))


def make_store(root: Path, project: Path) -> None:
    write_scope(
        root,
        {"strategy": {"style": "terse"}},
        [{"tactics": {"note": "g1"}}, {"tactics": {"note": "g2"}}],
    )
    cwd_dir = root / cwd_key(str(project))
    write_scope(
        cwd_dir,
        {"contract": {"goal": "ship"}},  # the old name of strategy
        [{"working": {"step": 1}}, {"working": {"step": 2}}, {"working": {"step": None, "done": True}}],
        owner={"cwd": str(project)},
    )
    write_scope(cwd_dir / "2026-01-01_abc", {"tactics": {"todo": ["a", "b"]}}, [{"tactics": {"todo": ["a"]}}])
    (cwd_dir / "2026-01-01_abc" / "config.json").write_text('{"mode":"active"}\n')


def sf(store: str, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, STATEFLOW_STORE=store)
    return subprocess.run(["stateflow", *args], capture_output=True, text=True, timeout=120, env=env, cwd=cwd)


def test_a_state_flow_store_becomes_agent_memory_with_its_history(tmp_path: Path, backend: str) -> None:
    root, project = tmp_path / "state-flow", tmp_path / "proj"
    project.mkdir()
    make_store(root, project)
    assert sf(backend, tmp_path, "migrate").returncode == 0
    out = sf(backend, tmp_path, "import-state-flow", str(root), "--agent", "pi")
    assert out.returncode == 0, out.stderr
    results = {r["scope"]: r for r in json.loads(out.stdout)}
    assert {s: r["transitions"] for s, r in results.items()} == {"global": 3, "cwd": 4, "session": 2}

    view = ["--agent", "pi", "--cwd", str(project), "--session", "2026-01-01_abc"]
    read = sf(backend, tmp_path, "tool", "read_state", '{"paths": ["global", "cwd", "session"]}', *view)
    assert read.returncode == 0, read.stderr
    text = read.stdout
    for expected in ('"style"', '"g2"', '"goal"', '"done"', '"todo"'):
        assert expected in text, text
    history = sf(backend, tmp_path, "history", "list", "--limit", "100", *view)
    assert history.returncode == 0, history.stderr
    entries = json.loads(history.stdout)[::-1]  # oldest first
    assert len(entries) == 9 and all(e["origin"]["door"] == "import" for e in entries)
    cwd_changes = [e["changes"]["cwd"] for e in entries if "cwd" in e["changes"]]
    assert cwd_changes == [  # the checkpoint, then the tail in its order
        {"strategy": {"goal": "ship"}},
        {"tactics": {"step": 1}},
        {"tactics": {"step": 2}},
        {"tactics": {"step": None, "done": True}},
    ]

    again = sf(backend, tmp_path, "import-state-flow", str(root), "--agent", "pi")
    assert again.returncode == 1 and again.stderr.startswith("error[conflict]: ")


BREAKAGES: dict[str, Callable[[Path], object]] = {
    "state.json": lambda root: (root / "state.json").write_text("{}"),
    "envelope": lambda root: (root / "checkpoint.json").write_text('{"state":{},"through":3}\n'),
    "boundaries": lambda root: (root / "patches.jsonl").write_text(canonical({"tactics": {"x": 1}}) * 5),
    "half pair": lambda root: (root / "patches.jsonl").unlink(),
    "meta version": lambda root: (root / "meta.json").write_text('{"version":3}\n'),
    "bad json": lambda root: (root / "patches.jsonl").write_text("{not json\n{}\n"),
    "live writer": lambda root: (root / ".state-flow-publication.lock").write_text("123"),
    "cwd owner": lambda root: next(root.glob("--*--/meta.json")).write_text(
        canonical({"version": 2, "temporal": {"revision": 3, "checkpoint": 0, "patches": [1, 2, 3]}})
    ),
}


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_an_unknown_or_damaged_layout_is_refused_and_nothing_is_written(
    tmp_path: Path, breakage: str
) -> None:
    root, project = tmp_path / "state-flow", tmp_path / "proj"
    project.mkdir()
    make_store(root, project)
    BREAKAGES[breakage](root)
    store = tmp_path / "memory.db"
    out = sf(str(store), tmp_path, "import-state-flow", str(root))
    assert out.returncode == 1
    assert out.stderr.startswith("error[unsupported-format]: "), out.stderr
    assert not store.exists()  # nothing written, not even an empty store


def test_a_patch_writing_a_reserved_index_key_is_refused_naming_it(tmp_path: Path) -> None:
    # the published State Flow stored such a key literally; memory reserves index syntax (seed 000)
    root = tmp_path / "state-flow"
    write_scope(root, {"strategy": {"s": 1}}, [{"tactics": {"a": 1}}, {"tactics": {"obj": {"[0]": "x"}}}])
    store = tmp_path / "memory.db"
    out = sf(str(store), tmp_path, "import-state-flow", str(root))
    assert out.returncode == 1
    assert out.stderr.startswith(f"error[invalid-patch]: {root / 'patches.jsonl'}, patch 2: index key '[0]'")
    assert not store.exists()  # nothing written
