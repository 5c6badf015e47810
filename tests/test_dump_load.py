"""`stateflow dump` / `stateflow load`: SQLite → PostgreSQL → SQLite keeps every document, its
revisions and the audit trail (time, origin, edits) identical."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from stateflow.states import DoorContext, StatesService
from stateflow.store import open_store

SUBJECT = {"target_kind": "agent", "target_name": "alice", "kind": "thread", "key": "t1"}
TEMPLATE = {"schema": {"type": "object", "properties": {"size": {"type": "integer"}}}}
STATE = {
    "schema": {"type": "object", "properties": {"title": {"type": "string"}, "n": {"type": "integer"}}},
    "subject_kinds": ["thread"],
    "default_subject_kind": "thread",
}
SET_N_7 = [{"op": "set", "path": ["n"], "value": 7}]


def sf(store: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, STATEFLOW_STORE=store)
    return subprocess.run(["stateflow", *args], capture_output=True, text=True, timeout=120, env=env)


def fill(location: str) -> None:
    store = open_store(location, auto_migrate=True)
    service = StatesService(store)
    ctx = DoorContext(door="api", actor="token:abc")
    try:
        service.install_builtins()
        service.put_template("box", TEMPLATE, context=ctx)
        service.declare("tickets", STATE, context=ctx)
        service.attach("tickets", "box", {"path": ["box"]}, context=ctx)
        for n in range(3):
            service.replace("tickets", SUBJECT, {"title": f"v{n}", "n": n, "box": {"size": n}}, context=ctx)
        service.merge("tickets", SUBJECT, {"title": "merged"}, context=ctx)
        service.apply("tickets", SUBJECT, SET_N_7, op_id="set-7", context=ctx)
        # an op id whose call changed nothing is remembered all the same (seq NULL)
        service.apply("tickets", SUBJECT, SET_N_7, op_id="set-7-again", context=ctx)
        other = {**SUBJECT, "key": "t2"}
        service.replace("tickets", other, {"title": "gone"}, context=ctx)
        service.erase("tickets", other, context=ctx)
    finally:
        service.close()
        store.close()
    memory = sf(
        location, "tool", "patch_state", '{"session": {"tactics": {"next": "ship"}}}', "--agent", "alice"
    )
    assert memory.returncode == 0, memory.stderr


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def without_seq(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in item.items() if k != "seq"} for item in items]


@pytest.mark.slow
def test_sqlite_to_postgresql_to_sqlite_is_identical(tmp_path: Path, pg_schema_url: str) -> None:
    first = str(tmp_path / "first.db")
    fill(first)
    dumps = [tmp_path / f"dump{i}.jsonl" for i in range(3)]
    assert sf(first, "dump", str(dumps[0])).returncode == 0
    assert oct(dumps[0].stat().st_mode & 0o777) == "0o600"

    assert sf(pg_schema_url, "migrate").returncode == 0
    loaded = sf(pg_schema_url, "load", str(dumps[0]))
    assert loaded.returncode == 0, loaded.stderr
    assert sf(pg_schema_url, "dump", str(dumps[1])).returncode == 0

    last = str(tmp_path / "last.db")
    assert sf(last, "load", str(dumps[1])).returncode == 0
    assert sf(last, "dump", str(dumps[2])).returncode == 0

    original = lines(dumps[0])
    kinds = {item.get("kind") for item in original[1:]}
    assert kinds == {"transition", "op", "document", "end"}
    states = {item["state"] for item in original if item.get("kind") == "document"}
    assert {"_states", "_templates", "tickets", "memory"} <= states  # catalog, templates, records, memory
    for other in dumps[1:]:
        assert without_seq(lines(other)) == without_seq(
            original
        )  # documents, revisions, times, origins, edits
    # the audit trail as the API shows it
    views = []
    for location in (first, last):
        store = open_store(location)
        service = StatesService(store)
        try:
            views.append(service.writes("tickets", SUBJECT, limit=100))
        finally:
            service.close()
            store.close()
    strip = [[{k: v for k, v in w.items() if k != "seq"} for w in view["items"]] for view in views]
    assert strip[0] == strip[1] and len(strip[0]) == 5
    # the idempotency ledger travelled: each op id still names the transition it produced, and
    # a retried call is a replay that changes nothing
    ops = [item for item in original if item.get("kind") == "op"]
    assert [(o["scope"], o["op_id"]) for o in ops] == [
        ("tickets@agent/alice", "set-7"),
        ("tickets@agent/alice", "set-7-again"),
    ]
    assert ops[1]["seq"] is None
    for location in (pg_schema_url, last):
        store = open_store(location)
        service = StatesService(store)
        try:
            seq = store.applied_op("set-7", "tickets@agent/alice")
            assert isinstance(seq, int) and store.applied_op("set-7-again", "tickets@agent/alice") is None
            (transition,) = store.transitions(after_seq=seq - 1, limit=1)
            assert transition.seq == seq and transition.origin["op_id"] == "set-7"
            before = service.read("tickets", SUBJECT)
            assert service.apply(
                "tickets", SUBJECT, [{"op": "set", "path": ["n"], "value": 8}], op_id="set-7"
            ).replayed
            assert service.read("tickets", SUBJECT) == before
        finally:
            service.close()
            store.close()


def test_load_refuses_a_store_with_data_and_a_file_that_is_not_a_dump(tmp_path: Path) -> None:
    source = str(tmp_path / "s.db")
    assert sf(source, "doc", "put", "notes", "a", '{"x": 1}').returncode == 0
    dump = tmp_path / "d.jsonl"
    assert sf(source, "dump", str(dump)).returncode == 0
    out = sf(source, "load", str(dump))
    assert out.returncode == 1 and out.stderr.startswith("error[conflict]: ")
    junk = tmp_path / "junk.jsonl"
    junk.write_text('{"hello": 1}\n')
    out = sf(str(tmp_path / "empty.db"), "load", str(junk))
    assert out.returncode == 1 and out.stderr.startswith("error[invalid-dump]: ")
    no_history = tmp_path / "docs.jsonl"
    assert sf(source, "dump", "--no-history", str(no_history)).returncode == 0
    assert all(item.get("kind") != "transition" for item in lines(no_history))
    target = str(tmp_path / "docs.db")
    assert sf(target, "load", str(no_history)).returncode == 0
    assert json.loads(sf(target, "doc", "get", "notes", "a").stdout) == {"x": 1}


def test_a_dump_without_history_loads_and_dumps_again_the_same(tmp_path: Path) -> None:
    """A dump without history listed an erased record as a document with a null body, which a
    load drops (nothing of it is left without its history): dump, load, dump gave one line
    fewer. Such a record is left out, so the second dump holds the first's documents."""
    first = str(tmp_path / "first.db")
    fill(first)  # (holds an erased record, thread/t2)
    dumps = [tmp_path / f"docs{i}.jsonl" for i in range(2)]
    assert sf(first, "dump", "--no-history", str(dumps[0])).returncode == 0
    documents = [item for item in lines(dumps[0]) if item.get("kind") == "document"]
    assert documents and all(item["body"] is not None for item in documents)
    assert lines(dumps[0])[-1]["documents"] == len(documents)
    second = str(tmp_path / "second.db")
    loaded = sf(second, "load", str(dumps[0]))
    assert loaded.returncode == 0, loaded.stderr
    assert sf(second, "dump", "--no-history", str(dumps[1])).returncode == 0
    again = lines(dumps[1])

    def bodies(items: list[dict[str, Any]]) -> list[tuple[str, str, Any]]:
        # (the revisions start again at 1: a load without history writes each record once)
        return [(i["state"], i["subject"], i["body"]) for i in items if i.get("kind") == "document"]

    assert bodies(again) == bodies(documents)
    assert again[-1]["documents"] == len(documents)


def test_a_refused_load_creates_nothing_and_changes_nothing(tmp_path: Path) -> None:
    """The whole dump is checked before a store is opened: a file that is not a dump, or one
    whose lines a replay would trip over, leaves a missing store missing and an empty store as
    it was; a dump refused part way through its replay takes back the store the load created."""
    source = str(tmp_path / "s.db")
    for value in (1, 2):
        assert sf(source, "doc", "put", "notes", "a", json.dumps({"x": value})).returncode == 0
    dump = tmp_path / "d.jsonl"
    assert sf(source, "dump", str(dump)).returncode == 0
    items = lines(dump)
    assert [item.get("kind") for item in items] == [None, "transition", "transition", "document", "end"]

    def variant(name: str, index: int, change: dict[str, Any]) -> Path:
        edited = [dict(item) for item in items]
        edited[index] = {**edited[index], **change}
        path = tmp_path / name
        path.write_text("".join(json.dumps(item) + "\n" for item in edited))
        return path

    second = items[2]["changes"][0]
    refused = {
        "not a dump": Path("/etc/hostname")
        if Path("/etc/hostname").exists()
        else variant("n.jsonl", 0, {"a": 1}),
        "truncated": tmp_path / "cut.jsonl",
        "document without body": variant("nobody.jsonl", 3, {"body": "text"}),
        "revision skipped": variant("skip.jsonl", 2, {"changes": [{**second, "revision": 5}]}),
        "unknown line": variant("kind.jsonl", 3, {"kind": "blob"}),
    }
    refused["truncated"].write_bytes(dump.read_bytes()[:-20])
    # a dump whose edit does not apply passes the check: only its replay refuses it
    bad_edit = {**second, "edits": [[["x", "deeper"], 1]]}
    halfway = variant("halfway.jsonl", 2, {"changes": [bad_edit]})

    for why, path in [*refused.items(), ("edit does not apply", halfway)]:
        target = tmp_path / "new" / "copy.db"
        out = sf(str(target), "load", str(path))
        assert out.returncode == 1 and out.stderr.startswith("error[invalid-dump]: "), (why, out.stderr)
        assert not (tmp_path / "new").exists(), why  # no file, no folder

    empty = tmp_path / "empty.db"
    assert sf(str(empty), "migrate").returncode == 0
    files = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("empty.db")}
    for why, path in refused.items():
        out = sf(str(empty), "load", str(path))
        assert out.returncode == 1 and out.stderr.startswith("error[invalid-dump]: "), (why, out.stderr)
        assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("empty.db")} == files
    assert sf(str(empty), "load", str(dump)).returncode == 0
    assert json.loads(sf(str(empty), "doc", "get", "notes", "a").stdout) == {"x": 2}


def test_a_refused_dump_leaves_its_target_as_it_was(tmp_path: Path) -> None:
    kept = tmp_path / "kept.jsonl"
    kept.write_text("an earlier dump\n")
    for target in (kept, tmp_path / "new.jsonl"):
        out = sf(str(tmp_path / "typo.db"), "dump", str(target))
        assert out.returncode == 1 and out.stderr.startswith("error[store-not-found]: "), out.stderr
    assert kept.read_text() == "an earlier dump\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.jsonl"]
    source = str(tmp_path / "s.db")
    assert sf(source, "doc", "put", "notes", "a", '{"x": 1}').returncode == 0
    out = sf(source, "dump", str(tmp_path / "no-such-dir" / "d.jsonl"))
    assert out.returncode == 1, out.stderr
    assert out.stderr.startswith("error[target-unwritable]: cannot write "), out.stderr
    assert sf(source, "dump", str(kept)).returncode == 0
    assert lines(kept)[-2]["body"] == {"x": 1} and oct(kept.stat().st_mode & 0o777) == "0o600"
    # a dump over the store's own files would replace the store with its dump
    for own in ("s.db", "s.db-wal", "./s.db-writer"):
        out = subprocess.run(
            ["stateflow", "--store", "s.db", "dump", own], capture_output=True, text=True, cwd=tmp_path
        )
        assert out.returncode == 1 and out.stderr.startswith("error[invalid-input]: "), (own, out.stderr)
    assert json.loads(sf(source, "doc", "get", "notes", "a").stdout) == {"x": 1}


def test_a_dump_never_replaces_a_pipe_a_link_or_a_device_and_dash_is_stdout(tmp_path: Path) -> None:
    # a finished dump is renamed over its target: over a named pipe, a symbolic link (such as
    # /dev/stdout) or a device node it would put a regular file in their place
    source = str(tmp_path / "s.db")
    assert sf(source, "doc", "put", "notes", "a", '{"x": 1}').returncode == 0
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "real.jsonl").write_text("kept\n")
    os.symlink(tmp_path / "real.jsonl", tmp_path / "link")
    os.symlink(tmp_path / "pipe", tmp_path / "to-pipe")
    os.symlink(tmp_path / "gone", tmp_path / "dangling")
    for name, kind in [
        ("pipe", "a named pipe"),
        ("link", "a symbolic link"),
        ("to-pipe", "a symbolic link"),
        ("dangling", "a symbolic link"),
    ]:
        out = sf(source, "dump", str(tmp_path / name))
        assert out.returncode == 1, (name, out.stderr)
        assert out.stderr.startswith(
            f"error[target-unwritable]: cannot write {tmp_path / name}: it is {kind}, "
        ), out.stderr
    assert (
        (tmp_path / "pipe").is_fifo()
        and (tmp_path / "link").is_symlink()
        and (tmp_path / "dangling").is_symlink()
    )
    assert (tmp_path / "real.jsonl").read_text() == "kept\n"
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")]
    # `-` is stdout, as without TARGET
    dashed = sf(source, "dump", "-")
    assert dashed.returncode == 0 and dashed.stdout == sf(source, "dump").stdout
    assert json.loads(dashed.stdout.splitlines()[-2])["body"] == {"x": 1}


def test_an_answer_stdout_cannot_take_is_one_refusal(backend: str, tmp_path: Path) -> None:
    """stdout on a full disk (here: a file past the process's file-size limit, EFBIG) is the
    documented target-unwritable, not an OSError traceback, for a dump and any other answer."""
    import resource
    import signal

    def limited() -> None:  # (in the child: stdout, not the store, is what it cannot write)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))

    open_store(backend, auto_migrate=True).close()
    (tmp_path / "big.json").write_text(json.dumps({"x": "y" * 2_000_000}))
    assert sf(backend, "doc", "put", "notes", "a", "--file", str(tmp_path / "big.json")).returncode == 0
    # (unbuffered, Python drops the rest of a short write without a word)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"} | {"STATEFLOW_STORE": backend}
    for args in (["dump"], ["dump", "-"], ["doc", "get", "notes", "a"]):
        with (tmp_path / "out").open("wb") as out:
            done = subprocess.run(
                ["stateflow", *args],
                stdout=out,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
                preexec_fn=limited,
            )
        assert done.returncode == 1, (args, done.stderr)
        assert done.stderr == "error[target-unwritable]: cannot write stdout: File too large\n", (
            args,
            done.stderr,
        )


def test_a_dump_piped_into_load_loads(tmp_path: Path) -> None:
    # load reads its dump twice (checked whole, then loaded): from a pipe it ended in a
    # traceback (the pipe cannot seek back), and `load -` was refused as a missing file
    source = str(tmp_path / "s.db")
    assert sf(source, "doc", "put", "notes", "a", '{"x": 1}').returncode == 0
    dump = sf(source, "dump").stdout
    for name, args in [("dash.db", ["load", "-"]), ("stdin.db", ["load", "/dev/stdin"])]:
        target = str(tmp_path / name)
        env = dict(os.environ, STATEFLOW_STORE=target)
        with subprocess.Popen(["stateflow", "--store", source, "dump"], stdout=subprocess.PIPE) as dumping:
            loaded = subprocess.run(
                ["stateflow", *args],
                stdin=dumping.stdout,
                capture_output=True,
                text=True,
                timeout=120,
                env=env,
            )
        assert (loaded.returncode, json.loads(loaded.stdout or "null")) == (
            0,
            {"transitions": 1, "documents": 1, "ops": 0},
        ), loaded.stderr
        assert sf(target, "dump").stdout == dump
    # a pipe that holds no whole dump is refused as a file would be, nothing created
    cut = subprocess.run(
        ["stateflow", "--store", str(tmp_path / "cut.db"), "load", "-"],
        input=dump[: len(dump) // 2],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cut.returncode == 1 and cut.stderr.startswith("error[invalid-dump]: "), cut.stderr
    assert not (tmp_path / "cut.db").exists()


def test_a_store_whose_history_was_pruned_dumps_only_what_loads(backend: str, tmp_path: Path) -> None:
    """Retention pruned a document's first revisions: a dump with history could never replay
    it, so the dump is refused up front, naming the document and --no-history; a transition left
    without changes (its documents purged) is not a line a load refuses."""
    from datetime import UTC, datetime, timedelta

    from stateflow.config import Config, RetentionConfig

    store = open_store(backend, auto_migrate=True)
    service = StatesService(store, Config(retention=RetentionConfig(audit_days=1)))
    try:
        service.install_builtins()
        service.declare("tickets", STATE)
        service.declare("scratch", {**STATE, "subject_kinds": ["thread"]})
        other = {**SUBJECT, "key": "t2"}
        service.replace("tickets", other, {"title": "kept whole"})
        service.replace("scratch", SUBJECT, {"title": "purged"})  # the newest transition
        store.purge("scratch")  # its transition stays (the newest), without changes
        out = tmp_path / "purged.jsonl"
        assert sf(backend, "dump", str(out)).returncode == 0
        assert all(item["changes"] for item in lines(out) if item.get("kind") == "transition")
        loaded = sf(str(tmp_path / "purged.db"), "load", str(out))
        assert loaded.returncode == 0, loaded.stderr

        for n in range(3):
            service.replace("tickets", SUBJECT, {"title": f"v{n}", "n": n})
        service.prune(now=datetime.now(UTC) + timedelta(days=3))
        service.replace("tickets", SUBJECT, {"title": "after the prune", "n": 9})
    finally:
        service.close()
        store.close()
    target = tmp_path / "all.jsonl"
    out_run = sf(backend, "dump", str(target))
    assert out_run.returncode == 1 and out_run.stderr.startswith("error[invalid-input]: "), out_run.stderr
    assert "pruned" in out_run.stderr and "--no-history" in out_run.stderr
    assert "record thread/t1 of agent alice in state 'tickets'" in out_run.stderr, out_run.stderr
    assert not target.exists()
    assert sf(backend, "dump", "--no-history", str(target)).returncode == 0
    copy = str(tmp_path / "copy.db")
    loaded = sf(copy, "load", str(target))
    assert loaded.returncode == 0, loaded.stderr
    got = sf(copy, "states", "read", "tickets", "--target-name", "alice", "--kind", "thread", "--key", "t1")
    assert got.returncode == 0 and json.loads(got.stdout)["data"]["title"] == "after the prune", got.stdout


def test_a_dump_cut_short_is_refused_whole(tmp_path: Path) -> None:
    """A dump ends with a line counting the others: one cut at any line boundary (a copy
    interrupted, a full disk) or missing a line in the middle is refused before any store is
    created, rather than loaded as a smaller store that `check` would call whole."""
    source = str(tmp_path / "s.db")
    for key in ("a", "b", "c"):
        assert sf(source, "doc", "put", "notes", key, '{"x": 1}').returncode == 0
    assert sf(source, "doc", "patch", "notes", "a", '{"x": 2}').returncode == 0
    for flags in ([], ["--no-history"]):
        dump = tmp_path / "d.jsonl"
        out = sf(source, "dump", *flags, str(dump))
        assert out.returncode == 0, out.stderr
        whole = dump.read_text().splitlines(keepends=True)
        end = json.loads(whole[-1])
        assert (
            end["kind"] == "end"
            and end["documents"] == len(lines(dump)) - 2 - end["transitions"] - end["ops"]
        )
        assert out.stderr == (
            f"dumped {end['transitions']} transitions, {end['ops']} op ids and {end['documents']} documents to {dump}\n"
        )
        damaged = {f"first {n} lines": whole[:n] for n in range(1, len(whole))}
        damaged["a line lost"] = whole[:2] + whole[3:]
        for why, kept in damaged.items():
            cut = tmp_path / "cut.jsonl"
            cut.write_text("".join(kept))
            target = tmp_path / "new" / "copy.db"
            loaded = sf(str(target), "load", str(cut))
            assert loaded.returncode == 1, (flags, why, loaded.stdout)
            assert loaded.stderr.startswith("error[invalid-dump]: "), (flags, why, loaded.stderr)
            assert not (tmp_path / "new").exists(), (flags, why)
        copy = tmp_path / f"copy{len(flags)}.db"
        loaded = sf(str(copy), "load", str(dump))
        assert loaded.returncode == 0 and loaded.stderr == "", loaded.stderr
        assert json.loads(loaded.stdout)["documents"] == end["documents"]


def test_an_earlier_dump_without_an_end_line_loads_with_a_warning(tmp_path: Path) -> None:
    """A dump written before the end line existed (version 1) still loads, with a warning that
    its completeness cannot be fully checked; with history, one that lost document lines is
    still refused (the transitions name documents the dump no longer has)."""
    source = str(tmp_path / "s.db")
    for key in ("a", "b"):
        assert sf(source, "doc", "put", "notes", key, '{"x": 1}').returncode == 0
    for flags in ([], ["--no-history"]):
        dump = tmp_path / "d.jsonl"
        assert sf(source, "dump", *flags, str(dump)).returncode == 0
        items = lines(dump)[:-1]
        items[0]["version"] = 1
        old = tmp_path / "old.jsonl"
        old.write_text("".join(json.dumps(item) + "\n" for item in items))
        copy = str(tmp_path / f"old{len(flags)}.db")
        loaded = sf(copy, "load", str(old))
        assert loaded.returncode == 0, loaded.stderr
        assert loaded.stderr.startswith(
            f"warning: {old} was written by an earlier stateflow, without an end line"
        )
        assert json.loads(sf(copy, "doc", "get", "notes", "b").stdout) == {"x": 1}
    history = tmp_path / "h.jsonl"
    assert sf(source, "dump", str(history)).returncode == 0
    items = lines(history)[:-2]  # the end line and the last document line lost
    items[0]["version"] = 1
    history.write_text("".join(json.dumps(item) + "\n" for item in items))
    loaded = sf(str(tmp_path / "cut.db"), "load", str(history))
    assert loaded.returncode == 1 and "cut short" in loaded.stderr and "notes/b" in loaded.stderr, (
        loaded.stderr
    )
    assert not (tmp_path / "cut.db").exists()


def test_check_names_a_store_a_load_left_unfinished(backend: str, tmp_path: Path) -> None:
    """A load refused part way into an existing store keeps what it loaded before the refusal:
    `check` says the store holds only part of a dump, instead of calling it whole."""
    source = str(tmp_path / "s.db")
    for value in (1, 2):
        assert sf(source, "doc", "put", "notes", "a", json.dumps({"x": value})).returncode == 0
    assert sf(source, "doc", "put", "notes", "b", '{"x": 1}').returncode == 0
    dump = tmp_path / "d.jsonl"
    assert sf(source, "dump", str(dump)).returncode == 0
    items = lines(dump)
    second = items[2]["changes"][0]
    items[2]["changes"] = [{**second, "edits": [[["x", "deeper"], 1]]}]  # passes the check, does not replay
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(item) + "\n" for item in items))
    assert sf(backend, "migrate").returncode == 0
    loaded = sf(backend, "load", str(bad))
    assert loaded.returncode == 1 and loaded.stderr.startswith("error[invalid-dump]: "), loaded.stderr
    checked = sf(backend, "check", "--json")
    assert checked.returncode == 1, checked.stdout
    (problem,) = json.loads(checked.stdout)["problems"]
    assert problem.startswith("load: a load started at ") and "holds only part of its dump" in problem
    told = sf(backend, "check").stderr  # the problem's own fix, not one to restore a backup beside it
    assert told == "error[corrupt-store]: 1 problem(s) found; each line above says what fixes it\n", told
    whole = str(tmp_path / "whole.db")
    assert sf(whole, "load", str(dump)).returncode == 0
    assert sf(whole, "check").returncode == 0


def test_a_dump_is_one_snapshot_while_writers_carry_on(backend: str, tmp_path: Path) -> None:
    """Writes committed while a dump runs — after it read the transitions, before it read the
    documents — are not in it: every line comes from one snapshot, so the dump loads (document
    lines ahead of the transition lines were refused by ``load``)."""
    from stateflow.store import DocKey, Write
    from stateflow.store.portable import dump

    store = open_store(backend, auto_migrate=True)
    writer = open_store(backend)  # (another handle: its own connections, as another process)
    try:
        for part in range(2):  # more documents than one page of document lines
            store.commit(
                [Write.between(DocKey("bulk", f"d{part}-{i}"), None, {"i": i}, expect=0) for i in range(400)]
            )
        lines_out = dump(store)
        taken = [next(lines_out), next(lines_out)]  # the header, then the first transition
        assert json.loads(taken[1])["kind"] == "transition"
        writer.commit(
            [
                Write.between(DocKey("bulk", f"d{p}-{i}"), {"i": i}, {"i": -i}, expect=1)
                for p in range(2)
                for i in range(0, 400, 7)
            ]
        )
        writer.commit([Write.between(DocKey("bulk", "new"), None, {"i": 0}, expect=0)])
        taken.extend(lines_out)
    finally:
        writer.close()
        store.close()
    out = tmp_path / "live.jsonl"
    out.write_bytes(b"".join(taken))
    items = lines(out)
    assert items[-1] == {"kind": "end", "transitions": 2, "ops": 0, "documents": 800}
    assert {(d["revision"], d["body"]["i"] >= 0) for d in items if d.get("kind") == "document"} == {(1, True)}
    copy = str(tmp_path / "copy.db")
    loaded = sf(copy, "load", str(out))
    assert loaded.returncode == 0, loaded.stderr


def test_ctrl_c_says_what_the_command_left_and_exits_130(tmp_path: Path) -> None:
    # click printed only "Aborted!" and exited 1, a refusal's status; each is interrupted here
    # while it waits on a pipe, so the signal lands mid-command whatever the machine's speed
    env = {k: v for k, v in os.environ.items() if k != "STATEFLOW_STORE"}
    source = str(tmp_path / "s.db")
    for n in range(4):  # a dump far larger than a pipe holds: it waits for its reader
        (tmp_path / "body.json").write_text(json.dumps({"text": f"{n}" * 300_000}))
        assert (
            sf(source, "doc", "put", "notes", f"n{n}", "--file", str(tmp_path / "body.json")).returncode == 0
        )
    with subprocess.Popen(
        ["stateflow", "--store", source, "dump"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    ) as dumping:
        assert dumping.stdout is not None and dumping.stderr is not None
        assert dumping.stdout.read(4096)  # it is writing, and will wait for the pipe to empty
        dumping.send_signal(signal.SIGINT)
        dumping.stdout.read()
        said = dumping.stderr.read().decode()
    assert (dumping.returncode, said) == (
        130,
        "interrupted: the dump on stdout is cut short: it has no end line, so `stateflow load` refuses it\n",
    )
    target = tmp_path / "new.db"
    with subprocess.Popen(
        ["stateflow", "--store", str(target), "load", "-"],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    ) as loading:
        assert loading.stdin is not None and loading.stderr is not None
        loading.stdin.write(b"{}\n" * (1 << 19))  # returns once the load has read most of it
        loading.stdin.flush()
        loading.send_signal(signal.SIGINT)
        said = loading.stderr.read().decode()
        loading.stdin.close()
    assert (loading.returncode, said) == (130, "interrupted: nothing was loaded: the store was not opened\n")
    assert not target.exists()
