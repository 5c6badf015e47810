"""The hop a SQLite store call takes from the event loop to a worker thread and back:
``stateflow.offload`` (what the HTTP edge uses) against anyio's ``to_thread.run_sync``
(Starlette's thread pool, what it used before), on one loop, one call at a time.

Per round and side: CPU time per hop (``time.process_time``, both threads of the process: what
load on a shared machine cannot move much) and wall time per hop, over ``--calls`` calls of a
function that does nothing, sides alternating round by round.

    python3 -m benchmarks.bench_edge_hop [--rounds 10] [--calls 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable

import anyio.to_thread

from benchmarks.rounds import Pair, report
from stateflow.offload import run_sync


def nothing() -> None:
    return None


async def via_offload() -> None:
    await run_sync(nothing)


async def via_anyio() -> None:
    await anyio.to_thread.run_sync(nothing)


async def per_hop(hop: Callable[[], Awaitable[None]], calls: int) -> tuple[float, float]:
    """(CPU µs, wall µs) per hop over ``calls`` hops."""
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(calls):
        await hop()
    return (time.process_time() - cpu) / calls * 1e6, (time.perf_counter() - wall) / calls * 1e6


async def main_async(rounds: int, calls: int) -> None:
    for hop in (via_offload, via_anyio):  # start the threads, warm both
        await per_hop(hop, 200)
    ours: list[tuple[float, float]] = []
    base: list[tuple[float, float]] = []
    for r in range(rounds):
        sides = ((ours, via_offload), (base, via_anyio))
        for measured, hop in sides if r % 2 == 0 else sides[::-1]:
            measured.append(await per_hop(hop, calls))
    print(f"{'case':<58} {'offload':>15}    {'anyio':>15}")
    report("CPU per hop", Pair([m[0] for m in ours], [m[0] for m in base]), "µs")
    report("wall time per hop", Pair([m[1] for m in ours], [m[1] for m in base]), "µs")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    asyncio.run(main_async(args.rounds, args.calls))


if __name__ == "__main__":
    main()
