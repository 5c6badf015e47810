"""`StatesService.apply_batch`: op batches on several records in one transaction."""

from __future__ import annotations

from typing import Any

import pytest

from stateflow.errors import InvalidInput, StateflowError
from stateflow.states import StatesService
from stateflow.store import SqlStore

from .threads import run_threads

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"n": {"type": "integer"}, "tags": {"type": "array"}},
}


def decl(kinds: list[str]) -> dict[str, Any]:
    return {"schema": SCHEMA, "subject_kinds": kinds, "default_subject_kind": kinds[0]}


def subj(key: str, kind: str = "thread") -> dict[str, str]:
    return {"target_kind": "agent", "target_name": "a", "kind": kind, "key": key}


def set_n(n: Any) -> list[dict[str, Any]]:
    return [{"op": "set", "path": ["n"], "value": n}]


@pytest.fixture
def service(store: SqlStore) -> StatesService:
    s = StatesService(store)
    s.declare("tickets", decl(["thread"]))
    s.declare("people", decl(["user"]))
    return s


def data(service: StatesService, state: str, subject: dict[str, str]) -> Any:
    record = service.read(state, subject)
    return None if record is None else record["data"]


def test_items_on_several_records_and_states_commit_as_one_transition(service: StatesService) -> None:
    results = service.apply_batch(
        [
            {"state": "tickets", "subject": subj("t2"), "ops": set_n(2)},
            {"state": "people", "subject": subj("u1", "user"), "ops": set_n(1), "op_id": "p-1"},
            {"state": "tickets", "subject": subj("t1"), "ops": set_n(1)},
        ]
    )
    assert [r.applied for r in results] == [True, True, True]
    assert [r.data for r in results] == [{"n": 2}, {"n": 1}, {"n": 1}]  # input order
    assert len({r.seq for r in results}) == 1  # one transition
    assert data(service, "tickets", subj("t1")) == {"n": 1}
    assert data(service, "people", subj("u1", "user")) == {"n": 1}
    writes = service.writes("tickets", subj("t2"))["items"]
    assert writes[0]["seq"] == results[0].seq and writes[0]["action"] == "apply-batch"


def test_items_on_one_record_apply_in_turn(service: StatesService) -> None:
    results = service.apply_batch(
        [
            {"state": "tickets", "subject": subj("t"), "ops": set_n(1)},
            {
                "state": "tickets",
                "subject": subj("t"),
                "ops": [
                    {
                        "op": "set",
                        "path": ["tags", "-"],
                        "value": "x",
                        "guard": {"path": ["n"], "expected": 1},
                    }
                ],
            },
        ]
    )
    assert [r.data for r in results] == [{"n": 1}, {"n": 1, "tags": ["x"]}]
    assert results[1].skipped == []
    assert len(service.writes("tickets", subj("t"))["items"]) == 1


def test_any_refusal_writes_nothing(service: StatesService) -> None:
    service.apply_batch([{"state": "tickets", "subject": subj("t1"), "ops": set_n(1)}])
    refusals: list[list[dict[str, Any]]] = [
        [  # the second item breaks the schema
            {"state": "tickets", "subject": subj("t1"), "ops": set_n(5), "op_id": "a"},
            {"state": "tickets", "subject": subj("t2"), "ops": set_n("five")},
        ],
        [  # a subject kind the state does not declare
            {"state": "tickets", "subject": subj("t1"), "ops": set_n(5), "op_id": "a"},
            {"state": "people", "subject": subj("u1"), "ops": set_n(5)},
        ],
        [  # an undeclared state
            {"state": "tickets", "subject": subj("t1"), "ops": set_n(5), "op_id": "a"},
            {"state": "nope", "subject": subj("t1"), "ops": set_n(5)},
        ],
    ]
    for items in refusals:
        with pytest.raises(StateflowError):
            service.apply_batch(items)
    assert data(service, "tickets", subj("t1")) == {"n": 1}
    assert data(service, "tickets", subj("t2")) is None
    assert service.store.applied_op("a", "tickets@agent/a") is False  # the refused batches kept "a" unused


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ("nope", "a batch is a list"),
        ([1], r"items\[0\] must be an object"),
        ([{"state": "tickets", "subject": subj("t")}], "exactly one of 'ops' or 'template_jq'"),
        ([{"state": "tickets", "subject": subj("t"), "ops": [], "input": 1}], "'input' goes only with"),
        ([{"state": "tickets", "subject": subj("t"), "ops": [{"op": "pop"}]}], r"items\[0\]: ops\[0\]"),
        ([{"state": "tickets", "subject": subj("t"), "ops": [], "extra": 1}], "unknown keys"),
        (
            [{"state": "tickets", "subject": subj(k), "ops": set_n(1), "op_id": "same"} for k in "ab"],
            "same op_id",
        ),
    ],
)
def test_malformed_batches_are_refused_before_anything_runs(
    service: StatesService, items: Any, message: str
) -> None:
    with pytest.raises(InvalidInput, match=message):
        service.apply_batch(items)


def test_the_batch_limit_is_the_documented_one(service: StatesService) -> None:
    # 100 items commit together; one more is refused whole, with the limit the docs state
    from pathlib import Path

    from stateflow.states.batch import MAX_BATCH_ITEMS

    docs = (Path(__file__).resolve().parent.parent / "docs" / "states.md").read_text()
    assert f"A batch holds at most {MAX_BATCH_ITEMS} items" in docs
    items = [{"state": "tickets", "subject": subj(f"t{i}"), "ops": set_n(i)} for i in range(MAX_BATCH_ITEMS)]
    assert len({r.seq for r in service.apply_batch(items)}) == 1
    more = [*items, {"state": "tickets", "subject": subj("extra"), "ops": set_n(0)}]
    message = f"a batch holds at most {MAX_BATCH_ITEMS} items, got {MAX_BATCH_ITEMS + 1}"
    assert f"`invalid-input: {message}`" in docs
    with pytest.raises(InvalidInput, match=f"^{message}$"):
        service.apply_batch(more)
    assert data(service, "tickets", subj("extra")) is None


def test_an_empty_batch_returns_an_empty_list(service: StatesService) -> None:
    assert service.apply_batch([]) == []


def test_each_item_op_id_is_its_own_idempotency_key(service: StatesService) -> None:
    first = service.apply_batch(
        [{"state": "tickets", "subject": subj("t1"), "ops": set_n(1), "op_id": "one"}]
    )
    again = service.apply_batch(
        [
            {"state": "tickets", "subject": subj("t1"), "ops": set_n(9), "op_id": "one"},  # replay
            {"state": "tickets", "subject": subj("t2"), "ops": set_n(2), "op_id": "two"},
        ]
    )
    assert first[0].applied and not again[0].applied and again[1].applied
    assert data(service, "tickets", subj("t1")) == {"n": 1}
    assert data(service, "tickets", subj("t2")) == {"n": 2}
    assert service.store.applied_op("two", "tickets@agent/a") == again[1].seq
    # the single-record door shares the same keys
    assert not service.apply("tickets", subj("t2"), set_n(3), op_id="two").applied


def test_a_replayed_item_says_so_as_a_single_write_does(service: StatesService) -> None:
    """One idempotency mechanism for single writes and batch items: the replay answers
    ``replayed`` with the seq of the original write, whichever door wrote first."""
    single = service.apply("tickets", subj("t1"), set_n(1), op_id="one")
    batch = service.apply_batch(
        [{"state": "tickets", "subject": subj("t1"), "ops": set_n(9), "op_id": "one"}]
    )
    assert batch[0].to_json() == {
        "applied": False,
        "data": None,
        "seq": None,
        "skipped": [],
        "replayed": True,
        "replayed_seq": single.seq,
    }
    again = service.apply("tickets", subj("t1"), set_n(9), op_id="one").to_json()
    assert again["replayed"] is True and again["replayed_seq"] == single.seq


def test_a_replayed_item_beside_a_new_record_takes_the_next_seq_on_both_backends(
    service: StatesService,
) -> None:
    """One writer, nothing refused: the write after a batch's replayed item takes the very next
    seq, as on SQLite. On PostgreSQL the first attempt creates the new record's row on its own
    before its claim is found taken; the next one must lock that row, not insert it again (an
    insert refused on the key after taking a seq left a gap)."""
    first = service.apply("tickets", subj("t1"), set_n(1), op_id="b-1")
    # read, not written: the store now knows t2 has no row, so the batch tries without locks
    assert service.revert("tickets", subj("t2"), 0) is None
    results = service.apply_batch(
        [
            {"state": "tickets", "subject": subj("t2"), "ops": set_n(2), "op_id": "b-1"},  # a replay
            {"state": "people", "subject": subj("u1", "user"), "ops": set_n(3)},
        ]
    )
    assert first.seq is not None
    assert results[0].replayed and results[0].replayed_seq == first.seq
    assert results[1].applied and results[1].seq == first.seq + 1
    assert service.apply("people", subj("u1", "user"), set_n(4)).seq == first.seq + 2


def test_a_batch_item_that_changes_nothing_says_nothing_was_written(service: StatesService) -> None:
    service.apply("tickets", subj("t1"), set_n(1))
    guarded = [{"op": "set", "path": ["n"], "value": 5, "guard": {"path": ["n"], "expected": 7}}]
    results = service.apply_batch(
        [
            {"state": "tickets", "subject": subj("t1"), "ops": guarded},
            {"state": "tickets", "subject": subj("t2"), "ops": set_n(2)},
        ]
    )
    assert results[0].to_json()["written"] is False and len(results[0].skipped) == 1
    assert "written" not in results[1].to_json()
    assert data(service, "tickets", subj("t1")) == {"n": 1}


def test_template_jq_items_run_their_update_program(service: StatesService) -> None:
    service.put_template(
        "counter",
        {
            "schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
            "template_jq": {
                "bump": {
                    "purpose": "update",
                    "params": ["by"],
                    "jq": {"content": '[{"op": "set", "path": ["n"], "value": ((.n // 0) + $input.by)}]'},
                }
            },
        },
    )
    service.attach("tickets", "counter", {"path": ["counter"]})
    results = service.apply_batch(
        [
            {"state": "tickets", "subject": subj("t1"), "template_jq": "bump", "input": {"by": 2}},
            {"state": "tickets", "subject": subj("t2"), "ops": set_n(7)},
        ]
    )
    assert results[0].data == {"counter": {"n": 2}} and results[1].data == {"n": 7}
    service.close()


def test_a_template_jq_update_builds_on_what_is_written_before_it_not_what_was_read(
    service: StatesService,
) -> None:
    """An update program runs inside the write's transaction, over the record as the write finds
    it: after the batch's earlier items, and after every write another caller committed — a
    read-then-write would apply ops computed over a stale record and lose those writes."""
    service.put_template(
        "counter",
        {
            "schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
            "template_jq": {
                "bump": {
                    "purpose": "update",
                    "jq": {"content": '[{"op": "set", "path": ["n"], "value": ((.n // 0) + 1)}]'},
                }
            },
        },
    )
    service.attach("tickets", "counter", {"path": ["counter"]})
    counted = [{"op": "set", "path": ["counter", "n"], "value": 5}]
    results = service.apply_batch(
        [
            {"state": "tickets", "subject": subj("t1"), "ops": counted},
            {"state": "tickets", "subject": subj("t1"), "template_jq": "bump"},
        ]
    )
    assert results[1].data == {"counter": {"n": 6}} and data(service, "tickets", subj("t1")) == {
        "counter": {"n": 6}
    }

    def bump(i: int) -> None:
        for _ in range(10):
            if i % 2:
                service.template_jq_update("tickets", subj("t2"), "bump")
            else:
                service.apply_batch([{"state": "tickets", "subject": subj("t2"), "template_jq": "bump"}])

    assert run_threads(bump, 4) == []
    assert data(service, "tickets", subj("t2")) == {"counter": {"n": 40}}  # none lost
    service.close()


def test_racing_batches_apply_a_shared_op_id_once(service: StatesService) -> None:
    outcomes: dict[int, list[bool]] = {}

    def run(w: int) -> None:
        shared = [{"op": "set_by_key", "path": ["tags"], "key_field": "id", "value": {"id": f"w{w}"}}]
        results = service.apply_batch(
            [
                {"state": "tickets", "subject": subj("shared"), "ops": shared, "op_id": "once"},
                {"state": "tickets", "subject": subj(f"own-{w}"), "ops": set_n(w), "op_id": f"own-{w}"},
            ]
        )
        outcomes[w] = [r.applied for r in results]

    assert run_threads(run, 6) == []
    assert sorted(o[0] for o in outcomes.values()) == [False] * 5 + [True]
    assert all(o[1] for o in outcomes.values())
    assert len(data(service, "tickets", subj("shared"))["tags"]) == 1
    assert [data(service, "tickets", subj(f"own-{w}")) for w in range(6)] == [{"n": w} for w in range(6)]


def test_each_write_validates_against_its_own_states_current_schema(service: StatesService) -> None:
    # writes to two states in turn, then after one is re-declared: each is checked against the
    # schema its state has now (validators are remembered by schema)
    for _ in range(2):
        service.apply("tickets", subj("t1"), set_n(1))
        service.apply("people", subj("p1", "user"), set_n(2))
        with pytest.raises(StateflowError, match=r"\$\.n"):
            service.apply("tickets", subj("t1"), set_n("one"))
    extra = {**SCHEMA, "properties": {**SCHEMA["properties"], "extra": {"type": "string"}}}
    service.declare("people", {**decl(["user"]), "schema": extra})
    with pytest.raises(StateflowError, match=r"\$\.extra"):
        service.apply("people", subj("p1", "user"), [{"op": "set", "path": ["extra"], "value": 1}])
    service.apply("tickets", subj("t1"), [{"op": "set", "path": ["extra"], "value": 1}])  # not declared there
    assert service.read("people", subj("p1", "user"))["data"] == {"n": 2}  # type: ignore[index]


def test_one_op_id_in_one_batch_is_each_tenants_own(service: StatesService) -> None:
    """An ``op_id`` is scoped by the state and the record's tenant: two tenants' items with the
    same id in one batch are two writes, as two applies are; each replays on its own after."""
    alice = {**subj("t1"), "target_name": "alice"}
    bob = {**subj("t1"), "target_name": "bob"}
    items = [
        {"state": "tickets", "subject": alice, "ops": set_n(1), "op_id": "pay-1"},
        {"state": "tickets", "subject": bob, "ops": set_n(2), "op_id": "pay-1"},
    ]
    first = service.apply_batch(items)
    assert [(r.applied, r.replayed) for r in first] == [(True, False), (True, False)]
    assert data(service, "tickets", alice) == {"n": 1} and data(service, "tickets", bob) == {"n": 2}
    again = service.apply_batch([{**items[0], "ops": set_n(5)}, {**items[1], "ops": set_n(6)}])
    assert [(r.replayed, r.replayed_seq) for r in again] == [(True, first[0].seq), (True, first[1].seq)]
    assert data(service, "tickets", alice) == {"n": 1} and data(service, "tickets", bob) == {"n": 2}
    with pytest.raises(InvalidInput, match="same op_id for the same state and tenant"):
        service.apply_batch([items[0], {**items[0], "subject": {**alice, "key": "t2"}}])
