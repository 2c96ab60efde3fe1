"""Capacity and server-added latency under load, side by side with the floor.

Run from the repository root:  .venv/bin/python -m bench.load  (or `make bench`)

The load generator is this process; every server is a separate one on a free
loopback port (bench/probed_server.py): Parley as `parley serve --executor scripted`
builds it (zero model time: PARLEY_SCRIPTED_CHUNK_DELAY_S=0) with server VAD on,
with the server's default VAD (Silero) and with webrtcvad, and the two floors of
bench/floors.py (`echo`: parse each append and acknowledge it; `vad`: the same plus
24 -> 16 kHz resampling and webrtcvad). Each of N sessions streams the speech
fixtures, looped with silence so VAD turns happen, at real-time pace in 20 ms
`input_audio_buffer.append` chunks (the clip rotated per session so turns do not
line up, and the sessions' send times spread over one chunk).

Per target and N, over a measurement window after a warm-up:
- Parley (a) `stop`: speech_stopped received minus the send of the chunk that
  completed the silence window. The bench knows that chunk exactly: it runs the
  same VadStream + TurnDetector over the same chunks beforehand (the VAD is
  deterministic and does not depend on timing). Client-side, so it includes
  loopback both ways and both event loops; "in server" is the same span inside the
  server (frame parsed -> speech_stopped emitted).
- Parley (b) `delta`: first audio delta taken by the writer minus the executor's
  first chunk (server-side probe).
- Floors `ack`: acknowledgement received minus its append sent.
- `loop lag`: the server's event-loop lag (a 10 ms sleep's oversleep); `slip`: how
  late the generator sent a chunk behind its real-time schedule; the server's CPU%
  (of one core) and RSS, CPU µs per append message; other processes' CPU and steal.

A point passes when p99 of (a) and (b) (floors: ack) is under 50 ms and no send
slipped more than 20 ms; a failing point is run once more (--retries) and passes if
either run does. The targets run back to back at each N of the sweep; a target
leaves at its first failing N, then --refine bisects its knee (once by default).
Capacity is the largest passing N.

Also, in this order, each with time kept for it from the sweep: VAD CPU per audio
second per backend; barge-in reaction (Parley with answers paced like real-time
synthesis, interrupting speech during every answer); `parley serve --workers 2`
searched from above the one process's knee; Parley's capacity at 40 and 100 ms
chunks. With --targets parley-1w parley-2w, `parley serve` with 1 and 2 worker
processes are swept side by side; with --profile N, py-spy's top frames of the
server at N.

Writes bench/results/load.json and bench/results/load.png. Every run is bounded:
a window of --window seconds per point, at most --max-n sessions, a timeout per
point and a budget for the whole run (--budget).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import bisect
import contextlib
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from bench.machine import machine, machine_ticks, tree_cpu_seconds, tree_rss_bytes
from bench.speech import PCM_RATE as RATE
from bench.speech import load_wav, silence
from bench.vad_backends import speech_extent_ms
from engine.turns import ServerVadParams, SpeechStopped, TurnDetector
from engine.vad import SileroOnnxBackend, VadBackend, VadStream, WebRtcVadBackend

FIXTURES = ["weather", "joke", "timer", "lights"]
RESULTS = Path(__file__).parent / "results"
PACKAGES = ["fastapi", "uvicorn", "websockets", "starlette", "numpy", "soxr", "onnxruntime"]
P99_LIMIT_MS = 50.0
SLIP_LIMIT_MS = 20.0
ROTATIONS = 32  # distinct start offsets: turns of independent users seldom line up
WARMUP_S = 1.0
CONNECT_CONCURRENCY = 16
POINT_TIMEOUT_S = 90.0
PACED = ["--chunk-ms", "100", "--chunk-delay-s", "0.1"]  # the barge-in server's answers
# Coarse, then one bisection at each knee (--refine): the knees move from about 75 to
# 300 sessions with how busy this shared machine is.
DEFAULT_SWEEP = [1, 25, 50, 100, 150, 200, 250, 300, 350, 400]
BATCHED_SESSIONS = 32  # streams sharing the VadBatcher in the VAD cost figure
# Seconds of the budget each later stage needs, kept from the sweep so that it runs:
BARGE_S = 30.0  # barge-in: one 15 s point
WORKERS_S = 50.0  # parley serve --workers 2: up to 4 points
CHUNKS_S = 60.0  # 40 and 100 ms chunks: up to 3 points each

BACKENDS: dict[str, Callable[[], VadBackend]] = {
    "silero": SileroOnnxBackend,
    "webrtc": WebRtcVadBackend,
}


# --- audio: the looped clip, its chunks, and where the turns end -----------------------


@dataclass
class Clip:
    pcm: np.ndarray
    onsets_ms: list[int]  # where each utterance's audible speech starts

    @staticmethod
    def build(lead_ms: int, trail_ms: int) -> Clip:
        parts, onsets, at = [], [], 0
        for name in FIXTURES:
            wav = load_wav(name)
            start, _ = speech_extent_ms(wav)
            parts += [silence(lead_ms), wav, silence(trail_ms)]
            onsets.append(at + lead_ms + start)
            at += lead_ms + len(wav) * 1000 // RATE + trail_ms
        pcm = np.concatenate(parts)
        block = RATE // 5  # a whole number of 20, 40 and 100 ms chunks
        pad = -len(pcm) % block
        return Clip(np.concatenate([pcm, np.zeros(pad, np.int16)]), onsets)

    def chunks(self, chunk_ms: int) -> list[np.ndarray]:
        n = RATE * chunk_ms // 1000
        return [self.pcm[i : i + n] for i in range(0, len(self.pcm), n)]

    def texts(self, chunk_ms: int) -> list[str]:
        """Each chunk as the append event a client sends (built once, shared)."""
        return [
            json.dumps(
                {
                    "type": "input_audio_buffer.append",
                    "audio": base64.b64encode(c.tobytes()).decode(),
                }
            )
            for c in self.chunks(chunk_ms)
        ]


def rotation(index: int, n_chunks: int) -> int:
    return (index % ROTATIONS) * n_chunks // ROTATIONS


def plan_stops(clip: Clip, chunk_ms: int, backend: VadBackend, n_send: int) -> list[dict[int, int]]:
    """Per rotation: speech_stopped audio_end_ms -> index of the chunk whose arrival
    completes it, by running Parley's VadStream and TurnDetector over the same
    chunks (default server_vad parameters, as the sessions use)."""
    chunks = clip.chunks(chunk_ms)
    plans = []
    for r in range(ROTATIONS):
        offset = rotation(r, len(chunks))
        stream, detector = VadStream(backend), TurnDetector(ServerVadParams())
        plan: dict[int, int] = {}
        for k in range(n_send):
            for event in detector.feed(stream.process(chunks[(offset + k) % len(chunks)])):
                if isinstance(event, SpeechStopped):
                    plan[event.audio_end_ms] = k
        plans.append(plan)
    return plans


# --- servers --------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_json(port: int, path: str, timeout: float = 5.0) -> Any:
    # Loopback only; no proxy.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://127.0.0.1:{port}{path}", timeout=timeout) as response:
        return json.loads(response.read())


@dataclass
class Target:
    name: str  # parley, echo, vad, parley-2w, ...
    argv: list[str]
    floor: bool  # acknowledges every append (bench/floors.py)
    vad_backend: str | None = None  # Parley's
    probed: bool = True  # serves /bench/stats
    env: dict[str, str] = field(default_factory=dict)


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


# --- one measurement point -------------------------------------------------------------


@dataclass
class Samples:
    """Everything the sessions of one point recorded (ms), in the window."""

    slip: list[float] = field(default_factory=list)
    stop: list[float] = field(default_factory=list)
    ack: list[float] = field(default_factory=list)
    unmatched_stops: int = 0
    sent: int = 0  # appends sent in the window
    errors: list[str] = field(default_factory=list)
    barge: list[dict[str, float | None]] = field(default_factory=list)
    responses_done: int = 0


class Session:
    """One client: streams its rotation of the clip at real time and reads events."""

    def __init__(
        self,
        ws: ClientConnection,
        texts: list[str],
        offset: int,
        start: float,
        n_send: int,
        chunk_s: float,
        window: tuple[float, float],
        out: Samples,
        plan: dict[int, int] | None,
        floor: bool,
        onset_chunks: set[int] | None = None,
    ) -> None:
        self.ws, self.texts, self.offset = ws, texts, offset
        self.start, self.n_send, self.chunk_s, self.window = start, n_send, chunk_s, window
        self.out, self.plan, self.floor = out, plan, floor
        self.onset_chunks = onset_chunks  # clip chunk indices where speech starts (barge-in)
        self.send_t: list[float] = []
        self.pending: deque[float] = deque()
        self.last_delta: dict[str, float] = {}
        self.started_t: list[float] = []
        self.cancelled: list[tuple[str, float]] = []

    def in_window(self, t: float) -> bool:
        return self.window[0] <= t < self.window[1]

    async def send(self) -> None:
        loop = asyncio.get_running_loop()
        texts, m = self.texts, len(self.texts)
        for k in range(self.n_send):
            due = self.start + k * self.chunk_s  # the chunk's audio has been "recorded"
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            now = loop.time()
            self.send_t.append(now)
            if self.in_window(due):
                self.out.slip.append((now - due) * 1000)
                self.out.sent += 1
            if self.floor:
                self.pending.append(now)
            await self.ws.send(texts[(self.offset + k) % m])

    async def receive(self) -> None:
        loop = asyncio.get_running_loop()
        with contextlib.suppress(ConnectionClosed):
            async for message in self.ws:
                now = loop.time()
                assert isinstance(message, str)
                if self.floor:
                    sent = self.pending.popleft()
                    if self.in_window(sent):
                        self.out.ack.append((now - sent) * 1000)
                    continue
                tail = message[-80:]
                if tail.endswith('"response.output_audio.delta"}'):
                    i = tail.rfind('"response_id":"')
                    if i >= 0:
                        self.last_delta[tail[i + 15 : tail.index('"', i + 15)]] = now
                    continue
                if len(message) > 20_000:
                    continue  # a large non-delta event: nothing to time here
                event = json.loads(message)
                kind = event.get("type")
                if kind == "input_audio_buffer.speech_stopped":
                    k = None if self.plan is None else self.plan.get(event["audio_end_ms"])
                    if k is None or k >= len(self.send_t):
                        self.out.unmatched_stops += 1
                    elif self.in_window(self.send_t[k]):
                        self.out.stop.append((now - self.send_t[k]) * 1000)
                elif kind == "input_audio_buffer.speech_started":
                    self.started_t.append(now)
                elif kind == "response.done":
                    self.out.responses_done += 1
                    if event["response"]["status"] == "cancelled":
                        self.cancelled.append((event["response"]["id"], now))
                elif kind == "error":
                    self.out.errors.append(str(event.get("error", {}).get("message")))

    def barge_results(self, chunk_ms: int) -> None:
        """For each cancelled response: reaction times from the first chunk of the
        interrupting speech (the latest speech onset sent before the cancel)."""
        if self.onset_chunks is None:
            return
        m = len(self.texts)
        for rid, t_done in self.cancelled:
            sent = bisect.bisect_right(self.send_t, t_done)  # chunks sent by then
            onset = next(
                (k for k in range(sent - 1, -1, -1) if (self.offset + k) % m in self.onset_chunks),
                None,
            )
            if onset is None or not self.in_window(self.send_t[onset]):
                continue
            t0 = self.send_t[onset]
            t_last = self.last_delta.get(rid)
            i = bisect.bisect_right(self.started_t, t_done) - 1
            t_started = self.started_t[i] if i >= 0 else None

            def ms(a: float | None, b: float | None) -> float | None:
                return None if a is None or b is None else (b - a) * 1000

            sent_last = None if t_last is None else bisect.bisect_right(self.send_t, t_last)
            self.out.barge.append(
                {
                    "done_wall_ms": ms(t0, t_done),
                    "done_audio_ms": float((sent - onset) * chunk_ms),
                    "last_delta_wall_ms": ms(t0, t_last),
                    "last_delta_audio_ms": None
                    if sent_last is None
                    else float((sent_last - onset) * chunk_ms),
                    "started_to_done_ms": ms(t_started, t_done),
                    "started_to_last_delta_ms": ms(t_started, t_last),
                }
            )


def pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def dist(values: list[float]) -> dict[str, float | None]:
    return {
        "n": len(values),
        "p50": pct(values, 50),
        "p95": pct(values, 95),
        "p99": pct(values, 99),
        "max": max(values) if values else None,
    }


@dataclass
class Point:
    target: str
    n: int
    chunk_ms: int
    passed: bool
    why: str  # what failed, or ""
    stop_ms: dict[str, float | None]  # (a) client-side
    stop_server_ms: dict[str, float | None]  # (a) inside the server
    delta_ms: dict[str, float | None]  # (b)
    ack_ms: dict[str, float | None]  # floors
    loop_lag_ms: dict[str, float | None]
    gc_ms: dict[str, float | None]  # full garbage collections in the window: n and pauses
    slip_ms: dict[str, float | None]
    server_cpu_pct: float  # of one core
    cpu_us_per_msg: float | None
    server_rss_mb: float
    generator_cpu_pct: float
    other_cpu_pct: float  # other processes on the machine, of one core
    steal_pct: float  # of all cores' time
    messages: int
    unmatched_stops: int
    responses_done: int
    errors: list[str]
    window_s: float
    barge: list[dict[str, float | None]] = field(default_factory=list)
    attempt: int = 1
    decisive: bool = False  # the run the sweep's verdict for this N came from


async def open_sessions(url: str, n: int) -> list[ClientConnection]:
    gate = asyncio.Semaphore(CONNECT_CONCURRENCY)

    async def one() -> ClientConnection:
        async with gate:
            return await connect(
                url,
                compression=None,
                proxy=None,
                max_size=None,
                ping_interval=None,
                open_timeout=20,
                close_timeout=2,
            )

    results = await asyncio.gather(*(one() for _ in range(n)), return_exceptions=True)
    conns = [r for r in results if isinstance(r, ClientConnection)]
    failed = [r for r in results if not isinstance(r, ClientConnection)]
    if failed:
        for ws in conns:
            with contextlib.suppress(Exception):
                await ws.close()
        raise RuntimeError(f"{len(failed)} of {n} connections failed: {failed[0]!r}")
    return conns


async def run_point(
    server: Server,
    n: int,
    chunk_ms: int,
    texts: list[str],
    window_s: float,
    plans: list[dict[int, int]] | None,
    onset_chunks: set[int] | None = None,
    profile_to: Path | None = None,
) -> Point:
    loop = asyncio.get_running_loop()
    target = server.target
    conns = await open_sessions(f"ws://127.0.0.1:{server.port}/v1/realtime", n)
    chunk_s = chunk_ms / 1000
    t0 = loop.time() + 0.5
    window = (t0 + WARMUP_S, t0 + WARMUP_S + window_s)
    n_send = int((WARMUP_S + window_s) / chunk_s) + 2
    out = Samples()
    sessions = [
        Session(
            ws,
            texts,
            rotation(i, len(texts)),
            t0 + chunk_s * i / n,
            n_send,
            chunk_s,
            window,
            out,
            None if plans is None else plans[i % ROTATIONS],
            target.floor,
            onset_chunks,
        )
        for i, ws in enumerate(conns)
    ]
    receivers = [loop.create_task(s.receive()) for s in sessions]
    senders = [loop.create_task(s.send()) for s in sessions]
    pid = server.proc.pid

    async def sample_at(t: float, reset: bool) -> tuple[Any, ...]:
        await asyncio.sleep(max(0.0, t - loop.time()))
        stats = await server.stats(reset)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return (
            loop.time(),
            tree_cpu_seconds(pid),
            machine_ticks(),
            usage.ru_utime + usage.ru_stime,
            stats,
        )

    try:
        async with asyncio.timeout(POINT_TIMEOUT_S + window_s):
            first = await sample_at(window[0], reset=True)
            spy = None if profile_to is None else start_py_spy(pid, window_s, profile_to)
            last = await sample_at(window[1], reset=False)
            if spy is not None:
                await asyncio.to_thread(spy.wait, 30)
            rss = tree_rss_bytes(pid)
            done, _ = await asyncio.wait(senders, timeout=5)
            for task in done:
                if not task.cancelled() and (exc := task.exception()) is not None:
                    out.errors.append(f"send: {exc!r}")
            await asyncio.sleep(1.0)  # late acks and events of the window's chunks
    finally:
        for task in senders:
            task.cancel()
        await asyncio.gather(*(ws.close() for ws in conns), return_exceptions=True)
        for task in receivers:
            task.cancel()
        await asyncio.gather(*senders, *receivers, return_exceptions=True)
    for s in sessions:
        s.barge_results(chunk_ms)
    wall = last[0] - first[0]
    server_cpu = last[1] - first[1]
    busy, steal, total = (b - a for a, b in zip(first[2], last[2], strict=True))
    gen_cpu = last[3] - first[3]
    stats = last[4]
    point = Point(
        target=target.name,
        n=n,
        chunk_ms=chunk_ms,
        passed=False,
        why="",
        stop_ms=dist(out.stop),
        stop_server_ms=dist(stats.get("stop_ms", [])),
        delta_ms=dist(stats.get("delta_ms", [])),
        ack_ms=dist(out.ack),
        loop_lag_ms=dist(stats.get("loop_lag_ms", [])),
        gc_ms=dist(stats.get("gc_ms", [])),
        slip_ms=dist(out.slip),
        server_cpu_pct=100 * server_cpu / wall,
        cpu_us_per_msg=1e6 * server_cpu / out.sent if out.sent else None,
        server_rss_mb=rss / 2**20,
        generator_cpu_pct=100 * gen_cpu / wall,
        other_cpu_pct=100 * max(0.0, busy - server_cpu - gen_cpu) / wall,
        steal_pct=100 * steal / total if total else 0.0,
        messages=out.sent,
        unmatched_stops=out.unmatched_stops,
        responses_done=out.responses_done,
        errors=out.errors[:5],
        window_s=window_s,
    )
    point.passed, point.why = judge(point, target)
    point.barge = out.barge
    return point


def start_py_spy(pid: int, seconds: float, path: Path) -> subprocess.Popen[bytes]:
    """Sample the server's Python stacks (only while running Python: idle waits in
    the selector are left out) into py-spy's collapsed "raw" format."""
    spy = Path(sys.executable).with_name("py-spy")
    argv = [
        str(spy),
        "record",
        "-p",
        str(pid),
        "-d",
        str(int(seconds)),
        "-r",
        "200",
        "-f",
        "raw",
        "--function",
        "--nonblocking",
        "-o",
        str(path),
    ]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def top_frames(path: Path, limit: int = 15) -> dict[str, list[tuple[str, float]]]:
    """Self and inclusive share of samples per frame, from collapsed stacks."""
    self_: dict[str, int] = {}
    incl: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        leaf = frames[-1]
        self_[leaf] = self_.get(leaf, 0) + n
        for frame in set(frames):
            incl[frame] = incl.get(frame, 0) + n

    def top(d: dict[str, int]) -> list[tuple[str, float]]:
        # The event loop's and the launcher's own frames hold every sample: leave them out.
        generic = (
            "asyncio/base_events.py",
            "asyncio/runners.py",
            "<frozen runpy>",
            "probed_server.py",
            "asyncio/events.py",
        )
        ranked = sorted(
            ((f, c) for f, c in d.items() if not any(g in f for g in generic)),
            key=lambda kv: -kv[1],
        )[:limit]
        return [(frame, round(100 * c / total, 1)) for frame, c in ranked]

    return {"samples": [("total", float(total))], "self": top(self_), "inclusive": top(incl)}


def judge(p: Point, target: Target) -> tuple[bool, str]:
    fails = []
    if p.errors:
        fails.append("errors")
    slip = p.slip_ms["max"]
    if slip is None or slip > SLIP_LIMIT_MS:
        fails.append(f"slip {slip or 0:.0f}")
    checks = {"ack": p.ack_ms} if target.floor else {"stop": p.stop_ms}
    if not target.floor and target.probed:
        checks["delta"] = p.delta_ms
    for name, d in checks.items():
        p99 = d["p99"]
        if p99 is not None and p99 >= P99_LIMIT_MS:
            fails.append(f"{name} p99 {p99:.0f}")
        elif p99 is None and p.n >= 10:
            fails.append(f"no {name}")
    return not fails, ", ".join(fails)


# --- the run ----------------------------------------------------------------------------


def _f(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


HEADER = (
    "target | N | chunk ms | (a) stop p50/p95/p99 | (a) in server p99 | (b) delta p50/p99"
    " | ack p50/p99 | loop lag p99 | full GCs: n, max ms | slip p99/max | CPU % | CPU µs/msg"
    " | RSS MB"
    " | others % | steal % | pass"
)


def row(p: Point) -> str:
    return " | ".join(
        [
            p.target,
            str(p.n),
            str(p.chunk_ms),
            "/".join(_f(p.stop_ms[q]) for q in ("p50", "p95", "p99")),
            _f(p.stop_server_ms["p99"], 1),
            "/".join(_f(p.delta_ms[q], 1) for q in ("p50", "p99")),
            "/".join(_f(p.ack_ms[q], 1) for q in ("p50", "p99")),
            _f(p.loop_lag_ms["p99"], 1),
            f"{p.gc_ms['n']}, {_f(p.gc_ms['max'], 1)}",
            f"{_f(p.slip_ms['p99'], 1)}/{_f(p.slip_ms['max'], 1)}",
            _f(p.server_cpu_pct),
            _f(p.cpu_us_per_msg),
            _f(p.server_rss_mb),
            _f(p.other_cpu_pct),
            _f(p.steal_pct),
            "yes" if p.passed else f"NO ({p.why})",
        ]
    )


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.clip = Clip.build(lead_ms=300, trail_ms=1200)
        self.points: list[Point] = []
        self.plans: dict[tuple[int, str], list[dict[int, int]]] = {}
        self.texts: dict[int, list[str]] = {}
        self.deadline = time.monotonic() + args.budget
        self.unbounded: list[str] = []  # targets whose capacity is a lower bound

    def time_left(self) -> float:
        return float(self.deadline - time.monotonic())

    def out_of_time(self, keep_s: float = 0.0) -> bool:
        """No time for another point while `keep_s` stays for the stages after it."""
        return self.time_left() < max(30.0, keep_s)

    def texts_for(self, chunk_ms: int) -> list[str]:
        if chunk_ms not in self.texts:
            self.texts[chunk_ms] = self.clip.texts(chunk_ms)
        return self.texts[chunk_ms]

    def plans_for(self, chunk_ms: int, backend: str) -> list[dict[int, int]]:
        key = (chunk_ms, backend)
        if key not in self.plans:
            n_send = int((WARMUP_S + self.args.window) * 1000 / chunk_ms) + 2
            self.plans[key] = plan_stops(self.clip, chunk_ms, BACKENDS[backend](), n_send)
        return self.plans[key]

    async def point(self, server: Server, n: int, chunk_ms: int) -> Point:
        """One point; a failing one is run again (--retries; twice more if other
        processes took over half a core meanwhile) and passes if any run does: a
        neighbour's burst on this shared machine is not the server's doing. The run
        that decided is marked `decisive`."""
        target = server.target
        plans = None
        if target.vad_backend is not None:
            plans = self.plans_for(chunk_ms, target.vad_backend)
        attempt = 0
        while True:
            attempt += 1
            try:
                p = await run_point(
                    server, n, chunk_ms, self.texts_for(chunk_ms), self.args.window, plans
                )
            except Exception as exc:
                print(f"  {target.name} N={n}: failed to run: {exc!r}", flush=True)
                p = failed_point(target.name, n, chunk_ms, repr(exc), self.args.window)
            p.attempt = attempt
            if not await server.drained():
                print(f"  {target.name}: sessions still open after the point", flush=True)
            self.points.append(p)
            print(row(p), flush=True)
            retries = self.args.retries + (p.other_cpu_pct > 50 and self.args.retries > 0)
            if p.passed or attempt > retries or self.out_of_time():
                break
        p.decisive = True
        return p

    async def warm(self, servers: list[Server]) -> None:
        """A few seconds of light load on each server, not measured, so that no point
        pays for first-use work (imports, pydantic schemas, allocator growth)."""
        texts = self.texts_for(20)
        await asyncio.gather(*(run_point(s, 8, 20, texts, 3.0, None) for s in servers))
        await asyncio.gather(*(s.drained() for s in servers))

    async def sweep(self, servers: list[Server], chunk_ms: int, keep_s: float) -> dict[str, int]:
        """Back to back at each N; a target leaves at its first failing N, then its
        knee is bisected (--refine); `keep_s` of the budget is left for later stages.
        The capacity per target; a target that never failed (the sweep or the budget
        ran out) is listed in `self.unbounded`."""
        alive = {s.target.name for s in servers}
        passed: dict[str, int] = {s.target.name: 0 for s in servers}
        failed: dict[str, int] = {}
        print(HEADER, flush=True)
        for n in [n for n in self.args.sweep if n <= self.args.max_n]:
            for server in servers:
                name = server.target.name
                if name not in alive or self.out_of_time(keep_s):
                    continue
                p = await self.point(server, n, chunk_ms)
                if p.passed:
                    passed[name] = n
                else:
                    failed[name] = n
                    alive.discard(name)
            if not alive:
                break
        for server in servers:
            name = server.target.name
            if name not in failed:
                continue
            for _ in range(self.args.refine):
                lo, hi = passed[name], failed[name]
                if self.out_of_time(keep_s) or hi - lo <= max(2, lo // 10):
                    break
                mid = (lo + hi) // 2
                p = await self.point(server, mid, chunk_ms)
                if p.passed:
                    passed[name] = mid
                else:
                    failed[name] = mid
        self.unbounded += sorted(set(passed) - set(failed))
        return passed

    async def search(
        self, server: Server, chunk_ms: int, start: int, points: int, keep_s: float = 0.0
    ) -> int:
        """Capacity from `start`: up by 25 % while passing (down while failing),
        `points` runs at most, stopping while `keep_s` of the budget is left."""
        n, best, worst = start, 0, None
        for _ in range(points):
            if self.out_of_time(keep_s) or n < 1 or n > self.args.max_n:
                break
            p = await self.point(server, n, chunk_ms)
            if p.passed:
                best = max(best, n)
                n = n + max(1, n // 4) if worst is None else (n + worst) // 2
            else:
                worst = n if worst is None else min(worst, n)
                n = (best + n) // 2 if best else n * 3 // 4
            if worst is not None and worst - best <= max(2, best // 10):
                break
        if worst is None:  # never failed: a lower bound
            name = server.target.name
            self.unbounded.append(name if chunk_ms == 20 else f"{name} at {chunk_ms} ms")
        return best


def failed_point(name: str, n: int, chunk_ms: int, why: str, window_s: float) -> Point:
    empty = dist([])
    return Point(
        target=name,
        n=n,
        chunk_ms=chunk_ms,
        passed=False,
        why=why,
        stop_ms=empty,
        stop_server_ms=empty,
        delta_ms=empty,
        ack_ms=empty,
        loop_lag_ms=empty,
        gc_ms=empty,
        slip_ms=empty,
        server_cpu_pct=0.0,
        cpu_us_per_msg=None,
        server_rss_mb=0.0,
        generator_cpu_pct=0.0,
        other_cpu_pct=0.0,
        steal_pct=0.0,
        messages=0,
        unmatched_stops=0,
        responses_done=0,
        errors=[why],
        window_s=window_s,
    )


def targets(args: argparse.Namespace) -> dict[str, Target]:
    """Parley with the server's default VAD (Silero) and with webrtcvad (the floor's
    VAD), the two floors, a paced Parley for barge-in, and `parley serve` itself."""
    py = [sys.executable, "-m", "bench.probed_server"]
    serve = [str(Path(sys.executable).with_name("parley")), "serve", "--port", "{port}"]
    scripted = {"PARLEY_SCRIPTED_CHUNK_DELAY_S": "0", "PARLEY_EXECUTOR": "scripted"}
    vad = args.vad_backend
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
        out[name] = Target(name, argv, False, vad, probed=False, env=scripted)
    return out


@contextlib.asynccontextmanager
async def started(*targets_: Target) -> Any:
    servers = [Server(t) for t in targets_]
    try:
        await asyncio.gather(*(s.ready() for s in servers))
        yield servers
    finally:
        for s in servers:
            s.stop()


async def vad_cost(clip: Clip) -> dict[str, dict[str, float]]:
    """CPU per second of audio of each VAD path, resampling included, fed as a live
    session feeds it (20 ms chunks; bench/vad_backends.py feeds the whole clip at
    once, which spreads the per-call cost), and the share of one core that 100 live
    sessions take."""
    from bench.floors import _Audio

    def best_us(new_feed: Callable[[], Callable[[np.ndarray], object]]) -> float:
        best = float("inf")
        for _ in range(3):
            feed = new_feed()
            t0 = time.process_time()
            for chunk in clip.chunks(20):
                feed(chunk)
            best = min(best, time.process_time() - t0)
        return best * 1e6 / (len(clip.pcm) / RATE)

    def parley(make: Callable[[], VadBackend]) -> Callable[[], Callable[[np.ndarray], object]]:
        return lambda: VadStream(make()).process

    paths = {f"parley {name}": parley(make) for name, make in BACKENDS.items()}
    paths["floor soxr+webrtcvad"] = lambda: _Audio().feed
    out = {}
    for name, new_feed in paths.items():
        us = best_us(new_feed)
        out[name] = {"us_per_audio_s": us, "core_pct_100_sessions": us * 100 / 1e4}
    us, loop_us = await batched_silero_us(clip)
    out["parley silero batched"] = {
        "us_per_audio_s": us,
        "core_pct_100_sessions": us * 100 / 1e4,
        "loop_us_per_audio_s": loop_us,  # the rest is the worker thread's
    }
    return out


async def batched_silero_us(clip: Clip, sessions: int = BATCHED_SESSIONS) -> tuple[float, float]:
    """CPU per second of audio of Silero as the server runs it, and the event loop's
    part of it: `sessions` streams, each a task that awaits its 20 ms chunks one after
    the other as a session does, sharing one VadBatcher (the worker thread's CPU is the
    process's too). Best of 3."""
    from engine.vad_batch import VadBatcher

    async def feed(stream: VadStream) -> None:
        for chunk in clip.chunks(20):
            await stream.score(chunk)

    best = (float("inf"), float("inf"))
    for _ in range(3):
        batcher = VadBatcher(SileroOnnxBackend())
        streams = [VadStream(batcher) for _ in range(sessions)]
        try:
            t0, loop0 = time.process_time(), time.thread_time()
            await asyncio.gather(*(feed(s) for s in streams))
            best = min(best, (time.process_time() - t0, time.thread_time() - loop0))
        finally:
            batcher.close()
    audio_s = sessions * len(clip.pcm) / RATE
    return best[0] * 1e6 / audio_s, best[1] * 1e6 / audio_s


def barge_summary(points: list[Point]) -> dict[str, dict[str, float | None]]:
    rows = [r for p in points for r in p.barge]
    keys = rows[0].keys() if rows else []
    return {k: dist([v for r in rows if (v := r[k]) is not None]) for k in keys}


def plot(points: list[Point], capacity: dict[str, int], path: Path, title: str) -> None:
    """Latency percentiles (p50 dotted, p99 solid) and server CPU per message against
    N, 20 ms chunks, from the run that decided each N."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 6.5))
    series = [
        ("parley", "stop_ms", "Parley (a) speech_stopped", "tab:blue"),
        ("parley", "delta_ms", "Parley (b) first audio delta", "tab:cyan"),
        ("parley-webrtc", "stop_ms", "Parley with webrtcvad (a)", "tab:green"),
        ("echo", "ack_ms", "floor echo: ack", "tab:gray"),
        ("vad", "ack_ms", "floor echo+resample+webrtcvad: ack", "tab:orange"),
        ("parley-1w", "stop_ms", "parley serve, 1 worker (a)", "tab:purple"),
        ("parley-2w", "stop_ms", "parley serve --workers 2 (a)", "tab:red"),
    ]
    for target, metric, label, color in series:
        pts = sorted(
            (
                p
                for p in points
                if p.target == target and p.chunk_ms == 20 and p.messages and p.decisive
            ),
            key=lambda p: p.n,
        )
        if not pts:
            continue
        ns = [p.n for p in pts]
        for q, style in (("p50", ":"), ("p99", "-")):
            ys = [getattr(p, metric)[q] for p in pts]
            values = [np.nan if y is None else max(y, 0.05) for y in ys]
            ax.plot(ns, values, style, color=color, marker="o", ms=3, label=f"{label} {q}")
        failed = [(p.n, getattr(p, metric)["p99"]) for p in pts if not p.passed]
        ax.plot(
            [n for n, y in failed if y is not None],
            [max(y, 0.05) for n, y in failed if y is not None],
            "x",
            color=color,
            ms=9,
            mew=2,
        )
        if metric != "delta_ms":
            busy = [p for p in pts if p.n >= 10]
            ax2.plot(
                [p.n for p in busy],
                [p.cpu_us_per_msg or np.nan for p in busy],
                "-o",
                color=color,
                ms=3,
                label=f"{target}: capacity {capacity.get(target, '?')}",
            )
    ax.axhline(P99_LIMIT_MS, color="red", lw=0.8)
    ax.set_yscale("log")
    ax.set_xlabel("concurrent sessions (20 ms chunks at real time)")
    ax.set_ylabel("ms (log scale)")
    ax.set_title(
        "latency p50 (dotted) and p99 (solid); x: the N failed; red: the 50 ms limit",
        fontsize=10,
    )
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2)
    ax2.set_ylim(bottom=0)
    ax2.set_xlabel("concurrent sessions")
    ax2.set_ylabel("server CPU µs per append message")
    ax2.set_title("server CPU per message", fontsize=10)
    ax2.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


async def main_async(args: argparse.Namespace) -> None:
    load_before = [round(x, 2) for x in os.getloadavg()]
    if load_before[0] > 0.5:
        print(f"warning: load average {load_before[0]} before start; numbers will be noisy")
    bench = Bench(args)
    all_targets = targets(args)
    result: dict[str, Any] = {"machine": {**machine(PACKAGES), "loadavg_before": load_before}}
    t_start = time.monotonic()

    print("VAD CPU per second of audio (resampling included):", flush=True)
    result["vad_cost"] = await vad_cost(bench.clip)
    for name, c in result["vad_cost"].items():
        print(
            f"  {name}: {c['us_per_audio_s']:.0f} µs/audio s,"
            f" 100 sessions = {c['core_pct_100_sessions']:.1f} % of one core"
            + (
                f" ({c['loop_us_per_audio_s']:.0f} µs on the loop)"
                if "loop_us_per_audio_s" in c
                else ""
            )
        )

    if args.profile:
        await profile(bench, all_targets[args.profile_target], args.profile, result)
        return

    capacity: dict[str, Any] = {}
    print(f"\ncapacity sweep, 20 ms chunks, VAD {args.vad_backend} ({args.window:.0f} s window):")
    names = args.targets
    if args.vad_backend == "webrtc" and "parley-webrtc" in names:
        names = [n for n in names if n != "parley-webrtc"]  # "parley" is that already
    workers = bool(args.workers_search) and "parley" in names
    larger = [c for c in args.chunks if c != 20] if names[0] == "parley" else []
    keep_s = (
        (BARGE_S if args.barge else 0.0)
        + (WORKERS_S if workers else 0.0)
        + (CHUNKS_S if larger else 0.0)
    )
    async with started(*(all_targets[n] for n in names)) as servers:
        await bench.warm(servers)
        capacity["20"] = await bench.sweep(servers, 20, keep_s)

    if args.barge and not bench.out_of_time():
        print(f"\nbarge-in: {args.barge} sessions, paced answers (100 ms chunks at real time)")
        barge_clip = Clip.build(lead_ms=0, trail_ms=800)
        chunk_ms = 20
        texts = barge_clip.texts(chunk_ms)
        onsets = {ms // chunk_ms for ms in barge_clip.onsets_ms}
        async with started(all_targets["parley-barge"]) as (server,):
            p = await run_point(
                server, args.barge, chunk_ms, texts, args.barge_window, None, onsets
            )
            await server.drained()
        p.target = "parley-barge"
        bench.points.append(p)
        result["barge_in"] = {"sessions": args.barge, **barge_summary([p])}
        b = result["barge_in"]
        print("barge-in (ms from the first chunk of interrupting speech) | n | p50 | p99")
        for key in (
            "done_wall_ms",
            "done_audio_ms",
            "last_delta_wall_ms",
            "last_delta_audio_ms",
            "started_to_done_ms",
            "started_to_last_delta_ms",
        ):
            if key in b:
                print(f"  {key} | {b[key]['n']} | {_f(b[key]['p50'], 1)} | {_f(b[key]['p99'], 1)}")
        print(f"  responses done: {p.responses_done}, slip max {_f(p.slip_ms['max'], 1)} ms")

    if workers and not bench.out_of_time():
        # `parley serve --workers 2` (client-side figures only), from above the one
        # process's 20 ms knee: what the second core adds.
        start = max(1, capacity["20"].get("parley", 1) * 5 // 4)
        print("\nparley serve --workers 2: capacity at 20 ms chunks", flush=True)
        async with started(all_targets["parley-2w"]) as servers:
            await bench.warm(servers)
            capacity["20"]["parley-2w"] = await bench.search(
                servers[0], 20, start, args.workers_search, keep_s=CHUNKS_S if larger else 0.0
            )

    if larger and not bench.out_of_time():
        # Larger chunks save per-message work: start above the 20 ms figure.
        start = max(1, capacity["20"].get("parley", 1) * 5 // 4)
        async with started(all_targets["parley"]) as (server,):
            await bench.warm([server])
            for chunk_ms in larger:
                print(f"\nparley: capacity at {chunk_ms} ms chunks", flush=True)
                capacity.setdefault(str(chunk_ms), {})["parley"] = await bench.search(
                    server, chunk_ms, start, args.search_points
                )

    wall = time.monotonic() - t_start
    cap20 = capacity["20"]
    ratios = {
        f"{p}/{f}": round(cap20[p] / cap20[f], 2) if cap20.get(f) else None
        for p in ("parley", "parley-webrtc", "parley-2w")
        if p in cap20
        for f in ("echo", "vad", "parley-1w", "parley")
        if f in cap20 and f != p
    }
    result["machine"]["run_wall_s"] = round(wall, 1)
    result["setup"] = {
        "vad_backend": args.vad_backend,
        "window_s": args.window,
        "warmup_s": WARMUP_S,
        "sweep": args.sweep,
        "p99_limit_ms": P99_LIMIT_MS,
        "slip_limit_ms": SLIP_LIMIT_MS,
        "clip_s": len(bench.clip.pcm) / RATE,
        "turn_detection": asdict(ServerVadParams()),
    }
    result["capacity"] = capacity
    result["capacity_lower_bound"] = bench.unbounded  # never failed: at least this
    result["ratios"] = ratios
    result["points"] = [asdict(p) for p in bench.points]
    print(f"\ncapacity (sessions, 20 ms chunks): {cap20}; ratios {ratios}")
    if bench.unbounded:
        print(f"  (no failing N reached for {', '.join(bench.unbounded)}: a lower bound)")
    for key, value in capacity.items():
        if key != "20":
            print(f"capacity {key}: {value}")
    others = [p.other_cpu_pct for p in bench.points if p.messages]
    steal = [p.steal_pct for p in bench.points if p.messages]
    if others:
        print(
            f"other processes: median {np.median(others):.0f} % of a core"
            f" (max {max(others):.0f}); steal median {np.median(steal):.1f} %"
            f" (max {max(steal):.1f}); run {wall:.0f} s"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = args.name
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    title = (
        f"{result['machine']['cpu']}, {result['machine']['cores']} cores, "
        f"{result['machine']['date']}; capacity {cap20}"
    )
    plot(bench.points, cap20, RESULTS / f"{name}.png", title)
    print(f"wrote {RESULTS / (name + '.json')} and {RESULTS / (name + '.png')}")


async def profile(bench: Bench, target: Target, n: int, result: dict[str, Any]) -> None:
    """One point with py-spy on the server; prints and saves the top frames."""
    path = Path(tempfile.mkdtemp(prefix="parley-bench-")) / "profile.txt"
    plans = None if target.vad_backend is None else bench.plans_for(20, target.vad_backend)
    async with started(target) as (server,):
        print(HEADER)
        p = await run_point(
            server, n, 20, bench.texts_for(20), bench.args.window, plans, profile_to=path
        )
        print(row(p))
    frames = top_frames(path)
    for kind in ("self", "inclusive"):
        print(f"\ntop frames by {kind} share of the server's busy samples:")
        for frame, share in frames[kind]:
            print(f"  {share:5.1f} %  {frame}")
    result["profile"] = {"point": asdict(p), **frames, "raw": str(path)}
    out = RESULTS / f"{bench.args.name}-profile.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}; collapsed stacks in {path}")


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.load", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--window", type=float, default=4.0, help="seconds measured per point")
    parser.add_argument("--retries", type=int, default=1, help="reruns of a failing point")
    parser.add_argument("--sweep", type=int, nargs="+", default=DEFAULT_SWEEP)
    parser.add_argument("--max-n", type=int, default=400)
    parser.add_argument(
        "--refine", type=int, default=1, help="bisection steps at each knee, after the sweep"
    )
    parser.add_argument("--chunks", type=int, nargs="+", default=[20, 40, 100])
    parser.add_argument("--search-points", type=int, default=3)
    parser.add_argument("--vad-backend", default="silero", choices=list(BACKENDS))
    parser.add_argument(
        "--workers-search",
        type=int,
        default=4,
        metavar="POINTS",
        help="points to search `parley serve --workers 2` at 20 ms chunks (0: skip)",
    )
    parser.add_argument("--barge", type=int, default=10, help="barge-in sessions (0: skip)")
    parser.add_argument("--barge-window", type=float, default=15.0)
    parser.add_argument(
        "--targets",
        nargs="+",
        default=["parley", "parley-webrtc", "echo", "vad"],
        choices=[
            "parley",
            "parley-webrtc",
            "echo",
            "vad",
            "parley-1w",
            "parley-2w",
            "parley-webrtc-nofreeze",
        ],
        help="servers to sweep back to back; parley-1w and parley-2w are `parley serve "
        "--workers 1|2` (client-side figures only)",
    )
    parser.add_argument("--budget", type=float, default=480.0, help="seconds for the whole run")
    parser.add_argument("--name", default="load", help="results file name")
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="only profile the server (py-spy) with N sessions",
    )
    parser.add_argument("--profile-target", default="parley", choices=["parley", "echo", "vad"])
    args = parser.parse_args()
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
