"""`parley serve --workers N`: several processes on one port, each with its own app."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
from websockets.sync.client import connect

from tests.support.servers import free_port

PARLEY = str(Path(sys.executable).with_name("parley"))


def children(pid: int) -> list[int]:
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


def test_two_workers_serve_sessions_and_stop() -> None:
    port = free_port()
    env = {**os.environ, "PARLEY_SCRIPTED_CHUNK_DELAY_S": "0"}
    flags = ["--port", str(port), "--executor", "scripted", "--model", "from-the-flag"]
    proc = subprocess.Popen(
        [PARLEY, "serve", "--workers", "2", *flags, "--log-level", "warning"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", trust_env=False) as http:
            deadline = time.monotonic() + 60
            while True:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                try:
                    if http.get("/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "the workers did not start"
                time.sleep(0.2)
        # The supervisor's children: two workers (plus multiprocessing's helper, if any).
        assert len(children(proc.pid)) >= 2
        url = f"ws://127.0.0.1:{port}/v1/realtime"
        for _ in range(4):
            with connect(url, proxy=None, open_timeout=10) as ws:
                event = json.loads(ws.recv(timeout=10))
                assert event["type"] == "session.created"
                assert event["session"]["model"] == "from-the-flag"  # flags reach the workers
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode is not None


def test_a_missing_model_stops_every_worker(tmp_path: Path) -> None:
    missing = tmp_path / "nope.gguf"
    env = {**os.environ, "PARLEY_CACHE_DIR": str(tmp_path / "cache")}
    argv = [PARLEY, "serve", "--workers", "2", "--port", str(free_port())]
    # A startup failure ends the supervisor, not a loop of restarted workers.
    done = subprocess.run(
        [*argv, "--llm-model", str(missing)], env=env, capture_output=True, text=True, timeout=120
    )
    assert "cannot start" in done.stderr and str(missing) in done.stderr
