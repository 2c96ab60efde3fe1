"""A server for bench/load, with probes: Parley (`parley serve --executor scripted`
as the CLI builds it) or one of the floors (bench/floors.py).

Run by bench/load as its own process:
  python -m bench.probed_server parley --port P [--vad-backend silero|webrtc]
  python -m bench.probed_server echo|vad --port P

Every server gets the same uvicorn options as `parley serve` (server/cli.py's
uvicorn_config) and the default asyncio loop, plus:

- an event-loop lag probe: a task that sleeps 10 ms and records how late it wakes;
- `GET /bench/stats?reset=1`: the samples gathered since the last reset, in ms.

Parley also gets two timestamps by wrapping (in this process only; nothing in
server/, engine/ or models/ knows about them):

- `delta_ms`: first `response.output_audio.delta` of a response taken by the
  connection's writer (the step right before `send_text`) minus the moment the
  executor yielded that response's first chunk (ScriptedExecutor.generate);
- `stop_ms`: `speech_stopped` emitted by the session minus the arrival of the
  append that completed the silence window (when the reader parsed its frame).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import uvicorn
from fastapi import FastAPI

MAX_SAMPLES = 200_000  # per list, between resets (the runs are short)
LAG_PERIOD_S = 0.010


class Probes:
    def __init__(self) -> None:
        self.samples: dict[str, list[float]] = {
            "loop_lag_ms": [],
            "delta_ms": [],
            "stop_ms": [],
            "gc_ms": [],  # pauses of the cyclic garbage collector's full (oldest) collections
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


def instrument_parley(probes: Probes) -> None:
    """Wrap the executor, the outbox and the session's append path (class attributes,
    this process only) to timestamp `delta_ms` and `stop_ms`."""
    from engine import protocol
    from engine.emitter import Outbox, OutEvent
    from engine.session import Session
    from engine.turns import SpeechStopped, TurnEvent
    from models.base import OutputChunk, Prompt
    from models.scripted import ScriptedExecutor
    from server import realtime

    first_chunk: dict[str, float] = {}  # response id -> executor's first chunk
    seen_items: set[str] = set()
    generate = ScriptedExecutor.generate

    async def timed_generate(
        self: ScriptedExecutor, prompt: Prompt
    ) -> AsyncGenerator[OutputChunk, None]:
        first = True
        async with contextlib.aclosing(generate(self, prompt)) as inner:
            async for chunk in inner:
                if first:
                    first_chunk[prompt.request_id] = time.monotonic()
                    first = False
                yield chunk

    get = Outbox.get

    async def timed_get(self: Outbox) -> OutEvent | None:
        event = await get(self)
        if (
            event is not None
            and event.type == "response.output_audio.delta"
            and event.item_id is not None
            and event.item_id not in seen_items
        ):
            now = time.monotonic()
            seen_items.add(event.item_id)
            t0 = first_chunk.pop(json.loads(event.text)["response_id"], None)
            if t0 is not None:
                probes.add("delta_ms", (now - t0) * 1000)
        return event

    parse = protocol.parse_client_event  # the reader's, imported by name in server/realtime.py

    def timed_parse(text: str | bytes, max_bytes: int) -> protocol.ClientEvent:
        now = time.monotonic()
        event = parse(text, max_bytes)
        if isinstance(event, protocol.InputAudioBufferAppend):
            object.__setattr__(event, "_bench_arrival", now)  # outside pydantic's fields
        return event

    on_append = Session._on_append
    on_turn_event = Session._on_turn_event

    async def timed_on_append(self: Session, event: protocol.InputAudioBufferAppend) -> None:
        self._bench_arrival = event.__dict__.get("_bench_arrival")  # type: ignore[attr-defined]
        await on_append(self, event)

    async def timed_on_turn_event(self: Session, event: TurnEvent) -> None:
        await on_turn_event(self, event)
        arrival = getattr(self, "_bench_arrival", None)
        if isinstance(event, SpeechStopped) and arrival is not None:
            probes.add("stop_ms", (time.monotonic() - arrival) * 1000)

    ScriptedExecutor.generate = timed_generate  # type: ignore[method-assign]
    Outbox.get = timed_get  # type: ignore[method-assign]
    realtime.__dict__["parse_client_event"] = timed_parse
    Session._on_append = timed_on_append  # type: ignore[method-assign]
    Session._on_turn_event = timed_on_turn_event  # type: ignore[method-assign]


def parley_config(args: argparse.Namespace, probes: Probes) -> uvicorn.Config:
    from server.cli import uvicorn_config
    from server.config import Settings

    instrument_parley(probes)
    settings = Settings(
        host="127.0.0.1",
        port=args.port,
        executor="scripted",
        scripted_chunk_delay_s=args.chunk_delay_s,
        scripted_chunk_ms=args.chunk_ms,
        vad_backend=args.vad_backend,
        log_level="warning",
    )
    config = uvicorn_config(settings)
    assert isinstance(config.app, FastAPI)
    add_stats_route(config.app, probes)
    return config


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
