"""Servers on a free port of 127.0.0.1, run by uvicorn in the test's own event loop.

`serving` runs any ASGI app (Parley, or a fake backend) until the block ends;
`RunningServer` is what the `serve` / `server` fixtures of tests/conftest.py hand out.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import uvicorn
from openai import AsyncOpenAI
from openai.resources.realtime.realtime import AsyncRealtimeConnectionManager

from server.cli import uvicorn_options
from server.config import Settings

# Fast, but still paced: a response streams over a few hundred milliseconds.
TEST_SETTINGS: dict[str, Any] = {
    "executor": "scripted",
    "scripted_chunk_delay_s": 0.01,
    "log_level": "warning",
}
START_TIMEOUT_S = 10.0


def free_port() -> int:
    """A port nothing listens on right now (for a server in another process)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def bound_socket() -> socket.socket:
    """A socket bound to a free port, for a server in this process to listen on."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


class _Server(uvicorn.Server):
    """uvicorn.Server that reports readiness as an event and leaves the process's
    signal handlers (pytest's Ctrl-C) alone."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = asyncio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.ready.set()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def serving(
    config: uvicorn.Config,
    sock: socket.socket,
    *,
    name: str,
    start_timeout_s: float = START_TIMEOUT_S,
    stop_timeout_s: float = 15,
) -> AsyncIterator[None]:
    """Serve `config`'s app on `sock` until the block ends; fail if it does not start."""
    server = _Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]), name=name)
    try:
        ready = asyncio.create_task(server.ready.wait())
        await asyncio.wait(
            {ready, task}, timeout=start_timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
        if not server.ready.is_set():
            ready.cancel()
            if task.done():
                task.result()  # raise why it failed to start
            raise AssertionError(f"{name} did not start within {start_timeout_s} s")
        yield
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, stop_timeout_s)


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
