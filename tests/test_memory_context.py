"""Baseline context, navigation, artifacts, extra roots, fork and restore (both backends)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from stateflow.errors import InvalidInput, PatchError
from stateflow.memory import ExtraRoot
from stateflow.memory.protocol import for_scopes
from stateflow.store import SqlStore
from stateflow.tools import READ_STATE_DESCRIPTION

from .memory_helpers import view


def test_lazy_bodies_never_enter_the_baseline(store: SqlStore) -> None:
    m = view(store)
    m.patch_state({"session": {"lazy": {"secret": "LAZY-BODY"}, "tactics": {"a": 1}}})
    m.patch_state({"session": {"lazy": {"secret": "LAZY-BODY-2"}}})
    ctx = m.context()
    text = ctx.text()
    assert "LAZY-BODY" not in text
    assert ctx.head["state"] == {"tactics": {"a": 1}}
    assert ctx.head["lazy_navigation"] == {
        "available": True,
        "path": "effective.lazy",
        "keys": {"secret": "string"},
    }
    # the lazy-only transition disappears from recent transitions; the hot one stays
    assert [t["changes"] for t in ctx.head["recent_transitions"]] == [
        [{"scope": "session", "patch": {"tactics": {"a": 1}}}]
    ]


def test_context_is_byte_stable_until_the_state_changes(store: SqlStore) -> None:
    m = view(store)
    m.patch_state({"cwd": {"strategy": {"x": 1}}})
    first, second = m.context(), m.context()
    assert first.text() == second.text() and first.projection == second.projection
    m.patch_state({"cwd": {"strategy": {"x": 2}}})
    third = m.context()
    assert third.projection != first.projection and third.text() != first.text()
    assert third.text().startswith(
        first.text().split("State Flow runtime context")[0]
    )  # stable protocol prefix


def test_navigation_keys_are_bounded(store: SqlStore) -> None:
    m = view(store)
    m.patch_state({"session": {"lazy": {f"k{i}": i for i in range(32)}}})
    assert len(m.context().head["lazy_navigation"]["keys"]) == 32
    m.patch_state({"session": {"lazy": {"k32": 1}}})
    assert m.context().head["lazy_navigation"] == {"available": True, "path": "effective.lazy"}
    other = view(store, session="s2", scopes=("session",))
    other.patch_state({"lazy": {"x" * 1100: 1}})
    assert "keys" not in other.context().head["lazy_navigation"]
    assert other.read_state({"path": "lazy", "projection": "keys"})["meta"] == {"type": "object", "size": 1}


def test_the_navigation_bound_counts_characters_not_bytes(store: SqlStore) -> None:
    # {"<key>":"number"} is 13 characters around the key: 1,011 "é" make exactly 1,024
    # characters (2,035 UTF-8 bytes), one more goes over
    m = view(store, scopes=("session",))
    m.patch_state({"lazy": {"é" * 1011: 1}})
    assert m.context().head["lazy_navigation"]["keys"] == {"é" * 1011: "number"}
    m.patch_state({"lazy": {"é" * 1011: None, "é" * 1012: 1}})
    assert "keys" not in m.context().head["lazy_navigation"]


def test_effective_navigation_overlays_scopes(store: SqlStore) -> None:
    m = view(store)
    m.patch_state({"global": {"lazy": {"a": [1], "b": 1}}, "session": {"lazy": {"a": {"x": 1}}}})
    assert m.context().head["lazy_navigation"]["keys"] == {"a": "object", "b": "number"}
    empty = view(store, session="fresh", scopes=("session",))
    assert empty.context().head["lazy_navigation"] == {"available": False, "path": "effective.lazy"}


def test_passive_mode_omits_the_response(store: SqlStore) -> None:
    view(store).record_response("answer")
    assert view(store).context().head["state"]["response"] == "answer"
    assert "response" not in view(store, mode="passive").context().head["state"]


def test_artifact_cards_get_a_stale_hint_when_their_source_changes(store: SqlStore, tmp_path: Path) -> None:
    source = tmp_path / "SKILL.md"
    source.write_text("v1")
    m = view(store, cwd=str(tmp_path))
    m.patch_state(
        {"cwd": {"artifacts": {str(source): {"description": "How to release", "tags": ["release"]}}}}
    )
    card = m.context().head["state"]["artifacts"][str(source)]
    assert card == {"description": "How to release", "tags": ["release"]}
    source.write_text("v2 is longer")
    os.utime(source, ns=(1, 1))
    assert "changed" in m.context().head["state"]["artifacts"][str(source)]["hint"]
    m.patch_state({"cwd": {"artifacts": {str(source): {"description": "How to release (v2)"}}}})
    assert "hint" not in m.context().head["state"]["artifacts"][str(source)]
    source.unlink()
    assert "no longer exists" in m.context().head["state"]["artifacts"][str(source)]["hint"]
    assert "_runtime" not in str(m.read_state({"path": "cwd"}))


def test_declared_extra_roots_are_validated_and_follow_their_policy(store: SqlStore) -> None:
    roots = (
        ExtraRoot("plugins", {"type": "object", "properties": {"level": {"type": "integer"}}}),
        ExtraRoot("archive", {"type": "object"}, lazy=True),
    )
    m = view(store, extra_roots=roots)
    m.patch_state({"session": {"plugins": {"level": 3}, "archive": {"old": "ARCHIVED"}}})
    head = m.context().head
    assert head["state"] == {"plugins": {"level": 3}}
    assert "ARCHIVED" not in m.context().text()
    assert m.read_state({"path": "archive.old"}) == {"value": "ARCHIVED"}
    with pytest.raises(PatchError, match="does not match its declared schema"):
        m.patch_state({"session": {"plugins": {"level": "high"}}})
    with pytest.raises(InvalidInput, match="not a built-in plane"):
        view(store, extra_roots=(ExtraRoot("lazy", {}),))


def test_fork_copies_a_retained_boundary_into_a_new_session(store: SqlStore) -> None:
    parent = view(store)
    parent.patch_state({"session": {"tactics": {"step": 1}, "lazy": {"notes": ["a"]}}})
    parent.patch_state({"session": {"tactics": {"step": 2}}})
    child = parent.fork("child", offset=1)
    assert child.read_state({"path": "session.tactics.step"}) == {"value": 1}
    assert child.read_state({"path": "session.lazy.notes"}) == {"value": ["a"]}
    assert parent.read_state({"path": "session.tactics.step"}) == {"value": 2}
    with pytest.raises(InvalidInput, match="already has memory"):
        parent.fork("child")


def test_restore_is_a_new_transition(store: SqlStore) -> None:
    m = view(store)
    m.patch_state({"session": {"tactics": {"step": 1}}})
    m.patch_state({"session": {"tactics": {"step": 2}, "strategy": {"added": True}}})
    assert m.restore(1)
    assert m.read_state({"path": "session"}) == {"value": {"tactics": {"step": 1}}}
    assert m.read_state({"path": "session[1].tactics.step"}) == {"value": 2}


def test_recent_transitions_are_the_newest_history_limit_transitions(store: SqlStore) -> None:
    one = view(store, history_limit=1)
    one.patch_state({"global": {"tactics": {"z": 1}}})
    one.patch_state({"cwd": {"tactics": {"y": 1}}})
    one.patch_state({"session": {"tactics": {"x": 1}}})
    one.patch_state({"session": {"tactics": {"a": 1}}})
    assert [t["changes"] for t in one.context().head["recent_transitions"]] == [
        [{"scope": "session", "patch": {"tactics": {"a": 1}}}]
    ]

    seven = view(store, session="s7")  # history_limit 7
    seven.patch_state({"global": {"strategy": {"old": True}}})
    for i in range(7):
        seven.patch_state({"session": {"tactics": {"i": i}}})
    recent = seven.context().head["recent_transitions"]
    assert [t["changes"] for t in recent] == [
        [{"scope": "session", "patch": {"tactics": {"i": i}}}] for i in range(7)
    ]


def test_a_lazy_only_transition_takes_its_place_in_the_window_and_is_then_dropped(store: SqlStore) -> None:
    m = view(store, history_limit=2)
    m.patch_state({"session": {"tactics": {"h": 1}}})
    m.patch_state({"session": {"tactics": {"h": 2}}})
    m.patch_state({"session": {"lazy": {"notes": ["LAZY"]}}})
    head = m.context().head
    assert [t["changes"] for t in head["recent_transitions"]] == [
        [{"scope": "session", "patch": {"tactics": {"h": 2}}}]
    ]
    m.patch_state({"session": {"lazy": {"notes": ["LAZY", "MORE"]}}})
    assert "recent_transitions" not in m.context().head


@pytest.mark.parametrize(
    ("mode", "scopes"), [("active", ("global", "cwd", "session")), ("passive", ("cwd",))]
)
def test_the_protocol_says_found_past_values_are_evidence_not_memory(
    store: SqlStore, mode: str, scopes: tuple[str, ...]
) -> None:
    text = view(store, scopes=scopes, mode=mode).context().text()
    assert "found values are historical evidence, not automatically current memory." in text
    assert text.count("historical evidence") == 1


def test_passive_recent_transitions_omit_the_response_like_the_state(store: SqlStore) -> None:
    active = view(store)
    active.patch_state({"session": {"tactics": {"a": 1}}})
    active.record_response("THE ANSWER")
    active.patch_state({"session": {"tactics": {"a": 2}}, "cwd": {"strategy": {"s": 1}}})
    assert [c["patch"] for t in active.context().head["recent_transitions"] for c in t["changes"]] == [
        {"tactics": {"a": 1}},
        {"response": "THE ANSWER"},
        {"strategy": {"s": 1}},
        {"tactics": {"a": 2}},
    ]
    passive = view(store, mode="passive").context()
    assert "THE ANSWER" not in passive.text()
    assert [c["patch"] for t in passive.head["recent_transitions"] for c in t["changes"]] == [
        {"tactics": {"a": 1}},
        {"strategy": {"s": 1}},
        {"tactics": {"a": 2}},
    ]


def test_an_extra_root_that_is_no_object_is_refused_when_built(store: SqlStore) -> None:
    # a plane is an object: an array root used to be accepted, then refused every write
    with pytest.raises(
        InvalidInput, match=r"extra root 'notes' declares type 'array': an extra root is a plane"
    ):
        ExtraRoot("notes", {"type": "array"})
    with pytest.raises(InvalidInput, match=r"declares type \['string', 'null'\]"):
        ExtraRoot("notes", {"type": ["string", "null"]})
    m = view(store, extra_roots=(ExtraRoot("notes", {"type": ["object", "null"]}),))
    m.patch_state({"session": {"notes": {"k": 1}}})
    assert m.read_state({"path": "session.notes"}) == {"value": {"k": 1}}


_EXAMPLE_PATH = re.compile(
    r"(?<![\w$\".])((?:effective|global|cwd|session)?(?:\[\d+\])?(?:\.?[a-z]+)(?:\.[a-z]+|\[\d+(?::\d+)?\])+)"
)


@pytest.mark.parametrize(
    "scopes",
    [
        ("global", "cwd", "session"),
        ("global", "cwd"),
        ("global", "session"),
        ("cwd", "session"),
        ("cwd",),
        ("global",),
        ("session",),
    ],
)
def test_every_example_path_the_view_is_taught_reads_in_that_view(
    store: SqlStore, tmp_path: Path, scopes: tuple[str, ...]
) -> None:
    """The protocol text's READ examples and ``read_state``'s description name paths this view
    can read: in its own scopes, relative where it has one owner (a history offset and patches
    still name the scope) — never the session's history in a view without the session."""
    m = view(store, scopes=scopes, cwd=str(tmp_path))
    for n in range(4):  # (history two transitions back in every scope)
        planes = {"tactics": {"next": f"step {n}"}, "lazy": {"memory": list(range(30)), "x": n}}
        m.patch_state(planes if len(scopes) == 1 else dict.fromkeys(scopes, planes))
    text = m.context().text()
    read_part = text[text.index("READ with read_state") : text.index('"keys" returns')]
    taught = _EXAMPLE_PATH.findall(read_part.split("Paths:", 1)[1])
    described = _EXAMPLE_PATH.findall(for_scopes(READ_STATE_DESCRIPTION, scopes).split("Paths:", 1)[1])
    assert len(taught) == len(described) == 5, (taught, described)
    assert taught == described
    for path in taught:
        m.read_state({"path": path})  # (raises where the view cannot read it)
    if len(scopes) == 1:
        assert taught[1] == "lazy.memory[4]" and taught[3] == f"{scopes[0]}[2].lazy.x"
    assert not any(p.startswith("session") for p in taught) or "session" in scopes
