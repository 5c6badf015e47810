"""Receipts against what the model was shown, and values too large to repeat (both backends)."""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from stateflow.doc.merge import Emitted, merge_patch, overlay
from stateflow.doc.select import MISSING
from stateflow.errors import HotBudgetExceeded, PatchError
from stateflow.memory.planes import PlaneSet, effective_view, model_view
from stateflow.memory.receipts import ECHO_LIMIT, authored_entries, authored_paths, effective_entries
from stateflow.store import SqlStore
from stateflow.store.spares import SPARES
from tests.memory_helpers import view


def entries(receipt: Any) -> list[dict[str, Any]]:
    assert receipt.state_updates is not None, receipt.message
    return list(receipt.state_updates["effective"])


def test_a_lazy_write_with_nothing_to_reconcile_gets_no_state_updates(store: SqlStore) -> None:
    m = view(store)
    m.patch_state({"session": {"lazy": {"notes": ["n0", "n1"]}}})
    m.context()
    # an element edit under lazy: no hot path, the navigation's keys as shown
    receipt = m.patch_state({"session": {"lazy": {"notes": {"[1]": "N1"}}}})
    assert receipt.message == "State materialized atomically at session scope."
    assert receipt.state_updates is None and receipt.changed_scopes == ["session"]
    assert m.read_state({"path": "session.lazy.notes"}) == {"value": ["n0", "N1"]}
    # a new top-level lazy key changes the navigation: that is reported, with no effective entry
    receipt = m.patch_state({"session": {"lazy": {"plan": "p"}}})
    assert receipt.state_updates is not None and receipt.state_updates["effective"] == []
    assert receipt.state_updates["lazy_navigation"]["keys"] == {"notes": "array", "plan": "string"}


def test_a_shared_write_by_another_session_appears_in_the_next_receipt(store: SqlStore) -> None:
    mine, other = view(store, session="mine"), view(store, session="other")
    mine.context()  # what the model of "mine" was shown
    other.patch_state({"cwd": {"strategy": {"db": "postgres"}}})
    receipt = mine.patch_state({"session": {"tactics": {"next": "migrate"}}})
    assert entries(receipt) == [
        {"path": ["strategy"], "value": {"db": "postgres"}},
        {"path": ["tactics"], "value": {"next": "migrate"}},
    ]
    # the receipt advanced the shown view: the same drift is not repeated
    again = mine.patch_state({"session": {"tactics": {"then": "test"}}})
    assert entries(again) == [{"path": ["tactics", "then"], "value": "test"}]


def test_drift_alone_is_reported_even_when_the_patch_changes_nothing(store: SqlStore) -> None:
    mine, other = view(store, session="mine"), view(store, session="other")
    mine.patch_state({"session": {"tactics": {"next": "x"}}})
    other.patch_state({"global": {"strategy": {"style": "terse"}}})
    receipt = mine.patch_state({"session": {"tactics": {"next": "x"}}})
    assert receipt.message == "State already current."
    assert entries(receipt) == [
        {"path": ["strategy"], "value": {"style": "terse"}},
        {"path": ["tactics", "next"], "value": "x"},
    ]


def test_a_write_hidden_by_a_narrower_scope_reports_the_value_that_hides_it(store: SqlStore) -> None:
    m = view(store)
    m.patch_state({"session": {"tactics": {"mode": "session value"}}})
    receipt = m.patch_state({"global": {"tactics": {"mode": "global value"}}})
    assert receipt.changed_scopes == ["global"]
    assert entries(receipt) == [{"path": ["tactics", "mode"], "value": "session value"}]


def test_deleting_a_key_reveals_the_broader_value(store: SqlStore) -> None:
    m = view(store)
    m.patch_state({"cwd": {"tactics": {"k": "cwd"}}, "session": {"tactics": {"k": "session"}}})
    receipt = m.patch_state({"session": {"tactics": {"k": None}}})
    assert entries(receipt) == [{"path": ["tactics", "k"], "value": "cwd"}]
    gone = m.patch_state({"cwd": {"tactics": {"k": None}}})
    assert entries(gone) == [{"path": ["tactics"], "deleted": True}]


def test_cascaded_lists_each_scopes_targets_as_the_published_example(store: SqlStore) -> None:
    m = view(store)
    m.patch_state(
        {
            "session": {
                "intents": {
                    "ship": {"plan": {"$ref": "session.lazy.plans.x"}, "d": {"$ref": "session.tactics.draft"}}
                },
                "tactics": {"draft": "v1"},
                "lazy": {"plans": {"x": [1, 2]}},
            }
        }
    )
    receipt = m.patch_state({"session": {"intents": {"ship": None}}})
    assert receipt.state_updates is not None
    assert receipt.state_updates["cascaded"] == ["session.lazy.plans.x", "session.tactics.draft"]


def test_cascaded_goes_global_cwd_session_and_a_cleared_path_may_show_a_broader_value(
    store: SqlStore,
) -> None:
    """Seed 000: targets listed Global, CWD, Session, each scope's in its cascade order; a cleared
    session path that reveals a cwd value is reported with that value, not as deleted."""
    m = view(store)
    m.patch_state(
        {
            "session": {
                "intents": {"s": [{"$ref": "session.tactics.draft"}, {"$ref": "session.lazy.plans.x"}]},
                "tactics": {"draft": "session draft"},
                "lazy": {"plans": {"x": 1, "y": 2}},
            },
            "cwd": {
                "intents": {"c": [{"$ref": "cwd.tactics.rule"}, {"$ref": "cwd.strategy.db"}]},
                "tactics": {"rule": "r", "draft": "cwd draft"},
                "strategy": {"db": "sqlite"},
            },
            "global": {"intents": {"g": {"$ref": "global.lazy.notes"}}, "lazy": {"notes": ["n"]}},
        }
    )
    m.context()
    receipt = m.patch_state(
        {
            "session": {"intents": {"s": None}},
            "global": {"intents": {"g": None}},
            "cwd": {"intents": {"c": None}},
        }
    )
    assert receipt.state_updates is not None
    assert receipt.state_updates["cascaded"] == [
        "global.lazy.notes",
        "cwd.strategy.db",
        "cwd.tactics.rule",
        "session.lazy.plans.x",
        "session.tactics.draft",
    ]
    effective = entries(receipt)
    assert {"path": ["tactics", "draft"], "value": "cwd draft"} in effective  # revealed, not deleted
    assert {"path": ["tactics", "rule"], "deleted": True} in effective
    assert "session draft" not in receipt.text() and '"y"' not in receipt.text()  # paths only, no bodies
    assert m.read_state({"path": "effective.lazy.plans"}) == {"value": {"y": 2}}


def test_a_single_owner_lists_its_cascade_relative_in_the_published_order(store: SqlStore) -> None:
    m = view(store, scopes=("session",))
    m.patch_state(
        {
            "intents": {"ship": {"plan": {"$ref": "lazy.plans.x"}, "d": {"$ref": "tactics.draft"}}},
            "tactics": {"draft": "v1"},
            "lazy": {"plans": {"x": [1, 2]}},
        }
    )
    receipt = m.patch_state({"intents": {"ship": None}})
    assert receipt.state_updates is not None
    assert receipt.state_updates["cascaded"] == ["lazy.plans.x", "tactics.draft"]


def test_receipts_and_recent_transitions_never_repeat_a_large_value(store: SqlStore) -> None:
    m = view(store)
    big = "x" * (1024 * 1024)
    receipt = m.patch_state({"session": {"tactics": {"notes": big, "small": 1}}})
    assert len(receipt.text()) < 1000
    assert entries(receipt) == [
        {
            "path": ["tactics", "notes"],
            "omitted_bytes": len(big) + 2,
            "read_state": {"path": "effective.tactics.notes"},
        },
        {"path": ["tactics", "small"], "value": 1},
    ]
    assert m.read_state(entries(receipt)[0]["read_state"]) == {"value": big}
    m.patch_state({"session": {"tactics": {"small": 2}}})
    head = m.context().head
    (first, _second) = head["recent_transitions"]
    patch = first["changes"][0]["patch"]
    assert patch["tactics"]["notes"] == {
        "$omitted": {"omitted_bytes": len(big) + 2, "read_state": {"path": "session[1].tactics.notes"}}
    }
    assert m.read_state({"path": "session[1].tactics.notes"}) == {"value": big}
    # the hot state itself is shown once: the context is the value plus a bounded remainder
    context = m.context().text()
    assert len(big) < len(context) < len(big) + 8 * ECHO_LIMIT
    assert json.dumps(head["state"]["tactics"]["small"]) == "2"


def test_a_large_value_under_a_key_the_read_grammar_cannot_spell_is_read_by_its_ancestor(
    store: SqlStore,
) -> None:
    # patch_state takes such keys: the value left out is still one call away, the nearest
    # readable ancestor's, which holds it (as the dangling-reference hint names such a place)
    m = view(store)
    big = "y" * 3000
    receipt = m.patch_state({"session": {"tactics": {"bad key": {"a.b": big}}}})
    (entry,) = entries(receipt)
    assert entry == {
        "path": ["tactics", "bad key", "a.b"],
        "omitted_bytes": len(big) + 2,
        "read_state": {"path": "effective.tactics"},
    }
    assert m.read_state(entry["read_state"])["value"]["bad key"]["a.b"] == big
    m.patch_state({"session": {"tactics": {"small": 1}}})
    (first, _second) = m.context().head["recent_transitions"]
    stand_in = first["changes"][0]["patch"]["tactics"]["bad key"]["a.b"]["$omitted"]
    assert stand_in["read_state"] == {"path": "session[1].tactics"}
    assert m.read_state(stand_in["read_state"])["value"]["bad key"]["a.b"] == big


def test_a_hot_budget_refuses_growth_and_names_the_fix(store: SqlStore) -> None:
    m = view(store, hot_budget=4096)
    m.patch_state({"session": {"tactics": {"small": "fits"}}})
    try:
        m.patch_state({"session": {"tactics": {"big": "y" * 5000}}})
    except HotBudgetExceeded as exc:
        assert exc.code == "hot-budget" and "move large values to lazy" in exc.message
    else:
        raise AssertionError("the budget was not enforced")
    assert m.read_state({"path": "effective"}) == {"value": {"tactics": {"small": "fits"}}}
    m.patch_state({"session": {"lazy": {"big": "y" * 5000}}})  # the fix: lazy is not hot
    context = m.context()
    assert context.hot_bytes == len('{"tactics":{"small":"fits"}}')
    assert f"State Flow hot state: {context.hot_bytes} bytes of a 4096-byte budget" in context.text()


def test_an_index_patch_is_reported_per_element_against_the_shown_array(store: SqlStore) -> None:
    m = view(store)
    m.patch_state({"session": {"tactics": {"steps": ["a", "b", "c"], "plan": [{"n": 1}, {"n": 2}]}}})
    m.context()
    receipt = m.patch_state(
        {"session": {"tactics": {"steps": {"[1]": "B", "[2]": "C"}, "plan": {"[0]": {"n": 10}}}}}
    )
    assert entries(receipt) == [
        {"path": ["tactics", "steps", 1], "value": "B"},
        {"path": ["tactics", "steps", 2], "value": "C"},
        {"path": ["tactics", "plan", 0, "n"], "value": 10},
    ]


def test_an_index_patch_without_a_shown_array_reports_the_whole_array(store: SqlStore) -> None:
    mine, other = view(store, session="mine"), view(store, session="other")
    other.patch_state({"cwd": {"tactics": {"steps": ["a", "b"]}}})
    mine.context()
    other.patch_state({"cwd": {"tactics": {"steps": ["a", "b", "c"]}}})  # not shown to "mine"
    receipt = mine.patch_state({"cwd": {"tactics": {"steps": {"[2]": "C"}}}})
    assert entries(receipt) == [{"path": ["tactics", "steps"], "value": ["a", "b", "C"]}]


def test_a_kept_view_survives_a_shorter_rewrite_and_ignores_a_torn_file(
    store: SqlStore, tmp_path: Any
) -> None:
    from stateflow.memory import shown

    directory = str(tmp_path / "runtime")
    key = ("agent-a", "/tmp", "s1")
    wide = shown.Shown(
        {"session": 1}, "d1", {"available": True, "keys": {f"k{i}": "array" for i in range(30)}}
    )
    narrow = shown.Shown({"session": 2}, "d2", {"available": False})
    shown.remember(store, key, wide, directory)
    shown.remember(store, key, narrow, directory)
    other_process = object.__new__(type(store))  # a store object this process never showed a view through
    other_process.url = store.url
    recalled = shown.recall(other_process, key, directory)
    assert recalled is not None and (recalled.revisions, recalled.digest) == ({"session": 2}, "d2")
    [path] = (tmp_path / "runtime" / "shown").iterdir()
    path.write_bytes(path.read_bytes()[:20])  # torn
    assert shown.recall(other_process, key, directory) is None


def test_a_value_is_repeated_up_to_the_echo_limit_of_its_encoded_bytes(store: SqlStore) -> None:
    # at the limit's edge: escapes count (a control character encodes to 6 bytes), and a large
    # object is split into its members, of which only the large ones are omitted
    m = view(store)
    at_limit = {"plain": "a" * (ECHO_LIMIT - 2), "escaped": "\x01" * ((ECHO_LIMIT - 2) // 6), "n": 10**18}
    over = {"plain": "a" * (ECHO_LIMIT - 1), "escaped": "\x01" * ((ECHO_LIMIT - 2) // 6 + 1)}
    listed = ["b" * 100] * 30
    receipt = m.patch_state({"session": {"tactics": {"at": at_limit, "over": over, "listed": listed}}})
    omitted = {tuple(e["path"]): e["omitted_bytes"] for e in entries(receipt) if "omitted_bytes" in e}
    shown = {tuple(e["path"]): e["value"] for e in entries(receipt) if "value" in e}
    assert shown == {("tactics", "at", k): v for k, v in at_limit.items()}
    assert omitted == {
        ("tactics", "over", "plain"): ECHO_LIMIT + 1,
        ("tactics", "over", "escaped"): ECHO_LIMIT + 6,
        ("tactics", "listed"): len(json.dumps(listed, separators=(",", ":"))),
    }


# ------------------------------------------------------------------ a receipt without its diff

RECEIPT_KEYS = st.sampled_from(["a", "b", "[0]"])
RECEIPT_SCALARS = st.booleans() | st.integers(-2, 2) | st.sampled_from(["", "x", "y"])
RECEIPT_VALUES = st.recursive(
    RECEIPT_SCALARS,
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(RECEIPT_KEYS, inner, max_size=2),
    max_leaves=8,
)
RECEIPT_PATCHES: st.SearchStrategy[Any] = st.recursive(
    st.none() | RECEIPT_SCALARS | st.lists(RECEIPT_VALUES, max_size=2) | st.just({}),
    lambda inner: st.dictionaries(RECEIPT_KEYS, inner, max_size=2),
    max_leaves=6,
)
RECEIPT_PLANES = st.sampled_from(["intents", "strategy", "tactics", "response", "lazy"])
SCOPE_STATES = st.dictionaries(RECEIPT_PLANES, RECEIPT_VALUES, max_size=3)
SCOPE_PATCHES = st.dictionaries(RECEIPT_PLANES, RECEIPT_PATCHES, max_size=3)


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.tuples(SCOPE_STATES, SCOPE_PATCHES), min_size=1, max_size=3), st.booleans())
def test_a_receipt_skips_its_diff_only_where_the_diff_would_change_nothing(
    scopes: list[tuple[dict[str, Any], dict[str, Any]]], active: bool
) -> None:
    """Where every scope's merge listed its edits and each lies at or under an authored path,
    the entries are those of the diff of the hot views before and after, without it."""
    planes = PlaneSet()

    def hot_view(states: list[dict[str, Any]]) -> dict[str, Any]:
        view = overlay(*(model_view(s, planes) for s in states))
        view = {} if view is MISSING else dict(view)
        if not active:
            view.pop("response", None)
        return view

    basis, new, edited, authored = [], [], [], []
    for state, patch in scopes:
        edits = Emitted()
        try:
            merged = merge_patch(state, patch, copies=SPARES, prune=True, edits=edits)
        except PatchError:
            return
        basis.append(state)
        new.append(merged)
        edited.append(edits)
        if not edits.exact:
            return  # the receipt takes the diff
    before, after = hot_view(basis), hot_view(new)
    for patch in (p for _, p in scopes):
        authored += authored_paths(patch, planes.lazy, before)
    hot = frozenset(planes.names).difference(planes.lazy)
    got = authored_entries(edited, authored, hot, after)
    if got is not None:
        assert got == effective_entries(before, after, authored)


def test_a_receipt_takes_its_diff_where_an_edit_lies_above_what_the_patch_names() -> None:
    planes = PlaneSet()
    hot = frozenset(planes.names).difference(planes.lazy)
    # an object patched onto a scalar is one edit of the whole object, above the authored leaf
    states: list[dict[str, Any]] = [{"tactics": {"next": "x"}}, {"tactics": {}}]
    for state in states:
        edits = Emitted()
        after = merge_patch(state, {"tactics": {"next": {"step": 1}}}, prune=True, edits=edits)
        assert edits.exact
        assert authored_entries([edits], [("tactics", "next", "step")], hot, after) is None
    # leaves set, and a plane the hot view does not show; a path authored by two scopes is
    # listed once, at its last place, and one under another authored path not at all
    edits = Emitted()
    after = merge_patch(
        {"tactics": {"next": "x"}, "lazy": {}}, {"tactics": {"next": "y"}, "lazy": {"k": 1}}, edits=edits
    )
    authored: list[tuple[str | int, ...]] = [("tactics", "next"), ("strategy",), ("strategy", "s")]
    authored.append(("tactics", "next"))
    assert authored_entries([edits], authored, hot, after) == [
        (("strategy",), MISSING),
        (("tactics", "next"), "y"),
    ]


@settings(max_examples=800, deadline=None)
@given(st.lists(st.none() | SCOPE_STATES, min_size=1, max_size=3), st.booleans())
def test_the_effective_view_is_the_overlay_of_the_scopes_views(
    states: list[dict[str, Any] | None], with_lazy: bool
) -> None:
    planes = PlaneSet()
    whole = overlay(*(model_view(s, planes, with_lazy=with_lazy) for s in states))
    expected = {name: whole[name] for name in planes.names if name in whole}
    got = effective_view(states, planes, with_lazy=with_lazy)
    assert orjson.dumps(got) == orjson.dumps(expected)  # key order too, at every level
