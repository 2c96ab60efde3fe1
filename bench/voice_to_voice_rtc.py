"""Voice to voice over WebRTC beside the WebSocket: bench/voice_to_voice.py's
`--transport rtc`.

One Parley server with the embedded default executor in its own process (as the ws
transport starts it). Two sessions on it, one after the other, both with the
default server_vad, each fixture spoken `repeats` times at real time:

- rtc: a WebRTC call (bench/rtc_client.py, aiortc): the fixture goes out on the Opus
  microphone track, silence between; the answer comes back on the call's track,
  paced in real time by the server. End of speech is when the microphone's last
  frame with sound went out; first audio is when the answer's stream began on the
  track, decoded (its first frame that is not digital silence; Opus and the client's
  jitter buffer, aiortc's 4 frames, included), and `audible_ms` when its first frame
  loud enough to hear arrived (the synthesizer's leading silence on top).
- ws: bench/voice_to_voice_ws.py's server_vad session: 20 ms appends; first audio is
  the first `response.output_audio.delta` at the client (a player's jitter buffer,
  e.g. the browser page's 60 ms, comes on top).

Both measure end of speech -> first audio at the client on one clock
(time.monotonic()), and the rtc run also end of speech -> speech_stopped at the
client.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.load.servers import Server, Target
from bench.rtc_client import Call, call
from bench.speech import load_wav, silence
from bench.voice_to_voice_ws import (
    LEAD_MS,
    RESPONSE_TIMEOUT_S,
    SERVER_START_S,
    cascade_target,
    measure_mode,
    quantile,
)

QUANTILES = (0.5, 0.9)
STREAM_RMS = 1.0  # above digital silence (pcm16 units)


@dataclass
class RtcRun:
    utterance: str
    repeat: int
    total_ms: float | None = None  # end of speech -> the answer's stream on the track
    vad_stop_ms: float | None = None  # end of speech -> speech_stopped at the client
    audible_ms: float | None = None  # end of speech -> the first frame of loud sound
    status: str | None = None
    error: str | None = None


class Inbox:
    """The call's events as they arrive, with their arrival times."""

    def __init__(self) -> None:
        self.events: list[tuple[float, dict[str, Any]]] = []
        self.changed = asyncio.Event()

    async def read(self, inbox: asyncio.Queue[str]) -> None:
        while True:
            text = await inbox.get()
            self.events.append((time.monotonic(), json.loads(text)))
            self.changed.set()

    def of(self, kind: str, since: float = 0.0) -> list[tuple[float, dict[str, Any]]]:
        return [(t, e) for t, e in self.events if e["type"] == kind and t >= since]

    async def until(
        self, kind: str, since: float, timeout_s: float
    ) -> tuple[float, dict[str, Any]]:
        async with asyncio.timeout(timeout_s):
            while not (found := self.of(kind, since)):
                self.changed.clear()
                await self.changed.wait()
        return found[0]


async def speak(rtc: Call, inbox: Inbox, name: str, repeat: int) -> RtcRun:
    """One fixture on the microphone; timed to the first sound of its answer."""
    run = RtcRun(name, repeat)
    began = time.monotonic()
    rtc.mic.say(np.concatenate([silence(LEAD_MS), load_wav(name)]))
    try:
        _, done = await inbox.until("response.done", began, RESPONSE_TIMEOUT_S)
        run.status = done["response"]["status"]
        # A fast answer is done before the playout's next frame starts it.
        await inbox.until("output_audio_buffer.started", began, RESPONSE_TIMEOUT_S)
        stopped = inbox.of("input_audio_buffer.speech_stopped", began)
        end = rtc.mic.last_audible
        if end is None or not stopped:
            run.error = "no turn"
            return run
        # The answer's stream begins: its first frame that is not digital silence,
        # as the WebSocket's first delta is its stream's first (leading silence and
        # all); a frame with speech loud enough to hear, too.
        await rtc.until_heard(lambda: bool(rtc.audible_since(end + 0.05)), RESPONSE_TIMEOUT_S)
        first = rtc.audible_since(end + 0.05, threshold=STREAM_RMS)[0].at
        run.audible_ms = (rtc.audible_since(end + 0.05)[0].at - end) * 1000
        run.total_ms = (first - end) * 1000
        run.vad_stop_ms = (stopped[-1][0] - end) * 1000
        # The answer plays out before the next utterance, as a user would wait.
        await inbox.until("output_audio_buffer.stopped", began, RESPONSE_TIMEOUT_S)
    except TimeoutError:
        run.error = f"no answer within {RESPONSE_TIMEOUT_S:.0f} s"
    return run


async def measure_rtc(port: int, repeats: int, fixtures: list[str]) -> list[RtcRun]:
    runs: list[RtcRun] = []
    async with call(f"http://127.0.0.1:{port}") as rtc:
        inbox = Inbox()
        reader = asyncio.create_task(inbox.read(rtc.inbox))
        try:
            await inbox.until("session.created", 0.0, 30.0)
            for repeat in range(1, repeats + 1):
                for name in fixtures:
                    run = await speak(rtc, inbox, name, repeat)
                    runs.append(run)
                    shown = "-" if run.total_ms is None else f"{run.total_ms:.0f} ms"
                    print(
                        f"  rtc {name} #{repeat}: {shown}"
                        + (f" [{run.error}]" if run.error else "")
                    )
        finally:
            reader.cancel()
    return runs


def spread(values: list[float]) -> dict[str, float | None]:
    return {f"p{round(q * 100)}": quantile(values, q) if values else None for q in QUANTILES} | {
        "n": float(len(values))
    }


async def run_rtc(
    repeats: int, fixtures: list[str], target: Target | None = None
) -> dict[str, Any]:
    """Start the server, measure a call and a WebSocket session, stop it."""
    server = Server(target or cascade_target())
    try:
        await server.ready(SERVER_START_S)
        rtc_runs = await measure_rtc(server.port, repeats, fixtures)
        ws_runs, _ = await measure_mode(server, "server_vad", repeats, fixtures)
    finally:
        server.stop()
    rtc_total = [r.total_ms for r in rtc_runs if r.total_ms is not None and r.error is None]
    ws_total = [
        v for r in ws_runs if r.error is None and (v := r.stages.get("total_ms")) is not None
    ]
    rtc_vad = [r.vad_stop_ms for r in rtc_runs if r.vad_stop_ms is not None and r.error is None]
    ws_vad = [
        v for r in ws_runs if r.error is None and (v := r.stages.get("vad_stop_ms")) is not None
    ]
    rtc_audible = [r.audible_ms for r in rtc_runs if r.audible_ms is not None and r.error is None]
    summary = {
        "webrtc": {
            "total_ms": spread(rtc_total),
            "vad_stop_ms": spread(rtc_vad),
            "audible_ms": spread(rtc_audible),
        },
        "websocket": {"total_ms": spread(ws_total), "vad_stop_ms": spread(ws_vad)},
    }
    print_table(summary)
    return {
        "setup": {
            "server": (target or cascade_target()).name + " (own process), server_vad",
            "webrtc": "aiortc call: Opus track both ways, first sound decoded at the client",
            "websocket": "websockets, 20 ms appends, first audio delta at the client",
            "repeats": repeats,
            "fixtures": fixtures,
        },
        "quantiles_ms": summary,
        "runs": {
            "webrtc": [vars(r) for r in rtc_runs],
            "websocket": [
                {"utterance": r.utterance, "repeat": r.repeat, "error": r.error} | r.stages
                for r in ws_runs
            ],
        },
    }


def print_table(summary: dict[str, dict[str, dict[str, float | None]]]) -> None:
    def cell(d: dict[str, float | None]) -> str:
        return "/".join("-" if d[k] is None else f"{d[k]:.0f}" for k in ("p50", "p90"))

    print("\nend of speech -> first audio at the client, ms p50/p90 (server_vad):")
    print("transport | runs | end of speech -> speech_stopped | end of speech -> first audio")
    for name, row in summary.items():
        n = int(row["total_ms"]["n"] or 0)
        print(f"{name} | {n} | {cell(row['vad_stop_ms'])} | {cell(row['total_ms'])}")
