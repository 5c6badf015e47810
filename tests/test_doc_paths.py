import pytest

from stateflow.doc.paths import Index, Key, PatchesPath, Range, ReadPath, parse
from stateflow.errors import InvalidPath


def test_explicit_roots_with_and_without_history_offset() -> None:
    p = parse("cwd.lazy.memory[10:20]")
    assert isinstance(p, ReadPath)
    assert (p.root, p.offset, p.implicit) == ("cwd", 0, False)
    assert p.selectors == (Key("lazy"), Key("memory"), Range(10, 20))
    q = parse("session[3].lazy.investigation")
    assert isinstance(q, ReadPath)
    assert (q.root, q.offset, q.selectors) == ("session", 3, (Key("lazy"), Key("investigation")))
    r = parse("effective[2]")
    assert isinstance(r, ReadPath)
    assert (r.root, r.offset, r.selectors) == ("effective", 2, ())


def test_implicit_plane_roots_alias_effective() -> None:
    p = parse("tactics.nextAction")
    assert isinstance(p, ReadPath)
    assert (p.root, p.implicit, p.selectors) == ("effective", True, (Key("tactics"), Key("nextAction")))
    q = parse("lazy[3]")  # an index selector on the plane, not a history offset
    assert isinstance(q, ReadPath)
    assert q.selectors == (Key("lazy"), Index(3))


def test_fallback_range_spelling_is_identical() -> None:
    a, b = parse("cwd.lazy.m[0..10]"), parse("cwd.lazy.m[0:10]")
    assert isinstance(a, ReadPath) and isinstance(b, ReadPath)
    assert a.selectors == b.selectors


def test_keys_may_use_dollar_underscore_and_dash() -> None:
    p = parse("effective.lazy.$ref_x-1.A9")
    assert isinstance(p, ReadPath)
    assert p.selectors[-2:] == (Key("$ref_x-1"), Key("A9"))


def test_zero_and_numbers_without_leading_zeros_are_canonical() -> None:
    assert parse("cwd[0].lazy.m[0][10:100]") == ReadPath(
        "cwd", 0, (Key("lazy"), Key("m"), Index(0), Range(10, 100)), "cwd[0].lazy.m[0][10:100]"
    )


def test_scope_patches_paths() -> None:
    assert parse("cwd.patches") == PatchesPath("cwd", 0, "cwd.patches")
    assert parse("global.patches[4]") == PatchesPath("global", 4, "global.patches[4]")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty read path"),
        ("unknown.memory", "must start with a plane"),
        ("state.working", "must start with a plane"),
        ("cwd.lazy.memory[-1]", "invalid selector"),
        ("cwd.lazy.memory[2:]", "invalid selector"),
        ("cwd.lazy.memory[:2]", "invalid selector"),
        ("cwd.lazy.memory[0:10:2]", "invalid selector"),
        ("cwd.lazy.memory[*]", "invalid selector"),
        ("cwd.lazy.memory[0,1]", "invalid selector"),
        ("cwd.lazy.memory[0.2]", "invalid selector"),
        ("cwd.lazy.mémoire", "invalid selector"),
        ("cwd.lazy.1abc", "invalid selector"),
        ("cwd.lazy['a']", "invalid selector"),
        ('cwd.lazy["a"]', "invalid selector"),
        ("cwd.lazy.", "invalid selector"),
        ("cwd..lazy", "invalid selector"),
        ("cwd.lazy.m[2:1]", "ends before it starts"),
        ("cwd[1][2]", "followed only by '.'"),
        ("cwd[-1].lazy", "followed only by '.'"),
        ("effective.patches", "requires an explicit scope"),
        ("global[1].patches", "index patches after .patches"),
        ("global.patches.x", "ends at .patches"),
        ("cwd.lazy.m[ 1]", "invalid selector"),
        ("cwd.lazy.m[01]", "'01' has a leading zero"),
        ("cwd.lazy.m[00:02]", "'00' has a leading zero"),
        ("cwd.lazy.m[0..010]", "'010' has a leading zero"),
        ("lazy[00]", "'00' has a leading zero"),
        ("session[01].lazy", "'01' has a leading zero"),
        ("cwd.patches[01]", "'01' has a leading zero"),
    ],
)
def test_everything_else_is_rejected_clearly(text: str, message: str) -> None:
    with pytest.raises(InvalidPath, match=message):
        parse(text)


def test_non_string_paths_are_rejected() -> None:
    with pytest.raises(InvalidPath, match="must be a string"):
        parse(3)


def test_a_key_named_like_patches_is_an_ordinary_member() -> None:
    p = parse("cwd.patchesX")
    assert isinstance(p, ReadPath)
    assert p.selectors == (Key("patchesX"),)
