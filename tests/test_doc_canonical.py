import json
import math
from typing import Any

import pytest

from stateflow.doc.canonical import (
    check,
    decode,
    encode,
    encode_indented,
    encode_trusted,
    identical,
    json_equal,
    kind,
    text_length,
)
from stateflow.errors import InvalidJSON, NotJSON


def test_encode_is_compact_and_keeps_key_order() -> None:
    assert encode({"b": 1, "a": [True, None, 1.5, "é"]}) == '{"b":1,"a":[true,null,1.5,"é"]}'.encode()


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, {"a": [math.nan]}])
def test_nan_and_infinity_are_refused(bad: object) -> None:
    with pytest.raises(InvalidJSON, match="NaN and Infinity"):
        encode(bad)


def test_non_string_keys_are_refused_with_their_location() -> None:
    with pytest.raises(InvalidJSON, match=r"\$\.a: object key 1 is not a string"):
        check({"a": {1: "x"}})


def test_non_json_types_and_huge_integers_are_refused() -> None:
    with pytest.raises(InvalidJSON, match="set is not a JSON type"):
        check({"a": {1, 2}})
    with pytest.raises(InvalidJSON, match="64-bit"):
        check(2**70)


@pytest.mark.parametrize("text", ["NaN", "[Infinity]", "{'a': 1}", "[1,]", "1 2"])
def test_decode_is_strict(text: str) -> None:
    with pytest.raises(InvalidJSON):
        decode(text)


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ('{"n": 1, "n": 2}', "n"),
        ('{"ops": [{"op": "set"}], "ops": []}', "ops"),
        ('[1, {"a": {"x": "1:2", "x": 3}}]', "x"),
        ('{"a\\u003a": 1, "a:": 2}', "a:"),  # one name, one of them escaped
        ('{"é": 1, "\\u00e9": 2}', "é"),
        ('{"k": {"deep": 1}, "k": {}}', "k"),
    ],
)
def test_decode_refuses_an_object_naming_a_member_twice(text: str, name: str) -> None:
    # orjson keeps the last value: the other was dropped without a word
    with pytest.raises(NotJSON, match=f"^member name '{name}' is given more than once in one object"):
        decode(text)
    with pytest.raises(NotJSON):
        decode(text.encode())


@pytest.mark.parametrize(
    "text",
    [
        '{"a": "x:y:z", "b": {"c": ":"}}',
        '{"a\\\\u003a": 1, "b": "\\\\u003A"}',  # an escaped backslash, then u003a: no colon
        '{"a\\u003a": 1, "a": 2}',
        '[{"a": 1}, {"a": 1}]',  # one name in two objects
        '{"": 1, " ": 2}',
    ],
)
def test_decode_keeps_objects_whose_names_are_distinct(text: str) -> None:
    assert decode(text) == json.loads(text)


def test_json_equality_rules() -> None:
    assert json_equal(1, 1.0)
    assert not json_equal(True, 1)
    assert not json_equal(False, 0)
    assert json_equal(True, True)
    assert json_equal({"a": [1, {"b": None}]}, {"a": [1.0, {"b": None}]})
    assert not json_equal({"a": 1}, {"a": 1, "b": 2})
    assert not json_equal([1, 2], [2, 1])
    assert not json_equal(None, 0)
    assert not json_equal("1", 1)


def test_identical_is_stricter_than_json_equality() -> None:
    assert not identical(1, 1.0)
    assert not identical(True, 1)
    assert identical({"a": [1, "x"]}, {"a": [1, "x"]})


def test_kind_names() -> None:
    values: tuple[Any, ...] = ({}, [], "", 0, 1.5, True, None)
    assert [kind(v) for v in values] == [
        "object",
        "array",
        "string",
        "number",
        "number",
        "boolean",
        "null",
    ]


def test_string_length_counts_code_points() -> None:
    assert text_length("compact") == 7
    assert text_length("é😀") == 2  # two code points (UTF-16 would say 3)


def _nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


def test_nesting_up_to_the_storage_limit_is_accepted_deeper_is_refused_by_place() -> None:
    assert encode(_nested(254)).startswith(b"[[")
    # a document that deep inside an answer's envelope: past orjson's limit, the same JSON
    enveloped = {"data": {"data": _nested(254), "n": 1e16}}
    assert decode(encode_trusted(enveloped)) == enveloped
    assert decode(encode_indented(enveloped)) == enveloped and encode_indented(enveloped).startswith(
        b'{\n  "data"'
    )
    for depth in (255, 5_000):  # 5,000 is deeper than Python itself recurses
        with pytest.raises(InvalidJSON, match="nested deeper than 254 levels") as info:
            check(_nested(depth), "value")
        assert str(info.value).startswith("value[0][0]")


def test_a_place_hundreds_of_levels_deep_is_shown_with_its_run_cut() -> None:
    """A too-deep value's place spelled every level (``$[0][0]…``, 770 characters for 254
    levels): a long run of one step is shown by its first three, its last and the count, the same
    from a value and from its text."""
    deep: Any = {"k": _nested(300)}
    with pytest.raises(InvalidJSON) as checked:
        check(deep)
    assert str(checked.value) == (
        "$.k[0][0][0]…[0] (253 × [0]): nested deeper than 254 levels, which JSON storage refuses"
    )
    keys: Any = 1
    for _ in range(300):
        keys = {"a": keys}
    with pytest.raises(InvalidJSON, match=r"^\$\.a\.a\.a…\.a \(254 × \.a\): nested deeper"):
        check(keys)
    with pytest.raises(InvalidJSON) as decoded:
        decode("[" * 2_000 + "]" * 2_000)
    assert str(decoded.value).startswith("$[0][0][0]…[0] (254 × [0]): nested deeper than 254 levels")
    with pytest.raises(InvalidJSON, match=r"^\$\[0\]\[0\]\[0\]\[0\]\[0\]\[0\]: nested"):
        check(_nested(2), "$[0][0][0][0][0]", 253)  # (a short run is spelled out)


def test_text_deeper_than_the_parser_reads_is_refused_as_a_value_that_deep_is() -> None:
    """Past orjson's own limit (1024) the text cannot be parsed at all: refused as the value
    it holds is from 255 levels on (invalid-json, the same place), not as text that is not JSON."""
    deep = "[" * 2_000 + "1" + "]" * 2_000
    for value, text in (
        (_nested(1_100), "[" * 1_100 + "1" + "]" * 1_100),
        ({"a": [1, {'b"c': _nested(2_000)}]}, '{"a": [1, {"b\\"c": ' + deep + "}]}"),
    ):
        with pytest.raises(InvalidJSON) as checked:
            check(value)
        with pytest.raises(InvalidJSON) as decoded:
            decode(text)
        assert not isinstance(decoded.value, NotJSON)
        assert str(decoded.value) == str(checked.value)
        assert "nested deeper than 254 levels" in str(decoded.value)
        with pytest.raises(InvalidJSON) as from_bytes:
            decode(text.encode())
        assert str(from_bytes.value) == str(checked.value)


def test_a_bad_value_deep_inside_is_named_by_its_full_path() -> None:
    with pytest.raises(InvalidJSON, match=r"^\$\.people\[1\]\.score: nan"):
        check({"people": [{"score": 1.0}, {"score": math.nan}], "ok": True})


@pytest.mark.parametrize("bad", [2**64, -(2**63) - 1, math.nan, math.inf, -math.inf])
@pytest.mark.parametrize(
    ("value", "place"),
    [
        (lambda bad: {"a": bad}, "$.a"),
        (lambda bad: [1, "s", bad], "$[2]"),
        (lambda bad: {"x": [{"y": [0.5, bad]}]}, "$.x[0].y[1]"),
    ],
)
def test_numbers_inside_containers_are_refused_by_place(bad: object, value: Any, place: str) -> None:
    # a container's numbers are answered in its own loop, not by a call each: the same refusals
    with pytest.raises(InvalidJSON) as refused:
        check(value(bad))
    assert refused.value.message.startswith(f"{place}: ")


def test_numbers_at_the_bounds_inside_containers_are_accepted() -> None:
    check({"a": 2**64 - 1, "b": [-(2**63), 1.5, -0.0, True, False, None, "s", 0], "c": {"d": 1e308}})
