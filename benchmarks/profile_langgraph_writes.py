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
import cProfile
import pstats
import tempfile
from collections.abc import Callable
from typing import Any

from benchmarks.profile_apply import (
    LAYERS,
    drop_profiling_schema,
    print_layers,
    profiling_url,
    sample_layers,
)

ADAPTER_LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("adapter codec (values to JSON)", ("stateflow/langgraph/codec.py",)),
    ("adapter (saver/store/records)", ("stateflow/langgraph/",)),
    ("LangGraph's own code", ("site-packages/langgraph/", "site-packages/langchain_core/")),
]


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
        url = profiling_url(tmp, args.postgres, "bench_profile_lg", args.synchronous)
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
                cpu, counts = sample_layers(
                    fn, range(start, start + args.calls), args.interval, LAYERS + ADAPTER_LAYERS
                )
                print_layers(f"== {name}", cpu, counts)
        finally:
            service.close()
            service.store.close()
            drop_profiling_schema(args.postgres, "bench_profile_lg")


if __name__ == "__main__":
    main()
