"""Knowledge sources through the CLI on both backends: discovery, hashed freshness, pruning of
confirmed-missing Markdown, and unknown freshness under an unavailable root."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from stateflow.store import SqlStore


@pytest.fixture
def url(backend: str, store: SqlStore) -> str:
    return backend


def sf(url: str, *args: str, cwd: Path, root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["stateflow", "--store", url, *args, "--knowledge-root", str(root)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


def ok(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    root, project = tmp_path / "notes", tmp_path / "project"
    (root / "deep").mkdir(parents=True)
    project.mkdir()
    (root / "a.md").write_text("# A\n")
    (root / "deep" / "c.md").write_text("# C\n")
    (root / "UPPER.MD").write_text("not lowercase .md\n")
    (root / "plain.txt").write_text("not Markdown\n")
    os.symlink(root / "a.md", root / "link.md")  # a link is never a source
    os.symlink(root / "deep", root / "linked-dir")
    return root, project


def card(url: str, project: Path, root: Path, source: str, description: str) -> None:
    patch = json.dumps({"global": {"artifacts": {source: {"description": description}}}})
    done = sf(url, "tool", "patch_state", patch, cwd=project, root=root)
    assert done.returncode == 0, done.stderr


def head(url: str, project: Path, root: Path) -> dict[str, Any]:
    context: dict[str, Any] = ok(sf(url, "context", "--json", cwd=project, root=root))["head"]
    return context


def test_discovery_and_freshness_follow_the_bytes(url: str, tree: tuple[Path, Path]) -> None:
    root, project = tree
    a, c = str(root / "a.md"), str(root / "deep" / "c.md")
    card(url, project, root, a, "notes on A")
    [status] = ok(sf(url, "knowledge", "status", cwd=project, root=root))
    assert status == {
        "root": str(root),
        "available": True,
        "sources": 2,
        "uncompiled": [c],
        "missing": [],
        "stale": [],
    }
    assert head(url, project, root)["knowledge_sources"] == [
        {"root": str(root), "available": True, "sources": 2, "uncompiled": [c]}
    ]
    # a touched file with the same bytes stays fresh; changed bytes make the card stale
    os.utime(root / "a.md", ns=(1, 1))
    assert "hint" not in head(url, project, root)["state"]["artifacts"][a]
    (root / "a.md").write_text("# A, rewritten\n")
    assert "changed" in head(url, project, root)["state"]["artifacts"][a]["hint"]
    assert ok(sf(url, "knowledge", "status", cwd=project, root=root))[0]["stale"] == [a]
    # rewriting the card records the new bytes
    card(url, project, root, a, "notes on the rewritten A")
    assert "hint" not in head(url, project, root)["state"]["artifacts"][a]


def test_scan_prunes_only_confirmed_missing_markdown(url: str, tree: tuple[Path, Path]) -> None:
    root, project = tree
    a, txt = str(root / "a.md"), str(root / "plain.txt")
    card(url, project, root, a, "notes on A")
    card(url, project, root, txt, "plain text")
    (root / "a.md").unlink()
    (root / "plain.txt").unlink()
    [status] = ok(sf(url, "knowledge", "status", cwd=project, root=root))
    assert status["missing"] == [a] and status["stale"] == [txt]
    scanned = ok(sf(url, "knowledge", "scan", cwd=project, root=root))
    assert scanned["pruned"] == [{"scope": "global", "source": a}]
    assert list(head(url, project, root)["state"]["artifacts"]) == [txt]  # not Markdown: kept
    history = ok(sf(url, "history", "list", "--limit", "1", cwd=project, root=root))
    assert history[0]["origin"] == {"door": "runtime", "action": "knowledge-prune"}
    assert history[0]["changes"] == {"global": {"artifacts": {a: None}}}
    # nothing left to prune: no transition
    assert ok(sf(url, "knowledge", "scan", cwd=project, root=root))["pruned"] == []
    assert len(ok(sf(url, "history", "list", cwd=project, root=root))) == 3


def test_an_unavailable_root_makes_freshness_unknown_and_prunes_nothing(
    url: str, tree: tuple[Path, Path]
) -> None:
    root, project = tree
    a = str(root / "a.md")
    card(url, project, root, a, "notes on A")
    root.rename(root.with_name("unmounted"))
    scanned = ok(sf(url, "knowledge", "scan", cwd=project, root=root))
    assert scanned == {
        "pruned": [],
        "roots": [{"root": str(root), "available": False, "freshness": "unknown"}],
    }
    context = head(url, project, root)
    assert context["state"]["artifacts"] == {a: {"description": "notes on A"}}  # no "no longer exists"
    assert context["knowledge_sources"] == [{"root": str(root), "available": False, "freshness": "unknown"}]


def test_knowledge_commands_need_a_root(tmp_path: Path) -> None:
    done = subprocess.run(
        ["stateflow", "--store", str(tmp_path / "s.db"), "knowledge", "scan"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "STATEFLOW_KNOWLEDGE_ROOTS"},
    )
    assert done.returncode == 1
    assert done.stderr.startswith("error[invalid-input]: no knowledge root is configured")


def test_the_claude_code_hook_prunes_before_showing_the_context(url: str, tree: tuple[Path, Path]) -> None:
    root, project = tree
    a, c = str(root / "a.md"), str(root / "deep" / "c.md")
    card(url, project, root, a, "notes on A")
    card(url, project, root, c, "notes on C")
    (root / "a.md").unlink()
    hook = subprocess.run(
        [
            "stateflow",
            "--store",
            url,
            "hook",
            "claude-code",
            "--knowledge-root",
            str(root),
            "--session",
            "default",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=project,
        input='{"hook_event_name": "UserPromptSubmit", "prompt": "hi"}',
    )
    assert hook.returncode == 0, hook.stderr
    context = json.loads(hook.stdout)["hookSpecificOutput"]["additionalContext"]
    assert (
        c in context
        and a not in context.split("State Flow runtime context")[1].split('"recent_transitions"')[0]
    )
    assert list(head(url, project, root)["state"]["artifacts"]) == [c]


def test_a_source_whose_name_is_not_utf8_is_named_apart_and_the_rest_still_answered(
    url: str, tree: tuple[Path, Path]
) -> None:
    # Linux allows any bytes in a name: such a file can be no card's source, nor JSON text, so
    # it is listed apart (escaped) instead of failing the status, the scan and the model's context
    root, project = tree
    a, c = str(root / "a.md"), str(root / "deep" / "c.md")
    card(url, project, root, a, "notes on A")
    (root / os.fsdecode(b"caf\xe9.md")).write_text("# other\n")
    unnamed = [f"{root}/caf\\xe9.md"]
    [status] = ok(sf(url, "knowledge", "status", cwd=project, root=root))
    assert (status["sources"], status["uncompiled"], status["not_utf8"]) == (2, [c], unnamed)
    assert ok(sf(url, "knowledge", "scan", cwd=project, root=root))["roots"] == [status]
    assert head(url, project, root)["knowledge_sources"] == [
        {"root": str(root), "available": True, "sources": 2, "uncompiled": [c], "not_utf8": unnamed}
    ]
    # a root whose own name is not UTF-8: every source under it is named apart
    odd = root.rename(root.with_name(os.fsdecode(b"notes\xff")))
    [status] = ok(sf(url, "knowledge", "status", cwd=project, root=odd))
    shown = f"{root.parent}/notes\\xff"
    assert status == {
        "root": shown,
        "available": True,
        "sources": 0,
        "uncompiled": [],
        "not_utf8": [f"{shown}/a.md", f"{shown}/caf\\xe9.md", f"{shown}/deep/c.md"],
        "missing": [],
        "stale": [],
    }
