"""Studio pages on big data: a memory scope with 10,000 revisions beside a 100 MB lazy plane.

One store holds two sessions of one agent: ``big`` (``--revisions`` hot writes, then
``--lazy-mb`` MB of lazy state in 20 children) and ``small`` (20 hot writes, a few bytes of
lazy state). Each round requests the same page of both, in alternating order, through the real
app (in process, so the time is the server's: routing, session, reads, rendering); the ratio
big/small shows what history length and lazy size cost a page (target: nothing), and the
absolute time is held against the 300 ms budget.

    python3 -m benchmarks.bench_studio [--revisions 10000] [--lazy-mb 100] [--rounds 30]
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from fastapi.testclient import TestClient

from benchmarks.rounds import alternate, report
from stateflow.api import states_service
from stateflow.http.app import create_app
from stateflow.http.auth import TokenSet, parse_token
from stateflow.memory import Identity, MemoryView
from stateflow.store import SqlStore, open_store

TOKEN = "bench-studio-token-0001"
AGENT = "bench"
BUDGET_MS = 300.0


def build(store: SqlStore, revisions: int, lazy_mb: int, cwd: str) -> None:
    big = MemoryView(store, Identity(AGENT, cwd, "big"))
    small = MemoryView(store, Identity(AGENT, cwd, "small"))
    start = time.perf_counter()
    every = max(1, revisions // 20)  # (small: 20 hot writes whatever --revisions says)
    for i in range(revisions):
        big.patch_state({"session": {"tactics": {"next": f"step {i}"}, "intents": {"goal": {"n": i}}}})
        if i % every == 0:
            small.patch_state({"session": {"tactics": {"next": f"step {i}"}}})
        if i and i % 2000 == 0:
            print(f"  … {i:,} revisions written ({time.perf_counter() - start:.0f} s)", flush=True)
    per_key = max(1, lazy_mb * 1000 // 20)  # 20 children of ~lazy_mb/20 MB (1 KB strings)
    for k in range(20):
        big.patch_state({"session": {"lazy": {f"archive{k}": ["x" * 1000] * per_key}}})
    small.patch_state({"session": {"lazy": {"archive0": ["x"]}}})
    print(f"  built in {time.perf_counter() - start:.0f} s", flush=True)


def signed_in(client: TestClient) -> None:
    nonce = re.search(r'name="login_csrf" value="([^"]+)"', client.get("/studio/login").text)
    assert nonce is not None
    r = client.post("/studio/login", data={"token": TOKEN, "login_csrf": nonce[1]}, follow_redirects=False)
    assert r.status_code == 303, r.text


def timed(client: TestClient, url: str) -> float:
    start = time.perf_counter()
    r = client.get(url)
    elapsed = (time.perf_counter() - start) * 1000
    assert r.status_code == 200, (url, r.status_code, r.text[:300])
    return elapsed


def compare(client: TestClient, name: str, page: Callable[[str], str], rounds: int) -> None:
    """Alternate big and small round by round; both medians, the ratio and its spread."""
    timed(client, page("big"))
    timed(client, page("small"))
    pair = alternate(lambda _: timed(client, page("big")), lambda _: timed(client, page("small")), rounds)
    big_ms = statistics.median(pair.ours)
    verdict = "ok" if big_ms <= BUDGET_MS else "OVER BUDGET"
    report(f"{name} (big vs small)", pair, "ms", f"big ≤ {BUDGET_MS:.0f} ms: {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--revisions", type=int, default=10_000)
    parser.add_argument("--lazy-mb", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'studio.db'}?synchronous=normal"
        store = open_store(url, auto_migrate=True)
        print(f"building: {args.revisions:,} revisions and a {args.lazy_mb} MB lazy plane", flush=True)
        build(store, args.revisions, args.lazy_mb, tmp)
        store.close()

        # a fresh store: nothing cached, as after a restart
        store = open_store(url)
        service = states_service(store)  # (the built-in memory state installed, as a server has it)
        with TestClient(create_app(service, TokenSet([parse_token(TOKEN)]))) as client:
            signed_in(client)

            def scope(session: str) -> str:
                return f"/studio/memory/{AGENT}/scope?scope=session&key={session}"

            def record(session: str) -> str:
                return f"/studio/states/memory/record?tk=agent&tn={AGENT}&kind=session&key={session}"

            def lazy_child(session: str) -> str:
                return f'/studio/memory/{AGENT}/lazy?scope=session&key={session}&plane=lazy&path=["archive0"]'

            timed(client, scope("small"))  # built-ins checked, templates compiled
            first = timed(client, scope("big"))
            print(f"{'scope page, first request':<34} big {first:7.1f} ms  (no cached member of it)")
            compare(client, "memory scope page", scope, args.rounds)
            compare(client, "memory state record page", record, args.rounds)
            cursors = {}
            for session in ("big", "small"):
                # the cursor the "Older" link carries, 90 % of the way back
                key = Identity(AGENT, tmp, session).key("session")
                depth = store.get(key, []).revision * 9 // 10
                seq = store.read_at(key, revision=store.get(key, []).revision - depth, members=[]).seq
                cursors[session] = f"&start={depth}&before={seq}"

            def old_page(session: str) -> str:
                return scope(session) + cursors[session]

            compare(client, "scope timeline, a page far back", old_page, args.rounds)

            # as-of reads after the lazy plane was written (its last 20 revisions): rebuilding
            # the hot planes must not decode the 100 MB plane kept in the same snapshots
            revisions = {
                s: store.get(Identity(AGENT, tmp, s).key("session"), []).revision for s in ("big", "small")
            }

            def asof(session: str) -> str:
                return scope(session) + "&offset=5"

            def diff(session: str) -> str:
                r = revisions[session]
                return record(session) + f"&a={r - 6}&b={r - 5}&rev={r - 5}"

            compare(client, "scope as of [5] (hot planes)", asof, args.rounds)
            compare(client, "record page, as of and diff of two old revisions", diff, args.rounds)
            cold = timed(client, lazy_child("big"))
            print(f"{'lazy child, first open':<34} big {cold:7.1f} ms  (the nodes down to its first page)")
            deep = timed(client, lazy_child("big").replace("archive0", "archive7") + "&start=4000")
            print(f"{'another child, a page deep, first':<34} big {deep:7.1f} ms")
            compare(client, "lazy child, later opens", lazy_child, args.rounds)
        service.close()
        store.close()
        store = open_store(url)  # cold again, as after a restart: no node of the plane cached
        service = states_service(store)  # (the built-in memory state installed, as a server has it)
        with TestClient(create_app(service, TokenSet([parse_token(TOKEN)]))) as client:
            signed_in(client)
            timed(client, scope("small"))
            first = timed(client, scope("big"))
            opened = timed(client, lazy_child("big"))
            print(
                f"{'after a restart: scope page':<34} big {first:7.1f} ms, then its first lazy open "
                f"{opened:.1f} ms: {first + opened:.1f} ms ({'ok' if first + opened <= BUDGET_MS else 'OVER BUDGET'})"
            )
        service.close()
        store.close()


if __name__ == "__main__":
    main()
