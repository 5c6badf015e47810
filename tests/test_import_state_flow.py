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

    # the same import again finds every scope already imported: it writes nothing
    again = sf(backend, tmp_path, "import-state-flow", str(root), "--agent", "pi")
    assert again.returncode == 0, again.stderr
    assert [r["transitions"] for r in json.loads(again.stdout)] == [0, 0, 0]
    # once the agent has written its memory, importing into it is refused
    assert (
        sf(backend, tmp_path, "tool", "patch_state", '{"cwd": {"tactics": {"step": 3}}}', *view).returncode
        == 0
    )
    refused = sf(backend, tmp_path, "import-state-flow", str(root), "--agent", "pi")
    assert refused.returncode == 1 and refused.stderr.startswith("error[conflict]: "), refused.stderr


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


def sessions_store(
    root: Path, project: Path, session: dict[str, object], tail: list[dict[str, object]]
) -> None:
    """A store whose global and cwd scopes import cleanly, and one session scope."""
    write_scope(root, {"contract": {"lang": "py"}}, [])
    cwd_dir = root / cwd_key(str(project))
    write_scope(cwd_dir, {"strategy": {"c": 1}}, [], owner={"cwd": str(project)})
    write_scope(cwd_dir / "s1", session, tail)


def imported(store: str, cwd: Path, root: Path) -> subprocess.CompletedProcess[str]:
    assert sf(store, cwd, "migrate").returncode == 0
    return sf(store, cwd, "import-state-flow", str(root), "--agent", "a")


def read(store: str, project: Path, *paths: str) -> object:
    view = ["--agent", "a", "--cwd", str(project), "--session", "s1"]
    out = sf(store, project, "tool", "read_state", json.dumps({"paths": list(paths)}), *view)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["value"]


REFUSED_IN_A_SESSION: dict[str, tuple[str, list[dict[str, object]]]] = {
    "unknown plane": ("invalid-input", [{"notes": {"x": 1}}]),
    "plane not an object": ("invalid-input", [{"tactics": "text"}]),
    "card without description": ("invalid-patch", [{"artifacts": {"/etc/hostname": {"kind": "doc"}}}]),
    "artifact source leaving the directory": (
        "outside-roots",
        [{"artifacts": {"../elsewhere.txt": {"description": "d"}}}],
    ),
    "response not a string": ("invalid-patch", [{"response": 3}]),
}


@pytest.mark.parametrize("case", sorted(REFUSED_IN_A_SESSION))
def test_a_session_patch_memory_refuses_fails_the_whole_import_before_anything_is_written(
    tmp_path: Path, backend: str, case: str
) -> None:
    root, project = tmp_path / "state-flow", tmp_path / "proj"
    project.mkdir()
    code, tail = REFUSED_IN_A_SESSION[case]
    sessions_store(root, project, {"tactics": {"next": "x"}}, [{"tactics": {"next": "y"}}, *tail])
    assert sf(backend, tmp_path, "migrate").returncode == 0
    out = sf(backend, tmp_path, "import-state-flow", str(root), "--agent", "a")
    assert out.returncode == 1
    where = root / cwd_key(str(project)) / "s1" / "patches.jsonl"
    assert out.stderr.startswith(f"error[{code}]: {where}, patch 2: "), out.stderr
    # nothing of the tree was written, so the import can be run again once the source is fixed
    assert read(backend, project, "global.strategy", "cwd.strategy", "session.tactics") == [None, None, None]


def test_a_response_is_imported_as_the_scopes_response(tmp_path: Path, backend: str) -> None:
    root, project = tmp_path / "state-flow", tmp_path / "proj"
    project.mkdir()
    sessions_store(root, project, {"tactics": {"next": "x"}, "response": "Done."}, [{"response": "Shipped."}])
    out = imported(backend, tmp_path, root)
    assert out.returncode == 0, out.stderr
    assert read(backend, project, "session.response", "session.tactics") == ["Shipped.", {"next": "x"}]


def test_a_sessions_relative_artifact_source_becomes_absolute_in_its_directory(
    tmp_path: Path, backend: str
) -> None:
    # State Flow resolves it against the session's one directory; memory's session scope is
    # seen from others, so it keeps the absolute path
    root, project = tmp_path / "state-flow", tmp_path / "proj"
    (project / "src").mkdir(parents=True)
    (project / "src" / "app.py").write_text("print()\n")
    sessions_store(root, project, {}, [{"artifacts": {"src/app.py": {"description": "entry point"}}}])
    out = imported(backend, tmp_path, root)
    assert out.returncode == 0, out.stderr
    assert read(backend, project, "session.artifacts") == [
        {str(project / "src" / "app.py"): {"description": "entry point"}}
    ]


def test_a_card_of_a_source_outside_the_directory_needs_its_knowledge_root(
    tmp_path: Path, backend: str
) -> None:
    root, project, skills = tmp_path / "state-flow", tmp_path / "proj", tmp_path / "skills"
    project.mkdir()
    skills.mkdir()
    (skills / "SKILL.md").write_text("# skill\n")
    card = {str(skills / "SKILL.md"): {"description": "a skill", "kind": "skill"}}
    sessions_store(root, project, {}, [])
    write_scope(root / cwd_key(str(project)), {"artifacts": card}, [], owner={"cwd": str(project)})
    refused = imported(backend, tmp_path, root)
    assert refused.returncode == 1 and refused.stderr.startswith("error[outside-roots]: "), refused.stderr
    out = sf(
        backend, tmp_path, "import-state-flow", str(root), "--agent", "a", "--knowledge-root", str(skills)
    )
    assert out.returncode == 0, out.stderr
    assert read(backend, project, "cwd.artifacts") == [card]


def test_replay_applies_the_recorded_net_patches_and_never_reruns_the_cascade(
    tmp_path: Path, backend: str
) -> None:
    # the intent's deletion was accepted without clearing the plan it referenced (history from
    # before ownership): the source's state still holds the plan, and so must memory
    root, project = tmp_path / "state-flow", tmp_path / "proj"
    project.mkdir()
    owned = {"intents": {"rel": {"plan": {"$ref": "session.lazy.plan"}}}, "lazy": {"plan": ["a", "b"]}}
    sessions_store(root, project, owned, [{"intents": {"rel": None}}])
    out = imported(backend, tmp_path, root)
    assert out.returncode == 0, out.stderr
    assert read(backend, project, "session.lazy", "session.intents") == [{"plan": ["a", "b"]}, None]


def test_two_source_scopes_of_one_directory_are_refused_naming_both(tmp_path: Path) -> None:
    (tmp_path / "real" / "proj").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    root = tmp_path / "state-flow"
    folders = []
    for cwd, strategy in (
        (tmp_path / "real" / "proj", {"db": "postgres"}),
        (tmp_path / "link" / "proj", {"db": "sqlite"}),
    ):
        folders.append(root / cwd_key(str(cwd)))
        write_scope(folders[-1], {"strategy": strategy}, [], owner={"cwd": str(cwd)})
    store = tmp_path / "memory.db"
    out = sf(str(store), tmp_path, "import-state-flow", str(root))
    assert out.returncode == 1
    assert out.stderr.startswith("error[conflict]: "), out.stderr
    assert all(str(folder) in out.stderr for folder in folders), out.stderr
    assert not store.exists()  # nothing written


def test_renamed_planes_are_renamed_in_the_references_that_name_them(tmp_path: Path, backend: str) -> None:
    root, project = tmp_path / "state-flow", tmp_path / "proj"
    project.mkdir()
    session = {
        "intents": {"release": {"draft": {"$ref": "session.working.draft"}, "see": "$session.working.draft"}},
        "working": {"draft": "notes"},
        "lazy": {
            "why": "$contract.rules and $session.lazy.working stay apart",
            "ref": {"$ref": "cwd.lazy.working"},
        },
    }
    sessions_store(root, project, session, [])
    assert imported(backend, tmp_path, root).returncode == 0
    assert read(backend, project, "session.intents.release", "session.lazy") == [
        {"draft": {"$ref": "session.tactics.draft"}, "see": "$session.tactics.draft"},
        {"why": "$strategy.rules and $session.lazy.working stay apart", "ref": {"$ref": "cwd.lazy.working"}},
    ]
    # the intent still owns its draft: deleting it clears the draft
    view = ["--agent", "a", "--cwd", str(project), "--session", "s1"]
    out = sf(backend, project, "tool", "patch_state", '{"session": {"intents": {"release": null}}}', *view)
    assert out.returncode == 0 and '"cascaded":["session.tactics.draft"]' in out.stdout, out.stdout
    assert read(backend, project, "session.tactics") == [None]


def test_an_import_continues_where_memory_holds_an_earlier_step_of_the_same_source(
    tmp_path: Path, backend: str
) -> None:
    # memory holding exactly this source's import up to some step (a run cut short, or a source
    # that has grown since) is continued after that step, not refused
    root, project = tmp_path / "state-flow", tmp_path / "proj"
    project.mkdir()
    sessions_store(root, project, {"tactics": {"n": 0}}, [{"tactics": {"n": 1}}])
    assert imported(backend, tmp_path, root).returncode == 0
    write_scope(
        root / cwd_key(str(project)) / "s1", {"tactics": {"n": 0}}, [{"tactics": {"n": n}} for n in (1, 2, 3)]
    )
    out = imported(backend, tmp_path, root)
    assert out.returncode == 0, out.stderr
    assert [r["transitions"] for r in json.loads(out.stdout)] == [0, 0, 2]
    assert read(backend, project, "session.tactics") == [{"n": 3}]
    view = ["--agent", "a", "--cwd", str(project), "--session", "s1", "--scopes", "session"]
    history = json.loads(sf(backend, tmp_path, "history", "list", *view).stdout)
    assert [e["origin"]["step"] for e in history] == [3, 2, 1, 0]
