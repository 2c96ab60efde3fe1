"""A soak run: the server (started here, or one already running), N users until the
deadline, and the server's memory sampled throughout."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from bench.load.servers import Server, Target
from bench.machine import tree_rss_bytes
from bench.soak.actor import ANSWER_TIMEOUT_S, Actor
from bench.soak.audio import Audio
from bench.soak.tally import Tally
from bench.soak.verdict import TOLERANCE_MB_PER_MIN, RssSample

ROOT = Path(__file__).resolve().parents[2]
# Answers at the pace of real speech (100 ms of audio per 100 ms), so a user who
# talks over one barges in while it plays. Every simulated user connects from
# loopback, one client to the per-key limits: unpaced.
SCRIPTED_ENV = {
    "PARLEY_SCRIPTED_CHUNK_DELAY_S": "0.1",
    "PARLEY_NEW_SESSIONS_PER_KEY_PER_MINUTE": "0",
}


@dataclass
class Options:
    sessions: int = 50
    minutes: float = 10.0
    executor: str = "scripted"
    url: str | None = None  # attach to this server instead of starting one
    pid: int | None = None  # the attached server's process, for its memory
    api_key: str | None = None
    seed: int = 1
    sample_s: float | None = None  # default: a 60th of the run, 1 to 10 s
    tolerance_mb_per_min: float = TOLERANCE_MB_PER_MIN

    @property
    def duration_s(self) -> float:
        return self.minutes * 60

    def sample_interval_s(self) -> float:
        if self.sample_s is not None:
            return self.sample_s
        return min(10.0, max(1.0, self.duration_s / 60))


@dataclass
class Served:
    url: str  # ws://.../v1/realtime
    pid: int | None
    server: Server | None = None  # when started here


@dataclass
class Outcome:
    """What a run gathered, before it is judged and reported."""

    tally: Tally
    rss: list[RssSample] = field(default_factory=list)
    rss_after_close_mb: float | None = None
    duration_s: float = 0.0
    unfinished_users: int = 0
    server_log: dict[str, Any] = field(default_factory=dict)


def serve_target(executor: str) -> Target:
    """`parley serve` from this checkout (python -m server.cli, so the code under test
    is the code beside this file) on a free port."""
    argv = [sys.executable, "-m", "server.cli", "serve", "--port", "{port}"]
    argv += ["--executor", executor, "--log-level", "warning", "--max-sessions", "0"]
    pythonpath = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = {**SCRIPTED_ENV, "PYTHONPATH": pythonpath}
    return Target(f"soak-{executor}", argv, floor=False, probed=False, env=env)


@contextlib.asynccontextmanager
async def served(options: Options) -> AsyncIterator[Served]:
    if options.url is not None:
        yield Served(options.url, options.pid)
        return
    server = Server(serve_target(options.executor))
    try:
        await server.ready(timeout_s=120.0)
        yield Served(f"ws://127.0.0.1:{server.port}/v1/realtime", server.proc.pid, server)
    finally:
        server.stop()


def health_url(ws_url: str) -> str:
    parts = urlsplit(ws_url)
    scheme = "https" if parts.scheme == "wss" else "http"
    return urlunsplit((scheme, parts.netloc, "/healthz", "", ""))


def open_sessions(url: str) -> int | None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=2.0) as response:
            sessions = json.loads(response.read()).get("sessions")
    except (OSError, ValueError):
        return None
    return sessions if isinstance(sessions, int) else None


async def sample(served_: Served, t0: float) -> RssSample:
    rss = tree_rss_bytes(served_.pid) / 2**20 if served_.pid is not None else 0.0
    sessions = await asyncio.to_thread(open_sessions, health_url(served_.url))
    return RssSample(round(time.monotonic() - t0, 1), round(rss, 1), sessions)


TRACEBACK = "Traceback (most recent call last):"


def log_findings(text: str) -> dict[str, Any]:
    """What the server's own log says went wrong: error lines, and each traceback's
    exception (its first unindented line) with how often it came."""
    lines = text.splitlines()
    bad = [line for line in lines if re.match(r"(ERROR|CRITICAL)\b", line)]
    raised: Counter[str] = Counter()
    for chunk in text.split(TRACEBACK)[1:]:
        tail = [line for line in chunk.splitlines()[1:] if line and not line[0].isspace()]
        raised[tail[0] if tail else "?"] += 1
    return {
        "tracebacks": text.count(TRACEBACK),
        "error_lines": len(bad),
        "first_errors": bad[:5],
        "exceptions": dict(raised.most_common(5)),
    }


async def run(options: Options, audio: Audio | None = None) -> Outcome:
    audio = audio or Audio.build()
    tally = Tally()
    outcome = Outcome(tally)
    async with served(options) as target:
        t0 = time.monotonic()
        deadline = t0 + options.duration_s
        users = [
            asyncio.create_task(
                Actor(i, target.url, audio, tally, options.seed, deadline, options.api_key).run()
            )
            for i in range(options.sessions)
        ]
        interval = options.sample_interval_s()
        while (now := time.monotonic()) < deadline:
            outcome.rss.append(await sample(target, t0))
            await asyncio.sleep(max(0.0, min(interval, deadline - now)))
        outcome.rss.append(await sample(target, t0))
        # Users finish the action in hand; one that cannot is cut off.
        _, pending = await asyncio.wait(users, timeout=ANSWER_TIMEOUT_S + 10)
        outcome.unfinished_users = len(pending)
        for task in pending:
            task.cancel()
        await asyncio.gather(*users, return_exceptions=True)
        for task in users:
            if not task.cancelled() and (exc := task.exception()) is not None:
                tally.error("soak_client_crash", repr(exc))
        outcome.duration_s = time.monotonic() - t0
        await asyncio.sleep(2.0)  # the server lets the last sessions go
        if target.pid is not None:
            outcome.rss_after_close_mb = round(tree_rss_bytes(target.pid) / 2**20, 1)
        if target.server is not None:
            target.server.log.flush()
            with contextlib.suppress(OSError):
                log = await asyncio.to_thread(Path(target.server.log.name).read_text)
                outcome.server_log = log_findings(log)
    return outcome
