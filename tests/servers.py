"""Start real ``stateflow serve`` processes for tests, and look at their worker processes."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TOKEN = "ops-test-token-0123456789"


def free_port() -> int:
    """A loopback port free now, for a server that binds it later (seconds later on a loaded
    machine). It is drawn below the kernel's ephemeral range, where no connection's own port is
    ever taken: one from that range (the kernel's ``bind`` to port 0) could meanwhile become the
    local port of any of the suite's outgoing connections, and the server then failed to start."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    draw = random.SystemRandom()
    for _ in range(200):
        port = draw.randrange(10_000, max(low, 10_001))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:  # (in use: another draw)
                continue
            return port
    with socket.socket() as s:  # (no free port drawn: the kernel's choice)
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def base_env(tmp_path: Path, store: str, **extra: str) -> dict[str, str]:
    env = dict(
        os.environ,
        STATEFLOW_STORE=store,
        XDG_DATA_HOME=str(tmp_path / "data"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        STATEFLOW_TOKENS="",
    )
    env.update(extra)
    return env


@dataclass
class Server:
    url: str
    proc: subprocess.Popen[str]

    def call(
        self, method: str, path: str, body: Any = None, timeout: float = 30, token: str = TOKEN
    ) -> tuple[int, Any, dict[str, str]]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Authorization": f"Bearer {token}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                raw = response.read()
                return response.status, json.loads(raw) if raw else None, _lower(response.headers)
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            return exc.code, json.loads(raw) if raw else None, _lower(exc.headers)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start(
    env: dict[str, str], *args: str, token: bool = True, prefix: Sequence[str] = (), log: Path | None = None
) -> Server:
    """``stateflow serve`` on a free loopback port (with the test token unless ``token`` is
    false; run under ``prefix``, a command such as another user's; its stderr written to
    ``log`` when given); waits until it answers."""
    port = free_port()
    with log.open("w") if log is not None else nullcontext(None) as stderr:
        proc = subprocess.Popen(
            [
                *prefix,
                "stateflow",
                "serve",
                "--port",
                str(port),
                *(["--token", TOKEN] if token else []),
                *args,
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL if stderr is None else stderr,
            text=True,
        )
    server = Server(f"http://127.0.0.1:{port}", proc)
    wait_ready(server)
    return server


def wait_ready(server: Server, timeout: float = 120) -> None:
    """Wait until ``server`` answers its liveness probe (a deadline for the machine: importing
    the server took over 30 s at load 15; one that never answers or exits still fails)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"stateflow serve exited with {server.proc.returncode}")
        try:
            urllib.request.urlopen(server.url + "/api/health", timeout=1)
            return
        except OSError:
            time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"stateflow serve did not answer within {timeout:g} s")


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (from /proc)."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = (task / "children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                if child not in found:
                    found.add(child)
                    todo.append(child)
    return found


def jq_workers(pid: int) -> set[int]:
    """The jq worker processes below ``pid`` (one that ends while looked at is not listed)."""
    found = set()
    for child in descendants(pid):
        try:
            if b"stateflow.jq.worker" in Path(f"/proc/{child}/cmdline").read_bytes():
                found.add(child)
        except OSError:
            continue
    return found


def _cpu_ticks(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[11]) + int(fields[12])  # utime + stime


def wait_running_jq(pid: int, running: Callable[[], bool], timeout: float = 60) -> set[int]:
    """The jq workers below ``pid`` once one of them runs a program: its CPU time grows while
    looked at. A worker that only exists proves nothing — one that compiled an uploaded
    template's programs stays idle in the pool. ``running``: whether the caller still waits."""
    deadline = time.monotonic() + timeout
    first: dict[int, int] = {}
    while True:
        for worker in jq_workers(pid):
            ticks = _cpu_ticks(worker)
            if ticks is None:
                continue
            if ticks >= first.setdefault(worker, ticks) + 2:
                return jq_workers(pid)
        assert time.monotonic() < deadline and running(), "no jq worker ran the program"
        time.sleep(0.05)


def alive(pid: int) -> bool:
    """Running (a zombie waiting to be reaped counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_gone(pids: set[int], timeout: float) -> set[int]:
    """The pids still alive after waiting up to ``timeout`` seconds for all to go."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = {p for p in pids if alive(p)}
        if not left:
            return left
        time.sleep(0.05)
    return {p for p in pids if alive(p)}


def _lower(headers: Any) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}
