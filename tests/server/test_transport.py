"""The connection itself: a close frame reaches a client that is still sending, and a
client that stops reading is let go at the write deadline (server/ws_protocol.py,
the writer of server/realtime.py)."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import httpx
from starlette.websockets import WebSocketDisconnect, WebSocketState

from engine.emitter import Outbox, OutboxOverflow, OutEvent
from server.config import Settings
from server.realtime import (
    CLOSE_GOING_AWAY,
    CLOSE_NOT_READING,
    Ending,
    RealtimeEndpoint,
    WriteTimeout,
    ending_of,
)
from server.resume import ResumeRegistry
from server.resume_tokens import ResumeTokens
from server.sessions import SessionHub
from server.ws_protocol import ABORT_EXTENSION
from tests.support.processes import parley_serve
from tests.support.raw_ws import TEXT, RawWebSocket, close_code, frame, parse_frames
from tests.support.servers import ServerFactory, free_port

# --- 1009 ------------------------------------------------------------------------------


def send_oversize_then_read(port: int) -> tuple[OSError | None, int | None, OSError | None]:
    """Send an 8 MiB frame in one go (a client that reads only when it has sent),
    then read to the end: the send's error, the close code, the read's error."""
    ws = RawWebSocket(port)
    try:
        sent: OSError | None = None
        try:
            ws.send_raw(
                frame(TEXT, b'{"type":"input_audio_buffer.append","audio":"' + b"A" * (8 << 20))
            )
        except OSError as exc:
            sent = exc
        data, read = ws.read_to_end()
        return sent, close_code(parse_frames(data)), read
    finally:
        ws.close()


async def test_a_client_still_sending_gets_the_1009_close_frame(serve: ServerFactory) -> None:
    # Frames over 128 KiB close the connection: this one is refused from its header
    # on, with 8 MiB still to come. The server closing its socket then would reset
    # the connection under the client's send (and discard the close frame).
    server = await serve(max_message_bytes=64 * 1024)
    sent, code, read = await asyncio.to_thread(send_oversize_then_read, server.port)
    assert sent is None, f"the send was cut: {sent!r}"
    assert code == 1009
    assert read is None, f"the connection ended in {read!r}, not an orderly close"


# --- the write deadline, unit ----------------------------------------------------------


class StuckWebSocket:
    """A WebSocket whose client reads nothing: every send waits forever."""

    def __init__(self) -> None:
        self.aborted = 0
        self.client_state = WebSocketState.CONNECTED
        self.scope: dict[str, Any] = {"extensions": {ABORT_EXTENSION: {"abort": self.abort}}}

    def abort(self) -> None:
        self.aborted += 1

    async def send_text(self, text: str) -> None:
        await asyncio.Event().wait()

    async def close(self, code: int = 1000, reason: str | None = None) -> None:
        await asyncio.Event().wait()


class FakeSession:
    def __init__(self) -> None:
        self.outbox = Outbox()
        self.outbox.put_control(OutEvent('{"type":"session.created"}', "session.created"))


def endpoint(write_timeout_s: float) -> RealtimeEndpoint:
    settings = Settings(executor="scripted", write_timeout_s=write_timeout_s)
    hub = SessionHub(settings, None, None)  # type: ignore[arg-type]
    return RealtimeEndpoint(hub, None, ResumeRegistry(ResumeTokens()))  # type: ignore[arg-type]


async def test_a_send_past_the_write_deadline_ends_the_writer() -> None:
    ws = StuckWebSocket()
    writer = endpoint(0.01)._write(ws, FakeSession(), beta=False)  # type: ignore[arg-type]
    try:
        await writer
    except WriteTimeout:
        pass
    else:
        raise AssertionError("the writer waited past its deadline without failing")


class GoneWebSocket(StuckWebSocket):
    """A client that left while the server was sending to it."""

    async def send_text(self, text: str) -> None:
        raise WebSocketDisconnect(code=1006)


async def test_a_client_gone_under_a_send_ends_the_writer_without_a_failure() -> None:
    # (It ended the connection as an internal failure, 1011 and an ERROR line, in
    # about one of 300 sessions of a soak that drops connections.)
    await endpoint(10)._write(GoneWebSocket(), FakeSession(), beta=False)  # type: ignore[arg-type]


async def test_a_stuck_close_frame_is_replaced_by_an_abort() -> None:
    ws = StuckWebSocket()
    await endpoint(0.01)._close(ws, Ending(CLOSE_NOT_READING))  # type: ignore[arg-type]
    assert ws.aborted == 1


async def test_a_write_timeout_aborts_without_a_close_frame() -> None:
    ws = StuckWebSocket()
    await endpoint(10)._close(ws, Ending(abort=True))  # type: ignore[arg-type]
    assert ws.aborted == 1


async def test_ending_of_each_way_a_connection_ends() -> None:
    async def fail(exc: BaseException) -> None:
        raise exc

    async def ok() -> None:
        return None

    tasks = {
        "overflow": asyncio.create_task(fail(OutboxOverflow("full"))),
        "timeout": asyncio.create_task(fail(WriteTimeout("stuck"))),
        "bug": asyncio.create_task(fail(RuntimeError("bug"))),
        "ok": asyncio.create_task(ok()),
        "ok2": asyncio.create_task(ok()),
    }
    await asyncio.wait(tasks.values())
    t = tasks
    assert ending_of(t["ok"], t["timeout"], {t["timeout"]}) == Ending(abort=True)
    assert ending_of(t["overflow"], t["ok2"], {t["overflow"]}).code == CLOSE_NOT_READING
    assert ending_of(t["bug"], t["ok2"], {t["bug"]}).code == 1011
    assert ending_of(t["ok"], t["ok2"], {t["ok"]}).code == CLOSE_GOING_AWAY
    assert ending_of(t["ok"], t["ok2"], {t["ok2"]}) == Ending()  # the client left


# --- the write deadline, end to end ----------------------------------------------------


# How long the end-to-end test waits for the server to let its stalled client go.
LET_GO_DEADLINE_S = 20.0


def sessions_open(port: int) -> int:
    with httpx.Client(trust_env=False) as http:
        return int(http.get(f"http://127.0.0.1:{port}/healthz").json()["sessions"])


def flood_without_reading(port: int) -> OSError | int | None:
    """A client with a tiny receive window that asks for ~12 MB of echoes, far more than
    the socket buffers hold, and reads nothing until the server has ended its session
    (by /healthz); then reads to the end. How the connection ended: the error of the
    send or of the read, else the code of the close frame it read (None: none)."""
    ws = RawWebSocket(port, receive_buffer=4096)
    ws.sock.settimeout(LET_GO_DEADLINE_S)  # a server that never lets go fails the test
    try:
        update = {"type": "session.update", "session": {"instructions": "x" * 60_000}}
        try:
            for _ in range(200):
                ws.send(update)
        except OSError as exc:
            return exc
        # Not reading is the point: a client that reads, however slowly, may be sent
        # everything in time, and then nothing ends its (healthy) session.
        deadline = time.monotonic() + LET_GO_DEADLINE_S
        while sessions_open(port) and time.monotonic() < deadline:
            time.sleep(0.05)
        data, error = ws.read_to_end()
        return error or close_code(parse_frames(data))
    finally:
        ws.close()


def test_a_client_that_stops_reading_is_aborted_at_the_write_deadline() -> None:
    # A server process of its own: what the test process has loaded and set up by then
    # (models, log handlers) must not change when the server gets to write.
    port = free_port()
    env = {**os.environ, "PARLEY_WRITE_TIMEOUT_S": "0.5"}
    flags = ["--executor", "scripted", "--vad-backend", "webrtc", "--log-level", "warning"]
    with parley_serve(port, flags, env, ready="/readyz") as proc:
        # Its session ends while the client is connected and not reading: the
        # connection is aborted (a reset, under the client's last send or its read),
        # or, when what was queued for it still fit in the socket buffers as the outbox
        # overflowed, closed with 1008, which the client sees once it reads.
        ended = flood_without_reading(port)
        open_after = sessions_open(port)
        proc.terminate()
        server_log = proc.communicate(timeout=30)[1]
    let_go = isinstance(ended, ConnectionResetError | BrokenPipeError) or ended == 1008
    assert let_go, f"not let go: {ended!r}; the server said:\n{server_log}"
    assert open_after == 0
