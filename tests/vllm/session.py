"""A Parley server on a real uvicorn in the test's loop, around an executor the test
made, and a client on its WebSocket that keeps every event it is sent."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import numpy as np
import uvicorn
import websockets

from bench.speech import load_wav, silence
from models.base import Executor
from server.app import create_app
from server.cli import uvicorn_options
from server.config import Settings
from tests.support.harness import Harness
from tests.support.servers import bound_socket, serving


@contextlib.asynccontextmanager
async def running_app(ex: Executor, settings: Settings) -> AsyncIterator[str]:
    """The WebSocket URL of a server whose sessions share `ex`."""
    sock = bound_socket()
    port = sock.getsockname()[1]
    options = {**uvicorn_options(settings), "host": "127.0.0.1", "port": port, "log_config": None}
    # No keepalive pings: the barge-in scenes load a small runner's every core with
    # vLLM's token stream, and a ping unanswered for 20 s closes the session (1011)
    # in the middle of a test that is otherwise on time.
    options["ws_ping_interval"] = None
    config = uvicorn.Config(create_app(settings, executor=ex), **options)
    async with serving(config, sock, name="parley on vllm", start_timeout_s=120, stop_timeout_s=30):
        yield f"ws://127.0.0.1:{port}/v1/realtime"


class Client:
    """A session's events as they come, read in the background."""

    def __init__(self, ws: websockets.ClientConnection) -> None:
        self.ws = ws
        self.events: list[dict[str, Any]] = []
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for message in self.ws:
            self.events.append(json.loads(message))

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]

    def audio(self, response_id: str) -> list[dict[str, Any]]:
        """The response's audio deltas."""
        deltas = self.of("response.output_audio.delta")
        return [d for d in deltas if d["response_id"] == response_id]

    async def until(self, condition: Callable[[], bool], limit_s: float = 120) -> None:
        await Harness().wait_until(condition, limit_s)

    async def send(self, event: dict[str, Any]) -> None:
        await self.ws.send(json.dumps(event))

    async def say(self, name: str) -> None:
        """A spoken turn, then a second of silence, in 100 ms appends five times
        faster than real time."""
        pcm = np.concatenate([silence(300), load_wav(name), silence(1000)])
        for i in range(0, len(pcm), 2400):
            chunk = pcm[i : i + 2400].astype("<i2").tobytes()
            audio = base64.b64encode(chunk).decode()
            await self.send({"type": "input_audio_buffer.append", "audio": audio})
            await asyncio.sleep(0.02)

    def close(self) -> None:
        self._reader.cancel()


@contextlib.asynccontextmanager
async def connected(url: str) -> AsyncIterator[Client]:
    async with websockets.connect(url, max_size=None, ping_interval=None) as ws:
        client = Client(ws)
        try:
            yield client
        finally:
            client.close()
