import copy
import enum
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stateflow.doc.canonical import check, json_equal
from stateflow.doc.ops import Guard, Op, apply_ops, parse_ops
from stateflow.doc.select import MISSING
from stateflow.errors import InvalidJSON, OpError


def run(doc: Any, ops: list[dict[str, Any]]) -> Any:
    return apply_ops(doc, parse_ops(ops)).document


# ----------------------------------------------------------------------------- set / remove


def test_set_creates_intermediates_objects_for_keys_lists_for_indices() -> None:
    assert run(MISSING, [{"op": "set", "path": ["a", "b"], "value": 1}]) == {"a": {"b": 1}}
    assert run({}, [{"op": "set", "path": ["v", "-", "scope"], "value": "x"}]) == {"v": [{"scope": "x"}]}
    assert run({}, [{"op": "set", "path": ["g", "-", "-"], "value": "first"}]) == {"g": [["first"]]}


def test_set_appends_with_dash_and_replaces_existing_index() -> None:
    doc = {"l": [1, 2]}
    assert run(doc, [{"op": "set", "path": ["l", "-"], "value": 3}]) == {"l": [1, 2, 3]}
    assert run(doc, [{"op": "set", "path": ["l", 0], "value": 9}]) == {"l": [9, 2]}
    assert run({}, [{"op": "set", "path": ["new", "-"], "value": 1}]) == {"new": [1]}


def test_set_may_store_null() -> None:
    assert run({"a": 1}, [{"op": "set", "path": ["a"], "value": None}]) == {"a": None}


@pytest.mark.parametrize(
    ("doc", "path", "message"),
    [
        ({"l": [1]}, ["l", 3], r"index 3 is past the end of the list \(len 1\); use '-' to append"),
        ({"l": [1]}, ["l", "k"], "key 'k' requires an object, found list"),
        ({"o": {}}, ["o", 0], "index 0 requires a list, found object"),
        ({"s": "x"}, ["s", "k"], "key 'k' requires an object, found string"),
        ({"o": {}}, ["o", "-"], "'-' requires a list, found object"),
    ],
)
def test_set_type_mismatches_are_loud(doc: Any, path: list[Any], message: str) -> None:
    with pytest.raises(OpError, match=message):
        run(doc, [{"op": "set", "path": path, "value": 1}])


def test_remove_deletes_and_shifts_and_absent_is_a_no_op() -> None:
    doc = {"l": [1, 2, 3], "o": {"k": 1}}
    assert run(doc, [{"op": "remove", "path": ["l", 0]}]) == {"l": [2, 3], "o": {"k": 1}}
    assert run(doc, [{"op": "remove", "path": ["o", "k"]}]) == {"l": [1, 2, 3], "o": {}}
    assert run(doc, [{"op": "remove", "path": ["nope", "deeper"]}]) == doc
    assert run(doc, [{"op": "remove", "path": ["l", 7]}]) == doc
    with pytest.raises(OpError, match="key 'x' requires an object, found list"):
        run(doc, [{"op": "remove", "path": ["l", "x"]}])


# ----------------------------------------------------------------------------- keyed ops

PEOPLE = {"people": [{"id": 1, "name": "a", "age": 3}, {"id": 2, "name": "b"}, "stray", {"x": 1}]}


def test_set_by_key_replaces_first_match_whole_or_appends() -> None:
    out = run(
        PEOPLE,
        [
            {
                "op": "set_by_key",
                "path": ["people"],
                "key_field": "id",
                "value": [{"id": 1, "name": "A"}, {"id": 3}],
            }
        ],
    )
    assert out["people"] == [{"id": 1, "name": "A"}, {"id": 2, "name": "b"}, "stray", {"x": 1}, {"id": 3}]
    one = run({}, [{"op": "set_by_key", "path": ["p"], "key_field": "id", "value": {"id": "k"}}])
    assert one == {"p": [{"id": "k"}]}


def test_empty_keyed_payload_creates_nothing() -> None:
    assert run({}, [{"op": "set_by_key", "path": ["a", "b"], "key_field": "id", "value": []}]) == {}
    assert run({}, [{"op": "set_by_key_each", "path": ["a"], "key_field": "id", "value": {"x": []}}]) == {}


def test_keys_compare_with_json_equality_booleans_never_match_numbers() -> None:
    doc = {"l": [{"id": True}, {"id": 1}]}
    out = run(doc, [{"op": "set_by_key", "path": ["l"], "key_field": "id", "value": {"id": 1, "v": 2}}])
    assert out == {"l": [{"id": True}, {"id": 1, "v": 2}]}


def test_merge_by_key_shallow_merges_drops_nulls_never_inserts() -> None:
    out = run(
        PEOPLE,
        [
            {
                "op": "merge_by_key",
                "path": ["people"],
                "key_field": "id",
                "value": [{"id": 1, "name": "A", "age": None, "tags": {"t": 1}}, {"id": 9, "name": "z"}],
            }
        ],
    )
    assert out["people"][0] == {"id": 1, "name": "A", "age": 3, "tags": {"t": 1}}
    assert len(out["people"]) == 4
    assert run({}, [{"op": "merge_by_key", "path": ["x"], "key_field": "id", "value": [{"id": 1}]}]) == {}


def test_unset_by_key_deletes_named_fields_of_the_first_match() -> None:
    out = run(
        PEOPLE,
        [
            {
                "op": "unset_by_key",
                "path": ["people"],
                "key_field": "id",
                "value": [{"id": 1, "fields": ["age", "zz"]}],
            }
        ],
    )
    assert out["people"][0] == {"id": 1, "name": "a"}


def test_remove_by_key_drops_every_match() -> None:
    doc = {"l": [{"k": "a"}, {"k": "b"}, {"k": "a"}, 5]}
    assert run(doc, [{"op": "remove_by_key", "path": ["l"], "key_field": "k", "key": "a"}]) == {
        "l": [{"k": "b"}, 5]
    }
    assert run(doc, [{"op": "remove_by_key", "path": ["l"], "key_field": "k", "key": ["a", "b"]}]) == {
        "l": [5]
    }
    assert run({}, [{"op": "remove_by_key", "path": ["l"], "key_field": "k", "key": "a"}]) == {}


def test_set_by_key_each_fans_out_into_lists_under_an_object() -> None:
    doc = {"by": {"x": [{"id": 1, "v": 0}]}}
    out = run(
        doc,
        [
            {
                "op": "set_by_key_each",
                "path": ["by"],
                "key_field": "id",
                "value": {"x": [{"id": 1, "v": 1}], "y": [{"id": 1, "v": 2}], "z": []},
            }
        ],
    )
    assert out == {"by": {"x": [{"id": 1, "v": 1}], "y": [{"id": 1, "v": 2}]}}
    with pytest.raises(OpError, match="needs a list"):
        run(
            {"by": {"x": 1}},
            [{"op": "set_by_key_each", "path": ["by"], "key_field": "id", "value": {"x": [{"id": 1}]}}],
        )
    with pytest.raises(OpError, match="needs an object"):
        run(
            {"by": []},
            [{"op": "set_by_key_each", "path": ["by"], "key_field": "id", "value": {"x": [{"id": 1}]}}],
        )


def test_keyed_op_on_a_non_list_is_loud() -> None:
    with pytest.raises(OpError, match="needs a list"):
        run({"l": {}}, [{"op": "set_by_key", "path": ["l"], "key_field": "id", "value": {"id": 1}}])


# ----------------------------------------------------------------------------- guards


def test_guards_read_the_pre_batch_document_and_skip_with_a_reason_row() -> None:
    doc = {"status": "open", "n": 1}
    ops = [
        {
            "op": "set",
            "path": ["status"],
            "value": "closed",
            "guard": {"path": ["status"], "expected": "open"},
        },
        # evaluated against the document before the batch, so it still sees "open"
        {"op": "set", "path": ["n"], "value": 2, "guard": {"path": ["status"], "expected": "closed"}},
        {"op": "set", "path": ["m"], "value": 1, "guard": {"path": ["missing", "deep"], "expected": None}},
    ]
    result = apply_ops(doc, parse_ops(ops))
    assert result.document == {"status": "closed", "n": 1, "m": 1}
    assert result.skipped == [
        {
            "index": 1,
            "op": {"op": "set", "path": ["n"], "value": 2},
            "reason": "guard",
            "expected": "closed",
            "actual": "open",
        }
    ]
    assert result.paths == [["status"], ["m"]]
    assert "guard" not in result.applied[0].raw


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        ("nope", "ops must be a list"),
        ([{"op": "frob", "path": ["a"]}], r"ops\[0\]: unknown op 'frob'"),
        ([{"op": "set", "path": ["a"]}], "needs a 'value'"),
        ([{"op": "set", "path": [], "value": 1}], "non-empty list"),
        ([{"op": "set", "path": ["a", ""], "value": 1}], "empty-string path segment"),
        ([{"op": "set", "path": ["a", -1], "value": 1}], "negative list index -1"),
        (
            [{"op": "set", "path": ["a", True], "value": 1}],
            "segment true must be a string key or a list index",
        ),
        ([{"op": "set", "path": ["a"], "value": 1, "extra": 2}], r"unknown keys \['extra'\]"),
        ([{"op": "remove", "path": ["a"], "value": 1}], "a remove op takes no 'value'"),
        ([{"op": "remove", "path": ["a", "-"]}], "'-' \\(append\\) is not allowed"),
        ([{"op": "set_by_key", "path": ["a", "-"], "key_field": "id", "value": []}], "not allowed"),
        ([{"op": "set_by_key", "path": ["a"], "value": []}], "needs 'key_field'"),
        (
            [{"op": "set_by_key", "path": ["a"], "key_field": "id", "value": [{"id": 1.5}]}],
            "string or an integer",
        ),
        (
            [{"op": "set_by_key", "path": ["a"], "key_field": "id", "value": [{"id": 1}, {"id": 1}]}],
            "duplicate",
        ),
        ([{"op": "set_by_key", "path": ["a"], "key_field": "id", "value": [{"x": 1}]}], "has no key field"),
        (
            [{"op": "set_by_key", "path": ["a"], "key_field": "id", "value": [{"id": 1}], "key": 1}],
            "unknown keys",
        ),
        ([{"op": "unset_by_key", "path": ["a"], "key_field": "fields", "value": []}], "cannot use 'fields'"),
        (
            [
                {
                    "op": "unset_by_key",
                    "path": ["a"],
                    "key_field": "id",
                    "value": [{"id": 1, "fields": ["id"]}],
                }
            ],
            "key field",
        ),
        (
            [
                {
                    "op": "unset_by_key",
                    "path": ["a"],
                    "key_field": "id",
                    "value": [{"id": 1, "fields": ["x", "x"]}],
                }
            ],
            "twice",
        ),
        (
            [
                {
                    "op": "unset_by_key",
                    "path": ["a"],
                    "key_field": "id",
                    "value": [{"id": 1, "fields": [], "x": 1}],
                }
            ],
            "exactly",
        ),
        ([{"op": "remove_by_key", "path": ["a"], "key_field": "id"}], "needs 'key'"),
        ([{"op": "remove_by_key", "path": ["a"], "key_field": "id", "key": [None]}], "string or an integer"),
        ([{"op": "set_by_key_each", "path": ["a"], "key_field": "id", "value": {"-": []}}], "fan-out key"),
        ([{"op": "set", "path": ["a"], "value": 1, "guard": {"path": ["a"]}}], "guard must be exactly"),
        ([{"op": "set", "path": ["a"], "value": 1, "guard": {"path": ["-"], "expected": 1}}], "not allowed"),
        ([{"op": "set", "path": ["a"], "value": float("nan")}], "NaN"),
    ],
)
def test_malformed_batches_are_refused_naming_the_op(ops: Any, message: str) -> None:
    with pytest.raises(OpError, match=message):
        parse_ops(ops)


def test_limits() -> None:
    with pytest.raises(OpError, match="the cap is 1000"):
        parse_ops([{"op": "remove", "path": ["a"]}] * 1001)
    parse_ops([{"op": "remove", "path": ["a"]}] * 1000)
    with pytest.raises(OpError, match="129 segments — the cap is 128"):
        parse_ops([{"op": "remove", "path": ["a"] * 129}])
    parse_ops([{"op": "remove", "path": ["a"] * 128}])
    items = [{"id": i} for i in range(201)]
    with pytest.raises(OpError, match="201 items — the cap is 200"):
        parse_ops([{"op": "set_by_key", "path": ["a"], "key_field": "id", "value": items}])
    parse_ops([{"op": "set_by_key", "path": ["a"], "key_field": "id", "value": items[:200]}])


def test_a_bad_op_anywhere_refuses_the_whole_batch_before_applying() -> None:
    ops = [{"op": "set", "path": ["a"], "value": 1}, {"op": "set", "path": ["b"]}]
    with pytest.raises(OpError, match=r"ops\[1\]"):
        parse_ops(ops)


def test_apply_never_mutates_its_input() -> None:
    doc = {"l": [{"id": 1, "v": [1]}], "o": {"a": 1}}
    before = copy.deepcopy(doc)
    out = run(
        doc,
        [
            {"op": "set", "path": ["o", "b"], "value": 2},
            {"op": "merge_by_key", "path": ["l"], "key_field": "id", "value": [{"id": 1, "w": 1}]},
            {"op": "remove", "path": ["o", "a"]},
        ],
    )
    assert doc == before
    assert out == {"l": [{"id": 1, "v": [1], "w": 1}], "o": {"b": 2}}


# ------------------------------------------------------------------------------ parsing, fast paths


class _Number(enum.IntEnum):
    ONE = 1


class _Text(str):
    pass


def _pairwise_duplicate(keys: list[Any]) -> Any:
    """The first key JSON-equal to an earlier one (the rule ``_check_unique`` keeps), or MISSING."""
    for i, k in enumerate(keys):
        if any(json_equal(k, other) for other in keys[:i]):
            return k
    return MISSING


_KEY = st.one_of(
    st.integers(-3, 3),
    st.sampled_from(["a", "b", "1", "", "-"]),
    st.sampled_from([_Number.ONE, _Text("a"), _Text("1")]),
)


@settings(max_examples=1500, deadline=None)
@given(st.lists(_KEY, max_size=6))
def test_duplicate_keys_are_the_pairwise_json_equality_ones(keys: list[Any]) -> None:
    """The set that answers for keys of exactly ``str`` or ``int`` finds the very duplicate
    the pairwise JSON-equality loop finds; other keys (an ``IntEnum``, a ``str`` subclass) are
    told by that loop, as before."""
    expected = _pairwise_duplicate(keys)
    raws: list[dict[str, Any]] = [{"op": "remove_by_key", "path": ["l"], "key_field": "id", "key": keys}]
    if all(type(k) in (str, int) for k in keys):  # (a set_by_key's items are checked as JSON too)
        raws.append(
            {"op": "set_by_key", "path": ["l"], "key_field": "id", "value": [{"id": k} for k in keys]}
        )
    for raw in raws:
        if expected is MISSING:
            parse_ops([raw])
            continue
        where = "key" if raw["op"] == "remove_by_key" else "id"
        with pytest.raises(OpError) as refused:
            parse_ops([raw])
        assert refused.value.message == f"ops[0]: duplicate {where} {expected!r} in one payload"


def test_a_parsed_op_is_the_named_tuple_its_fields_make() -> None:
    guard = {"path": ["g"], "expected": 1}
    raws: list[dict[str, Any]] = [
        {"op": "set", "path": ["a", 0, "-"], "value": {"x": [1]}},
        {"op": "set", "path": ["a"], "value": "text", "guard": guard},
        {"op": "set", "path": ["a"], "value": None},
        {"op": "remove", "path": ["a", 1]},
        {"op": "set_by_key", "path": ["l"], "key_field": "id", "value": {"id": 1}},
        {"op": "remove_by_key", "path": ["l"], "key_field": "id", "key": ["a", 2]},
    ]
    parsed = parse_ops(raws)
    made = [
        Op("set", ("a", 0, "-"), raws[0], {"x": [1]}),
        Op("set", ("a",), {"op": "set", "path": ["a"], "value": "text"}, "text", guard=Guard(("g",), 1)),
        Op("set", ("a",), raws[2], None),
        Op("remove", ("a", 1), raws[3]),
        Op("set_by_key", ("l",), raws[4], {"id": 1}, "id"),
        Op("remove_by_key", ("l",), raws[5], None, "id", ("a", 2)),
    ]
    assert parsed == made
    for op, expected in zip(parsed, made, strict=True):
        assert type(op) is Op
        assert op._asdict() == expected._asdict()
    # a container value is the caller's no more; a string is immutable and kept as given
    assert parsed[0].value is not raws[0]["value"] and parsed[0].raw is not raws[0]
    assert parsed[1].value is raws[1]["value"]


@pytest.mark.parametrize("value", [float("nan"), (1, 2), _Text("a"), {1: "a"}, [[float("inf")]]])
def test_a_set_value_that_is_not_plain_json_is_still_refused(value: Any) -> None:
    with pytest.raises(InvalidJSON) as checked:
        check(value, "value")
    with pytest.raises(OpError) as refused:
        parse_ops([{"op": "set", "path": ["a"], "value": value}])
    assert refused.value.message == f"ops[0]: {checked.value.message}"


def test_a_set_copies_small_and_large_objects_alike() -> None:
    """A set copies each object on its path: plainly when small, through the copier when large
    (which is told the step); the values are the same either way and the input is untouched."""
    told: list[Any] = []

    class Copier:
        min_elements = 3

        def list_copy(self, source: list[Any]) -> list[Any]:
            return list(source)

        def dict_copy(self, source: dict[str, Any]) -> dict[str, Any]:
            return dict(source)

        def made(self, new: Any, source: Any, steps: Any) -> None:
            told.append((new, source, list(steps)))

    doc = {"big": {"a": 1, "b": 2, "c": {"x": 1}}, "small": {"a": 1}}
    before = copy.deepcopy(doc)
    ops = parse_ops(
        [
            {"op": "set", "path": ["big", "c", "y"], "value": 2},
            {"op": "set", "path": ["small", "b"], "value": 3},
        ]
    )
    plain = apply_ops(doc, ops).document
    copied = apply_ops(doc, ops, copies=Copier()).document
    assert plain == copied == {"big": {"a": 1, "b": 2, "c": {"x": 1, "y": 2}}, "small": {"a": 1, "b": 3}}
    assert doc == before
    assert told == [(copied["big"], doc["big"], [("c", copied["big"]["c"])])]
