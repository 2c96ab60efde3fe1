"""Servers on a free port of 127.0.0.1, run by uvicorn in the test's own event loop.

`serving_app` serves an app a test made (bench/fakes/serving.py serves any ASGI app);
`RunningServer` is what the `serve` / `server` fixtures of tests/conftest.py hand out.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import uvicorn
from openai import AsyncOpenAI
from openai.resources.realtime.realtime import AsyncRealtimeConnectionManager

from bench.fakes.serving import bound_socket, serving
from server.cli import uvicorn_options
from server.config import Settings

# Fast, but still paced: a response streams over a few hundred milliseconds.
TEST_SETTINGS: dict[str, Any] = {
    "executor": "scripted",
    "scripted_chunk_delay_s": 0.01,
    "log_level": "warning",
}


def free_port() -> int:
    """A port nothing listens on right now (for a server in another process)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class RunningServer:
    settings: Settings
    port: int

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/realtime"


ServerFactory = Callable[..., Awaitable[RunningServer]]


@contextlib.asynccontextmanager
async def serving_app(app: Any, settings: Settings, *, name: str) -> AsyncIterator[RunningServer]:
    """An app made by the test (`create_app` with its own executor or observer),
    served as `parley serve` would serve it, on a free port, until the block ends."""
    sock = bound_socket()
    port = sock.getsockname()[1]
    options = {**uvicorn_options(settings), "port": port, "log_config": None}
    async with serving(uvicorn.Config(app, **options), sock, name=name):
        yield RunningServer(settings, port)


def sdk_connect(server: RunningServer) -> AsyncRealtimeConnectionManager:
    """A realtime connection to `server` from the official SDK's GA client."""
    client = AsyncOpenAI(base_url=f"{server.http_url}/v1", api_key="x")
    return client.realtime.connect(model="parley-scripted")
