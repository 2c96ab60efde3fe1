"""`parley serve` in a process of its own, running this checkout's code.

The server runs as `python -m server.cli` with this checkout first on PYTHONPATH (its
`--workers` inherit it), so the processes run the code under test, not an installed
`parley`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
PARLEY = [sys.executable, "-m", "server.cli"]
# A safety net for a loaded machine: workers import the app before they answer.
START_TIMEOUT_S = 120.0


@contextmanager
def parley_serve(
    port: int, flags: list[str], env: Mapping[str, str] | None = None, ready: str = "/healthz"
) -> Iterator[subprocess.Popen[str]]:
    """`parley serve --port PORT FLAGS` (with `env`, or this process's environment),
    yielded once `ready` answers 200; at the end stopped as a deployment would stop it
    (SIGTERM, then SIGKILL after 20 s) if it still runs."""
    variables = {**(os.environ if env is None else env), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [*PARLEY, "serve", "--port", str(port), *flags],
        env=variables,
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not answers(port, ready):
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.1)
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(20)
            finally:
                if proc.poll() is None:
                    proc.kill()


def answers(port: int, path: str) -> bool:
    """Whether GET `path` answers 200, on a new connection (so that any worker may
    take it)."""
    try:
        with httpx.Client(trust_env=False) as http:
            return http.get(f"http://127.0.0.1:{port}{path}").status_code == 200
    except httpx.TransportError:
        return False


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (a supervisor's workers)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found
