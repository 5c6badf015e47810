"""Where one caller's ``apply`` spends its CPU: a sampling profile, grouped by layer.

The op batch of ``bench_states_vs_langgraph`` (the one ``bench_commit_floor`` measures) is
applied in a loop by one caller while a timer on the process's CPU time (``ITIMER_PROF``)
samples the Python stack every ``--interval`` seconds; each sample is charged to the first
layer found from the innermost frame outwards (a statement's time to the statements, even
when a planning function sent it). Sampling, not tracing: a tracing profiler's cost per call
inflates the many small Python functions against the few long C calls (the statements).
``--synchronous full`` profiles the durable case (the fsync's system time then shows in the
commit); ``off`` leaves what is CPU of our own.

    python3 -m benchmarks.profile_apply [--calls 20000] [--synchronous off|full] [--postgres URL]
"""

from __future__ import annotations

import argparse
import collections
import signal
import tempfile
import time
from collections.abc import Callable
from types import FrameType

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # (layer, frames "path:function" — a path alone matches every function in it)
    (
        "statements (SQLite/psycopg calls)",
        (
            "store/sqlite.py:all",
            "store/sqlite.py:run",
            "store/sqlite.py:many",
            "store/sqlite.py:_settle",
            "store/sqlite.py:__enter__",
            "psycopg/",
        ),
    ),
    ("PostgreSQL store (commit arguments, group commit)", ("store/postgres.py",)),
    ("writer queue (turns between processes)", ("store/writer_queue.py",)),
    (
        "op parsing",
        tuple(
            f"doc/ops.py:{function}"
            for function in (
                "parse_ops",
                "parse_op",
                "_parse_path",
                "_parse_guard",
                "_check_items",
                "_check_key",
                "_check_unique",
                "_check_count",
                "_check_unset_entries",
            )
        ),
    ),
    ("ops applied (copy-on-write)", ("doc/ops.py", "doc/copies.py", "store/spares.py")),
    ("record diff", ("doc/diff.py",)),
    ("JSON Schema validation", ("states/schema.py:valid",)),
    ("JSON checks, copies, encoding", ("doc/canonical.py",)),
    (
        "row planning (stage, plan, emit)",
        ("store/writes.py:_stage", "store/writes.py:_plan_doc", "store/writes.py:_emit"),
    ),
    (
        "caches (known rows, members, heads)",
        ("store/cache.py", "store/writes.py:_known", "store/writes.py:_remember"),
    ),
    ("group commit (turn, savepoint, wait)", ("store/sqlite.py",)),
    (
        "store: optimistic commit, its check",
        ("store/writes.py", "store/ledger.py", "store/clock.py", "store/plan.py"),
    ),
    ("states pipeline and service", ("states/",)),
    ("store model objects", ("store/model.py", "store/rows.py")),
]


def layer_of(frame: FrameType | None, layers: list[tuple[str, tuple[str, ...]]] = LAYERS) -> str:
    """The first of ``layers`` found from the innermost frame outwards."""
    while frame is not None:
        code = frame.f_code
        where = code.co_filename.replace("\\", "/")
        for layer, marks in layers:
            for mark in marks:
                path, _, function = mark.partition(":")
                if path in where and (not function or function == code.co_name):
                    return layer
        frame = frame.f_back
    return "other (the benchmark's loop, dataclass and tuple constructors)"


def profiling_url(tmp: str, postgres: str | None, schema: str, synchronous: str) -> str:
    """A fresh store to profile: SQLite in ``tmp``, or a new schema of ``postgres``."""
    if not postgres:
        return f"sqlite:///{tmp}/stateflow.db?synchronous={synchronous}"
    import psycopg

    with psycopg.connect(postgres, autocommit=True) as admin:
        admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        admin.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in postgres else "?"
    return f"{postgres}{sep}options=-csearch_path%3D{schema}"


def drop_profiling_schema(postgres: str | None, schema: str) -> None:
    if postgres:
        import psycopg

        with psycopg.connect(postgres, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


def sample_layers(
    run: Callable[[int], object],
    calls: range,
    interval: float,
    layers: list[tuple[str, tuple[str, ...]]] = LAYERS,
) -> tuple[float, collections.Counter[str]]:
    """Run ``run(i)`` for each i of ``calls`` under a CPU-time sampling timer: the CPU per
    call in ms and the samples per layer."""
    counts: collections.Counter[str] = collections.Counter()

    def sample(_signal: int, frame: FrameType | None) -> None:
        counts[layer_of(frame, layers)] += 1

    signal.signal(signal.SIGPROF, sample)
    started = time.process_time()
    signal.setitimer(signal.ITIMER_PROF, interval, interval)
    for i in calls:
        run(i)
    signal.setitimer(signal.ITIMER_PROF, 0, 0)
    return (time.process_time() - started) / len(calls) * 1000, counts


def print_layers(title: str, cpu: float, counts: collections.Counter[str]) -> None:
    total = sum(counts.values()) or 1
    print(f"{title}: {cpu:.3f} ms CPU per call ({total} samples)")
    for layer, n in counts.most_common():
        print(f"  {n / total * 100:5.1f}%  {n / total * cpu * 1000:6.1f} µs  {layer}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--interval", type=float, default=0.0005, help="seconds of CPU between samples")
    parser.add_argument("--synchronous", default="off", choices=["off", "normal", "full"])
    parser.add_argument("--postgres", default=None, help="profile against this PostgreSQL instead")
    args = parser.parse_args()

    from benchmarks.bench_states_vs_langgraph import DECL, ops_for, subject
    from stateflow.states import StatesService
    from stateflow.store import open_store

    with tempfile.TemporaryDirectory() as tmp:
        url = profiling_url(tmp, args.postgres, "bench_profile", args.synchronous)
        service = StatesService(open_store(url, auto_migrate=True))
        service.declare("bench", DECL)
        for i in range(500):  # warm: every subject written, the caches filled
            service.apply("bench", subject(i), ops_for(i))
        cpu, counts = sample_layers(
            lambda i: service.apply("bench", subject(i), ops_for(i)), range(args.calls), args.interval
        )
        service.close()
        drop_profiling_schema(args.postgres, "bench_profile")
    backend = "postgresql" if args.postgres else f"sqlite synchronous={args.synchronous}"
    print_layers(f"apply, one caller, {backend}", cpu, counts)


if __name__ == "__main__":
    main()
