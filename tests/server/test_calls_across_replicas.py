"""WebRTC calls behind a load balancer: two real replicas (uvicorn on 127.0.0.1,
each with its own PARLEY_REPLICA_URL and the shared key secret). A call is made on
one; its sideband, hang-up and DELETE are sent to the other, as a round-robin
balancer would, and reach the call."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import websockets
from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers

from server.call_routes import FORWARDED_HEADER, CallRoutes, plain_call_id
from server.cli import uvicorn_config
from server.config import Settings
from tests.support.events import TIMEOUT_S, Events
from tests.support.servers import (
    TEST_SETTINGS,
    RunningServer,
    ServerFactory,
    bound_socket,
    serving,
)
from tests.support.webrtc_client import rtc_call

KEY = "sk-parley-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
SECRET = "a-shared-secret-of-at-least-32-chars!"


@pytest.fixture
async def replica() -> AsyncIterator[ServerFactory]:
    """Starts replicas, each named by its own URL, all with the same keys and secret."""
    async with contextlib.AsyncExitStack() as running:

        async def start(**overrides: Any) -> RunningServer:
            sock = bound_socket()
            port = sock.getsockname()[1]
            url = f"http://127.0.0.1:{port}"
            given = {"api_keys": [KEY], "key_secret": SECRET, "replica_url": url} | overrides
            settings = Settings(**TEST_SETTINGS, **given)
            config = uvicorn_config(settings, host="127.0.0.1", port=port, log_config=None)
            await running.enter_async_context(serving(config, sock, name=f"replica:{port}"))
            return RunningServer(settings, port)

        yield start


@pytest.fixture
async def replicas(replica: ServerFactory) -> tuple[RunningServer, RunningServer]:
    return await replica(), await replica()


async def test_a_calls_sideband_and_hangup_sent_to_another_replica_reach_it(
    replicas: tuple[RunningServer, RunningServer],
) -> None:
    a, b = replicas
    async with rtc_call(a, key=KEY) as call, httpx.AsyncClient(base_url=b.http_url) as http:
        await call.events.until("session.created")
        assert CallRoutes(SECRET.encode(), b.http_url).holder(call.call_id) == a.http_url
        url = f"{b.ws_url}?call_id={call.call_id}"
        # From a page of the server's own: checked by B, whose Host it called.
        headers = AUTH | {"Origin": b.http_url}
        sideband = websockets.connect(url, additional_headers=headers, subprotocols=["realtime"])
        async with sideband as ws:
            assert ws.subprotocol == "realtime"  # as the holder chose it
            side = Events(ws.recv)
            update = {"type": "realtime", "instructions": "Answer like a pirate."}
            await ws.send(json.dumps({"type": "session.update", "session": update}))
            # The call on A took it: its data channel says so, and B relays A's answer.
            updated = await side.until("session.updated")
            assert updated["session"]["instructions"] == update["instructions"]
            on_call = await call.events.until("session.updated")
            assert on_call["session"]["instructions"] == update["instructions"]
            await ws.send(json.dumps({"type": "response.create"}))
            done = await side.until("response.done")
            assert done["response"]["status"] == "completed"
            # A request a replica forwarded is answered where it lands: never again.
            looped = await http.post(
                f"/v1/realtime/calls/{call.call_id}/hangup", headers=AUTH | {FORWARDED_HEADER: "1"}
            )
            assert looped.status_code == 404
            hung = await http.post(f"/v1/realtime/calls/{call.call_id}/hangup", headers=AUTH)
            assert hung.status_code == 200
            # The call ends on A, and A's close of the sideband reaches the client as is.
            with pytest.raises(websockets.ConnectionClosed) as closed:
                while True:
                    await asyncio.wait_for(ws.recv(), TIMEOUT_S)
            assert closed.value.rcvd is not None
            assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (1000, "Call ended.")
        await call.until_closed(TIMEOUT_S)
        gone = await http.post(f"/v1/realtime/calls/{call.call_id}/hangup", headers=AUTH)
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "call_not_found"
        with pytest.raises(websockets.InvalidStatus) as refused:
            await websockets.connect(url, additional_headers=AUTH)
        assert refused.value.response.status_code == 404  # A's answer, relayed


async def mint(http: httpx.AsyncClient) -> str:
    minted = await http.post("/v1/realtime/client_secrets", json={}, headers=AUTH)
    value: str = minted.json()["value"]
    return value


async def test_a_calls_delete_sent_to_another_replica_ends_it_for_its_own_key_only(
    replicas: tuple[RunningServer, RunningServer],
) -> None:
    a, b = replicas
    async with httpx.AsyncClient(base_url=b.http_url) as http:
        mine, other = await mint(http), await mint(http)  # minted on B, used on A
        async with rtc_call(a, key=mine) as call:
            await call.events.until("session.created")
            path = f"/v1/realtime/calls/{call.call_id}"
            # A checks the call's owner as for a DELETE of its own.
            stranger = await http.delete(path, headers={"Authorization": f"Bearer {other}"})
            assert stranger.status_code == 404
            assert stranger.json()["error"]["code"] == "call_not_found"
            deleted = await http.delete(path, headers={"Authorization": f"Bearer {mine}"})
            assert deleted.status_code == 200
            await call.until_closed(TIMEOUT_S)
        # Unauthenticated requests are refused before any forward.
        anonymous = await http.delete(path)
        assert anonymous.status_code == 401


async def test_an_id_no_replica_sealed_gets_404_and_reaches_no_address(
    replicas: tuple[RunningServer, RunningServer],
) -> None:
    _, b = replicas
    reached: list[object] = []

    def note(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        reached.append(writer.get_extra_info("peername"))
        writer.close()  # no answer: the forward fails

    sentinel = await asyncio.start_server(note, "127.0.0.1", 0)
    target = f"http://127.0.0.1:{sentinel.sockets[0].getsockname()[1]}"
    sealed = CallRoutes(SECRET.encode(), target).mint()
    forged = [
        CallRoutes(b"another-secret-of-at-least-32-chars!", target).mint(),
        sealed[:10] + ("A" if sealed[10] != "A" else "B") + sealed[11:],
        plain_call_id(),
    ]
    try:
        async with httpx.AsyncClient(base_url=b.http_url) as http:
            for call_id in forged:
                for method, path in (("POST", "/hangup"), ("DELETE", "")):
                    answer = await http.request(
                        method, f"/v1/realtime/calls/{call_id}{path}", headers=AUTH
                    )
                    assert answer.status_code == 404, answer.text
                    assert answer.json()["error"]["code"] == "call_not_found"
                url = f"{b.ws_url}?call_id={call_id}"
                with pytest.raises(websockets.InvalidStatus) as refused:
                    await websockets.connect(url, additional_headers=AUTH)
                assert refused.value.response.status_code == 404
            assert reached == []
            # The same address in an id a replica sealed is where B goes (and fails).
            answer = await http.post(f"/v1/realtime/calls/{sealed}/hangup", headers=AUTH)
            assert answer.status_code == 502
            assert answer.json()["error"]["code"] == "replica_unreachable"
            assert len(reached) == 1
    finally:
        sentinel.close()
        await sentinel.wait_closed()


async def test_the_relay_passes_frames_both_ways_and_each_sides_close_to_the_other(
    replicas: tuple[RunningServer, RunningServer],
) -> None:
    """B relays to a stand-in holder (an id sealed with the shared secret names it),
    which says what it got and closes, or drops, as it is told."""
    _, b = replicas
    heard: asyncio.Queue[tuple[str, Headers, int | None, str]] = asyncio.Queue()

    async def holder(conn: ServerConnection) -> None:
        await conn.send("hello")
        command = await conn.recv()
        assert isinstance(command, str)
        if command == "close":
            await conn.close(4002, "from the holder")
        elif command == "drop":
            conn.transport.abort()
        else:
            await conn.send(f"got {command}")
            await conn.wait_closed()
        assert conn.request is not None
        await heard.put((command, conn.request.headers, conn.close_code, conn.close_reason))

    async with websockets.serve(holder, "127.0.0.1", 0) as fake:
        target = f"http://127.0.0.1:{fake.sockets[0].getsockname()[1]}"
        url = f"{b.ws_url}?call_id={CallRoutes(SECRET.encode(), target).mint()}"
        headers = AUTH | {"Origin": b.http_url}  # the server's own page

        async def ends_with(command: str) -> websockets.ConnectionClosed:
            async with websockets.connect(url, additional_headers=headers) as ws:
                assert await ws.recv() == "hello"
                await ws.send(command)
                if command not in ("close", "drop"):
                    assert await ws.recv() == f"got {command}"
                    await ws.close(4001, "from the client")
                with pytest.raises(websockets.ConnectionClosed) as closed:
                    await asyncio.wait_for(ws.recv(), TIMEOUT_S)
            return closed.value

        by_client = await ends_with("ping")
        command, carried, code, reason = await heard.get()
        assert command == "ping"
        assert (code, reason) == (4001, "from the client")  # the client's close, relayed
        assert carried["authorization"] == AUTH["Authorization"]
        assert carried[FORWARDED_HEADER] == "1" and "origin" not in carried
        assert by_client.sent is not None and by_client.sent.code == 4001
        by_holder = await ends_with("close")
        assert by_holder.rcvd is not None
        assert (by_holder.rcvd.code, by_holder.rcvd.reason) == (4002, "from the holder")
        dropped = await ends_with("drop")
        assert dropped.rcvd is None  # dropped as the holder dropped it (1006)


async def test_a_client_that_stops_reading_a_relayed_sideband_is_cut_off_and_the_holder_freed(
    replica: ServerFactory,
) -> None:
    """The relay holds one frame at a time: a client that reads nothing is cut off
    after the write timeout, and the holder's side is closed (not buffered for)."""
    b = await replica(write_timeout_s=0.5)
    freed = asyncio.Event()
    sent = 0

    async def holder(conn: ServerConnection) -> None:
        nonlocal sent
        try:
            while True:  # far more than any socket buffer holds
                await conn.send("x" * 65536)
                sent += 1
        except websockets.ConnectionClosed:
            freed.set()

    async with websockets.serve(holder, "127.0.0.1", 0) as fake:
        target = f"http://127.0.0.1:{fake.sockets[0].getsockname()[1]}"
        url = f"{b.ws_url}?call_id={CallRoutes(SECRET.encode(), target).mint()}"
        # max_queue=1: the client's library reads little ahead of the app, which reads nothing.
        async with websockets.connect(url, additional_headers=AUTH, max_queue=1) as ws:
            await asyncio.wait_for(freed.wait(), TIMEOUT_S)
            with pytest.raises(websockets.ConnectionClosed) as closed:
                while True:
                    await asyncio.wait_for(ws.recv(), TIMEOUT_S)
    assert closed.value.rcvd is None  # cut off, as a client not reading is
    assert sent < 1024  # 64 MiB: what the holder was let send before it was freed
