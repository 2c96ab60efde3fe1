"""Voice to voice at a real client: bench/voice_to_voice.py's `--transport ws`.

A Parley server with the embedded default executor, as `parley serve` builds it
(bench/probed_server.py --executor cascade: create_app, `parley serve`'s uvicorn
options, Silero, Smart Turn loaded for semantic_vad), runs as its own process; this
process is the client, over a real WebSocket (`websockets`), so client and server
share neither a loop nor a GIL. One session per turn-detection mode: server_vad (the
default, nothing sent) and semantic_vad (eagerness auto, and low, set by a
session.update).

Each fixture is streamed as a microphone would: LEAD_MS of silence, the utterance,
then silence for as long as the answer takes (the microphone stays open), in 20 ms
`input_audio_buffer.append` events, each sent once its 20 ms have been "recorded".
The next utterance starts once the answer's `response.done` has arrived.

Times are time.monotonic(), CLOCK_MONOTONIC, one clock for every process on the
machine: the client's (the send of the chunk holding the last audible 10 ms, events
as they arrive) and the executor's own marks, read from the server's
/bench/executor after each mode. Stages:
  end of speech -> speech_stopped at the client (the end-of-turn decision, wire
  included); speech_stopped -> transcript and the model's stages (server marks);
  speech_stopped -> response.created (client); first audio -> first delta at the
  client (emit, wire included); total: end of speech -> first delta at the client.
"""

from __future__ import annotations

import asyncio
import base64
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from bench.load.servers import Server, Target, http_json
from bench.speech import FIXTURES, PCM_RATE, load_wav, silence
from bench.vad_backends import speech_extent_ms

CHUNK_MS = 20
LEAD_MS = 300
RESPONSE_TIMEOUT_S = 90.0  # per utterance, after its last audible chunk
SERVER_START_S = 600.0  # loading the models; a first run converts the LLM
ACK_TIMEOUT_S = 10.0
# The modes: the turn detection a session.update sets (None: the server's default).
MODES: dict[str, dict[str, Any] | None] = {
    "server_vad": None,
    "semantic_vad": {"type": "semantic_vad", "eagerness": "auto"},
    # low waits for 750 ms of silence even when the model is sure: the answer is
    # begun speculatively meanwhile (engine/speculation.py).
    "semantic_vad_low": {"type": "semantic_vad", "eagerness": "low"},
}
STAGES = {
    "vad_stop_ms": "end of speech -> speech_stopped at client",
    "asr_ms": "speech_stopped -> transcript",
    "llm_first_token_ms": "transcript -> first token",
    "tts_first_audio_ms": "first token -> first audio",
    "emit_ms": "first audio -> first delta at client",
    "pre_model_ms": "speech_stopped -> response.created",
    "created_to_delta_ms": "response.created -> first delta",
    "total_ms": "end of speech -> first delta at client",
}
QUANTILES = (0.5, 0.9)


@dataclass
class WsRun:
    mode: str
    utterance: str
    repeat: int
    turn: int  # position in the mode's session, from 1
    speech_ms: int
    turns_detected: int = 0
    max_send_lag_ms: float = 0.0
    user_transcript: str | None = None
    response_transcript: str | None = None
    response_status: str | None = None
    tokens: int | None = None
    audio_out_s: float | None = None
    error: str | None = None
    stages: dict[str, float | None] = field(default_factory=dict)
    timeline_ms: dict[str, float | None] = field(default_factory=dict)
    # Filled once the mode ends, from the server's marks.
    item_id: str | None = None
    response_id: str | None = None
    t_end: float | None = None
    t_stop: float | None = None
    t_created: float | None = None
    t_delta: float | None = None
    t_done: float | None = None


@dataclass
class Seen:
    """Server events as they arrive at the client."""

    stopped: list[tuple[float, str]] = field(default_factory=list)  # (t, user item id)
    committed: list[tuple[float, str]] = field(default_factory=list)  # (t, user item id)
    created: list[tuple[float, str]] = field(default_factory=list)  # (t, response id)
    first_delta: dict[str, float] = field(default_factory=dict)
    audio_bytes: dict[str, int] = field(default_factory=dict)
    done: dict[str, dict[str, Any]] = field(default_factory=dict)
    done_at: dict[str, float] = field(default_factory=dict)
    errors: list[dict[str, Any]] = field(default_factory=list)
    updated: list[dict[str, Any]] = field(default_factory=list)  # session.updated
    active: str | None = None  # the response whose deltas arrive

    def take(self, message: str | bytes, now: float) -> None:
        event = json.loads(message)
        kind = event.get("type")
        if kind == "response.output_audio.delta":
            rid = event["response_id"]
            self.first_delta.setdefault(rid, now)
            self.audio_bytes[rid] = self.audio_bytes.get(rid, 0) + len(event["delta"]) * 3 // 4
        elif kind == "input_audio_buffer.committed":
            self.committed.append((now, event["item_id"]))
        elif kind == "input_audio_buffer.speech_stopped":
            self.stopped.append((now, event["item_id"]))
        elif kind == "response.created":
            self.active = event["response"]["id"]
            self.created.append((now, event["response"]["id"]))
        elif kind == "response.done":
            self.done[event["response"]["id"]] = event["response"]
            self.done_at[event["response"]["id"]] = now
            self.active = None
        elif kind == "session.updated":
            self.updated.append(event["session"])
        elif kind == "error":
            self.errors.append(event["error"])


# How a client says one utterance into a session and takes its answer into its run.
Say = Callable[[ClientConnection, Seen, "WsRun", np.ndarray], Awaitable[None]]
# What a client sends first, to set its session up.
Setup = Callable[[ClientConnection, Seen], Awaitable[None]]


async def read(ws: ClientConnection, seen: Seen) -> None:
    try:
        async for message in ws:
            seen.take(message, time.monotonic())
    except ConnectionClosed:
        pass


def append_text(pcm: np.ndarray) -> str:
    audio = base64.b64encode(pcm.astype("<i2").tobytes()).decode()
    return json.dumps({"type": "input_audio_buffer.append", "audio": audio})


def answered(seen: Seen, stopped_before: int) -> bool:
    """The latest turn since `stopped_before` has a response, and it is done."""
    if len(seen.stopped) == stopped_before:
        return False
    t_stop = seen.stopped[-1][0]
    after = [r for t, r in seen.created if t >= t_stop]
    return bool(after) and after[0] in seen.done and seen.active is None


def chunk_of(pcm: np.ndarray, i: int) -> np.ndarray:
    """The `i`th CHUNK_MS of `pcm`, padded with silence at its end."""
    chunk = PCM_RATE * CHUNK_MS // 1000
    part = pcm[i * chunk : (i + 1) * chunk]
    return np.concatenate([part, silence(CHUNK_MS)[: chunk - len(part)]])


def led_in(wav: np.ndarray) -> tuple[np.ndarray, int]:
    """LEAD_MS of silence, then the utterance; and the index of the chunk holding its
    last audible 10 ms (the end of speech)."""
    _, end = speech_extent_ms(wav)
    return np.concatenate([silence(LEAD_MS), wav]), -(-(LEAD_MS + end) // CHUNK_MS) - 1


async def speak(ws: ClientConnection, seen: Seen, run: WsRun, wav: np.ndarray) -> None:
    """The utterance, then silence until its answer is done, at real time."""
    loop = asyncio.get_running_loop()
    pcm, last_speech_chunk = led_in(wav)
    n_speech = -(-len(pcm) // (PCM_RATE * CHUNK_MS // 1000))
    quiet = silence(CHUNK_MS)
    stopped_before = len(seen.stopped)
    t0 = loop.time()
    i = 0
    deadline: float | None = None
    while True:
        due = t0 + (i + 1) * CHUNK_MS / 1000
        await asyncio.sleep(max(0.0, due - loop.time()))
        run.max_send_lag_ms = max(run.max_send_lag_ms, (loop.time() - due) * 1000)
        if i == last_speech_chunk:
            run.t_end = time.monotonic()
            deadline = run.t_end + RESPONSE_TIMEOUT_S
        await ws.send(append_text(chunk_of(pcm, i) if i < n_speech else quiet))
        i += 1
        if i > n_speech and answered(seen, stopped_before):
            break
        if deadline is not None and time.monotonic() > deadline:
            break
    stops = seen.stopped[stopped_before:]
    run.turns_detected = len(stops)
    if not stops:
        run.error = "no speech_stopped"
        return
    run.t_stop, run.item_id = stops[-1]  # a split utterance: its last turn gets the answer
    take_answer(seen, run, run.t_stop)


def take_answer(seen: Seen, run: WsRun, since: float) -> None:
    """The run's answer: the first response created at or after `since`."""
    created = [(t, r) for t, r in seen.created if t >= since]
    if not created or created[0][1] not in seen.done:
        run.error = f"no response.done within {RESPONSE_TIMEOUT_S:.0f} s"
        return
    run.t_created, run.response_id = created[0]
    done = seen.done[run.response_id]
    run.response_status = done["status"]
    output = done.get("output") or [{}]
    content = output[0].get("content") or [{}]
    run.response_transcript = content[0].get("transcript")
    run.t_delta = seen.first_delta.get(run.response_id)
    run.t_done = seen.done_at.get(run.response_id)
    run.audio_out_s = seen.audio_bytes.get(run.response_id, 0) / 2 / PCM_RATE
    if run.response_status != "completed":
        run.error = f"response {run.response_status}"


def _ms(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else (b - a) * 1000


def fill_stages(run: WsRun, executor: dict[str, Any]) -> None:
    """The run's stages from its client times and the server's marks."""
    stats = executor.get("stats") or {}
    marks = stats.get("marks") or {}
    user = marks.get(run.item_id or "", {})
    resp = marks.get(run.response_id or "", {})
    t_text, t_token, t_audio = (
        user.get("transcribed"),
        resp.get("first_token"),
        resp.get("first_audio"),
    )
    run.user_transcript = (executor.get("transcripts") or {}).get(run.item_id or "")
    run.tokens = (stats.get("tokens_by_request") or {}).get(run.response_id or "")
    run.stages = {
        "vad_stop_ms": _ms(run.t_end, run.t_stop),
        "asr_ms": _ms(run.t_stop, t_text),
        "llm_first_token_ms": _ms(t_text, t_token),
        "tts_first_audio_ms": _ms(t_token, t_audio),
        "emit_ms": _ms(t_audio, run.t_delta),
        "pre_model_ms": _ms(run.t_stop, run.t_created),
        "created_to_delta_ms": _ms(run.t_created, run.t_delta),
        "total_ms": _ms(run.t_end, run.t_delta),
    }
    milestones = {
        "speech_stopped": run.t_stop,
        "response.created": run.t_created,
        "transcribed": t_text,
        "model_started": resp.get("started"),
        "first_token": t_token,
        "first_audio": t_audio,
        "first_audio_delta": run.t_delta,
        "response.done": run.t_done,
    }
    run.timeline_ms = {name: _ms(run.t_end, t) for name, t in milestones.items()}


async def configure(ws: ClientConnection, seen: Seen, detection: dict[str, Any] | None) -> None:
    """Set the session's turn detection (None: off) and wait until it is applied."""
    update = {
        "type": "session.update",
        "session": {"type": "realtime", "audio": {"input": {"turn_detection": detection}}},
    }
    before = len(seen.updated)
    await ws.send(json.dumps(update))
    deadline = time.monotonic() + ACK_TIMEOUT_S
    while len(seen.updated) == before and not seen.errors:
        if time.monotonic() > deadline:
            raise RuntimeError("no session.updated")
        await asyncio.sleep(0.01)
    if seen.errors:
        raise RuntimeError(f"session.update refused: {seen.errors[0]}")
    applied = (seen.updated[-1]["audio"]["input"]["turn_detection"] or {}).get("type")
    if applied != (detection or {}).get("type"):
        raise RuntimeError(f"turn detection applied as {applied}")


async def measure_mode(
    server: Server,
    mode: str,
    repeats: int,
    fixtures: list[str],
    *,
    say: Say = speak,
    setup: Setup | None = None,
) -> tuple[list[WsRun], dict[str, Any]]:
    """One session in `mode`: every fixture, `repeats` times, each said by `say`;
    then the server's marks. The session is set up by `setup`, by default as MODES
    says."""
    url = f"ws://127.0.0.1:{server.port}/v1/realtime"
    ws = await connect(url, compression=None, proxy=None, max_size=None, ping_interval=None)
    seen = Seen()
    reader = asyncio.get_running_loop().create_task(read(ws, seen))
    runs: list[WsRun] = []
    try:
        if setup is not None:
            await setup(ws, seen)
        elif (detection := MODES[mode]) is not None:
            await configure(ws, seen, detection)
        clips = {name: load_wav(name) for name in fixtures}
        for repeat in range(1, repeats + 1):
            for name, wav in clips.items():
                start, end = speech_extent_ms(wav)
                run = WsRun(mode, name, repeat, len(runs) + 1, speech_ms=end - start)
                await say(ws, seen, run, wav)
                runs.append(run)
                total = _ms(run.t_end, run.t_delta)
                shown = "-" if total is None else f"{total:.0f} ms"
                print(
                    f"  {mode} {name} #{repeat}: {shown} -> {run.response_transcript!r}"
                    + (f"  [{run.error}]" if run.error else ""),
                    flush=True,
                )
    finally:
        await ws.close()
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
    items = ",".join(r.item_id for r in runs if r.item_id)
    executor = await asyncio.to_thread(http_json, server.port, f"/bench/executor?items={items}")
    for run in runs:
        fill_stages(run, executor)
    if seen.errors:
        print(f"  server errors: {seen.errors}")
    return runs, executor


def quantile(values: list[float], q: float) -> float:
    """Linear interpolation between the closest ranks (numpy's default)."""
    return float(np.quantile(values, q))


def summarize(runs: list[WsRun]) -> dict[str, dict[str, dict[str, float | None]]]:
    """Per mode, per stage: p50 and p90 over the good runs."""
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for mode in MODES:
        good = [r for r in runs if r.mode == mode and r.error is None]
        out[mode] = {}
        for stage in STAGES:
            values = [v for r in good if (v := r.stages.get(stage)) is not None]
            out[mode][stage] = {
                f"p{round(q * 100)}": quantile(values, q) if values else None for q in QUANTILES
            } | {"n": float(len(values))}
    return out


def print_table(summary: dict[str, dict[str, dict[str, float | None]]]) -> None:
    def cell(d: dict[str, float | None]) -> str:
        return "/".join("-" if d[k] is None else f"{d[k]:.0f}" for k in ("p50", "p90"))

    print("\nover a real WebSocket, ms p50/p90 (wall clock):")
    print("mode | runs | " + " | ".join(STAGES.values()))
    for mode, row in summary.items():
        n = int(row["total_ms"]["n"] or 0)
        print(f"{mode} | {n} | " + " | ".join(cell(row[s]) for s in STAGES))


def cascade_target() -> Target:
    argv = [sys.executable, "-m", "bench.probed_server", "parley", "--port", "{port}"]
    return Target("parley-cascade", [*argv, "--executor", "cascade"], False, "silero")


async def run_ws(repeats: int, fixtures: list[str]) -> dict[str, Any]:
    """Start the server, measure every mode, stop it; the ws section of the results."""
    print("starting Parley with the embedded cascade in its own process ...", flush=True)
    t0 = time.monotonic()
    server = Server(cascade_target())
    runs: list[WsRun] = []
    speculation: dict[str, Any] = {}
    try:
        await server.ready(SERVER_START_S)
        load_s = time.monotonic() - t0
        print(f"server ready in {load_s:.1f} s", flush=True)
        executor: dict[str, Any] = {}
        for mode in MODES:
            mode_runs, executor = await measure_mode(server, mode, repeats, fixtures)
            runs += mode_runs
            if executor.get("speculation") is not None:
                speculation[mode] = executor["speculation"]  # cumulative, per process
                print(f"  speculation after {mode}: {executor['speculation']}")
        stats = await server.stats(reset=False)
    finally:
        server.stop()
    summary = summarize(runs)
    print_table(summary)
    score = stats.get("score_ms", [])
    if score:
        print(
            f"end-of-turn model calls: {len(score)}, median {statistics.median(score):.0f} ms,"
            f" max {max(score):.0f} ms"
        )
    return {
        "setup": {
            "server": "bench.probed_server parley --executor cascade (own process)",
            "client": "websockets, one session per mode",
            "modes": MODES,
            "end_of_turn_model_loaded": executor.get("end_of_turn"),
            "chunk_ms": CHUNK_MS,
            "lead_silence_ms": LEAD_MS,
            "trail": "silence streamed until response.done",
            "repeats": repeats,
            "fixtures": fixtures,
            "server_load_s": round(load_s, 1),
        },
        "stages": STAGES,
        "quantiles_ms": summary,
        "end_of_turn_calls_ms": score,
        "speculation": speculation or None,
        "runs": [{k: v for k, v in vars(r).items() if not k.startswith("t_")} for r in runs],
    }


def fixtures_arg(text: str) -> list[str]:
    names = [n for n in text.split(",") if n]
    unknown = set(names) - set(FIXTURES)
    if unknown:
        raise ValueError(f"unknown fixtures: {sorted(unknown)}")
    return names
