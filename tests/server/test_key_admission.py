"""Who may open what, over a real server: an ephemeral key opens one session or call
(server/key_uses.py), only the key that made a call may hang it up, and per-key
limits on sessions open and new sessions (server/key_limits.py) answer HTTP 429."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from aiortc import RTCConfiguration, RTCPeerConnection
from fastapi import FastAPI
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosedError, InvalidStatus

from bench.rtc_client import offer_sdp
from server import cli
from server.auth import ApiError, KeyStore
from server.config import Settings
from server.ephemeral_keys import EphemeralKey
from server.key_limits import KeyLimits, client_of
from server.key_uses import KeyUses
from tests.support.events import TIMEOUT_S, read_event
from tests.support.refusals import handshake_refusal
from tests.support.scrape import parse, value
from tests.support.servers import RunningServer, ServerFactory

KEY = "sk-parley-test-key"
OTHER_KEY = "sk-parley-other-key"


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def open_ws(server: RunningServer, key: str | None = None) -> Any:
    headers = bearer(key) if key else {}
    return connect(server.ws_url, open_timeout=TIMEOUT_S, additional_headers=headers)


async def created(ws: ClientConnection) -> None:
    assert (await read_event(ws.recv))["type"] == "session.created"


async def refusal(server: RunningServer, key: str | None = None) -> tuple[int, dict[str, Any]]:
    """A WebSocket refused before the upgrade: its status and OpenAI's error object."""
    return await handshake_refusal(open_ws(server, key))


async def mint(server: RunningServer) -> str:
    async with httpx.AsyncClient(base_url=server.http_url, timeout=TIMEOUT_S) as http:
        minted = await http.post("/v1/realtime/client_secrets", json={}, headers=bearer(KEY))
    assert minted.status_code == 200, minted.text
    value: str = minted.json()["value"]
    return value


# --- one session per ephemeral key ---------------------------------------------------


async def test_an_ephemeral_key_opens_one_websocket(serve: ServerFactory) -> None:
    server = await serve(api_keys=[KEY])
    value = await mint(server)
    async with open_ws(server, value) as ws:
        await created(ws)
        status, error = await refusal(server, value)  # while the first is open
    assert (status, error["code"]) == (401, "invalid_api_key")
    assert "already used" in error["message"]
    status, error = await refusal(server, value)  # and after: a reconnect needs a new key
    assert (status, error["code"]) == (401, "invalid_api_key")
    assert (await refusals_counted(server))["key_used"] == 2
    async with open_ws(server, await mint(server)) as ws:
        await created(ws)
    # PARLEY_EPHEMERAL_KEY_USES=0: a key opens sessions until it expires, as OpenAI's do.
    unlimited = await serve(api_keys=[KEY], ephemeral_key_uses=0)
    value = await mint(unlimited)
    async with open_ws(unlimited, value) as first, open_ws(unlimited, value) as second:
        for ws in (first, second):
            await created(ws)


async def test_concurrent_handshakes_with_one_key_open_one_session(serve: ServerFactory) -> None:
    server = await serve(api_keys=[KEY])
    value = await mint(server)

    async def outcome(stack: contextlib.AsyncExitStack) -> int | str:
        try:
            ws = await stack.enter_async_context(open_ws(server, value))
        except InvalidStatus as refused:
            return refused.response.status_code
        return str((await read_event(ws.recv))["type"])

    async with contextlib.AsyncExitStack() as stack:
        results = await asyncio.gather(*(outcome(stack) for _ in range(4)))
    assert sorted(results, key=str) == [401] * 3 + ["session.created"]


async def test_a_refusal_at_capacity_does_not_spend_the_key(
    serve: ServerFactory, apps: list[FastAPI]
) -> None:
    server = await serve(api_keys=[KEY], max_sessions=1)
    value = await mint(server)
    async with open_ws(server, KEY) as holder:
        await created(holder)
        async with open_ws(server, value) as turned_away:
            with pytest.raises(ConnectionClosedError) as closed:
                await asyncio.wait_for(turned_away.recv(), TIMEOUT_S)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013
    await asyncio.wait_for(apps[0].state.hub.drained.wait(), TIMEOUT_S)
    async with open_ws(server, value) as ws:  # the key still opens its session
        await created(ws)
    status, _ = await refusal(server, value)  # which spent it
    assert status == 401


# --- calls -------------------------------------------------------------------------


async def refusals_counted(server: RunningServer) -> dict[str, float]:
    """`parley_sessions_refused_total` from /metrics, by reason."""
    async with httpx.AsyncClient(base_url=server.http_url, timeout=TIMEOUT_S) as http:
        samples = parse((await http.get("/metrics", headers=bearer(KEY))).text)
    reasons = ("key_used", "key_sessions_open", "key_new_sessions_rate")
    return {r: value(samples, "parley_sessions_refused_total", reason=r) for r in reasons}


@contextlib.asynccontextmanager
async def offering() -> AsyncIterator[str]:
    """An SDP offer from a peer that stays up until the block ends."""
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    pc.addTransceiver("audio")
    pc.createDataChannel("oai-events")
    try:
        yield await offer_sdp(pc)
    finally:
        await pc.close()


async def place_call(http: httpx.AsyncClient, key: str, sdp: str) -> httpx.Response:
    headers = bearer(key) | {"Content-Type": "application/sdp"}
    return await http.post("/v1/realtime/calls", content=sdp, headers=headers)


def call_id(response: httpx.Response) -> str:
    assert response.status_code == 201, response.text
    return response.headers["location"].rsplit("/", 1)[-1]


async def test_an_ephemeral_key_places_one_call(serve: ServerFactory) -> None:
    server = await serve(api_keys=[KEY])
    value = await mint(server)
    async with (
        httpx.AsyncClient(base_url=server.http_url, timeout=TIMEOUT_S) as http,
        offering() as first,
        offering() as second,
    ):
        made = call_id(await place_call(http, value, first))
        again = await place_call(http, value, second)
        assert again.status_code == 401, again.text
        assert again.json()["error"]["code"] == "invalid_api_key"
        assert (await http.get("/healthz")).json()["sessions"] == 1
        # Nor does the spent key open a WebSocket beside its call.
        status, _ = await refusal(server, value)
        assert status == 401
        assert (await http.delete(f"/v1/realtime/calls/{made}", headers=bearer(KEY))).is_success


async def test_only_the_key_that_made_a_call_hangs_it_up(serve: ServerFactory) -> None:
    server = await serve(api_keys=[KEY, OTHER_KEY])
    key_a, key_b = await mint(server), await mint(server)
    async with (
        httpx.AsyncClient(base_url=server.http_url, timeout=TIMEOUT_S) as http,
        offering() as offer_a,
        offering() as offer_b,
    ):
        made_by_a = call_id(await place_call(http, key_a, offer_a))
        made_by_api = call_id(await place_call(http, KEY, offer_b))
        # Key B is told what an unknown id tells: nothing about A's call.
        for target in (made_by_a, made_by_api, "rtc_unknown"):
            other = await http.delete(f"/v1/realtime/calls/{target}", headers=bearer(key_b))
            assert other.status_code == 404, other.text
            assert other.json()["error"]["code"] == "call_not_found"
        assert (await http.get("/healthz")).json()["sessions"] == 2
        # A's own key ends it; an API key ends any call, another key's too.
        hung = await http.delete(f"/v1/realtime/calls/{made_by_a}", headers=bearer(key_a))
        assert hung.status_code == 200
        by_api = await http.delete(f"/v1/realtime/calls/{made_by_api}", headers=bearer(OTHER_KEY))
        assert by_api.status_code == 200
        # `/hangup` is the application server's: an ephemeral key gets 403 even for
        # its own call.
        key_c = await mint(server)
        made_by_c = call_id(await place_call(http, key_c, offer_a))
        own = await http.post(f"/v1/realtime/calls/{made_by_c}/hangup", headers=bearer(key_c))
        assert own.status_code == 403
        assert (
            await http.delete(f"/v1/realtime/calls/{made_by_c}", headers=bearer(key_c))
        ).is_success


# --- per-key limits -----------------------------------------------------------------


async def test_sessions_open_per_key_are_capped_across_websockets_and_calls(
    serve: ServerFactory, apps: list[FastAPI]
) -> None:
    server = await serve(api_keys=[KEY, OTHER_KEY], max_sessions_per_key=2)
    async with (
        httpx.AsyncClient(base_url=server.http_url, timeout=TIMEOUT_S) as http,
        offering() as offer,
        open_ws(server, KEY) as ws,
    ):
        await created(ws)
        made = call_id(await place_call(http, KEY, offer))
        status, error = await refusal(server, KEY)
        assert (status, error["code"]) == (429, "rate_limit_exceeded")
        assert "Too many sessions open" in error["message"]
        async with offering() as another:
            refused = await place_call(http, KEY, another)
        assert refused.status_code == 429
        assert refused.json()["error"]["code"] == "rate_limit_exceeded"
        async with open_ws(server, OTHER_KEY) as other:  # another key is unaffected
            await created(other)
        assert (await http.delete(f"/v1/realtime/calls/{made}", headers=bearer(KEY))).is_success
    # Once they have ended, their places are free again.
    await asyncio.wait_for(apps[0].state.hub.drained.wait(), TIMEOUT_S)
    assert (
        apps[0].state.keys.limits.held(client_of(KEY, None, open_server=False, address=None)) == 0
    )
    async with open_ws(server, KEY) as first, open_ws(server, KEY) as second:
        for ws in (first, second):
            await created(ws)


async def test_new_sessions_per_key_are_paced(serve: ServerFactory, apps: list[FastAPI]) -> None:
    server = await serve(
        api_keys=[KEY, OTHER_KEY], new_sessions_per_key_per_minute=60, new_sessions_burst=2
    )
    clock = [5000.0]
    apps[0].state.keys.limits.now = lambda: clock[0]
    for _ in range(2):
        async with open_ws(server, KEY) as ws:
            await created(ws)
    status, error = await refusal(server, KEY)
    assert (status, error["code"], error["type"]) == (429, "rate_limit_exceeded", "requests")
    assert "a minute" in error["message"]
    async with (
        httpx.AsyncClient(base_url=server.http_url, timeout=TIMEOUT_S) as http,
        offering() as offer,
    ):
        refused = await place_call(http, KEY, offer)
    assert refused.status_code == 429
    async with open_ws(server, OTHER_KEY) as ws:
        await created(ws)
    assert (await refusals_counted(server))["key_new_sessions_rate"] == 2
    clock[0] += 1.0  # one new session a second
    async with open_ws(server, KEY) as ws:
        await created(ws)


async def test_an_open_server_limits_each_address(serve: ServerFactory) -> None:
    # Every client of this test is 127.0.0.1: one client to the limits.
    server = await serve(max_sessions_per_key=1)
    async with open_ws(server) as ws:
        await created(ws)
        assert (await refusal(server))[0] == 429


class _NoServer:
    def __init__(self, config: object) -> None:
        self.started = True

    def run(self) -> None:
        pass


def test_the_per_key_session_limit_has_a_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    served: list[Settings] = []

    def config(settings: Settings) -> object:
        served.append(settings)
        return object()

    monkeypatch.setattr(cli, "uvicorn_config", config)
    monkeypatch.setattr(cli, "DrainingServer", _NoServer)
    monkeypatch.setattr(cli, "prepare_to_serve", lambda: None)
    monkeypatch.delenv("PARLEY_MAX_SESSIONS_PER_KEY", raising=False)
    assert cli.main(["serve", "--executor", "scripted", "--max-sessions-per-key", "3"]) == 0
    assert served[-1].max_sessions_per_key == 3
    assert cli.main(["serve", "--executor", "scripted"]) == 0
    assert served[-1].max_sessions_per_key is None


# --- KeyStore.admit, without a server -------------------------------------------------


def ephemeral_key(keys: KeyStore) -> EphemeralKey:
    value, _ = keys.issue("parley", None, 60)
    found = keys.authenticate(value, websocket=True)
    assert found is not None
    return found


def test_a_per_key_refusal_does_not_spend_the_key() -> None:
    limits = KeyLimits(max_open=1, per_minute=0, burst=1)
    keys = KeyStore([KEY], "s" * 32, uses=KeyUses(), limits=limits)
    holder = keys.admit(KEY, None, None)
    first = ephemeral_key(keys)
    client = client_of("ek_", first, open_server=False, address=None)
    limits.open(client)  # the key's one place is taken
    with pytest.raises(ApiError) as refused:
        keys.admit("ek_", first, None)
    assert refused.value.status == 429
    limits.close(client)
    keys.admit("ek_", first, None).release()  # not spent by the 429
    with pytest.raises(ApiError) as used:
        keys.admit("ek_", first, None)
    assert used.value.status == 401
    assert limits.held(client) == 0  # a refused admission holds no place
    holder.release()
    holder.release()  # once only
    assert limits.held(client_of(KEY, None, open_server=False, address=None)) == 0


def test_a_record_that_cannot_be_written_refuses_with_503() -> None:
    uses = KeyUses()
    limits = KeyLimits(max_open=None, per_minute=0, burst=1)
    keys = KeyStore([KEY], "s" * 32, uses=uses, limits=limits)
    found = ephemeral_key(keys)
    uses.close()
    with pytest.raises(ApiError) as refused:
        keys.admit("ek_", found, None)
    assert (refused.value.status, refused.value.type) == (503, "server_error")
    assert limits.held(client_of("ek_", found, open_server=False, address=None)) == 0
