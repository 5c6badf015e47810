"""Cold start: a memory read from the command line against Python opening sqlite3 and reading a row.

Every CLI call starts a fresh interpreter, so what a command imports is paid on every call. The
baseline is the least any Python tool can do to answer from the same file: start the
interpreter, import ``sqlite3``, open the store and read one row. Against it, in alternating
rounds (each a fresh process, bytecode cached as after an install):

- ``stateflow tool read_state '{"path": "effective"}'``
- ``stateflow context``

and, with ``-X importtime``, what ``import stateflow`` costs, what the CLI imports before
running a memory read, and whether any heavy layer crept in (the states layer, a JSON Schema
library, pydantic, FastAPI, uvicorn, psycopg, the MCP SDK).

    python3 -m benchmarks.bench_cold_start [--rounds 21]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.rounds import alternate, report

# Modules a memory read must never load: each is a layer or library another command needs.
HEAVY = (
    "stateflow.states",
    "stateflow.http",
    "stateflow.mcp",
    "stateflow.jq",
    "jsonschema",
    "jsonschema_rs",
    "pydantic",
    "fastapi",
    "starlette",
    "uvicorn",
    "psycopg",
    "psycopg_pool",
    "mcp",
    "rich",
    "jq",
)

# The console script's own code: `stateflow ARGS` is this with the same interpreter.
CLI = "import sys; from stateflow.cli.main import main; sys.argv[0] = 'stateflow'; sys.exit(main())"


def environment() -> dict[str, str]:
    """The caller's environment with bytecode caching on, as an installed package runs."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def memory_read(store: str, *command: str) -> list[str]:
    return [sys.executable, "-c", CLI, "--store", store, *command]


def baseline(store: str) -> list[str]:
    code = (
        "import sqlite3, sys; conn = sqlite3.connect(sys.argv[1]); "
        "conn.execute('SELECT * FROM documents LIMIT 1').fetchone()"
    )
    return [sys.executable, "-c", code, store]


def run_ms(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    return (time.perf_counter() - start) * 1000


def imports(argv: list[str], env: dict[str, str]) -> dict[str, int]:
    """Cumulative import time (µs) of every module ``argv`` imports, from ``-X importtime``."""
    out = subprocess.run(
        [argv[0], "-X", "importtime", *argv[1:]],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    found: dict[str, int] = {}
    for line in out.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line.split("|")
        found[name.strip()] = int(cumulative)
    return found


def heavy_modules(imported: dict[str, int]) -> list[str]:
    return sorted(m for m in imported if any(m == h or m.startswith(h + ".") for h in HEAVY))


def prepare(store: str) -> None:
    """A store with a few planes in every scope, as an agent leaves it after a session."""
    from stateflow.memory import Identity, MemoryView
    from stateflow.store import open_store

    opened = open_store(store)
    view = MemoryView(opened, Identity.of("default", os.getcwd(), None))
    for i in range(20):
        view.patch_state(
            {
                "global": {"strategy": {"style": f"terse {i}"}},
                "cwd": {"tactics": {"build": f"make {i}"}, "lazy": {"notes": [f"n{j}" for j in range(50)]}},
                "session": {"intents": {"ship": {"goal": f"release {i}"}}, "tactics": {"next": f"step {i}"}},
            }
        )
    opened.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()
    env = environment()
    with tempfile.TemporaryDirectory() as tmp:
        store = str(Path(tmp) / "memory.db")
        prepare(store)
        read = memory_read(store, "tool", "read_state", '{"path": "effective"}')
        context = memory_read(store, "context")
        base = baseline(store)
        for argv in (read, context, base):  # write bytecode caches, warm the file cache
            run_ms(argv, env)

        print(f"{'case':<58} {'stateflow':>13}    {'baseline':>13}")
        cases = (
            ("cold `stateflow tool read_state` vs python3+sqlite3 row", read),
            ("cold `stateflow context` vs python3+sqlite3 row", context),
        )
        for label, argv in cases:

            def ours(_round: int, argv: list[str] = argv) -> float:
                return run_ms(argv, env)

            pair = alternate(ours, lambda _round: run_ms(base, env), args.rounds)
            report(label, pair, "ms", "<= 4x")

        package: list[float] = []
        api: list[float] = []
        cli: list[float] = []
        for _ in range(args.rounds):
            package.append(imports([sys.executable, "-c", "import stateflow"], env)["stateflow"] / 1000)
            entry = imports([sys.executable, "-c", "from stateflow import connect"], env)
            api.append((entry["stateflow"] + entry["stateflow.api"]) / 1000)
            cli.append(imports(read, env)["stateflow.cli.main"] / 1000)
        for label, values in (
            ("import stateflow (target <= 50 ms)", package),
            ("from stateflow import connect", api),
            ("what the CLI imports before a memory read", cli),
        ):
            print(
                f"{label}: {statistics.median(values):.1f} ms (rounds {min(values):.1f}–{max(values):.1f} ms)"
            )
        for label, argv in (("read_state", read), ("context", context)):
            heavy = heavy_modules(imports(argv, env))
            print(f"heavy modules a cold `{label}` imports: {', '.join(heavy) if heavy else 'none'}")


if __name__ == "__main__":
    main()
