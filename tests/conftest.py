"""A real Parley server (uvicorn, in the test's event loop) for end-to-end tests.

`serve(**overrides)` starts one on 127.0.0.1 with a free port, running
`create_app(Settings(...))` under the same uvicorn configuration `parley serve` uses
(server.cli.uvicorn_config), and returns it; every server started is shut down
cleanly when the test ends. `server` is one with the test defaults.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import uvicorn

from server.cli import uvicorn_config
from server.config import Settings

# Fast, but still paced: a response streams over a few hundred milliseconds.
TEST_SETTINGS: dict[str, Any] = {
    "executor": "scripted",
    "scripted_chunk_delay_s": 0.01,
    "log_level": "warning",
}
START_TIMEOUT_S = 10.0


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


@pytest.fixture
async def serve() -> AsyncIterator[ServerFactory]:
    running: list[tuple[_Server, asyncio.Task[None]]] = []

    async def start(**overrides: Any) -> RunningServer:
        settings = Settings(**{**TEST_SETTINGS, **overrides})
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        server = _Server(uvicorn_config(settings, host="127.0.0.1", port=port, log_config=None))
        task = asyncio.create_task(server.serve(sockets=[sock]), name=f"uvicorn:{port}")
        running.append((server, task))
        ready = asyncio.create_task(server.ready.wait())
        await asyncio.wait(
            {ready, task}, timeout=START_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED
        )
        if not server.ready.is_set():
            ready.cancel()
            if task.done():
                task.result()  # raise why it failed to start
            raise AssertionError(f"server did not start within {START_TIMEOUT_S} s")
        return RunningServer(settings, port)

    try:
        yield start
    finally:
        for server, _ in running:
            server.should_exit = True
        for _, task in running:
            await asyncio.wait_for(task, 15)


@pytest.fixture
async def server(serve: ServerFactory) -> RunningServer:
    return await serve()
