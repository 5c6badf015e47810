"""A string or key holding a lone surrogate (a Python ``str`` can, no JSON text can) is refused by
every write as ``invalid-json``, naming its place, and writes nothing — on both backends. The
doors that copy a value (replace, merge, an op's value, a LangGraph item) make the test by that
copy's encoding; the message is the one :func:`~stateflow.doc.canonical.check` gives."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Callable
from functools import partial
from typing import Any

import orjson
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
from langgraph.store.base import PutOp

from stateflow.doc.canonical import check, checked_copy, encode
from stateflow.errors import InvalidInput
from stateflow.langgraph import StateflowSaver, StateflowStore
from stateflow.states import StatesService
from stateflow.store import SqlStore

DECL: dict[str, Any] = {
    "schema": {"type": "object", "properties": {"v": {}}},
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}
SUBJECT = {"target_kind": "agent", "target_name": "bot", "kind": "thread", "key": "k"}


def refusal(call: Callable[[], object], code: str = "invalid-json") -> str:
    with pytest.raises(InvalidInput) as refused:
        call()
    assert refused.value.code == code
    return refused.value.message


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"a": "x\ud800"}, "$.a: a string holding a lone surrogate (\\ud800) is not Unicode text"),
        (
            {"a": [1, {"k\udc01": 2}]},
            "$.a[1]: an object key holding a lone surrogate (\\udc01) is not Unicode text",
        ),
        ("\ud83d", "$: a string holding a lone surrogate (\\ud83d) is not Unicode text"),
        # (two faults: each names the one the check names, the first in document order)
        ([{"n": float("nan")}, "\ud800"], "$[0].n: nan is not a JSON number (NaN and Infinity are refused)"),
        (
            ["\ud800", {"n": float("nan")}],
            "$[0]: a string holding a lone surrogate (\\ud800) is not Unicode text",
        ),
        (
            {"a": float("nan"), "k\udc01": 1},
            "$.a: nan is not a JSON number (NaN and Infinity are refused)",
        ),
        ([{"n": float("nan")}, "x"], "$[0].n: nan is not a JSON number (NaN and Infinity are refused)"),
    ],
)
def test_encode_and_the_checked_copy_refuse_as_the_check_does(value: Any, message: str) -> None:
    assert refusal(lambda: check(value)) == message
    assert refusal(lambda: encode(value)) == message
    assert refusal(lambda: checked_copy(value)) == message


def test_the_checked_copy_is_a_copy_of_plain_json() -> None:
    value = {"a": ["é", {"b": "😀"}], "n": 1.5}
    copy = checked_copy(value)
    assert copy == value and copy is not value and copy["a"] is not value["a"]
    assert encode(value) == '{"a":["é",{"b":"😀"}],"n":1.5}'.encode()


def test_a_lone_surrogate_is_refused_by_every_record_write_naming_its_place(store: SqlStore) -> None:
    states = StatesService(store)
    states.install_builtins()
    states.declare("t", DECL)
    states.replace("t", SUBJECT, {"kept": "é"})
    before = states.read("t", SUBJECT)
    assert before is not None
    bad = {"a": ["ok", "x\ud800"]}
    refused = {
        "replace": refusal(lambda: states.replace("t", SUBJECT, bad)),
        "merge": refusal(lambda: states.merge("t", SUBJECT, bad)),
        "replace_from": refusal(lambda: states.replace_from("t", SUBJECT, lambda _: bad)),
        # (an op batch's refusal is its own: invalid-ops, naming the op and the place in its value)
        "set": refusal(
            lambda: states.apply("t", SUBJECT, [{"op": "set", "path": ["v"], "value": bad}]), "invalid-ops"
        ),
        "set_by_key": refusal(
            lambda: states.apply(
                "t",
                SUBJECT,
                [{"op": "set_by_key", "path": ["l"], "key_field": "id", "value": {"id": "\udfff"}}],
            ),
            "invalid-ops",
        ),
    }
    place = "a lone surrogate (\\ud800) is not Unicode text"
    assert refused == {
        "replace": f"$.a[1]: a string holding {place}",
        "merge": f"$.a[1]: a string holding {place}",
        "replace_from": f"$.a[1]: a string holding {place}",
        "set": f"ops[0]: value.a[1]: a string holding {place}",
        "set_by_key": "ops[0]: value.id: a string holding a lone surrogate (\\udfff) is not Unicode text",
    }
    assert states.read("t", SUBJECT) == before  # nothing written


def test_a_lone_surrogate_in_a_langgraph_item_is_refused_and_nothing_is_written(store: SqlStore) -> None:
    items = StateflowStore(StatesService(store))
    items.put(("docs",), "a", {"text": "kept"})
    place = "holding a lone surrogate (\\ud800) is not Unicode text"
    for key, value, message in (
        ("a", {"text": "x\ud800"}, f"value.text: a string {place}"),
        ("b", {"k\ud800": 1}, f"value: an object key {place}"),
    ):
        # one put (the store's encoder refuses it: named as the check names it) and a batch
        assert refusal(partial(items.put, ("docs",), key, value)) == f"document.{message}"
        batch = [PutOp(("docs",), key, value), PutOp(("docs",), "c", {})]
        assert refusal(partial(items.batch, batch)) == f"ops[0]: {message}"
    found = items.get(("docs",), "a")
    assert found is not None and found.value == {"text": "kept"}
    assert items.get(("docs",), "b") is None and items.get(("docs",), "c") is None


def test_a_lone_surrogate_in_a_checkpoint_or_a_pending_write_is_refused_and_nothing_is_written(
    store: SqlStore,
) -> None:
    saver = StateflowSaver(StatesService(store))
    thread: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    first = saver.put(
        thread, generate_checkpoint(channel_values={"a": "kept"}), generate_metadata(), {"a": 1}
    )
    saver.put_writes(first, [("a", "pending")], "task")
    place = "holding a lone surrogate (\\ud800) is not Unicode text"
    refused: list[tuple[dict[str, Any], dict[str, Any], str]] = [
        ({"a": "x\ud800"}, {}, f"checkpoint.channel_values.a: a string {place}"),
        ({"a": [{"k\ud800": 1}]}, {}, f"checkpoint.channel_values.a[0]: an object key {place}"),
        ({"a": "ok"}, {"note": "x\ud800"}, f"metadata.note: a string {place}"),
    ]
    for values, metadata, message in refused:
        checkpoint = generate_checkpoint(channel_values=values)
        call = partial(saver.put, first, checkpoint, generate_metadata(**metadata), {"a": 2})
        assert refusal(call) == message
        assert (
            saver.get_tuple({"configurable": {**thread["configurable"], "checkpoint_id": checkpoint["id"]}})
            is None
        )
    for writes, message in (
        ([("a", "x\ud800")], f"writes[0][1]: a string {place}"),
        ([("a", "fine"), ("b", {"text": ["x\ud800"]})], f"writes[1][1].text[0]: a string {place}"),
    ):
        assert refusal(partial(saver.put_writes, first, writes, "other")) == message
    assert [c.checkpoint["id"] for c in saver.list(thread)] == [first["configurable"]["checkpoint_id"]]
    kept = saver.get_tuple(first)
    assert kept is not None and kept.checkpoint["channel_values"] == {"a": "kept"}
    assert kept.pending_writes == [("task", "a", "pending")]
    # (a value LangGraph's serializer takes, a tuple, is written as it writes it: "?" for the
    # surrogate, as its own savers store it)
    saver.put_writes(first, [("a", ("x\ud800",))], "third")
    kept = saver.get_tuple(first)
    assert kept is not None and ("third", "a", ["x?"]) in (kept.pending_writes or [])


def test_a_lone_surrogate_in_a_thread_id_namespace_or_key_is_refused_by_its_place(store: SqlStore) -> None:
    # the key quoting cannot spell it (no UTF-8 does): refused as a value's is, never a raw
    # UnicodeEncodeError, and nothing is written — by the saver and the store, sync and async
    states = StatesService(store)
    saver, items = StateflowSaver(states), StateflowStore(states)
    place = "a string holding a lone surrogate (\\ud800) is not Unicode text"
    bad = "t\ud800"

    def config(thread: str = "t", ns: str = "", **more: str) -> RunnableConfig:
        return {"configurable": {"thread_id": thread, "checkpoint_ns": ns, **more}}

    checkpoint = generate_checkpoint(channel_values={"a": "kept"})
    saver_calls: list[tuple[Callable[[], Any], Callable[[], Any], str]] = [
        (
            partial(saver.put, config(bad), checkpoint, generate_metadata(), {}),
            partial(saver.aput, config(bad), checkpoint, generate_metadata(), {}),
            "thread_id",
        ),
        (
            partial(saver.put, config(ns=bad), checkpoint, generate_metadata(), {}),
            partial(saver.aput, config(ns=bad), checkpoint, generate_metadata(), {}),
            "checkpoint_ns",
        ),
        (
            partial(saver.put_writes, config(bad, checkpoint_id="c"), [("a", 1)], "task"),
            partial(saver.aput_writes, config(bad, checkpoint_id="c"), [("a", 1)], "task"),
            "thread_id",
        ),
        (partial(saver.get_tuple, config(bad)), partial(saver.aget_tuple, config(bad)), "thread_id"),
        (
            partial(saver.get_tuple, config(checkpoint_id=bad)),
            partial(saver.aget_tuple, config(checkpoint_id=bad)),
            "checkpoint_id",
        ),
        (partial(saver.delete_thread, bad), partial(saver.adelete_thread, bad), "thread_id"),
        (partial(saver.copy_thread, bad, "u"), partial(saver.acopy_thread, bad, "u"), "thread_id"),
        (
            partial(saver.put, config(), {**checkpoint, "id": bad}, generate_metadata(), {}),
            partial(saver.aput, config(), {**checkpoint, "id": bad}, generate_metadata(), {}),
            "checkpoint_id",
        ),
    ]
    store_calls: list[tuple[Callable[[], Any], Callable[[], Any], str]] = [
        (
            partial(items.put, ("d", bad), "k", {"v": 1}),
            partial(items.aput, ("d", bad), "k", {"v": 1}),
            "namespace[1]",
        ),
        (partial(items.put, ("d",), bad, {"v": 1}), partial(items.aput, ("d",), bad, {"v": 1}), "key"),
        (partial(items.delete, ("d",), bad), partial(items.adelete, ("d",), bad), "key"),
        (partial(items.get, (bad,), "k"), partial(items.aget, (bad,), "k"), "namespace[0]"),
        (partial(items.search, (bad,)), partial(items.asearch, (bad,)), "namespace_prefix[0]"),
        (
            partial(items.list_namespaces, prefix=(bad,)),
            partial(items.alist_namespaces, prefix=(bad,)),
            "prefix[0]",
        ),
        (
            partial(items.batch, [PutOp(("d",), "fine", {}), PutOp(("d",), bad, {})]),
            partial(items.abatch, [PutOp(("d",), "fine", {}), PutOp(("d",), bad, {})]),
            "ops[1]: key",
        ),
    ]
    for sync, in_async, where in saver_calls + store_calls:
        assert refusal(sync) == f"{where}: {place}"

        async def awaited(call: Callable[[], Any] = in_async) -> Any:
            return await call()

        assert refusal(partial(asyncio.run, awaited())) == f"{where}: {place}"
    # nothing was written: no record of either state
    assert [c.checkpoint["id"] for c in saver.list(None)] == []
    assert items.search(()) == [] and items.list_namespaces() == []


def test_an_op_id_or_an_origin_meta_json_cannot_carry_is_refused_at_every_door(
    backend: str, store: SqlStore
) -> None:
    # an op id holding a lone surrogate reached the ledger (a raw UnicodeEncodeError from the
    # database driver), and the meta was encoded before it was checked (a bare TypeError); the
    # CLI printed a traceback for an --op-id holding a byte that is not UTF-8
    states = StatesService(store)
    states.install_builtins()
    states.declare("t", DECL)
    ops = [{"op": "set", "path": ["v"], "value": 1}]
    item = {"state": "t", "subject": SUBJECT, "ops": ops, "op_id": "a\udcffb"}
    assert refusal(lambda: states.apply("t", SUBJECT, ops, op_id="a\udcffb")) == (
        "op_id: a string holding a lone surrogate (\\udcff) is not Unicode text"
    )
    assert refusal(lambda: states.apply_batch([item])) == (
        "items[0].op_id: a string holding a lone surrogate (\\udcff) is not Unicode text"
    )
    assert refusal(lambda: states.replace("t", SUBJECT, {"v": 1}, origin={"meta": {"x": "\ud800"}})) == (
        "origin.meta.x: a string holding a lone surrogate (\\ud800) is not Unicode text"
    )
    assert refusal(lambda: states.replace("t", SUBJECT, {"v": 1}, origin={"meta": {"x": 2**64}})) == (
        "origin.meta.x: integer 18446744073709551616 is outside the 64-bit range JSON stores"
    )
    cli = subprocess.run(
        [
            *(
                b"stateflow",
                b"--store",
                backend.encode(),
                b"states",
                b"apply",
                b"t",
                b"--target-name",
                b"bot",
            ),
            *(b"--kind", b"thread", b"--key", b"k", b"--data", orjson.dumps(ops), b"--op-id", b"a\xffb"),
        ],
        capture_output=True,
        timeout=120,
        env=dict(os.environ, STATEFLOW_URL="", STATEFLOW_TOKEN=""),
    )
    assert (cli.returncode, cli.stderr.decode()) == (
        1,
        "error[invalid-json]: op_id: a string holding a lone surrogate (\\udcff) is not Unicode text\n",
    )
    assert states.read("t", SUBJECT) is None  # nothing written
