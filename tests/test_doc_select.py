import pytest

from stateflow.doc.paths import Index, Key, Range, ReadPath, parse
from stateflow.doc.select import keys, meta, select
from stateflow.errors import SelectionError

TEN = list(range(10))


def sel(doc: object, text: str) -> object:
    p = parse(text)
    assert isinstance(p, ReadPath)
    return select(doc, p.selectors, text)


@pytest.mark.parametrize(("rng", "expected"), [("[0:10]", TEN), ("[10:10]", []), ("[3..5]", [3, 4])])
def test_ranges_that_fit_the_array(rng: str, expected: list[int]) -> None:
    assert sel({"lazy": {"m": TEN}}, f"cwd.lazy.m{rng}") == expected


@pytest.mark.parametrize("rng", ["[0:15]", "[11:11]", "[0..11]"])
def test_ranges_that_do_not_fit_fail_without_truncating(rng: str) -> None:
    with pytest.raises(SelectionError, match=r"outside cwd\.lazy\.m \(length 10\)\Z"):
        sel({"lazy": {"m": TEN}}, f"cwd.lazy.m{rng}")


def test_items_members_and_errors_name_the_full_path() -> None:
    doc = {"lazy": {"m": ["a", {"b": [1, 2]}]}}
    assert sel(doc, "cwd.lazy.m[1].b[1]") == 2
    # an index or range beyond the array names the array, not the path through it
    with pytest.raises(SelectionError, match=r"index 2 is outside cwd\.lazy\.m \(length 2\)\Z"):
        sel(doc, "cwd.lazy.m[2]")
    with pytest.raises(SelectionError, match=r"index 5 is outside cwd\.lazy\.m\[1\]\.b \(length 2\)\Z"):
        sel(doc, "cwd.lazy.m[1].b[5].c")
    with pytest.raises(SelectionError, match=r"does not exist: cwd\.lazy\.x"):
        sel(doc, "cwd.lazy.x")
    with pytest.raises(SelectionError, match="array selector requires an array"):
        sel(doc, "cwd.lazy[0]")
    with pytest.raises(SelectionError, match="does not exist"):
        sel(doc, "cwd.lazy.m.b")  # a member of an array


def test_select_does_not_copy_or_mutate() -> None:
    inner = {"x": 1}
    doc = {"a": inner}
    assert select(doc, [Key("a")], "a") is inner
    assert select([1, 2, 3], [Range(0, 2)], "") == [1, 2]
    assert select([[5]], [Index(0), Index(0)], "") == 5


def test_keys_projection_shapes() -> None:
    assert keys({"memory": [], "rules": {}, "soul": "x", "n": 1, "f": False, "z": None}) == {
        "meta": {"type": "object", "size": 6},
        "keys": {
            "memory": "array",
            "rules": "object",
            "soul": "string",
            "n": "number",
            "f": "boolean",
            "z": "null",
        },
    }
    assert keys(list(range(10000))) == {"meta": {"type": "array", "length": 10000}, "keys": []}
    assert keys("compact") == {"meta": {"type": "string", "length": 7}, "keys": []}
    assert keys(42) == {"meta": {"type": "number"}, "keys": []}
    assert keys(True) == {"meta": {"type": "boolean"}, "keys": []}
    assert list(keys({})) == ["meta", "keys"]  # keys stays last


def test_meta_is_closed() -> None:
    for value in ({"a": 1}, [1], "s", 1, None, True):
        assert set(meta(value)) <= {"type", "size", "length"}
