"""The least write that keeps history and audit, by hand, next to LangGraph's and ours (SQLite).

``bench_langgraph_adapters`` asks our adapters' writes for at least 0.8× LangGraph's rate. This
script measures what no implementation of the contract gets under: a checkpoint ``put`` and a
store ``put`` written by hand for these shapes — the record built in memory, checked against
the state's JSON Schema, its members encoded, and, in one durable transaction, the audit row
(transition with its origin), the document's row, its member rows and the history row (the
change with its edits) — on minimal tables (no per-state counts, no value or state indexes, no
checks that another writer moved anything, no generality). Beside it, LangGraph's
``SqliteSaver.put`` / ``SqliteStore.put`` and our ``StateflowSaver.put`` / ``StateflowStore.put``
through the same cases as ``bench_langgraph_adapters`` (one caller, WAL, ``synchronous=FULL``
everywhere). Each round runs every side, the order rotating; the script prints each side's
median wall time and CPU time per write and the rate ratio against LangGraph (its time / ours)
with the spread of the rounds and how many rounds reached the issue's 0.8×, and ours against
the floor by hand (its time / ours), round by round.

    python3 -m benchmarks.bench_langgraph_floor [--ops 400] [--rounds 6] (≥ 15 rounds to settle a ratio)
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema_rs
import orjson

from benchmarks.bench_langgraph_adapters import KEYS, Case, saver_cases, store_cases
from stateflow.langgraph import StateflowSaver, StateflowStore
from stateflow.langgraph.saver import DECLARATION as SAVER_DECLARATION
from stateflow.langgraph.store import DECLARATION as STORE_DECLARATION
from stateflow.states import StatesService
from stateflow.store import open_store

TARGET = 0.8
"""The issue's target for writes: this rate against LangGraph's."""

_TABLES = """
CREATE TABLE transitions (seq INTEGER PRIMARY KEY, at INTEGER NOT NULL, origin BLOB NOT NULL);
CREATE TABLE documents (doc_id INTEGER PRIMARY KEY, state TEXT NOT NULL, subject TEXT NOT NULL,
    revision INTEGER NOT NULL, updated_seq INTEGER, UNIQUE (state, subject));
CREATE TABLE members (doc_id INTEGER NOT NULL, name TEXT NOT NULL, revision INTEGER NOT NULL,
    body BLOB NOT NULL, PRIMARY KEY (doc_id, name));
CREATE TABLE changes (doc_id INTEGER NOT NULL, revision INTEGER NOT NULL, seq INTEGER NOT NULL,
    paths BLOB NOT NULL, edits BLOB NOT NULL, PRIMARY KEY (doc_id, revision));
"""


def _micros() -> int:
    return int(datetime.now(UTC).timestamp() * 1e6)


class ByHand:
    """The least saver ``put`` and store ``put`` for the benchmark's shapes (see the module)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        conn.executescript(_TABLES)
        self.conn = conn
        self.checkpoints = jsonschema_rs.validator_for(SAVER_DECLARATION["schema"])
        self.items = jsonschema_rs.validator_for(STORE_DECLARATION["schema"])
        self.origin = orjson.dumps({"consumer": "langgraph", "door": "api", "action": "replace"})
        self.held: dict[int, tuple[int, int, dict[str, Any]]] = {}  # item → doc id, revision, record

    def _commit(self, rows: Callable[[int], None]) -> None:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        seq = conn.execute(
            "INSERT INTO transitions (at, origin) VALUES (?, ?) RETURNING seq", (_micros(), self.origin)
        ).fetchone()[0]
        rows(seq)
        conn.execute("COMMIT")

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        """A checkpoint record (names, the checkpoint without its values, its metadata, the
        values of the channels it wrote), new: one document, two members, one change."""
        conf = config["configurable"]
        values = checkpoint["channel_values"]
        record = {
            "config": {
                "thread_id": conf["thread_id"],
                "checkpoint_ns": conf.get("checkpoint_ns", ""),
                "checkpoint_id": checkpoint["id"],
                "parent_checkpoint_id": conf.get("checkpoint_id"),
                "run_id": None,
            },
            "saved": {
                "checkpoint": {"json": {k: v for k, v in checkpoint.items() if k != "channel_values"}},
                "metadata": {"json": metadata},
                "channel_values": {c: {"json": values[c]} for c in new_versions if c in values},
                "sources": {},
            },
        }
        if not self.checkpoints.is_valid(record):
            raise ValueError(record)
        members = [(name, orjson.dumps(value)) for name, value in record.items()]
        subject = f"{conf['thread_id']}/{checkpoint['id']}"

        def rows(seq: int) -> None:
            doc_id = self.conn.execute(
                "INSERT INTO documents (state, subject, revision, updated_seq) VALUES (?, ?, 1, ?) "
                "RETURNING doc_id",
                ("langgraph_checkpoints", subject, seq),
            ).fetchone()[0]
            self.conn.executemany(
                "INSERT INTO members VALUES (?, ?, 1, ?)", [(doc_id, n, body) for n, body in members]
            )
            self.conn.execute(
                "INSERT INTO changes VALUES (?, 1, ?, '[[]]', ?)", (doc_id, seq, orjson.dumps([[[], record]]))
            )

        self._commit(rows)
        return {"configurable": {**conf, "checkpoint_id": checkpoint["id"]}}

    def store_put(self, namespace: tuple[str, ...], key: str, value: dict[str, Any]) -> None:
        """An item record rewritten (its ``value`` member changed): one member row, one change."""
        item = hash((namespace, key))
        now = datetime.now(UTC).isoformat()
        held = self.held.get(item)
        record = {
            "namespace": list(namespace),
            "key": key,
            "value": value,
            "created_at": held[2]["created_at"] if held else now,
            "expires_at": None,
            "ttl_minutes": None,
        }
        if not self.items.is_valid(record):
            raise ValueError(record)
        body = orjson.dumps(value)
        revision = held[1] + 1 if held else 1

        def rows(seq: int) -> None:
            conn = self.conn
            if held is None:
                doc_id = conn.execute(
                    "INSERT INTO documents (state, subject, revision, updated_seq) VALUES (?, ?, 1, ?) "
                    "RETURNING doc_id",
                    ("langgraph_store", "/".join((*namespace, key)), seq),
                ).fetchone()[0]
                conn.executemany(
                    "INSERT INTO members VALUES (?, ?, 1, ?)",
                    [(doc_id, n, orjson.dumps(v)) for n, v in record.items()],
                )
                edits = orjson.dumps([[[], record]])
            else:
                doc_id = held[0]
                conn.execute(
                    "UPDATE members SET revision = ?, body = ? WHERE doc_id = ? AND name = 'value'",
                    (revision, body, doc_id),
                )
                conn.execute(
                    "UPDATE documents SET revision = ?, updated_seq = ? WHERE doc_id = ?",
                    (revision, seq, doc_id),
                )
                edits = b'[[["value"],' + body + b"]]"
            conn.execute(
                "INSERT INTO changes VALUES (?, ?, ?, ?, ?)", (doc_id, revision, seq, b'[["value"]]', edits)
            )
            self.held[item] = (doc_id, revision, record)

        self._commit(rows)


class _Hand:
    """``ByHand`` behind the two methods the benchmark's cases call."""

    def __init__(self, hand: ByHand) -> None:
        self.put = hand.put
        self.hand = hand

    def get_next_version(self, current: Any, channel: Any) -> Any:
        return (current or 0) + 1


def _side(fn: Case, n: int, start: int) -> tuple[float, float]:
    """Wall and CPU milliseconds per call of ``n`` calls."""
    wall, cpu = time.perf_counter(), time.process_time()
    for i in range(start, start + n):
        fn(i)
    return (time.perf_counter() - wall) / n * 1e3, (time.process_time() - cpu) / n * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--ops", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.store.sqlite import SqliteStore

    with tempfile.TemporaryDirectory() as tmp:
        ours = StatesService(open_store(f"sqlite:///{tmp}/stateflow.db?synchronous=full"))
        hand_conn = sqlite3.connect(Path(tmp) / "hand.db", isolation_level=None, check_same_thread=False)
        lg_saver_conn = sqlite3.connect(Path(tmp) / "lg-saver.db", check_same_thread=False)
        lg_store_conn = sqlite3.connect(
            Path(tmp) / "lg-store.db", isolation_level=None, check_same_thread=False
        )
        for conn in (hand_conn, lg_store_conn):
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
        lg_saver_conn.execute("PRAGMA synchronous = FULL")
        lg_saver = SqliteSaver(lg_saver_conn)
        lg_saver.setup()
        lg_store = SqliteStore(lg_store_conn)
        lg_store.setup()
        hand = ByHand(hand_conn)

        def hand_store_put(i: int) -> None:
            hand.store_put(
                ("bench", "h", f"ns{i % 4}"),
                f"k{i % KEYS}",
                {"n": i, "text": "remember this", "tags": ["a", "b"]},
            )

        sides: dict[str, dict[str, Case]] = {
            "langgraph": {
                "saver put": saver_cases(lg_saver, "l")["saver put"],
                "store put": store_cases(lg_store, "l")["store put"],
            },
            "by hand": {
                "saver put": saver_cases(_Hand(hand), "h")["saver put"],  # type: ignore[arg-type]
                "store put": hand_store_put,
            },
            "stateflow": {
                "saver put": saver_cases(StateflowSaver(ours), "s")["saver put"],
                "store put": store_cases(StateflowStore(ours), "s")["store put"],
            },
        }
        try:
            for case in ("saver put", "store put"):
                for i in range(KEYS):  # warm: every store key written once, a chain started
                    for side in sides.values():
                        side[case](i)
                measured: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
                names = list(sides)
                for r in range(args.rounds):
                    order = names[r % len(names) :] + names[: r % len(names)]
                    for name in order:
                        measured[name].append(_side(sides[name][case], args.ops, 1000 + r * args.ops))
                lg = measured["langgraph"]
                for name in names:
                    walls = [w for w, _ in measured[name]]
                    cpus = [c for _, c in measured[name]]
                    ratios = [b[0] / m[0] for m, b in zip(measured[name], lg, strict=True)]
                    reached = sum(r >= TARGET for r in ratios)
                    print(
                        f"sqlite FULL {case:<10} {name:<10} {statistics.median(walls):6.3f} ms/write "
                        f"(CPU {statistics.median(cpus):.3f} ms)   rate vs LangGraph "
                        f"{statistics.median(ratios):4.2f}× ({min(ratios):.2f}–{max(ratios):.2f}×), "
                        f"{reached} of {len(ratios)} rounds ≥ {TARGET}×",
                        flush=True,
                    )
                    if name == "stateflow":  # ours against the floor by hand, round by round
                        floor = [
                            h[0] / m[0] for m, h in zip(measured[name], measured["by hand"], strict=True)
                        ]
                        print(
                            f"sqlite FULL {case:<10} stateflow ÷ by hand {statistics.median(floor):4.2f}× "
                            f"({min(floor):.2f}–{max(floor):.2f}×)",
                            flush=True,
                        )
        finally:
            ours.store.close()
            for conn in (hand_conn, lg_saver_conn, lg_store_conn):
                conn.close()


if __name__ == "__main__":
    main()
