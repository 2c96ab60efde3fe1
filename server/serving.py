"""The serving processes: uvicorn's server with a graceful drain before its shutdown,
and the `--workers N` supervisor whose workers run that server too.

uvicorn's own shutdown closes the listener and sends every WebSocket 1012 at once.
`DrainingServer` first drains the session hub (`SessionHub.drain`) while
still listening, so `/readyz` answers 503 and new upgrades get 503 while answers in
flight finish; then uvicorn's shutdown runs, bounded by `timeout_graceful_shutdown`.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from types import FrameType
from typing import Any, Protocol, runtime_checkable

import uvicorn
from uvicorn.supervisors import multiprocess

# Nothing of Parley is imported here: a `--workers` process unpickles DrainingProcess
# before it answers the supervisor's first health check (5 s), so this module must
# load fast; the app (and server.sessions) is loaded afterwards, by the server.

log = logging.getLogger(__name__)

# After the drain: how long uvicorn's shutdown waits for connections and tasks
# (HTTP requests, closing handshakes) before it cancels them.
SHUTDOWN_GRACE_S = 3.0
# How long a worker may take to answer the supervisor's health check. uvicorn's 5 s
# default kills and restarts workers forever when starting one (spawn imports the
# main module, i.e. all of Parley, before the worker can answer) takes longer, as
# it does on 2 busy cores (6 s measured).
WORKER_HEALTHCHECK_S = 30


@runtime_checkable
class Drainable(Protocol):
    """What the server drains (server.sessions.SessionHub)."""

    async def drain(self, cut: asyncio.Event | None = None) -> None: ...


def find_hub(app: Any) -> Drainable | None:
    """The session hub of a loaded app, through uvicorn's wrappers (proxy headers,
    logging), each of which holds the app it wraps as `.app`."""
    for _ in range(8):
        state = getattr(app, "state", None)
        hub = getattr(state, "hub", None)
        if isinstance(hub, Drainable):
            return hub
        app = getattr(app, "app", None)
        if app is None:
            return None
    return None


class DrainingServer(uvicorn.Server):
    """uvicorn.Server that drains Parley's sessions before shutting down. A second
    SIGINT (Ctrl+C twice) cuts the drain short, as it cuts uvicorn's wait."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._cut: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        hub = find_hub(self.config.loaded_app)
        if hub is not None and not self.force_exit:
            self._loop = asyncio.get_running_loop()
            self._cut = asyncio.Event()
            await hub.drain(self._cut)
        await super().shutdown(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        # A signal handler: only hand the cut to the loop, thread-safely.
        if self.force_exit and self._loop is not None and self._cut is not None:
            self._loop.call_soon_threadsafe(self._cut.set)


class DrainingProcess(multiprocess.Process):
    """A `--workers` process that runs `DrainingServer`."""

    @property
    def server(self) -> uvicorn.Server:
        if self._server is None:
            self._server = DrainingServer(config=self.config)
        return self._server


def run_workers(config: uvicorn.Config) -> None:
    """What `uvicorn.run` does for `workers > 1`, with draining workers. The
    supervisor sends SIGTERM to every worker and waits for them without a deadline,
    so each gets its whole drain."""
    config.timeout_worker_healthcheck = max(config.timeout_worker_healthcheck, WORKER_HEALTHCHECK_S)
    sock = config.bind_socket()
    # uvicorn's supervisor makes its workers from its module's `Process`: swapped for
    # this run only (uvicorn has no setting for it).
    original = multiprocess.Process
    multiprocess.Process = DrainingProcess  # type: ignore[misc]
    try:
        multiprocess.Multiprocess(config, sockets=[sock]).run()
    except KeyboardInterrupt:
        pass
    finally:
        multiprocess.Process = original  # type: ignore[misc]
        sock.close()
