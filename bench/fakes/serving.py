"""Serving an ASGI app (Parley, or a fake model server) on a socket of 127.0.0.1 in
this event loop, until a block ends: for the fakes here and for the tests."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator

import uvicorn

START_TIMEOUT_S = 10.0


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
