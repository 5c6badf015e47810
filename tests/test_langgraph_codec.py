"""The adapters' codec: which values a record keeps readable as JSON, and that every value
comes back as the serializer gives it back, whichever form it took."""

from __future__ import annotations

import enum
import math
import random
from pathlib import Path
from typing import Any

import orjson
import pytest
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from stateflow.doc.diff import diff
from stateflow.langgraph import StateflowSaver
from stateflow.langgraph.codec import NOT_PLAIN as REFUSED
from stateflow.langgraph.codec import (
    Codec,
    is_plain,
    plain,
    plain_edits,
    shaped,
    shaped_members,
    strict_bytes,
)
from stateflow.states import StatesService
from stateflow.store import open_store


def _nested(depth: int, leaf: Any) -> Any:
    """``leaf`` under ``depth`` levels, alternating objects and lists."""
    value = leaf
    for level in range(depth):
        value = {"k": value} if level % 2 else [value]
    return value


PLAIN: list[Any] = [
    None,
    True,
    "text",
    0,
    2**53,
    -(2**53),
    1.5,
    {"a": 1, "b": [1, 2, "x", None, False], "c": {"d": 2**53}},
    [1, [2, [3]]],
    _nested(64, 1),  # the deepest a value may go and stay readable
    _nested(64, "s"),
    _nested(63, {"n": 1}),
]
NOT_PLAIN: list[Any] = [
    2**53 + 1,
    -(2**53) - 1,
    {"a": 2**53 + 1},
    [1, -(2**53) - 1],
    math.nan,
    {"a": math.inf},
    (1, 2),
    {"a": (1,)},
    {1: "a"},
    b"bytes",
    _nested(65, 1),  # an integer one level too deep, in a list and in an object
    _nested(64, {"n": 1}),
    _nested(65, [1]),
]


@pytest.mark.parametrize("value", PLAIN)
def test_plain_json_is_kept_readable(value: Any) -> None:
    assert is_plain(value)
    assert Codec(JsonPlusSerializer()).encode(value) == {"json": value}


@pytest.mark.parametrize("value", NOT_PLAIN)
def test_anything_else_goes_through_the_serializer_and_comes_back(value: Any) -> None:
    assert not is_plain(value)
    serde = JsonPlusSerializer()
    codec = Codec(serde)
    stored = codec.encode(value)
    assert set(stored) == {"type", "b64"}
    back = codec.decode(stored)
    if isinstance(value, float) and math.isnan(value):
        assert math.isnan(back)
    else:  # what the serializer itself gives back (a tuple comes back a list)
        assert back == serde.loads_typed(serde.dumps_typed(value))


def test_a_checkpoints_values_read_back_as_written(tmp_path: Path) -> None:
    """Integer channel versions and values at every size a record may hold readable, and
    beyond, through a real saver and a reopened store."""
    values = {
        "small": 7,
        "edge": 2**53,
        "big": 2**53 + 1,
        "deep": _nested(64, 3),
        "too deep": _nested(65, 3),
        "mixed": {"n": [1, -(2**60), "x", None, True, 2.5]},
    }
    versions = {channel: n + 1 for n, channel in enumerate(values)}
    checkpoint = {
        "v": 4,
        "id": "1",
        "ts": "2026-01-01T00:00:00+00:00",
        "channel_values": values,
        "channel_versions": versions,
        "versions_seen": {"node": dict(versions)},
        "updated_channels": list(values),
    }
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    with StateflowSaver.open(tmp_path / "codec.db") as saver:
        saver.put(config, checkpoint, {"source": "loop", "step": 2**53 + 2, "parents": {}}, versions)  # type: ignore[arg-type]
    with StateflowSaver.open(tmp_path / "codec.db") as saver:
        got = saver.get_tuple(config)  # type: ignore[arg-type]
        assert got is not None
        assert got.checkpoint["channel_values"] == values
        assert got.checkpoint["channel_versions"] == versions
        assert got.metadata["step"] == 2**53 + 2
        stored = saver.records.store.get(saver.records.doc_key("checkpoint", saver._key("t", "", "1"))).body
        assert stored is not None
        held = stored["saved"]["channel_values"]
        assert {c for c, v in held.items() if "json" in v} == {"small", "edge", "deep"}


def test_a_checkpoint_is_stored_as_the_exact_codec_encodes_it(tmp_path: Path) -> None:
    """A put encodes its values without checking keys and integers' range, leaving those to the
    record's strict encoding; where that refuses, every value is encoded again exactly: the
    record stored is the one ``Codec.encode`` makes (an object with a key that is not text or
    one of a subclass of ``str``, an integer past 2^53: through the serializer; ±2^53: JSON)
    and reads back as written."""
    values: dict[str, Any] = {
        "keys": {1: "a"},
        "subclass key": {_Text("k"): 1},
        "edge": {"n": -(2**53)},
        "big": [2**53 + 1],
        "fine": {"n": [1, "x", None]},
    }
    versions = {channel: 1 for channel in values}
    checkpoint = {
        "v": 4,
        "id": "1",
        "ts": "2026-01-01T00:00:00+00:00",
        "channel_values": values,
        "channel_versions": versions,
        "versions_seen": {},
        "updated_channels": list(values),
    }
    metadata = {"source": "loop", "step": 2**53, "parents": {}}
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    with StateflowSaver.open(tmp_path / "exact.db") as saver:
        saver.put(config, checkpoint, metadata, versions)  # type: ignore[arg-type]
    with StateflowSaver.open(tmp_path / "exact.db") as saver:
        stored = saver.records.store.get(saver.records.doc_key("checkpoint", saver._key("t", "", "1"))).body
        assert stored is not None
        held = stored["saved"]
        exact = saver.codec.encode
        assert {c for c, v in held["channel_values"].items() if "json" in v} == {"edge", "fine"}
        for channel in ("edge", "fine"):
            assert held["channel_values"][channel] == exact(values[channel])
        assert held["metadata"]["json"]["step"] == 2**53
        got = saver.get_tuple(config)  # type: ignore[arg-type]
        assert got is not None
        assert got.checkpoint["channel_values"] == values
        assert got.metadata["step"] == 2**53


class _Name(str):
    """A task path of a subclass of ``str``."""


def _only_plain(value: Any, callers: list[Any]) -> None:
    """``value`` is JSON of exact types and holds none of ``callers``' objects."""
    assert all(value is not c for c in callers)
    if type(value) is dict:
        for k, v in value.items():
            assert type(k) is str
            _only_plain(v, callers)
    elif type(value) is list:
        for v in value:
            _only_plain(v, callers)
    else:
        assert value is None or type(value) in (str, int, float, bool)


def test_the_stored_records_keep_nothing_of_the_callers(backend: str) -> None:
    """What the store keeps (and caches) of a checkpoint and of its writes is exact JSON made
    of none of the caller's objects: changing them after ``put``/``put_writes`` changes
    nothing read back, from this saver and from a reopened store (a task path of a subclass
    of ``str`` too)."""
    name = "messages"
    text: dict[str, str] = {"text": "b"}
    messages: list[Any] = ["a", text]
    plan: dict[str, list[int]] = {"next": [1, 2]}
    versions = {name: 1, "plan": 1}
    seen = {"node": {name: 1}}
    checkpoint = {
        "v": 4,
        "id": "1",
        "ts": "2026-01-01T00:00:00+00:00",
        "channel_values": {name: messages, "plan": plan},
        "channel_versions": versions,
        "versions_seen": seen,
        "updated_channels": [name],
    }
    metadata = {"source": "loop", "step": 1, "parents": {"": "0"}, "run_id": "run"}
    parts: list[int] = [1]
    reply = {"text": "reply", "parts": parts}
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    callers = [messages, text, plan, plan["next"], versions, seen, seen["node"], metadata, reply, parts]

    def read_back(saver: StateflowSaver) -> None:
        got = saver.get_tuple(config)
        assert got is not None
        assert got.checkpoint["channel_values"] == {
            "messages": ["a", {"text": "b"}],
            "plan": {"next": [1, 2]},
        }
        assert got.checkpoint["channel_versions"] == {"messages": 1, "plan": 1}
        assert got.metadata == {"source": "loop", "step": 1, "parents": {"": "0"}, "run_id": "run"}
        assert [(w[0], w[1], w[2]) for w in got.pending_writes or []] == [
            ("task", "messages", {"text": "reply", "parts": [1]}),
            ("task", "plan", "x"),
        ]
        for kind in ("checkpoint", "writes"):
            body = saver.records.store.read([saver.records.doc_key(kind, saver._key("t", "", "1"))])
            _only_plain(next(iter(body.values())).body, callers)

    with open_store(backend, auto_migrate=True) as opened:
        saver = StateflowSaver(StatesService(opened))
        written = saver.put(config, checkpoint, metadata, {name: 1, "plan": 1})  # type: ignore[arg-type]
        saver.put_writes(written, [(name, reply), ("plan", "x")], "task", _Name("path"))
        messages.append("later")
        text["text"] = "changed"
        plan["next"].append(3)
        versions[name] = 9
        seen["node"][name] = 9
        metadata["parents"] = {}
        parts.append(2)
        read_back(saver)
    with open_store(backend, auto_migrate=True) as opened:
        read_back(StateflowSaver(StatesService(opened)))


class _Text(str):
    """A subclass of ``str``."""


class _Level(enum.IntEnum):
    LOW = 1


def _plain_by_the_rules(value: Any, depth: int = 0) -> bool:
    """What the codec keeps readable, spelled out: text and null anywhere; every other value
    at most 64 levels down; integers within ±2^53, finite floats, objects with text keys."""
    kind = type(value)
    if kind is str or value is None:
        return True
    if depth > 64:
        return False
    if kind is bool:
        return True
    if kind is int:
        return bool(-(2**53) <= value <= 2**53)
    if kind is float:
        return math.isfinite(value)
    if kind is dict:
        return all(type(k) is str and _plain_by_the_rules(v, depth + 1) for k, v in value.items())
    if kind is list:
        return all(_plain_by_the_rules(v, depth + 1) for v in value)
    return False


def _same_json(copy: Any, expected: Any, original: Any) -> None:
    """``copy`` is ``expected`` in exact types and key order, and new wherever it is a container."""
    assert type(copy) is type(expected)
    if type(expected) is dict:
        assert copy is not original and list(copy) == list(expected)
        for (k, v), o in zip(copy.items(), original.values(), strict=True):
            _same_json(v, expected[k], o)
    elif type(expected) is list:
        assert copy is not original and len(copy) == len(expected)
        for v, e, o in zip(copy, expected, original, strict=True):
            _same_json(v, e, o)
    else:
        assert copy == expected


def test_plain_answers_by_the_rules_and_copies_as_json_does() -> None:
    """``plain`` on random nests of objects and lists (leaves of every kind that is and is
    not plain, down to the depth limit and past it): not plain exactly where the rules say,
    else a copy equal in exact types and key order to what a JSON round trip gives, sharing
    no container with the value."""
    rng = random.Random(17)
    leaves: list[Any] = [
        "text",
        "",
        None,
        True,
        False,
        0,
        -7,
        2**53,
        -(2**53),
        2**53 + 1,
        -(2**60),
        1.5,
        -0.0,
        math.nan,
        math.inf,
        (1, 2),
        b"b",
        _Text("t"),
        _Level.LOW,
        {1: "a"},
        {_Text("k"): 1},
    ]

    def nest(depth: int) -> Any:
        if depth <= 0 or rng.random() < 0.3:
            return rng.choice(leaves)
        if rng.random() < 0.5:
            return {f"k{n}": nest(depth - 1) for n in range(rng.randint(0, 4))}
        return [nest(depth - 1) for _ in range(rng.randint(0, 4))]

    values = [nest(6) for _ in range(3000)]
    leaf: Any
    for depth in (62, 63, 64, 65, 66):
        for leaf in ("s", 1, True, 1.5, None, {}, []):
            values += [_nested(depth, leaf), {"a": _nested(depth, leaf)}, [_nested(depth, leaf)]]
    kept = 0
    for value in values:
        copy = plain(value)
        assert (copy is not REFUSED) == _plain_by_the_rules(value), value
        if copy is not REFUSED:
            kept += 1
            _same_json(copy, orjson.loads(orjson.dumps(value)), value)
    assert 300 < kept < len(values) - 300  # both answers, many times


def test_shaped_and_its_strict_encoding_answer_as_plain() -> None:
    """``shaped`` (no key or integer-range checks) then ``strict_bytes`` on random nests: where
    both accept, the copy is ``plain``'s and its bytes those of ``plain``'s copy; a value
    ``plain`` refuses is refused by one of them; a value ``plain`` keeps is refused only for an
    integer of exactly ±2^53 or a lone surrogate (the saver's exact retry keeps the first and
    names the second)."""
    rng = random.Random(29)
    leaves: list[Any] = [
        "text",
        None,
        True,
        0,
        -7,
        2**53,
        -(2**53),
        2**53 - 1,
        2**53 + 1,
        -(2**60),
        2**70,
        1.5,
        math.nan,
        -math.inf,
        (1, 2),
        b"b",
        _Text("t"),
        _Level.LOW,
        "\ud800",
        {1: "a"},
        {_Text("k"): 1},
        {"\ud800": 1},
    ]

    def nest(depth: int) -> Any:
        if depth <= 0 or rng.random() < 0.3:
            return rng.choice(leaves)
        if rng.random() < 0.5:
            return {f"k{n}": nest(depth - 1) for n in range(rng.randint(0, 4))}
        return [nest(depth - 1) for _ in range(rng.randint(0, 4))]

    def edge(value: Any) -> bool:  # (an integer of ±2^53 or a lone surrogate in it)
        return _holds(value, lambda x: type(x) is int and abs(x) == 2**53) or _holds(
            value, lambda x: type(x) is str and any(0xD800 <= ord(c) <= 0xDFFF for c in x)
        )

    values = [nest(6) for _ in range(3000)]
    deep: list[Any] = ["s", 1, 2**53 + 1, True, 1.5, None, {}, []]
    for depth in (62, 63, 64, 65, 66):
        for leaf in deep:
            values += [_nested(depth, leaf), {"a": _nested(depth, leaf)}]
    # (and the codec's own ways with a leaf or a container of leaves: the same)
    values += [rng.choice(leaves) for _ in range(300)]
    values += [[rng.choice(leaves) for _ in range(rng.randint(0, 5))] for _ in range(300)]
    values += [{f"k{n}": rng.choice(leaves) for n in range(rng.randint(0, 5))} for _ in range(300)]
    codec = Codec(JsonPlusSerializer())
    both = 0
    for value in values:
        exact = plain(value)
        copy = shaped(value)
        encoded = None if copy is REFUSED else strict_bytes({"json": copy})
        try:
            wrapped = codec.encode_shaped(value)
        except TypeError:  # (the serializer's refusal of a value ``shaped`` refused too)
            assert copy is REFUSED, value
            wrapped = {}
        if encoded is None:
            assert exact is REFUSED or edge(value), value
            assert "json" not in wrapped or strict_bytes(wrapped) is None, value
        else:
            both += 1
            assert exact is not REFUSED, value
            _same_json(copy, exact, value)
            assert encoded == orjson.dumps({"json": exact})
            _same_json(wrapped["json"], exact, value)
            assert strict_bytes(wrapped) == encoded
        if exact is not REFUSED:  # (``Codec.encode``'s own way with a leaf: ``plain``'s answer)
            _same_json(codec.encode(value)["json"], exact, value)
        elif type(value) in (int, float):  # (refused: to the serializer, where it takes it)
            try:
                serialized = codec.encode(value)
            except TypeError:  # (msgpack's refusal of an integer past 64 bits)
                continue
            assert "json" not in serialized, value
    assert 300 < both < len(values) - 300


def test_an_object_made_for_the_write_is_shaped_in_place_as_shaped_copies_it() -> None:
    """``shaped_members`` (and ``Codec.encode_made``) on random objects — flat ones, of leaves
    only, and nests, leaves of every kind ``shaped`` takes and refuses, down to the depth limit
    and past it: refused exactly where ``shaped`` refuses; else the object itself, holding what
    ``shaped``'s copy holds (exact types, key order, no container of the caller's), its bytes
    those of that copy — and what the serializer makes of it where refused is what it makes of
    the value as given."""
    rng = random.Random(41)
    leaves: list[Any] = [
        "text",
        None,
        True,
        0,
        2**53,
        2**53 + 1,
        1.5,
        math.nan,
        -math.inf,
        (1, 2),
        b"b",
        _Text("t"),
        _Level.LOW,
        {1: "a"},
        {_Text("k"): 1},
    ]
    flat: list[Any] = ["text", None, False, 7, -(2**53), 2**70]  # (what a check in C takes whole)

    def nest(depth: int) -> Any:
        if depth <= 0 or rng.random() < 0.3:
            return rng.choice(leaves)
        if rng.random() < 0.3:  # an object or a list of leaves a check in C takes whole
            if rng.random() < 0.5:
                return [rng.choice(flat) for _ in range(rng.randint(0, 4))]
            return {f"f{n}": rng.choice(flat) for n in range(rng.randint(0, 4))}
        if rng.random() < 0.5:
            return {f"k{n}": nest(depth - 1) for n in range(rng.randint(0, 4))}
        return [nest(depth - 1) for _ in range(rng.randint(0, 4))]

    values: list[dict[str, Any]] = [{f"m{n}": nest(5) for n in range(rng.randint(0, 6))} for _ in range(2000)]
    values += [
        {"m": rng.choice(flat), "n": [rng.choice(flat)], "o": {"p": rng.choice(flat)}} for _ in range(200)
    ]
    leaf: Any
    for depth in (61, 62, 63, 64, 65):
        for leaf in ("s", 1, 1.5, None, {}, [], ["s", 1], {"a": 1}):
            values.append({"a": _nested(depth, leaf)})
    serde = JsonPlusSerializer()
    codec = Codec(serde)
    kept = 0
    for value in values:
        copy = shaped(value)
        made = dict(value)  # (the object a put makes: the record holds it)
        ok = shaped_members(made)
        assert ok == (copy is not REFUSED), value
        if ok:
            kept += 1
            _same_json(made, copy, value)
            assert strict_bytes(made) == strict_bytes(copy)
            again = dict(value)
            encoded = codec.encode_made(again)
            assert encoded["json"] is again
            _same_json(again, copy, value)
        else:  # (some members copied already: the serializer's bytes are the value's)
            try:
                expected = codec.encode_shaped(value)
            except TypeError:  # (the serializer's refusal: of the object made for it too)
                with pytest.raises(TypeError):
                    codec.encode_made(dict(value))
                continue
            assert codec.encode_made(dict(value)) == expected
    assert 300 < kept < len(values) - 300  # both answers, many times


def _holds(value: Any, found: Any) -> bool:
    """Whether ``found`` holds for ``value``, a key of an object in it, or a value in it."""
    if type(value) is dict:
        return any(found(k) or _holds(v, found) for k, v in value.items())
    if type(value) is list:
        return any(_holds(v, found) for v in value)
    return bool(found(value))


_PLAIN_LEAVES: list[Any] = ["text", "", None, True, False, 0, 1, 1.0, -0.0, 2.5, 2**53, -(2**53)]
_REFUSED_LEAVES: list[Any] = [2**53 + 1, math.nan, (1, 2), b"b", _Text("t"), _Level.LOW, {1: "a"}]


def _grouped(before: dict[str, Any], after: dict[str, Any]) -> bytes:
    """``diff(before, after)``'s edits grouped by top-level member in first-touched order, as
    JSON text (exact number types, key order and edit order)."""
    groups: dict[str, list[Any]] = {}
    for edit in diff(before, after):
        groups.setdefault(str(edit.path[0]), []).append(edit.to_json())
    return orjson.dumps(groups)


def test_plain_edits_walks_once_what_plain_and_the_diff_give() -> None:
    """``plain_edits(new, old)`` on random bodies and random changes of them (number types
    swapped — ``1``, ``1.0``, ``True`` —, keys added, deleted and reordered, lists grown and
    shrunk, kinds changed, values refused anywhere, down to the depth limit and past it):
    refused exactly where ``plain`` refuses, else ``plain``'s copy — the record handed, filled
    in place (exact types, key order, no container of ``new``) — and exactly the diff's edits of ``old`` into it, grouped by member
    in first-touched order."""
    rng = random.Random(1203)

    def nest(depth: int, refused: float = 0.0) -> Any:
        if depth <= 0 or rng.random() < 0.35:
            return rng.choice(_REFUSED_LEAVES if rng.random() < refused else _PLAIN_LEAVES)
        if rng.random() < 0.5:
            return {f"k{n}": nest(depth - 1, refused) for n in range(rng.randint(0, 4))}
        return [nest(depth - 1, refused) for _ in range(rng.randint(0, 4))]

    def changed(value: Any, depth: int) -> Any:
        """A new value made from ``value``: its containers new, some parts changed."""
        roll = rng.random()
        if roll < 0.1:
            return nest(depth, 0.05)
        if type(value) is dict:
            items = [
                (k, changed(v, depth - 1) if rng.random() < 0.5 else _copied(v)) for k, v in value.items()
            ]
            if items and rng.random() < 0.2:
                del items[rng.randrange(len(items))]
            if rng.random() < 0.2:
                items.append((f"k{rng.randint(0, 6)}", nest(depth - 1, 0.05)))
            if rng.random() < 0.1:
                items.reverse()
            return dict(items)
        if type(value) is list:
            out = [changed(v, depth - 1) if rng.random() < 0.5 else _copied(v) for v in value]
            if rng.random() < 0.2:
                out.append(nest(depth - 1, 0.05))
            elif out and rng.random() < 0.1:
                out.pop()
            return out
        if roll < 0.5:  # the same number as another type (``0 == 0.0 == False``), or another leaf
            if type(value) is str:
                return value + "x"
            if type(value) in (int, float, bool) and value in (0, 1):
                return rng.choice([[0, 0.0, False], [1, 1.0, True]][int(value)])
            return rng.choice(_PLAIN_LEAVES)
        return value

    cases: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for _ in range(3000):
        old = {f"m{n}": nest(4) for n in range(rng.randint(0, 6))}
        cases.append((changed(old, 5), old))
    leaf: Any
    for depth in (62, 63, 64, 65, 66):
        for leaf in ("s", 1, True, 1.5, None, {}, []):
            new = {"a": _nested(depth, leaf)}
            for old_leaf in ("s", leaf):
                cases.append((new, {"a": orjson.loads(orjson.dumps(_nested(depth, old_leaf)))}))
            cases.append((new, {}))
    # lists of texts and nulls equal to the ones before, and lists equal but of other types
    for was, now in (
        (["a", None], ["a", None]),
        ([], []),
        (["a", 1], ["a", True]),
        ([1.0], [1]),
        (["a"], ["b"]),
    ):
        cases.append(({"m": {"t": now, "n": 1}}, {"m": {"t": was, "n": 2}}))
        cases.append(({"m": [{"t": now}]}, {"m": [{"t": was}]}))
    kept = edited = 0
    for new, old in cases:
        if type(new) is not dict:
            continue
        copy = plain(new)
        record = dict(new)  # (the record a write makes for the item: filled in place)
        made = plain_edits(record, old)
        assert (made is None) == (copy is REFUSED), (new, old)
        if made is None:
            continue
        kept += 1
        body, groups = made
        assert body is record
        _same_json(body, orjson.loads(orjson.dumps(new)), new)
        assert orjson.dumps(groups) == _grouped(old, body), (new, old)
        edited += bool(groups)
    assert 1000 < kept < len(cases) - 300 and 500 < edited < kept  # every answer, many times


def _copied(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value)) if type(value) in (dict, list) else value
