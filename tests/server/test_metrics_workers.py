"""`parley serve --workers 2`: whichever worker answers `/metrics`, the scrape sums
every worker's sessions (server/metrics.py, multiprocess mode); a killed worker's
open sessions leave the gauge; the metrics directory goes with the server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
from websockets.sync.client import ClientConnection, connect

from tests.support.processes import ROOT, children, parley_serve
from tests.support.scrape import Samples, parse, value
from tests.support.servers import free_port

DEADLINE_S = 60


def connections_by_process(pids: list[int], port: int) -> dict[int, int]:
    """How many established TCP connections to `port` each process holds."""
    established = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local_port = int(fields[1].split(":")[1], 16)
        if local_port == port and fields[3] == "01":  # ESTABLISHED
            established.add(fields[9])  # the socket's inode
    counts = {}
    for pid in pids:
        inodes = set()
        with_fds = Path(f"/proc/{pid}/fd")
        for fd in with_fds.iterdir() if with_fds.exists() else []:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
        counts[pid] = len(inodes & established)
    return counts


def until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def scrape(port: int) -> Samples:
    # A new connection each time, so that either worker may answer.
    with httpx.Client(trust_env=False) as http:
        response = http.get(f"http://127.0.0.1:{port}/metrics", headers={"Connection": "close"})
    assert response.status_code == 200
    return parse(response.text)


@contextmanager
def two_workers(port: int) -> Iterator[subprocess.Popen[str]]:
    env = {**os.environ, "PARLEY_SCRIPTED_CHUNK_DELAY_S": "0"}
    flags = ["--workers", "2", "--executor", "scripted", "--log-level", "warning"]
    with parley_serve(port, flags, env) as proc:
        yield proc


def open_session(port: int) -> ClientConnection:
    ws = connect(f"ws://127.0.0.1:{port}/v1/realtime", proxy=None, open_timeout=10)
    assert json.loads(ws.recv(timeout=10))["type"] == "session.created"
    return ws


def test_a_scrape_sums_every_worker_and_forgets_a_killed_ones_sessions() -> None:
    port = free_port()
    with two_workers(port) as proc, ExitStack() as sessions:
        workers = children(proc.pid)
        (metrics_dir,) = {
            entry.split("=", 1)[1]
            for pid in workers
            for entry in Path(f"/proc/{pid}/environ").read_text().split("\0")
            if entry.startswith("PROMETHEUS_MULTIPROC_DIR=")
        }
        # Sessions until both workers hold some (the kernel picks the worker). On a
        # loaded machine one worker may still be importing the app when the other
        # answers: give it time rather than a count of tries, and close each extra
        # session the busy worker takes meanwhile (kept, they would fill its 100).
        opened: list[ClientConnection] = []
        extra = 0  # sessions opened and closed again
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            ws = open_session(port)
            counts = connections_by_process(workers, port)
            if sum(1 for n in counts.values() if n) < 2 and len(opened) >= 3:
                ws.close()
                extra += 1
                until(
                    lambda: sum(connections_by_process(workers, port).values()) == len(opened),
                    "an extra session did not close",
                )
                time.sleep(0.2)
                continue
            opened.append(sessions.enter_context(ws))
            if sum(1 for n in counts.values() if n) >= 2 and len(opened) >= 4:
                break
            time.sleep(0.2)
        busy = {pid: n for pid, n in connections_by_process(workers, port).items() if n}
        assert len(busy) == 2, f"the sessions all went to one worker: {busy}"
        total = len(opened)
        made = total + extra

        # Every scrape, whichever worker answers it, shows both workers' sessions
        # (once the extra sessions' ends are counted).
        def settled() -> bool:
            samples = scrape(port)
            return (
                value(samples, "parley_connections_closed_total", code="1000") == extra
                and value(samples, "parley_sessions_open") == total
            )

        until(settled, "the extra sessions' ends were not counted")
        for _ in range(10):
            samples = scrape(port)
            assert value(samples, "parley_sessions_open") == total
            assert value(samples, "parley_sessions_total") == made
            assert value(samples, "parley_client_events_total", type="session.update") == 0

        for ws in opened[:-1]:
            ws.close()

        def closed() -> bool:
            samples = scrape(port)
            return (
                value(samples, "parley_sessions_open") == 1
                and value(samples, "parley_connections_closed_total", code="1000") == made - 1
            )

        until(closed, "the closed sessions were not counted")

        # The worker holding the last session dies: its open session leaves the gauge
        # (the counters it made stay counted).
        (holder,) = [p for p, n in connections_by_process(workers, port).items() if n]
        os.kill(holder, signal.SIGKILL)

        def forgotten() -> bool:
            samples = scrape(port)
            assert value(samples, "parley_sessions_total") == made
            return value(samples, "parley_sessions_open") == 0

        until(forgotten, "the killed worker's session is still counted open")
        assert Path(metrics_dir).is_dir()
    assert proc.returncode is not None
    assert not Path(metrics_dir).exists()  # removed when the server stopped


def test_a_worker_starts_without_the_apps_modules() -> None:
    """A spawned worker imports the command's module before it can answer uvicorn's
    5 s health check; the app (the SDK's schemas, onnxruntime) must come later, in
    worker_app, or a busy host kills and restarts its workers forever."""
    heavy = "{'server.app', 'openai', 'onnxruntime'}"
    probe = f"import sys, server.cli; print(sorted({heavy} & set(sys.modules)))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
