"""Where the adapters' writes spend their CPU: saver ``put``, ``put_writes`` and store ``put``
(``bench_langgraph_adapters``' cases, one caller), sampled by layer as
:mod:`benchmarks.profile_apply` samples ``apply``, beside a plain states ``apply`` of a small
record in the same process (the write the adapters' writes should cost about as much as).

    python3 -m benchmarks.profile_langgraph_writes [--calls 3000] [--synchronous off|full]
        [--postgres URL] [--cprofile]

``--cprofile`` prints the functions with the most own time and the call counts per write
instead (a tracing profile: its times inflate small Python functions; its counts are exact).
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import pstats
import signal
import tempfile
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from benchmarks.profile_apply import LAYERS

ADAPTER_LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("adapter codec (values to JSON)", ("stateflow/langgraph/codec.py",)),
    ("adapter (saver/store/records)", ("stateflow/langgraph/",)),
    ("LangGraph's own code", ("site-packages/langgraph/", "site-packages/langchain_core/")),
]


def layer_of(frame: FrameType | None) -> str:
    while frame is not None:
        code = frame.f_code
        where = code.co_filename.replace("\\", "/")
        for layer, marks in LAYERS + ADAPTER_LAYERS:
            for mark in marks:
                path, _, function = mark.partition(":")
                if path in where and (not function or function == code.co_name):
                    return layer
        frame = frame.f_back
    return "other (the benchmark's loop, dataclass and tuple constructors)"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--interval", type=float, default=0.0005, help="seconds of CPU between samples")
    parser.add_argument("--synchronous", default="off", choices=["off", "normal", "full"])
    parser.add_argument("--postgres", default=None, help="profile against this PostgreSQL instead")
    parser.add_argument("--cprofile", action="store_true", help="call counts and own time instead")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()

    from benchmarks.bench_langgraph_adapters import saver_cases, store_cases
    from benchmarks.bench_states_vs_langgraph import DECL, ops_for, subject
    from stateflow.langgraph import StateflowSaver, StateflowStore
    from stateflow.states import StatesService
    from stateflow.store import open_store

    with tempfile.TemporaryDirectory() as tmp:
        if args.postgres:
            import psycopg

            sep = "&" if "?" in args.postgres else "?"
            with psycopg.connect(args.postgres, autocommit=True) as admin:
                admin.execute("DROP SCHEMA IF EXISTS bench_profile_lg CASCADE")
                admin.execute("CREATE SCHEMA bench_profile_lg")
            url = f"{args.postgres}{sep}options=-csearch_path%3Dbench_profile_lg"
        else:
            url = f"sqlite:///{tmp}/stateflow.db?synchronous={args.synchronous}"
        service = StatesService(open_store(url, auto_migrate=True))
        service.declare("bench", DECL)
        cases: dict[str, Callable[[int], Any]] = {
            **saver_cases(StateflowSaver(service), "p"),
            **store_cases(StateflowStore(service), "p"),
        }
        cases["states apply (plain)"] = lambda i: service.apply("bench", subject(i), ops_for(i))
        wanted = ("states apply (plain)", "saver put", "saver put_writes", "store put")
        for i in range(300):  # warm: checkpoints for put_writes, every key written once
            for name in wanted:
                cases[name](i)
        try:
            for name in wanted:
                fn = cases[name]
                start = 10_000
                if args.cprofile:
                    profile = cProfile.Profile()
                    profile.enable()
                    for i in range(start, start + args.calls):
                        fn(i)
                    profile.disable()
                    print(f"== {name}: calls per write, own time (tracing)")
                    stats = pstats.Stats(profile)
                    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)  # type: ignore[attr-defined]
                    for (path, line, func), (_cc, nc, tt, _ct, _callers) in rows[: args.top]:
                        short = "/".join(path.split("/")[-2:])
                        print(
                            f"  {nc / args.calls:7.1f}  {tt / args.calls * 1e6:7.1f} µs  {short}:{line} {func}"
                        )
                    total = sum(v[1] for v in stats.stats.values())  # type: ignore[attr-defined]
                    print(f"  {total / args.calls:.0f} Python calls per write")
                    continue
                counts: collections.Counter[str] = collections.Counter()

                def sample(
                    _signal: int, frame: FrameType | None, counts: collections.Counter[str] = counts
                ) -> None:
                    counts[layer_of(frame)] += 1

                signal.signal(signal.SIGPROF, sample)
                started = time.process_time()
                signal.setitimer(signal.ITIMER_PROF, args.interval, args.interval)
                for i in range(start, start + args.calls):
                    fn(i)
                signal.setitimer(signal.ITIMER_PROF, 0, 0)
                cpu = (time.process_time() - started) / args.calls * 1000
                total = sum(counts.values()) or 1
                print(f"== {name}: {cpu:.3f} ms CPU per write ({total} samples)")
                for layer, n in counts.most_common():
                    print(f"  {n / total * 100:5.1f}%  {n / total * cpu * 1000:6.1f} µs  {layer}")
        finally:
            service.close()
            service.store.close()
            if args.postgres:
                import psycopg

                with psycopg.connect(args.postgres, autocommit=True) as admin:
                    admin.execute("DROP SCHEMA bench_profile_lg CASCADE")


if __name__ == "__main__":
    main()
