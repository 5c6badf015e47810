"""Acknowledged writes survive a killed process, with concurrent callers sharing commits.

A child process runs eight threads that each keep applying to their own subjects and print
every value once ``apply`` has returned; the test kills it with SIGKILL mid-stream, opens the
store afresh and finds every acknowledged value (or a later one) in place.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import time

from stateflow.states import StatesService
from stateflow.store import open_store

THREADS = 8

CHILD = textwrap.dedent(
    """
    import sys, threading
    from stateflow.states import StatesService
    from stateflow.store import open_store

    service = StatesService(open_store(sys.argv[1], auto_migrate=True))
    lock = threading.Lock()

    def subject(t):
        return {"target_kind": "agent", "target_name": "a", "kind": "thread", "key": f"t{t}"}

    def run(t):
        n = 0
        while True:
            n += 1
            service.apply("s", subject(t), [{"op": "set", "path": ["n"], "value": n}])
            with lock:  # acknowledged: apply returned
                print(t, n, flush=True)

    for t in range(int(sys.argv[2])):
        threading.Thread(target=run, args=(t,), daemon=True).start()
    threading.Event().wait()
    """
)


def test_acknowledged_applies_survive_kill_9(backend: str) -> None:
    with open_store(backend, auto_migrate=True) as store:
        StatesService(store).declare(
            "s",
            {
                "schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
                "subject_kinds": ["thread"],
                "default_subject_kind": "thread",
            },
        )
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, backend, str(THREADS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ,
    )
    assert child.stdout is not None
    acked: dict[int, int] = {}
    deadline = time.monotonic() + 300  # (a safety net: the loop ends at 300 acknowledged writes)
    try:
        while sum(acked.values()) < 300 and time.monotonic() < deadline:
            if not select.select([child.stdout], [], [], 1)[0]:
                continue  # (a child that died or hangs ends the loop at the deadline)
            line = child.stdout.readline()
            if not line:
                break
            t, n = map(int, line.split())
            acked[t] = n
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    assert child.stderr is not None
    assert sum(acked.values()) >= 300, child.stderr.read()
    assert len(acked) == THREADS  # every caller got through, not just one
    with open_store(backend) as fresh:
        service = StatesService(fresh)
        for t, n in acked.items():
            subject = {"target_kind": "agent", "target_name": "a", "kind": "thread", "key": f"t{t}"}
            record = service.read("s", subject)
            assert record is not None and record["data"]["n"] >= n, (t, n)
