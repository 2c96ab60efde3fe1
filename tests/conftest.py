"""A real Parley server (uvicorn, in the test's event loop) for end-to-end tests.

`serve(**overrides)` starts one on 127.0.0.1 with a free port, running
`create_app(Settings(...))` under the same uvicorn configuration `parley serve` uses
(server.cli.uvicorn_config), and returns it; every server started is shut down
cleanly when the test ends. `server` is one with the test defaults; `apps` lists
the apps served from then on, to reach their state (clocks, hub, limits).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from fastapi import FastAPI

import server.app as server_app
from bench.fakes.serving import bound_socket, serving
from server.app import create_app
from server.cli import uvicorn_config
from server.config import Settings
from tests.support.servers import TEST_SETTINGS, RunningServer, ServerFactory


@pytest.fixture(autouse=True)
def root_logging_restored() -> Iterator[None]:
    """`parley serve` (server.cli.main) sets up the root logger of its process. Run
    in-process by a test, its handler writes to that test's captured stderr, closed
    afterwards: left in place, every later log line fails on it and slows the servers
    of later tests by seconds. Each test leaves the root logger as it found it."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in root.handlers[:]:
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)


@pytest.fixture
async def serve() -> AsyncIterator[ServerFactory]:
    async with contextlib.AsyncExitStack() as running:

        async def start(**overrides: Any) -> RunningServer:
            settings = Settings(**{**TEST_SETTINGS, **overrides})
            sock = bound_socket()
            port = sock.getsockname()[1]
            config = uvicorn_config(settings, host="127.0.0.1", port=port, log_config=None)
            await running.enter_async_context(serving(config, sock, name=f"uvicorn:{port}"))
            return RunningServer(settings, port)

        yield start


@pytest.fixture
async def server(serve: ServerFactory) -> RunningServer:
    return await serve()


@pytest.fixture
def apps(monkeypatch: pytest.MonkeyPatch) -> list[FastAPI]:
    """The apps `serve` builds from now on, to reach their state (clock, sessions)."""
    made: list[FastAPI] = []

    def create(settings: Settings) -> FastAPI:
        made.append(create_app(settings))
        return made[-1]

    monkeypatch.setattr(server_app, "create_app", create)  # what server/cli.py imports
    return made
