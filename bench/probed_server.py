"""A server for bench/load, with probes: Parley (`parley serve --executor scripted`
as the CLI builds it) or one of the floors (bench/floors.py).

Run by bench/load (and bench/voice_to_voice, with the embedded cascade) as its own
process:
  python -m bench.probed_server parley --port P [--vad-backend silero|webrtc]
      [--executor scripted|cascade]
  python -m bench.probed_server echo|vad --port P

Every server gets the same uvicorn options as `parley serve` (server/cli.py's
uvicorn_config) and the default asyncio loop, plus:

- an event-loop lag probe: a task that sleeps 10 ms and records how late it wakes;
- `GET /bench/stats?reset=1`: the samples gathered since the last reset, in ms.

Parley also serves `GET /bench/executor?items=ID,...`: the executor's stats (its
marks are time.monotonic(), CLOCK_MONOTONIC, the same clock in every process on the
machine, so a client can set them beside its own times), the transcripts of the
user items named, its `speculation` stats when it has them, and whether the
end-of-turn model (semantic_vad) is loaded. Its end-of-turn model is timed:
`score_ms`, each scoring call from its request to its answer (queue included).

Parley also gets two timestamps from an engine observer (engine/observer.py, the
interface metrics will use; nothing is patched):

- `delta_ms`: first audio delta of a response taken by the connection's writer
  (the step right before `send_text`) minus the moment the executor yielded that
  response's first chunk;
- `stop_ms`: the turn committed and its response requested by the session, minus
  the arrival of the append that completed the silence window (when the reader
  parsed its frame).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gc
import time
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import numpy.typing as npt
import uvicorn
from fastapi import FastAPI

from engine.end_of_turn import EndOfTurnModel
from engine.observer import Observer, ResponseStatus

MAX_SAMPLES = 200_000  # per list, between resets (the runs are short)
LAG_PERIOD_S = 0.010


class Probes:
    def __init__(self) -> None:
        self.samples: dict[str, list[float]] = {
            "loop_lag_ms": [],
            "delta_ms": [],
            "stop_ms": [],
            "gc_ms": [],  # pauses of the cyclic garbage collector's full (oldest) collections
            "score_ms": [],  # semantic_vad: end-of-turn model calls, queue included
        }
        self._gc_start = 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._gc_start = time.perf_counter()
        else:
            self.add("gc_ms", (time.perf_counter() - self._gc_start) * 1000)

    def add(self, name: str, ms: float) -> None:
        values = self.samples[name]
        if len(values) < MAX_SAMPLES:
            values.append(ms)

    def take(self, reset: bool) -> dict[str, list[float]]:
        out = {name: list(values) for name, values in self.samples.items()}
        if reset:
            for values in self.samples.values():
                values.clear()
        return out

    async def lag_probe(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            t = loop.time()
            await asyncio.sleep(LAG_PERIOD_S)
            self.add("loop_lag_ms", (loop.time() - t - LAG_PERIOD_S) * 1000)


def add_stats_route(app: FastAPI, probes: Probes) -> None:
    @app.get("/bench/stats")
    async def stats(reset: int = 0) -> dict[str, Any]:
        return probes.take(bool(reset))


class ProbeObserver(Observer):
    """Two latency samples from the engine's own reports (engine/observer.py)."""

    def __init__(self, probes: Probes) -> None:
        self.probes = probes
        self._first_chunk: dict[str, float] = {}  # response id -> its model's first chunk
        self._response_of: dict[str, str] = {}  # assistant item id -> its response id

    def response_created(self, session_id: str, response_id: str, item_id: str) -> None:
        self._response_of[item_id] = response_id

    def first_model_chunk(self, session_id: str, response_id: str) -> None:
        self._first_chunk[response_id] = time.monotonic()

    def first_audio_sent(self, session_id: str, item_id: str) -> None:
        now = time.monotonic()
        t0 = self._first_chunk.pop(self._response_of.pop(item_id, ""), None)
        if t0 is not None:
            self.probes.add("delta_ms", (now - t0) * 1000)

    def response_done(self, session_id: str, response_id: str, status: ResponseStatus) -> None:
        # A response whose audio never reached the wire leaves nothing behind.
        self._first_chunk.pop(response_id, None)
        for item_id in [i for i, r in self._response_of.items() if r == response_id]:
            del self._response_of[item_id]

    def speech_stopped(
        self, session_id: str, item_id: str, audio_end_ms: int, frame_received: float | None
    ) -> None:
        if frame_received is not None:
            self.probes.add("stop_ms", (time.monotonic() - frame_received) * 1000)


class TimedEndOfTurn:
    """The server's end-of-turn model, each call timed into `score_ms`."""

    def __init__(self, model: EndOfTurnModel, probes: Probes) -> None:
        self.model, self.probes = model, probes

    async def probability(self, pcm: npt.NDArray[np.int16]) -> float | None:
        t0 = time.monotonic()
        try:
            return await self.model.probability(pcm)
        finally:
            self.probes.add("score_ms", (time.monotonic() - t0) * 1000)


def as_json(value: object) -> Any:
    """A dataclass instance as a dict; anything else as it is, or None."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value if isinstance(value, int | float | str | dict | list) else None


def add_executor_route(app: FastAPI) -> None:
    hub = app.state.hub

    @app.get("/bench/executor")
    async def executor_stats(items: str = "") -> dict[str, Any]:
        executor = hub.executor
        transcript = getattr(executor, "transcript", None)
        ids = [i for i in items.split(",") if i]
        return {
            "name": executor.name,
            "stats": as_json(executor.stats),
            "transcripts": {i: transcript(i) for i in ids} if callable(transcript) else {},
            # Speculative transcription, where the executor keeps such counts.
            "speculation": as_json(getattr(executor, "speculation", None)),
            "end_of_turn": hub.end_of_turn is not None,
        }


def parley_config(args: argparse.Namespace, probes: Probes) -> uvicorn.Config:
    from server.app import create_app
    from server.cli import uvicorn_options
    from server.config import Settings

    settings = Settings(
        host="127.0.0.1",
        port=args.port,
        executor=args.executor,
        scripted_chunk_delay_s=args.chunk_delay_s,
        scripted_chunk_ms=args.chunk_ms,
        vad_backend=args.vad_backend,
        log_level="warning",
        max_sessions=0,  # no limit: the benchmark searches for the capacity
        # Every load client connects from loopback, one client to the per-key limits.
        new_sessions_per_key_per_minute=0,
    )
    app = create_app(settings, observer=ProbeObserver(probes))
    hub = app.state.hub
    if hub.end_of_turn is not None:  # sessions take it from the hub as they open
        hub.end_of_turn = TimedEndOfTurn(hub.end_of_turn, probes)
    add_stats_route(app, probes)
    add_executor_route(app)
    # The options `parley serve` runs with (server/cli.py's uvicorn_config).
    return uvicorn.Config(app, **uvicorn_options(settings))


def floor_config(args: argparse.Namespace, probes: Probes) -> uvicorn.Config:
    from bench.floors import create_floor_app
    from server.config import Settings

    app = create_floor_app(args.kind)
    add_stats_route(app, probes)
    # The options server/cli.py's uvicorn_config gives `parley serve`.
    return uvicorn.Config(
        app,
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        ws_max_size=2 * Settings().max_message_bytes,
        ws_per_message_deflate=False,
    )


@contextlib.asynccontextmanager
async def running(probes: Probes) -> AsyncIterator[None]:
    task = asyncio.get_running_loop().create_task(probes.lag_probe())
    try:
        yield
    finally:
        task.cancel()


async def serve(config: uvicorn.Config, probes: Probes) -> None:
    async with running(probes):
        await uvicorn.Server(config).serve()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.probed_server")
    parser.add_argument("kind", choices=["parley", "echo", "vad"])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--vad-backend", default="silero", choices=["silero", "webrtc"])
    parser.add_argument(
        "--executor",
        default="scripted",
        choices=["scripted", "cascade"],
        help="Parley's: scripted (zero model time) or the embedded default, as `parley serve`",
    )
    parser.add_argument("--chunk-delay-s", type=float, default=0.0)
    parser.add_argument("--chunk-ms", type=int, default=100)
    parser.add_argument(
        "--no-gc-freeze", action="store_true", help="skip the gc.freeze() `parley serve` does"
    )
    args = parser.parse_args()
    probes = Probes()
    config = parley_config(args, probes) if args.kind == "parley" else floor_config(args, probes)
    from server.cli import prepare_to_serve

    prepare_to_serve(freeze_heap=not args.no_gc_freeze)  # as `parley serve` (floors too)
    asyncio.run(serve(config, probes))


if __name__ == "__main__":
    main()
