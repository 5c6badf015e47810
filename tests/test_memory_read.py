"""read_state: paths, ranges, projections, batches, history, hints (both backends)."""

from __future__ import annotations

from typing import Any

import pytest

from stateflow.errors import InvalidInput, InvalidPath, NotFound, SelectionError
from stateflow.store import SqlStore

from .memory_helpers import transitions, view

TEN = [f"thought {i}" for i in range(10)]


@pytest.fixture
def v(store: SqlStore):  # type: ignore[no-untyped-def]
    m = view(store)
    m.patch_state(
        {
            "cwd": {
                "lazy": {"memory": TEN, "rules": {"ranges": "Ranges are half-open.", "publication": {"x": 1}}}
            },
            "session": {"tactics": {"nextAction": "Implement progressive reads."}, "lazy": {"soul": ["s"]}},
        }
    )
    return m


@pytest.mark.parametrize(
    ("rng", "expected"), [("[0:10]", TEN), ("[10:10]", []), ("[0..3]", TEN[:3]), ("[4]", TEN[4])]
)
def test_ranges_and_items_that_fit(v, rng, expected) -> None:  # type: ignore[no-untyped-def]
    assert v.read_state({"path": f"cwd.lazy.memory{rng}"}) == {"value": expected}


@pytest.mark.parametrize(
    ("rng", "what"),
    [
        ("[0:15]", "range [0:15]"),
        ("[11:11]", "range [11:11]"),
        ("[0..11]", "range [0:11]"),
        ("[10]", "index 10"),
    ],
)
def test_ranges_that_do_not_fit_fail(v, rng, what) -> None:  # type: ignore[no-untyped-def]
    # the refusal names the array, not the path through it (read along the path, or whole)
    for path in (f"cwd.lazy.memory{rng}", f"cwd[0].lazy.memory{rng}", f"cwd.lazy.memory{rng}.x"):
        with pytest.raises(SelectionError) as refused:
            v.read_state({"path": path})
        assert str(refused.value) == f"{what} is outside {path.split('.lazy')[0]}.lazy.memory (length 10)"


def test_projections_have_exactly_their_fields(v) -> None:  # type: ignore[no-untyped-def]
    assert v.read_state({"path": "effective.lazy", "projection": "keys"}) == {
        "meta": {"type": "object", "size": 3},
        "keys": {"memory": "array", "rules": "object", "soul": "array"},
    }
    assert v.read_state({"path": "cwd.lazy.rules", "projection": "keys"}) == {
        "meta": {"type": "object", "size": 2},
        "keys": {"ranges": "string", "publication": "object"},
    }
    assert v.read_state({"path": "cwd.lazy.memory", "projection": "keys"}) == {
        "meta": {"type": "array", "length": 10},
        "keys": [],
    }
    assert list(v.read_state({"path": "cwd.lazy.memory", "projection": "patch"})) == ["patch"]


def test_batches_keep_order_and_duplicates_in_one_view(v) -> None:  # type: ignore[no-untyped-def]
    result = v.read_state(
        {
            "paths": [
                "effective.lazy.rules.ranges",
                "cwd.lazy.memory[0..2]",
                "session.tactics.nextAction",
                "cwd.lazy.memory[0..2]",
            ]
        }
    )
    assert result == {"value": ["Ranges are half-open.", TEN[:2], "Implement progressive reads.", TEN[:2]]}
    keys = v.read_state({"paths": ["cwd.lazy.memory", "cwd.lazy.rules"], "projection": "keys"})
    assert keys == {
        "meta": [{"type": "array", "length": 10}, {"type": "object", "size": 2}],
        "keys": [[], {"ranges": "string", "publication": "object"}],
    }


def test_one_bad_path_fails_the_whole_batch(v) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SelectionError):
        v.read_state({"paths": ["cwd.lazy.memory[0:2]", "cwd.lazy.memory[0:99]"]})
    with pytest.raises(InvalidPath):
        v.read_state({"paths": ["cwd.lazy.memory[0:2]", "cwd.lazy.memory[-1]"]})


def test_absent_documented_plane_reads_null_and_the_root_omits_it(v) -> None:  # type: ignore[no-untyped-def]
    assert v.read_state({"path": "response"}) == {"value": None}
    assert v.read_state({"path": "global.intents"}) == {"value": None}
    assert v.read_state({"path": "global.intents", "projection": "keys"}) == {
        "meta": {"type": "null"},
        "keys": [],
    }
    assert v.read_state({"path": "effective"}) == {
        "value": {"tactics": {"nextAction": "Implement progressive reads."}}
    }


def test_lazy_is_read_only_when_asked_for(v) -> None:  # type: ignore[no-untyped-def]
    assert "lazy" not in v.read_state({"path": "cwd"})["value"]
    assert v.read_state({"path": "lazy.soul"}) == {"value": ["s"]}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"path": "cwd.lazy", "offset": 1}, "does not accept offset"),
        ({"path": "cwd.lazy", "scope": "cwd"}, "does not accept scope"),
        ({"path": "a", "paths": ["b"]}, "not both"),
        ({}, "requires path or paths"),
        ({"paths": []}, "at least one path"),
        ({"path": "cwd", "projection": "values"}, "projection must be"),
        ("cwd", "requires an object"),
    ],
)
def test_malformed_reads_are_refused(v, args, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidInput, match=message):
        v.read_state(args)


def test_reads_never_write(v, store) -> None:  # type: ignore[no-untyped-def]
    before = transitions(store)
    v.read_state({"paths": ["effective", "cwd.lazy.memory[0:3]", "cwd[1].lazy"]})
    v.read_state({"path": "cwd.patches[0]"})
    v.context()
    with pytest.raises(SelectionError):
        v.read_state({"path": "cwd.lazy.nothing"})
    assert transitions(store) == before


def test_history_offsets_select_boundaries_of_the_view_timeline(store) -> None:  # type: ignore[no-untyped-def]
    m = view(store)
    m.patch_state(
        {
            "global": {"strategy": {"g": "G"}},
            "cwd": {"strategy": {"c": "C"}},
            "session": {"tactics": {"s": "S"}},
        }
    )
    m.patch_state({"cwd": {"strategy": {"c": "C1"}}, "session": {"tactics": {"s": "S1"}}})
    m.patch_state({"global": {"strategy": {"g": "G1"}}, "session": {"tactics": {"s": "S2"}}})
    m.patch_state({"cwd": {"strategy": {"c": "C2"}}, "session": {"tactics": {"s": "S3"}}})

    def value(path: str) -> Any:
        return m.read_state({"path": path})["value"]

    assert value("effective[1]") == {"strategy": {"g": "G1", "c": "C1"}, "tactics": {"s": "S2"}}
    assert value("global[1].strategy.g") == "G1"
    assert value("cwd[1].strategy.c") == "C1"
    assert value("cwd[2].strategy.c") == "C1"
    assert value("cwd[3].strategy.c") == "C"
    assert value("session[4]") == {}  # the origin: before the first transition
    with pytest.raises(NotFound, match="predates"):
        value("session[5]")
    with pytest.raises(InvalidPath, match="0 to 7"):
        value("session[8]")


def test_history_limit_bounds_model_offsets(store) -> None:  # type: ignore[no-untyped-def]
    m = view(store, history_limit=2)
    for i in range(4):
        m.patch_state({"session": {"tactics": {"i": i}}})
    assert m.read_state({"path": "session[2].tactics.i"}) == {"value": 1}
    with pytest.raises(InvalidPath, match="0 to 2"):
        m.read_state({"path": "session[3].tactics.i"})
    assert m.as_of(3, "session.tactics.i") == 0  # operators may go deeper


def test_the_operators_whole_state_includes_the_lazy_planes_when_asked(store) -> None:  # type: ignore[no-untyped-def]
    m = view(store)
    m.patch_state({"session": {"lazy": {"plan": ["a", "b"]}, "tactics": {"n": 1}}})
    m.patch_state({"session": {"lazy": {"plan": {"[0]": "A"}}}})
    for root in ("effective", "session"):
        assert m.as_of(1, root) == m.as_of(0, root) == {"tactics": {"n": 1}}  # the hot view
        assert m.as_of(1, root, lazy=True) == {"tactics": {"n": 1}, "lazy": {"plan": ["a", "b"]}}
        assert m.as_of(0, root, lazy=True) == {"tactics": {"n": 1}, "lazy": {"plan": ["A", "b"]}}
    assert m.as_of(1, "session.tactics", lazy=True) == {"n": 1}  # a deeper path reads as it is


def test_patch_projection_distinguishes_unchanged_deleted_indexed_and_replaced(store) -> None:  # type: ignore[no-untyped-def]
    m = view(store)
    m.patch_state({"cwd": {"lazy": {"memory": ["a", "b", "c"], "gone": {"x": 1}, "same": 1}}})
    m.patch_state({"cwd": {"lazy": {"memory": {"[1]": "corrected thought"}, "gone": None}}})
    assert m.read_state({"path": "cwd[0].lazy.memory", "projection": "patch"}) == {
        "patch": {"[1]": "corrected thought"}
    }
    assert m.read_state({"path": "cwd[0].lazy.gone", "projection": "patch"}) == {"patch": None}
    assert m.read_state({"path": "cwd[0].lazy.same", "projection": "patch"}) == {"patch": {}}
    m.patch_state({"cwd": {"lazy": {"memory": ["new first thought", "new second thought"]}}})
    assert m.read_state({"path": "cwd.lazy.memory", "projection": "patch"}) == {
        "patch": ["new first thought", "new second thought"]
    }
    assert m.read_state({"path": "effective[1].lazy.memory", "projection": "patch"}) == {
        "patch": {"[1]": "corrected thought"}
    }
    assert m.read_state({"path": "cwd[3].lazy", "projection": "patch"}) == {"patch": {}}  # origin
    assert m.read_state({"path": "session[0]", "projection": "patch"}) == {"patch": {}}


def test_scope_patch_history(store) -> None:  # type: ignore[no-untyped-def]
    m = view(store)
    m.patch_state({"cwd": {"tactics": {"a": 1}}})
    m.patch_state({"session": {"tactics": {"b": 1}}})
    m.patch_state({"cwd": {"tactics": {"a": 2, "c": 3}}})
    # the path names a change: each projection answers under its own key
    assert m.read_state({"path": "cwd.patches"}) == {"value": {"tactics": {"a": 2, "c": 3}}}
    assert m.read_state({"path": "cwd.patches[1]"}) == {"value": {"tactics": {"a": 1}}}
    assert m.read_state({"path": "cwd.patches[1]", "projection": "patch"}) == {"patch": {"tactics": {"a": 1}}}
    assert m.read_state({"path": "cwd.patches", "projection": "keys"}) == {
        "meta": {"type": "object", "size": 1},
        "keys": {"tactics": "object"},
    }
    with pytest.raises(NotFound, match="outside the retained window"):
        m.read_state({"path": "cwd.patches[2]"})
    with pytest.raises(InvalidInput, match="only path"):
        m.read_state({"paths": ["cwd.patches", "cwd"]})


def test_dangling_reference_hint_for_one_missing_value_path(store) -> None:  # type: ignore[no-untyped-def]
    m = view(store)
    m.patch_state(
        {
            "cwd": {
                "tactics": {"note": {"$ref": "cwd.lazy.plan"}, "prose": "see $cwd.lazy.plan for details"}
            },
            "session": {"strategy": {"x": "unrelated $cwd.lazy.planned text"}},
        }
    )
    result = m.read_state({"path": "cwd.lazy.plan"})
    assert result["value"] is None
    [hint] = result["hint"]
    assert hint["type"] == "dangling-reference"
    assert hint["paths"] == ["cwd.tactics.note", "cwd.tactics.prose"]
    assert hint["message"].startswith("The requested value is unavailable in the selected state.")
    for args in (
        {"path": "cwd.lazy.plan", "projection": "keys"},
        {"paths": ["cwd.lazy.plan"]},
        {"path": "cwd.lazy.unreferenced"},
    ):
        with pytest.raises(SelectionError):
            m.read_state(args)


def test_the_hint_matches_the_spellings_of_one_address_exactly(store) -> None:  # type: ignore[no-untyped-def]
    # seed 000: exact structured $ref and textual $path matches; a bare path is the effective one
    m = view(store)
    m.patch_state({"session": {"tactics": {"a": {"$ref": "lazy.q"}, "b": {"$ref": "session.lazy.q"}}}})
    for asked in ("lazy.q", "effective.lazy.q"):  # either spelling finds refs of the other
        assert m.read_state({"path": asked})["hint"][0]["paths"] == ["session.tactics.a"]
    assert m.read_state({"path": "session.lazy.q"})["hint"][0]["paths"] == ["session.tactics.b"]
    for other in ("effective.lazy.q.x", "cwd.lazy.q"):
        with pytest.raises(SelectionError):  # below or beside a referenced path: no hint
            m.read_state({"path": other})
    # the two forms are the only ones: an object keyed "$path" is ordinary data, not a reference
    m.patch_state({"session": {"tactics": {"c": {"$path": "session.lazy.r"}}}})
    with pytest.raises(SelectionError):
        m.read_state({"path": "session.lazy.r"})


def test_a_whole_scope_read_is_the_hot_view_and_lazy_is_read_by_name(store) -> None:  # type: ignore[no-untyped-def]
    m = view(store)
    m.patch_state({"session": {"tactics": {"a": 1}, "lazy": {"x": [1, 2]}}})
    for root in ("session", "effective"):
        assert m.read_state({"path": root}) == {"value": {"tactics": {"a": 1}}}
        assert m.read_state({"path": root, "projection": "keys"})["keys"] == {"tactics": "object"}
        assert m.read_state({"path": f"{root}.lazy"}) == {"value": {"x": [1, 2]}}
    assert m.read_state({"path": "session.lazy.x", "projection": "keys"}) == {
        "meta": {"type": "array", "length": 2},
        "keys": [],
    }


def test_hint_lists_at_most_three_owners_and_says_when_more_may_exist(store) -> None:  # type: ignore[no-untyped-def]
    m = view(store)
    m.patch_state({"session": {"tactics": {f"n{i}": {"$ref": "lazy.gone"} for i in range(5)}}})
    result = m.read_state({"path": "lazy.gone"})
    assert result["hint"][0]["paths"] == ["session.tactics.n0", "session.tactics.n1", "session.tactics.n2"]
    assert "additional reference owners may exist" in result["hint"][0]["message"]


def test_scope_patches_are_served_only_inside_the_hot_window(store) -> None:  # type: ignore[no-untyped-def]
    none = view(store, history_limit=0)
    none.patch_state({"cwd": {"tactics": {"a": 1}}})
    with pytest.raises(InvalidPath, match="0 to 0"):
        none.read_state({"path": "session[1]"})
    for index in (0, 1):  # no transition is in the window at limit 0 (not "use an integer from 0 to -1")
        with pytest.raises(InvalidPath, match=r"out of range: history_limit is 0, so no patch is readable$"):
            none.read_state({"path": f"cwd.patches[{index}]"})

    three = view(store, session="s3", history_limit=3)
    for i in range(6):
        three.patch_state({"session": {"tactics": {"i": i}}})
    assert three.read_state({"path": "session.patches[2]"}) == {"value": {"tactics": {"i": 3}}}
    # the newest 3 transitions hold at most 3 changes: index 3 is never served, and the refusal
    # names the range it accepts
    for index in (3, 4):
        with pytest.raises(
            InvalidPath, match=rf"^patch index {index} is out of range: use an integer from 0 to 2 "
        ):
            three.read_state({"path": f"session.patches[{index}]"})

    # limit 2: cwd changed at offsets 2 and 0; only its newest change is inside the window
    two = view(store, session="s2", history_limit=2)
    two.patch_state({"cwd": {"tactics": {"a": 2}}})
    two.patch_state({"session": {"tactics": {"b": 1}}})
    two.patch_state({"cwd": {"tactics": {"a": 3}}})
    assert two.read_state({"path": "cwd.patches[0]"}) == {"value": {"tactics": {"a": 3}}}
    with pytest.raises(NotFound, match=r"its 2 transition\(s\) \(history_limit 2\) hold 1 cwd change\(s\)$"):
        two.read_state({"path": "cwd.patches[1]"})  # retained, but outside the window

    # a young memory: the refusal counts the transitions the window holds, not the limit
    young = view(store, session="young", scopes=("session",))  # history_limit 7
    young.patch_state({"tactics": {"i": 0}})
    with pytest.raises(
        NotFound, match=r"its 1 transition\(s\) \(history_limit 7\) hold 1 session change\(s\)$"
    ):
        young.read_state({"path": "session.patches[1]"})


def test_a_scope_patch_older_than_the_views_last_limit_transitions_is_refused(store) -> None:  # type: ignore[no-untyped-def]
    m = view(store)  # history_limit 7
    m.patch_state({"global": {"strategy": {"g": 1}}})
    for i in range(7):
        m.patch_state({"session": {"tactics": {"i": i}}})
    assert m.read_state({"path": "global[7].strategy"}) == {"value": {"g": 1}}  # the boundary is in range
    with pytest.raises(NotFound, match="outside the retained window"):
        m.read_state({"path": "global.patches[0]"})  # its transition is the 8th newest
    m.patch_state({"global": {"strategy": {"g": 2}}})
    assert m.read_state({"path": "global.patches[0]"}) == {"value": {"strategy": {"g": 2}}}
    with pytest.raises(NotFound, match="outside the retained window"):
        m.read_state({"path": "global.patches[1]"})


def test_the_patch_at_the_oldest_boundary_is_outside_the_window(store) -> None:  # type: ignore[no-untyped-def]
    m = view(store, history_limit=2)
    for i in range(3):
        m.patch_state({"session": {"tactics": {"i": i}}})
    assert m.read_state({"path": "session[1].tactics", "projection": "patch"}) == {"patch": {"i": 1}}
    assert m.read_state({"path": "session[2].tactics"}) == {"value": {"i": 0}}  # the boundary is readable
    for path in ("session[2].tactics", "effective[2]"):  # what led to it is not
        with pytest.raises(NotFound, match="outside the retained window"):
            m.read_state({"path": path, "projection": "patch"})

    fresh = view(store, session="fresh", scopes=("session",), history_limit=2)
    fresh.patch_state({"tactics": {"i": 0}})
    fresh.patch_state({"tactics": {"i": 1}})
    assert fresh.read_state({"path": "session[2]", "projection": "patch"}) == {"patch": {}}  # the origin

    none = view(store, session="none", scopes=("session",), history_limit=0)
    assert none.read_state({"path": "session[0]", "projection": "patch"}) == {"patch": {}}  # the origin
    none.patch_state({"tactics": {"i": 0}})
    with pytest.raises(NotFound, match="outside the retained window"):
        none.read_state({"path": "tactics", "projection": "patch"})


def test_patch_projection_below_a_value_replaced_by_a_scalar_or_a_shorter_array(store) -> None:  # type: ignore[no-untyped-def]
    m = view(store)
    m.patch_state(
        {
            "cwd": {"strategy": {"db": {"engine": "pg"}}},
            "session": {
                "strategy": {"db": {"engine": "pg", "port": 5432}},
                "lazy": {"list": ["a", "b", "c"]},
            },
        }
    )
    m.patch_state({"session": {"strategy": {"db": "sqlite"}, "lazy": {"list": ["x"]}}})

    def patch(path: str) -> Any:
        return m.read_state({"path": path, "projection": "patch"})

    # a key that lay in the replaced object was deleted with it; one never there is refused,
    # as its value read is (there neither before nor after the transition)
    for root in ("session", "effective"):
        assert patch(f"{root}[0].strategy.db.engine") == {"patch": None}
        with pytest.raises(
            SelectionError, match=rf"read path does not exist: {root}\[0\]\.strategy\.db\.host"
        ):
            patch(f"{root}[0].strategy.db.host")
        assert patch(f"{root}[0].strategy.db") == {"patch": "sqlite"}
        # an element the new, shorter array does not reach was deleted; one it reaches is new
        assert patch(f"{root}[0].lazy.list[2]") == {"patch": None}
        assert patch(f"{root}[0].lazy.list[0]") == {"patch": "x"}
        with pytest.raises(SelectionError, match=r"index 5 is outside"):
            patch(f"{root}[0].lazy.list[5]")
    assert patch("cwd[0].strategy.db.engine") == {"patch": {}}  # cwd did not change
    # an object in place of the array: its elements were deleted with it
    m.patch_state({"session": {"lazy": {"list": {"x": 1}}}})
    for root in ("session", "effective"):
        assert patch(f"{root}[0].lazy.list[0]") == {"patch": None}
        with pytest.raises(SelectionError):
            patch(f"{root}[0].lazy.list[1]")
    # the whole view's patch walks to the same answers
    assert m.read_state({"path": "session[1]", "projection": "patch"}) == {
        "patch": {"strategy": {"db": "sqlite"}}
    }
    assert transitions(store) == 3


def test_patch_projection_below_a_replaced_array_is_unchanged_where_the_value_is_the_same(store) -> None:  # type: ignore[no-untyped-def]
    m = view(store)
    m.patch_state({"session": {"lazy": {"arr": [1, 2, 3], "objs": [{"a": 1}, {"b": 2}, {"c": 3}]}}})
    m.patch_state({"session": {"lazy": {"arr": [1, 2], "objs": [{"a": 1}, {"b": 5}]}}})

    def patch(path: str) -> Any:
        return m.read_state({"path": path, "projection": "patch"})["patch"]

    for root in ("session", "effective"):
        # the arrays were replaced whole, but these elements hold what they held: no change
        assert patch(f"{root}[0].lazy.arr[1]") == {}
        assert patch(f"{root}[0].lazy.arr[0:2]") == {}
        assert patch(f"{root}[0].lazy.objs[0]") == {}
        assert patch(f"{root}[0].lazy.objs[0].a") == {}
        # what changed is the replacement's value; what the shorter array lost was deleted
        assert patch(f"{root}[0].lazy.objs[1].b") == 5
        assert patch(f"{root}[0].lazy.arr[2]") is None
        assert patch(f"{root}[0].lazy.arr") == [1, 2]
    batch = ["session[0].lazy.arr[1]", "effective[0].lazy.arr[1]", "session[0].lazy.objs[1].b"]
    assert m.read_state({"paths": batch, "projection": "patch"}) == {"patch": [{}, {}, 5]}


def test_a_mention_ending_a_sentence_or_a_clause_is_a_reference(store) -> None:  # type: ignore[no-untyped-def]
    m = view(store)
    m.patch_state(
        {
            "session": {
                "tactics": {
                    "a": "For the rollout, see $session.lazy.plan.",
                    "b": "Two sources: $session.lazy.spec: and more",
                    "c": "Not these: $session.lazy.other.x, $session.lazy.other[1], $session.lazy.other:x.",
                }
            }
        }
    )
    assert m.read_state({"path": "session.lazy.plan"})["hint"][0]["paths"] == ["session.tactics.a"]
    assert m.read_state({"path": "session.lazy.spec"})["hint"][0]["paths"] == ["session.tactics.b"]
    with pytest.raises(SelectionError):  # each of those mentions a longer path
        m.read_state({"path": "session.lazy.other"})


def test_the_hint_scan_reads_keys_named_response_below_a_plane(store) -> None:  # type: ignore[no-untyped-def]
    m = view(store)
    m.patch_state(
        {"session": {"tactics": {"response": {"$ref": "session.lazy.x"}, "deep": {"response": "$lazy.y"}}}}
    )
    assert m.read_state({"path": "session.lazy.x"})["hint"][0]["paths"] == ["session.tactics.response"]
    assert m.read_state({"path": "lazy.y"})["hint"][0]["paths"] == ["session.tactics.deep.response"]


def test_hint_paths_are_readable_and_name_an_unspellable_key_by_its_ancestor(store, tmp_path) -> None:  # type: ignore[no-untyped-def]
    source = tmp_path / "notes.md"
    source.write_text("hi\n")
    m = view(store, cwd=str(tmp_path))
    m.patch_state(
        {
            "cwd": {"artifacts": {str(source): {"description": "details in $cwd.lazy.gone"}}},
            "session": {
                "tactics": {"my note": "see $cwd.lazy.gone", "it's": {"$ref": "cwd.lazy.gone"}},
                "strategy": {"list": [{"a b": ["x", {"c": "$cwd.lazy.gone"}]}]},
            },
        }
    )
    [hint] = m.read_state({"path": "cwd.lazy.gone"})["hint"]
    # each owner once (the two tactics keys share their object), and each one read_state reads
    assert hint["paths"] == ["session.tactics", "cwd.artifacts", "session.strategy.list[0]"]
    for path in hint["paths"]:
        assert "value" in m.read_state({"path": path})


def test_a_single_scope_view_finds_a_reference_by_any_spelling_of_its_address(store) -> None:  # type: ignore[no-untyped-def]
    one = view(store, scopes=("session",))
    one.patch_state({"tactics": {"text": "use $lazy.u", "scoped": "use $session.lazy.v"}})
    for path in ("lazy.u", "effective.lazy.u", "session.lazy.u"):
        assert one.read_state({"path": path})["hint"][0]["paths"] == ["tactics.text"], path
    for path in ("lazy.v", "effective.lazy.v", "session.lazy.v"):
        assert one.read_state({"path": path})["hint"][0]["paths"] == ["tactics.scoped"], path
    # with several scopes, session.lazy.u is not the effective address: no hint
    both = view(store)
    with pytest.raises(SelectionError):
        both.read_state({"path": "session.lazy.u"})


def test_read_paths_refuse_leading_zeros_as_patches_do(store) -> None:  # type: ignore[no-untyped-def]
    m = view(store)
    m.patch_state({"session": {"lazy": {"m": ["a", "b", "c"]}}})
    for path in ("session.lazy.m[01]", "session.lazy.m[00:02]", "session.lazy.m[0..02]", "session[01].lazy"):
        for projection in ("value", "keys", "patch"):
            with pytest.raises(InvalidPath, match="leading zero"):
                m.read_state({"path": path, "projection": projection})
    with pytest.raises(InvalidInput, match="leading zeros"):  # (the patch's own refusal)
        m.patch_state({"session": {"lazy": {"m": {"[01]": "B"}}}})
    assert m.read_state({"path": "session.lazy.m[1]"}) == {"value": "b"}
    assert m.read_state({"path": "session[0].lazy.m[0:2]"}) == {"value": ["a", "b"]}


def test_keys_of_an_absent_plane_read_it_as_null_as_value_does(store) -> None:  # type: ignore[no-untyped-def]
    m = view(store)
    m.patch_state({"session": {"lazy": {"a": 1}}})
    null_keys = {"meta": {"type": "null"}, "keys": []}
    for path in ("global.lazy", "response", "effective.intents", "session[1].lazy", "cwd.tactics"):
        assert m.read_state({"path": path}) == {"value": None}, path
        assert m.read_state({"path": path, "projection": "keys"}) == null_keys, path
    assert m.read_state({"paths": ["session.lazy", "global.lazy"], "projection": "keys"}) == {
        "meta": [{"type": "object", "size": 1}, {"type": "null"}],
        "keys": [{"a": "number"}, []],
    }
    with pytest.raises(SelectionError):  # below an absent plane, the path does not exist
        m.read_state({"path": "global.lazy.a", "projection": "keys"})
