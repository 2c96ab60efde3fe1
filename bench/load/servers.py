"""The servers a run measures: each target's process on a free loopback port."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PACED = ["--chunk-ms", "100", "--chunk-delay-s", "0.1"]  # the barge-in server's answers
# What the semantic_vad target's clients set with session.update before streaming.
SEMANTIC_VAD: dict[str, Any] = {"type": "semantic_vad", "eagerness": "auto"}


@dataclass
class Target:
    name: str  # parley, echo, vad, parley-2w, ...
    argv: list[str]
    floor: bool  # acknowledges every append (bench/floors.py)
    vad_backend: str | None = None  # Parley's
    probed: bool = True  # serves /bench/stats
    env: dict[str, str] = field(default_factory=dict)
    # Sent by every client in a session.update before streaming; None: the server's
    # default (server_vad).
    turn_detection: dict[str, Any] | None = None

    @property
    def semantic(self) -> bool:
        return (self.turn_detection or {}).get("type") == "semantic_vad"


def targets(vad: str) -> dict[str, Target]:
    """Parley with the server's default VAD (Silero) and with webrtcvad (the floor's
    VAD), Parley whose sessions use semantic_vad (the same server, its end-of-turn
    model scoring every pause), the two floors, a paced Parley for barge-in, and
    `parley serve` itself."""
    py = [sys.executable, "-m", "bench.probed_server"]
    serve = [str(Path(sys.executable).with_name("parley")), "serve", "--port", "{port}"]
    scripted = {
        "PARLEY_SCRIPTED_CHUNK_DELAY_S": "0",
        "PARLEY_EXECUTOR": "scripted",
        # Every load client connects from loopback, one client to the per-key limits.
        "PARLEY_NEW_SESSIONS_PER_KEY_PER_MINUTE": "0",
    }
    out = {
        "parley": Target(
            "parley", [*py, "parley", "--port", "{port}", "--vad-backend", vad], False, vad
        ),
        "parley-webrtc": Target(
            "parley-webrtc",
            [*py, "parley", "--port", "{port}", "--vad-backend", "webrtc"],
            False,
            "webrtc",
        ),
        "parley-semantic": Target(
            "parley-semantic",
            [*py, "parley", "--port", "{port}", "--vad-backend", vad],
            False,
            vad,
            turn_detection=SEMANTIC_VAD,
        ),
        "echo": Target("echo", [*py, "echo", "--port", "{port}"], True),
        "vad": Target("vad", [*py, "vad", "--port", "{port}"], True),
        # Answers paced like real-time speech synthesis: 100 ms of audio per 100 ms.
        "parley-barge": Target(
            "parley-barge",
            [*py, "parley", "--port", "{port}", "--vad-backend", vad, *PACED],
            False,
            vad,
        ),
    }
    # Before/after for the gc.freeze() that `parley serve` does at startup.
    out["parley-webrtc-nofreeze"] = Target(
        "parley-webrtc-nofreeze",
        [*py, "parley", "--port", "{port}", "--vad-backend", "webrtc", "--no-gc-freeze"],
        False,
        "webrtc",
    )
    for workers in (1, 2):
        name = f"parley-{workers}w"
        argv = [*serve, "--workers", str(workers), "--vad-backend", vad, "--log-level", "warning"]
        argv += ["--max-sessions", "0"]  # no limit: the benchmark searches for the capacity
        out[name] = Target(name, argv, False, vad, probed=False, env=scripted)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_json(port: int, path: str, timeout: float = 5.0) -> Any:
    # Loopback only; no proxy.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://127.0.0.1:{port}{path}", timeout=timeout) as response:
        return json.loads(response.read())


class Server:
    """A target's process on a free loopback port; stopped by `stop()` or at exit."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.port = free_port()
        self.log = tempfile.NamedTemporaryFile(  # closed in stop()
            prefix=f"parley-bench-{target.name}-", suffix=".log", delete=False
        )
        argv = [a.replace("{port}", str(self.port)) for a in target.argv]
        self.proc = subprocess.Popen(
            argv,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **target.env, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,
        )

    async def ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.target.name} exited: {self.tail()}")
            try:
                await asyncio.to_thread(http_json, self.port, "/healthz", 1.0)
                return
            except OSError:
                await asyncio.sleep(0.2)
        raise RuntimeError(f"{self.target.name} did not start in {timeout_s:.0f} s: {self.tail()}")

    async def drained(self, timeout_s: float = 30.0) -> bool:
        """Wait until the server has closed every session (one worker's view)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):
                if (await asyncio.to_thread(http_json, self.port, "/healthz"))["sessions"] == 0:
                    return True
            await asyncio.sleep(0.25)
        return False

    async def stats(self, reset: bool) -> dict[str, list[float]]:
        if not self.target.probed:
            return {}
        try:
            path = "/bench/stats?reset=1" if reset else "/bench/stats"
            result: dict[str, list[float]] = await asyncio.to_thread(http_json, self.port, path)
            return result
        except OSError:
            return {}

    def tail(self) -> str:
        self.log.flush()
        try:
            return Path(self.log.name).read_text()[-2000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.log.close()
        with contextlib.suppress(OSError):
            os.unlink(self.log.name)


@contextlib.asynccontextmanager
async def started(*targets_: Target) -> AsyncIterator[list[Server]]:
    servers = [Server(t) for t in targets_]
    try:
        await asyncio.gather(*(s.ready() for s in servers))
        yield servers
    finally:
        for s in servers:
            s.stop()
