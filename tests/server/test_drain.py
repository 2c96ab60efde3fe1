"""SIGTERM drains a real `parley serve` process: not ready, no new sessions, the
answer in flight finishes, then 1001; an answer longer than the drain is cancelled at
the deadline with its `response.done`, then 1001; a client that stopped reading does
not keep the process alive past the drain deadline. In one process and with
`--workers 2`."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.support.processes import parley_serve
from tests.support.raw_ws import RawWebSocket, close_code, parse_frames
from tests.support.servers import free_port

DRAIN_S = 3.0
# From SIGTERM to exit: the drain, the grace at its deadline (END_GRACE_S, 2 s), the
# sessions' bounded shutdown and uvicorn's (SHUTDOWN_GRACE_S, 3 s); CPU is shared.
EXIT_WITHIN_S = DRAIN_S + 9.0
# 6 words, one 100 ms chunk each, 0.3 s apart: about 2 s, well inside the drain.
CHUNK_DELAY_S = "0.3"
NO_VAD = {"type": "session.update", "session": {"audio": {"input": {"turn_detection": None}}}}


@contextmanager
def parley(*flags: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`parley serve` from this checkout, scripted and slow; yields the process and its
    base URL once /readyz answers 200."""
    port = free_port()
    env = {**os.environ, "PARLEY_SCRIPTED_CHUNK_DELAY_S": CHUNK_DELAY_S}
    argv = ["--executor", "scripted", "--vad-backend", "webrtc", "--log-level", "warning"]
    argv += ["--drain-timeout", str(DRAIN_S), *flags]
    with parley_serve(port, argv, env, ready="/readyz") as proc:
        yield proc, f"http://127.0.0.1:{port}"


DRAINED = (1001, "Server shutting down; reconnect.")
# The scripted executor reads a tool's output back, a word per chunk: 40 words at
# 0.3 s are 12 s, far past the drain deadline.
LONG_OUTPUT = " ".join(["word"] * 40)


async def answer_in_flight(url: str, *, long: bool = False) -> ClientConnection:
    """A session whose (manual) answer has started streaming; `long`: one that
    outlasts the drain."""
    ws = await connect(url.replace("http", "ws") + "/v1/realtime", proxy=None, max_size=None)
    await ws.send(json.dumps(NO_VAD))
    if long:
        item = {"type": "function_call_output", "call_id": "call_1", "output": LONG_OUTPUT}
        await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
    await ws.send(json.dumps({"type": "response.create"}))
    while json.loads(await ws.recv())["type"] != "response.output_audio.delta":
        pass
    return ws


async def rest_of(ws: ClientConnection) -> list[dict[str, Any]]:
    events = []
    try:
        while True:
            events.append(json.loads(await ws.recv()))
    except ConnectionClosed:
        return events


def stall(port: int, flooded: threading.Event) -> OSError | int | None:
    """A client that asks for ~24 MB of echoes, far more than the socket buffers
    hold, and reads nothing; `flooded` is set once it has sent them all or the
    server stopped taking them. Then it reads: how the connection ended (the error of
    a reset, the code of a close frame, or None)."""
    ws = RawWebSocket(port, receive_buffer=4096)
    try:
        update = {"type": "session.update", "session": {"instructions": "x" * 60_000}}
        ws.sock.settimeout(2)
        try:
            for _ in range(400):
                ws.send(update)
        except TimeoutError:
            pass  # the server stopped reading: its outbox is full
        except OSError as exc:
            return exc
        finally:
            flooded.set()
        ws.sock.settimeout(30)
        data, error = ws.read_to_end()
        return error or close_code(parse_frames(data))
    finally:
        ws.close()


async def wait_for(predicate: Any, timeout_s: float = 10) -> None:
    async with asyncio.timeout(timeout_s):
        # Another process: there is no event to wait on, only its answers.
        while not await predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.05)


async def draining(http: httpx.AsyncClient) -> bool:
    return (await http.get("/readyz")).status_code == 503


async def check_drain(
    proc: subprocess.Popen[str], url: str, *, stalled: bool, workers: int = 1
) -> None:
    port = int(url.rsplit(":", 1)[1])
    talker = await answer_in_flight(url)
    outlasting = await answer_in_flight(url, long=True)
    stuck: asyncio.Task[OSError | int | None] | None = None
    if stalled:
        flooded = threading.Event()
        stuck = asyncio.create_task(asyncio.to_thread(stall, port, flooded))
        await asyncio.to_thread(flooded.wait, 60)  # the server's writer is stuck now
    signalled = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    async with httpx.AsyncClient(base_url=url, trust_env=False) as http:
        await wait_for(lambda: draining(http))
        health = await http.get("/healthz")
        assert health.status_code == 200 and health.json()["status"] == "draining"
    if workers == 1:
        # (With several workers, the kernel picks which one takes an upgrade, and it
        # may not have had its SIGTERM from the supervisor yet.)
        with pytest.raises(InvalidStatus) as refused:
            await connect(url.replace("http", "ws") + "/v1/realtime", proxy=None)
        assert refused.value.response.status_code == 503
        assert json.loads(refused.value.response.body or b"{}")["error"]["code"] == (
            "server_shutting_down"
        )
    # The answer in flight finishes, then the session is closed with 1001.
    events = await rest_of(talker)
    done = [e for e in events if e["type"] == "response.done"]
    assert len(done) == 1 and done[0]["response"]["status"] == "completed"
    assert (talker.close_code, talker.close_reason) == DRAINED
    # The answer longer than the drain is cancelled at its deadline: one
    # response.done, nothing of the answer after it, then 1001.
    events = await rest_of(outlasting)
    kinds = [e["type"] for e in events]
    assert kinds.count("response.done") == 1 and kinds[-1] == "response.done", kinds[-5:]
    assert events[-1]["response"]["status"] == "cancelled"
    assert time.monotonic() - signalled >= DRAIN_S
    assert (outlasting.close_code, outlasting.close_reason) == DRAINED
    # The process ends by the deadline + a few seconds, stalled client or not.
    await asyncio.to_thread(proc.wait, EXIT_WITHIN_S + 5)
    assert time.monotonic() - signalled < EXIT_WITHIN_S
    if stuck is not None:
        # Let go: aborted (a reset, under its read or its last send), or, when what was
        # queued for it fit in the socket buffers by then, closed (1008: not reading;
        # 1001: drained), which it sees once it reads. Either way nobody waited for it.
        ended = await stuck
        assert isinstance(ended, ConnectionResetError | BrokenPipeError) or ended in (
            1008,
            1001,
        ), f"not let go: {ended!r}"


async def test_sigterm_drains_with_an_answer_in_flight_and_a_stalled_client() -> None:
    with parley() as (proc, url):
        await check_drain(proc, url, stalled=True)


async def test_every_worker_drains() -> None:
    with parley("--workers", "2") as (proc, url):
        await check_drain(proc, url, stalled=False, workers=2)
