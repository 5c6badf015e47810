"""patch_state: merge, index selectors, atomic cohorts, ownership, receipts, pruning (both backends)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stateflow.doc.canonical import MAX_DEPTH, check
from stateflow.doc.merge import is_index_patch, stored_index_key, stored_null
from stateflow.errors import InvalidInput, InvalidJSON, InvalidPath, PatchError
from stateflow.memory import MemoryView
from stateflow.memory.planes import Authored, PlaneSet, check_scope_patch
from stateflow.memory.receipts import authored_paths
from stateflow.store import SqlStore

from .conftest import StoreFactory
from .memory_helpers import transitions, view
from .threads import run_threads


def state(m: MemoryView, path: str) -> Any:
    return m.read_state({"path": path})["value"]


def test_recursive_merge_and_scope_local_deletion_reveals_broader_value(store: SqlStore) -> None:
    m = view(store)
    m.patch_state(
        {"cwd": {"tactics": {"k": "cwd value", "keep": 1}}, "session": {"tactics": {"k": "session value"}}}
    )
    assert state(m, "effective.tactics") == {"k": "session value", "keep": 1}
    receipt = m.patch_state({"session": {"tactics": {"k": None}}})
    assert state(m, "effective.tactics.k") == "cwd value"
    assert receipt.state_updates is not None
    assert receipt.state_updates["effective"] == [{"path": ["tactics", "k"], "value": "cwd value"}]


def test_indexed_patches_replace_existing_elements_atomically(store: SqlStore) -> None:
    m = view(store)
    m.patch_state(
        {"cwd": {"lazy": {"memory": ["a", "b", "c", "d", "e"], "groups": [{"notes": ["n0", "n1"]}]}}}
    )
    m.patch_state(
        {
            "cwd": {
                "lazy": {"memory": {"[1]": "B", "[4]": "E"}, "groups": {"[0]": {"notes": {"[1]": "fixed"}}}}
            }
        }
    )
    assert state(m, "cwd.lazy") == {
        "memory": ["a", "B", "c", "d", "E"],
        "groups": [{"notes": ["n0", "fixed"]}],
    }


def test_an_invalid_index_fails_the_whole_call_and_publishes_nothing(store: SqlStore) -> None:
    m = view(store)
    m.patch_state({"cwd": {"lazy": {"memory": ["a", "b"]}}})
    before = transitions(store)
    with pytest.raises(PatchError, match=r"array index \[2\] is out of bounds for length 2"):
        m.patch_state(
            {"session": {"tactics": {"x": 1}}, "cwd": {"lazy": {"memory": {"[0]": "A", "[2]": "C"}}}}
        )
    with pytest.raises(PatchError, match="cannot be deleted"):
        m.patch_state({"cwd": {"lazy": {"memory": {"[0]": None}}}})
    assert transitions(store) == before
    assert state(m, "session.tactics") is None
    assert state(m, "cwd.lazy.memory") == ["a", "b"]


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        (
            {"steps": {"[-1]": "z"}},
            r"index key '\[-1\]' at session\.tactics\.steps is not a valid array index",
        ),
        (
            {"steps": {"[01]": "B"}},
            r"index key '\[01\]' at session\.tactics\.steps is not a valid array index",
        ),
        (
            {"steps": {"[1]": "B", "note": "x"}},
            r"'\[1\]' at session\.tactics\.steps is beside the object key 'note'",
        ),
        ({"new": {"[0]": "z"}}, r"'\[0\]' at session\.tactics\.new: the value there is absent"),
        ({"obj": {"[0]": "z"}}, r"'\[0\]' at session\.tactics\.obj: the value there is an object"),
        ({"n": {"[ 1]": "z"}}, r"'\[ 1\]' at session\.tactics\.n: the value there is a number"),
    ],
)
def test_index_keys_are_reserved_and_a_bad_one_writes_nothing(
    store: SqlStore, patch: dict[str, Any], message: str
) -> None:
    # seed 000: index syntax is reserved, distinct from an ordinary key; a bad index fails the call
    m = view(store)
    m.patch_state({"session": {"tactics": {"steps": ["a", "b", "c"], "obj": {"k": 1}, "n": 1}}})
    before, tactics = transitions(store), state(m, "session.tactics")
    with pytest.raises(PatchError, match=message):
        m.patch_state({"cwd": {"strategy": {"x": 1}}, "session": {"tactics": patch}})
    assert transitions(store) == before
    assert state(m, "session.tactics") == tactics
    assert state(m, "cwd.strategy") is None
    m.patch_state({"session": {"tactics": {"steps": {"note": "x"}}}})  # ordinary keys: replaced
    assert state(m, "session.tactics.steps") == {"note": "x"}


def test_an_object_inside_an_array_value_holds_no_index_key(store: SqlStore) -> None:
    # such an object is stored as written, not merged: the reserved syntax is refused there too
    m = view(store)
    before = transitions(store)
    for patch, at in (
        ({"tactics": {"x": [{"[0]": 1}]}}, "session.tactics.x[0]['[0]']"),
        ({"lazy": {"x": [1, [{"a": {"[-1]": 2}}]]}}, "session.lazy.x[1][0].a['[-1]']"),
    ):
        with pytest.raises(
            PatchError, match=re.escape(f"memory cannot store an index key as an object key (at {at})")
        ):
            m.patch_state({"session": patch})
    assert transitions(store) == before
    m.patch_state({"session": {"tactics": {"x": [{"[note]": 1}]}}})  # not index form: a key
    assert state(m, "session.tactics.x") == [{"[note]": 1}]


def test_all_scopes_commit_as_one_transition(store: SqlStore) -> None:
    m = view(store)
    receipt = m.patch_state(
        {"global": {"strategy": {"a": 1}}, "cwd": {"strategy": {"b": 1}}, "session": {"tactics": {"c": 1}}}
    )
    assert receipt.message == "State materialized atomically at global+cwd+session scopes."
    [t] = store.transitions()
    assert len(t.changes) == 3 and t.seq == receipt.seq


def test_a_patch_that_changes_nothing_publishes_nothing(store: SqlStore) -> None:
    m = view(store)
    m.patch_state({"session": {"tactics": {"a": 1}}})
    before = transitions(store)
    receipt = m.patch_state({"session": {"tactics": {"a": 1}}})
    assert receipt.message == "State already current." and receipt.state_updates is None
    assert transitions(store) == before


def test_missing_deletion_hints_are_non_fatal(store: SqlStore) -> None:
    m = view(store)
    m.patch_state({"session": {"tactics": {"a": 0}}})
    receipt = m.patch_state({"session": {"tactics": {"a": 1, "gone": {"deep": None}, "x/y": None}}})
    assert receipt.changed_scopes == ["session"]
    assert receipt.hints == [
        {
            "type": "missing-deletion",
            "target": "/session/tactics/gone/deep",
            "unavailable": "/session/tactics/gone",
        },
        {
            "type": "missing-deletion",
            "target": "/session/tactics/x~1y",
            "unavailable": "/session/tactics/x~1y",
        },
    ]
    assert state(m, "session.tactics") == {"a": 1}  # no empty parent was created


def test_missing_deletion_hint_stops_at_a_scalar_and_goes_into_array_elements(store: SqlStore) -> None:
    m = view(store)
    m.patch_state({"session": {"tactics": {"a": "str", "arr": [{"j": 2}]}}})
    # a scalar ancestor is the first unavailable component: nothing lies below it
    receipt = m.patch_state({"session": {"tactics": {"a": {"b": None, "c": 1}}}})
    assert receipt.hints == [
        {"type": "missing-deletion", "target": "/session/tactics/a/b", "unavailable": "/session/tactics/a"}
    ]
    # an existing element is an object like any other: the absent key is what is unavailable
    receipt = m.patch_state({"session": {"tactics": {"arr": {"[0]": {"k": None, "j": 3}}}}})
    assert receipt.hints == [
        {
            "type": "missing-deletion",
            "target": "/session/tactics/arr/0/k",
            "unavailable": "/session/tactics/arr/0/k",
        }
    ]
    # an object of keys onto an array replaces it: the array holds no such key
    m.patch_state({"session": {"tactics": {"list": [1]}}})
    receipt = m.patch_state({"session": {"tactics": {"list": {"x": None, "y": 1}}}})
    assert receipt.hints == [
        {
            "type": "missing-deletion",
            "target": "/session/tactics/list/x",
            "unavailable": "/session/tactics/list",
        }
    ]


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ([], InvalidInput, "requires an object"),
        ({}, InvalidInput, "at least one scope"),
        ({"final": True}, InvalidInput, "does not accept field final"),
        ({"tactics": {"a": 1}}, InvalidInput, "not the plane"),
        ({"session": {}}, InvalidInput, "cannot be empty"),
        ({"session": []}, InvalidInput, "semantic patch object"),
        ({"session": {"response": "hi"}}, InvalidInput, "written by the runtime"),
        ({"session": {"meta": {}}}, InvalidInput, 'unknown patch key "meta"'),
        ({"session": {"lazy": [1]}}, InvalidInput, "must be a JSON object"),
        ({"session": {"tactics": "x"}}, InvalidInput, "must be a JSON object, or null to delete the plane"),
        ({"session": {"tactics": {"l": [1, None]}}}, PatchError, "cannot store null"),
        ({"session": {"artifacts": {"/a.md": {"kind": "doc"}}}}, PatchError, "needs a non-empty description"),
        (
            {"session": {"artifacts": {"/a.md": {"description": "x", "hash": "h"}}}},
            PatchError,
            "runtime-owned",
        ),
        (
            {"session": {"artifacts": {"/a.md": {"description": "x", "tags": ["a", "a"]}}}},
            PatchError,
            "unique",
        ),
    ],
)
def test_invalid_patches_are_refused_and_change_nothing(store: SqlStore, args, error, message) -> None:  # type: ignore[no-untyped-def]
    m = view(store)
    m.patch_state({"session": {"tactics": {"kept": True}}})
    before = transitions(store)
    with pytest.raises(error, match=message):
        m.patch_state(args)
    assert transitions(store) == before
    assert state(m, "session.tactics") == {"kept": True}


ODD_SCALARS = (
    st.none()
    | st.booleans()
    | st.sampled_from([0, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 1.5, float("nan"), float("inf")])
    | st.text(max_size=2)
    | st.sampled_from([b"x", (1,), 1j])
)
ODD_KEYS = st.sampled_from(["a", "b", "[0]"]) | st.sampled_from([1, None])
ODD_VALUES = st.recursive(
    ODD_SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(ODD_KEYS, inner, max_size=3)
)


def _refusal(patch: Any) -> tuple[type, str] | None:
    try:
        check_scope_patch("session", patch, PlaneSet())
    except (InvalidJSON, PatchError) as exc:
        return type(exc), exc.message
    return None


@settings(max_examples=400, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["strategy", "tactics", "lazy"]), st.dictionaries(ODD_KEYS, ODD_VALUES), min_size=1
    )
)
def test_a_patch_is_refused_as_its_two_value_checks_refuse_it(patch: dict[str, Any]) -> None:
    # one walk checks all (plain JSON, no stored null or index key); the error is the first check's that fails
    expected: tuple[type, str] | None = None
    try:
        check(patch, "session")
        at = stored_null(patch, True)
        key_at = stored_index_key(patch, True)
        if at is not None:
            expected = (
                PatchError,
                f"memory cannot store null (at session{at}); use null only to delete a key",
            )
        elif key_at is not None:
            expected = (
                PatchError,
                f"memory cannot store an index key as an object key (at session{key_at}); index keys "
                "address existing array elements only",
            )
    except InvalidJSON as exc:
        expected = (InvalidJSON, exc.message)
    assert _refusal(patch) == expected


def test_a_patch_nested_to_the_depth_limit_is_refused_at_it() -> None:
    deep: Any = 1
    for _ in range(MAX_DEPTH - 1):  # the patch is depth 0, the plane 1: the last object at 253
        deep = {"k": deep}
    assert _refusal({"tactics": deep}) is None
    refused = _refusal({"tactics": {"k": deep}})
    assert refused is not None and refused[0] is InvalidJSON and "nested deeper" in refused[1]
    assert _refusal({"tactics": {"l": [None]}}) == (
        PatchError,
        "memory cannot store null (at session.tactics.l[0]); use null only to delete a key",
    )


def _checked(patch: Any, authored: Authored | None) -> tuple[type, str] | None:
    try:
        check_scope_patch("session", patch, PlaneSet(), authored)
    except (InvalidJSON, PatchError) as exc:
        return type(exc), exc.message
    return None


def _index_object_at(node: Any, path: tuple[Any, ...]) -> bool:
    """Whether a non-empty object of ``"[N]"`` keys lies at or under ``path`` (a card: not)."""
    if type(node) is not dict or not node:
        return False
    if is_index_patch(node):
        return True
    if len(path) == 2 and path[0] == "artifacts":
        return False
    return any(_index_object_at(v, (*path, k)) for k, v in node.items())


SHOWN_VIEWS = st.sampled_from(
    [
        None,
        {},
        {"tactics": {"a": [1, 2, 3], "[0]": {"b": [4]}}, "strategy": {"b": ["x"]}},
        {"tactics": [1, 2], "strategy": {"a": {"b": [1, 2, 3, 4]}}},
    ]
)
AUTHORED_KEYS = st.sampled_from(["a", "b", "[0]", "[1]", "[2]"])
AUTHORED_PATCHES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=2) | st.lists(st.integers(), max_size=2),
    lambda inner: st.dictionaries(AUTHORED_KEYS, inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=1500, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["intents", "strategy", "tactics", "artifacts", "lazy"]),
        st.dictionaries(AUTHORED_KEYS, AUTHORED_PATCHES) | st.dictionaries(ODD_KEYS, ODD_VALUES) | st.none(),
        min_size=1,
    ),
    SHOWN_VIEWS,
)
def test_a_patch_check_lists_the_paths_the_patch_authors(patch: dict[str, Any], shown: Any) -> None:
    # the walk that checks a patch lists what the receipt's ``authored_paths`` would, or says
    # it cannot (an object of "[N]" keys, whose paths depend on the view last shown); it
    # refuses exactly what the check alone refuses, with the same error
    authored = Authored()
    refused = _checked(patch, authored)
    assert refused == _checked(patch, None)
    if refused is not None:
        return
    planes = PlaneSet()
    indexed = any(_index_object_at(v, (p,)) for p, v in patch.items() if p not in planes.lazy)
    assert authored.known is not indexed
    if authored.known:
        assert list(authored) == authored_paths(patch, planes.lazy, shown)


def test_a_patch_check_lists_its_paths_to_the_depth_limit() -> None:
    deep: Any = 1
    for _ in range(MAX_DEPTH - 1):
        deep = {"k": deep}
    authored = Authored()
    assert _checked({"tactics": deep}, authored) is None
    assert authored.known and list(authored) == [("tactics", *["k"] * (MAX_DEPTH - 1))]
    for patch in ({"tactics": {"k": deep}}, {"tactics": {"k": {"k": deep}}}, {"tactics": {"l": [None]}}):
        assert _checked(patch, Authored()) == _checked(patch, None) is not None
    empty: Any = {}
    for _ in range(MAX_DEPTH - 1):
        empty = {"k": empty}
    assert _checked({"tactics": empty}, Authored()) == _checked({"tactics": empty}, None) is not None


def test_a_scope_records_its_intents_first_whatever_the_patch_lists_first(store: SqlStore) -> None:
    # intents are staged first (their ownership cascade follows): the change lists their paths
    # before the other planes' and a new intents member takes the first position
    m = view(store)
    key = m.keys["session"]
    m.patch_state(
        {"session": {"tactics": {"t": 1}, "strategy": {"s": 1}, "intents": {"ship": {"goal": "g"}}}}
    )
    assert list(store.read([key])[key].body or {}) == ["intents", "tactics", "strategy"]
    m.patch_state({"session": {"lazy": {"l": 1}, "intents": {"ship": {"goal": "h"}}, "tactics": {"t": None}}})
    newest = store.history([key], limit=1)[0]  # (a plane left empty goes first: the diff's deletions)
    assert newest.paths == [["tactics"], ["intents", "ship", "goal"], ["lazy"]]


def test_empty_objects_are_pruned_along_the_patch(store: SqlStore) -> None:
    m = view(store)
    m.patch_state({"session": {"tactics": {"a": {"b": {"c": 1}}, "e": {}, "l": [{"x": {}, "y": 1}, {}]}}})
    assert state(m, "session.tactics") == {"a": {"b": {"c": 1}}, "l": [{"y": 1}, {}]}
    m.patch_state({"session": {"tactics": {"a": {"b": {"c": None}}}}})
    assert state(m, "session.tactics") == {"l": [{"y": 1}, {}]}
    m.patch_state({"session": {"tactics": {"l": None}}})
    assert state(m, "session") == {}


def test_intent_ownership_worked_example(store: SqlStore) -> None:
    m = view(store)
    refs = ["a", "a.x", "shared", "up.y", "down", "gone", "scalar.k"]
    m.patch_state(
        {
            "session": {
                "intents": {
                    "done": {
                        "refs": [{"$ref": f"session.tactics.{r}"} for r in refs]
                        + [{"$ref": "session.lazy.plan"}]
                    },
                    "keep": {
                        "refs": [
                            {"$ref": "session.tactics.shared"},
                            {"$ref": "session.tactics.up"},
                            {"$ref": "session.tactics.down.z"},
                        ]
                    },
                    "edited": {"$ref": "session.tactics.edited"},
                },
                "tactics": {
                    "a": {"x": 1},
                    "shared": 1,
                    "up": {"y": 1},
                    "down": {"z": 1},
                    "edited": 1,
                    "scalar": "k",
                },
                "lazy": {"plan": [1], "other": 2},
            }
        }
    )
    receipt = m.patch_state({"session": {"intents": {"done": None, "edited": "no refs"}}})
    assert receipt.state_updates is not None
    assert receipt.state_updates["cascaded"] == ["session.lazy.plan", "session.tactics.a"]
    assert state(m, "session.tactics") == {
        "shared": 1,
        "up": {"y": 1},
        "down": {"z": 1},
        "edited": 1,
        "scalar": "k",
    }
    assert state(m, "session.lazy") == {"other": 2}


def test_supersede_in_one_patch_and_textual_refs_never_own(store: SqlStore) -> None:
    m = view(store)
    m.patch_state(
        {
            "cwd": {
                "intents": {"old": {"$ref": "cwd.lazy.plan"}, "mention": "uses $cwd.strategy.rule"},
                "lazy": {"plan": ["step"]},
                "strategy": {"rule": "r"},
            }
        }
    )
    m.patch_state({"cwd": {"intents": {"old": None, "new": {"$ref": "cwd.lazy.plan"}, "mention": None}}})
    assert state(m, "cwd.lazy.plan") == ["step"]
    assert state(m, "cwd.strategy.rule") == "r"


def test_a_replacement_intent_ref_to_an_element_or_the_plane_keeps_the_targets(store: SqlStore) -> None:
    """The seed clears a deleted intent's targets "unless final remaining/new same-scope
    intents reference them directly or through ancestors/descendants". A replacement's ref to
    an element of the owned array (``lazy.q[0]``) or to the plane root (``session.lazy``)
    cannot own, but it still references the target: both were cleared, the new intent left
    dangling in the patch that made it."""
    m = view(store)
    seeded = {
        "lazy": {"q": ["one", "two"], "z": 1, "w": 2},
        "tactics": {"t": {"deep": 1}},
        "intents": {
            "old": {
                "plan": {"$ref": "session.lazy.q"},
                "z": {"$ref": "session.lazy.z"},
                "t": {"$ref": "session.tactics.t"},
            }
        },
    }
    m.patch_state({"session": seeded})
    receipt = m.patch_state(
        {"session": {"intents": {"old": None, "new": {"first": {"$ref": "session.lazy.q[0]"}}}}}
    )
    assert receipt.state_updates is not None
    assert receipt.state_updates["cascaded"] == ["session.lazy.z", "session.tactics.t"]
    assert state(m, "session.lazy") == {"q": ["one", "two"], "w": 2}
    assert m.read_state({"path": "session.lazy.q[0]"}) == {"value": "one"}

    m.patch_state({"session": {"intents": {"again": {"q": {"$ref": "session.lazy.q"}}}}})
    receipt = m.patch_state(
        {"session": {"intents": {"again": None, "new": None, "all": {"$ref": "session.lazy"}}}}
    )
    assert receipt.state_updates is not None and "cascaded" not in receipt.state_updates
    assert state(m, "session.lazy") == {"q": ["one", "two"], "w": 2}
    # a ref into another scope, or the effective view, keeps nothing (it never owned either)
    m.patch_state({"session": {"intents": {"last": {"$ref": "session.lazy.w"}}}})
    receipt = m.patch_state(
        {"session": {"intents": {"last": None, "all": None, "x": {"$ref": "effective.lazy.w"}}}}
    )
    assert receipt.state_updates is not None and receipt.state_updates["cascaded"] == ["session.lazy.w"]


def test_cascade_targets_are_cleared_before_authored_writes_recreate_them(store: SqlStore) -> None:
    m = view(store)
    m.patch_state(
        {"session": {"intents": {"i": {"$ref": "session.tactics.draft"}}, "tactics": {"draft": {"old": 1}}}}
    )
    receipt = m.patch_state({"session": {"intents": {"i": None}, "tactics": {"draft": {"new": 2}}}})
    assert state(m, "session.tactics.draft") == {"new": 2}  # fresh knowledge, no old fields
    assert receipt.state_updates is not None and receipt.state_updates["cascaded"] == [
        "session.tactics.draft"
    ]


@pytest.mark.parametrize(
    "deletion",
    [
        {"ship": None},  # the intent deleted
        {"ship": {"plan": None, "note": None}},  # every key of it deleted: pruned, so deleted too
    ],
)
def test_an_intent_deleted_by_pruning_clears_what_it_owned_in_lazy_too(
    store: SqlStore, deletion: dict[str, Any]
) -> None:
    m = view(store)
    ship = {"plan": {"$ref": "session.lazy.plan"}, "note": "text"}
    m.patch_state({"session": {"lazy": {"plan": ["a"]}, "intents": {"ship": ship}}})
    receipt = m.patch_state({"session": {"intents": deletion}})
    assert state(m, "session.intents") is None
    assert state(m, "session.lazy") is None
    assert receipt.state_updates is not None
    assert receipt.state_updates["cascaded"] == ["session.lazy.plan"]


def test_ownership_never_crosses_scopes(store: SqlStore) -> None:
    m = view(store)
    m.patch_state(
        {"session": {"intents": {"i": {"$ref": "cwd.tactics.shared"}}}, "cwd": {"tactics": {"shared": 1}}}
    )
    receipt = m.patch_state({"session": {"intents": {"i": None}}})
    assert state(m, "cwd.tactics.shared") == 1
    assert receipt.state_updates is not None and "cascaded" not in receipt.state_updates


def test_single_owner_view_uses_flat_paths_patches_and_anchored_refs(store: SqlStore) -> None:
    m = view(store, scopes=("cwd",))
    receipt = m.patch_state({"intents": {"release": {"$ref": "lazy.plan"}}, "lazy": {"plan": ["a"]}})
    assert receipt.message == "State materialized atomically at cwd scope."
    assert state(m, "intents.release") == {"$ref": "lazy.plan"}  # read back relative
    everyone = view(store)
    assert state(everyone, "cwd.intents.release") == {"$ref": "cwd.lazy.plan"}  # stored canonical
    receipt = m.patch_state({"intents": {"release": None}})
    assert receipt.state_updates is not None and receipt.state_updates["cascaded"] == ["lazy.plan"]
    with pytest.raises(InvalidPath, match="does not select"):
        m.read_state({"path": "session.tactics"})
    with pytest.raises(InvalidInput, match="cannot write the session scope"):
        m.patch_state({"session": {"tactics": {"a": 1}}})
    assert state(m, "lazy") is None
    # either form alone is taken; both in one patch are refused, naming the rule (nothing written)
    m.patch_state({"cwd": {"lazy": {"b": 1}}})
    mixed = {"lazy": {"a": 2}, "cwd": {"lazy": {"a": None}}}
    with pytest.raises(InvalidInput) as refused:
        m.patch_state(mixed)
    assert str(refused.value) == (
        'patch_state takes the cwd scope\'s planes at the top level ({"lazy": {…}}) or its scope object '
        '({"cwd": {…}}), not both in one patch'
    )
    with pytest.raises(InvalidInput, match="does not accept field foo"):
        m.patch_state({"lazy": {"a": 2}, "foo": {}})
    assert state(m, "lazy") == {"b": 1}


def test_receipts_never_carry_lazy_bodies(store: SqlStore) -> None:
    m = view(store)
    receipt = m.patch_state({"session": {"lazy": {"secret": "body text"}, "tactics": {"a": 1}}})
    assert "body text" not in receipt.text()
    assert receipt.state_updates is not None
    assert receipt.state_updates["lazy_navigation"] == {
        "available": True,
        "path": "effective.lazy",
        "keys": {"secret": "string"},
    }


def test_response_recording_follows_the_mode(store: SqlStore) -> None:
    active = view(store)
    assert active.record_response("the answer")
    assert state(active, "response") == "the answer"
    assert not active.record_response("the answer")
    assert active.record_response("")  # clearing a non-empty answer is a transition
    assert state(active, "response") is None
    passive = view(store, mode="passive")
    assert not passive.record_response("ignored")
    off = view(store, mode="off")
    with pytest.raises(InvalidInput, match="off"):
        off.read_state({"path": "effective"})


@pytest.mark.parametrize("mode", ["active", "passive"])
def test_a_view_without_the_session_scope_cannot_record_a_response(store: SqlStore, mode: str) -> None:
    shared = view(store, scopes=("global", "cwd"), mode=mode)
    before = transitions(store)
    with pytest.raises(InvalidInput, match="session scope: this view selects global, cwd"):
        shared.record_response("an answer nobody asked this view for")
    assert transitions(store) == before
    assert state(view(store), "session.response") is None


def test_memory_scopes_are_records_of_the_memory_state(store: SqlStore) -> None:
    from stateflow.subjects import Subject

    m = view(store, cwd="/tmp")
    m.patch_state({"cwd": {"tactics": {"a": 1}}})
    [t] = store.transitions()
    [change] = t.changes
    assert change.key.state == "memory"
    assert Subject.decode(change.key.subject) == Subject("agent", "agent-a", "cwd", "/tmp")
    assert t.origin["door"] == "tool"


def test_concurrent_patches_of_one_scope_from_separate_stores_all_land(open_migrated: StoreFactory) -> None:
    # each writer has its own store object, as separate processes do: no shared cache, no
    # shared group commit; their optimistic reads lose to each other and must retry or queue
    # for the row lock, never drop a patch or apply one to a state it was not merged into
    writers, calls = 6, 8
    stores = [open_migrated() for _ in range(writers)]
    try:

        def worker(n: int) -> None:
            m = view(stores[n])
            for i in range(calls):
                receipt = m.patch_state({"session": {"tactics": {f"w{n}": i, f"w{n}_{i}": True}}})
                assert receipt.changed_scopes == ["session"] and receipt.seq is not None

        assert run_threads(worker, writers) == []
        m = view(stores[0])
        tactics = state(m, "session.tactics")
        assert {k: v for k, v in tactics.items() if "_" not in k} == {
            f"w{n}": calls - 1 for n in range(writers)
        }
        assert {k for k in tactics if "_" in k} == {f"w{n}_{i}" for n in range(writers) for i in range(calls)}
        assert transitions(stores[0]) == writers * calls
        # every patch was merged into the state the one before it left: one revision each
        assert stores[0].read([m.keys["session"]])[m.keys["session"]].revision == writers * calls
    finally:
        for s in stores:
            s.close()


def test_concurrent_patches_of_one_scope_lose_nothing(store: SqlStore) -> None:
    def worker(n: int) -> None:
        m = view(store)
        for i in range(10):
            m.patch_state({"cwd": {"tactics": {f"k{n}_{i}": i}}, "session": {"lazy": {f"n{n}": i}}})

    assert run_threads(worker, 4) == []
    m = view(store)
    assert len(state(m, "cwd.tactics")) == 40
    assert state(m, "session.lazy") == {f"n{n}": 9 for n in range(4)}
    assert transitions(store) == 40


def test_null_deletes_a_whole_plane_as_deleting_each_of_its_keys_does(store: SqlStore, tmp_path: Any) -> None:
    source = tmp_path / "notes.md"
    source.write_text("hi\n")
    m = view(store, cwd=str(tmp_path))
    m.patch_state(
        {
            "cwd": {"artifacts": {str(source): {"description": "notes"}}, "tactics": {"t": "cwd"}},
            "session": {
                "intents": {"release": {"goal": "ship", "plan": {"$ref": "session.lazy.plan"}}},
                "lazy": {"plan": ["a"], "keep": 1},
                "tactics": {"t": "session"},
            },
        }
    )
    receipt = m.patch_state({"cwd": {"artifacts": None}, "session": {"intents": None, "tactics": None}})
    assert receipt.state_updates is not None
    # deleting the intents plane deletes every intent: what they owned is cleared
    assert receipt.state_updates["cascaded"] == ["session.lazy.plan"]
    assert receipt.state_updates["effective"] == [
        {"path": ["artifacts"], "deleted": True},
        {"path": ["intents"], "deleted": True},
        {"path": ["tactics"], "value": {"t": "cwd"}},  # the broader value is revealed
    ]
    assert state(m, "effective") == {"tactics": {"t": "cwd"}}
    assert state(m, "session.lazy") == {"keep": 1}
    cwd_key = m.keys["cwd"]
    assert store.read([cwd_key])[cwd_key].body == {"tactics": {"t": "cwd"}}  # the cards' provenance went too
    # the recorded change is the patch that would make it, and it can be sent again
    assert m.read_state({"path": "cwd.patches[0]"}) == {"value": {"artifacts": None}}
    m.patch_state({"session": {"lazy": None}})
    assert state(m, "session.lazy") is None
    before = transitions(store)
    again = m.patch_state({"session": {"lazy": None}})  # an absent plane: nothing to delete
    assert again.message == "State already current." and transitions(store) == before
    assert again.hints == [
        {"type": "missing-deletion", "target": "/session/lazy", "unavailable": "/session/lazy"}
    ]
    one = view(store, scopes=("cwd",), cwd=str(tmp_path))
    assert one.patch_state({"tactics": None}).changed_scopes == ["cwd"]
    assert state(one, "tactics") is None


@pytest.mark.parametrize(
    "patch",
    [
        {"tactics": {"a": "x\ud800"}},
        {"tactics": {"gone\udc00": None}},  # a deletion: its key is never encoded
        {"artifacts": {"/tmp/notes\ud800.md": {"description": "d"}}},  # a source path read from disk
        {"lazy": {"plan": ["\ud83d"]}},
    ],
)
def test_a_lone_surrogate_in_a_patch_is_refused_as_invalid_json_and_writes_nothing(
    store: SqlStore, patch: dict[str, Any]
) -> None:
    # text a JSON door parses cannot hold one; Python can, and the view refuses it as they do
    m = view(store, ("session",), cwd="/tmp")
    m.patch_state({"session": {"tactics": {"kept": 1}}})
    before = transitions(store)
    with pytest.raises(
        InvalidJSON, match=r"lone surrogate \(\\ud[8-f][0-9a-f]{2}\) is not Unicode text"
    ) as caught:
        m.patch_state({"session": patch})
    assert caught.value.code == "invalid-json"
    assert transitions(store) == before and state(m, "session.tactics") == {"kept": 1}
