"""API keys, ephemeral client secrets and the session limit, over a real server.

A refused handshake is an HTTP status before the upgrade (the `websockets` client
raises InvalidStatus) with OpenAI's error envelope as the body; a server at its
session limit accepts and then closes with 1013.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from fastapi import FastAPI
from openai import AsyncOpenAI
from openai.types.realtime import ClientSecretCreateResponse
from starlette.websockets import WebSocketState
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosedError

from engine.protocol import SessionIn
from server.app import create_app
from server.auth import (
    KEY_SUBPROTOCOL,
    ApiError,
    KeyStore,
    create_client_secret,
    parse_client_secret_request,
    presented_key,
)
from server.config import Settings
from server.ephemeral_keys import MAX_KEY_CHARS
from tests.support.events import TIMEOUT_S, read_event
from tests.support.refusals import handshake_refusal
from tests.support.sdk_check import _no_extras
from tests.support.servers import TEST_SETTINGS, RunningServer, ServerFactory

KEY = "sk-parley-test-key"
T0 = 1_700_000_000.0  # the fake clock's start, unix seconds


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def open_ws(server: RunningServer, **options: Any) -> Any:
    return connect(server.ws_url + "?model=parley", open_timeout=TIMEOUT_S, **options)


async def next_event(ws: ClientConnection) -> dict[str, Any]:
    return await read_event(ws.recv)


async def until(ws: ClientConnection, kind: str) -> dict[str, Any]:
    while (event := await next_event(ws))["type"] != kind:
        assert event["type"] != "error", event
    return event


async def session_created(ws: ClientConnection) -> dict[str, Any]:
    event = await next_event(ws)
    assert event["type"] == "session.created"
    session: dict[str, Any] = event["session"]
    return session


async def refusal(server: RunningServer, **options: Any) -> tuple[int, dict[str, Any]]:
    """Open a WebSocket that must be refused: the HTTP status and the error object."""
    return await handshake_refusal(open_ws(server, **options))


async def mint(server: RunningServer, body: dict[str, Any], key: str = KEY) -> httpx.Response:
    async with httpx.AsyncClient(base_url=server.http_url, timeout=TIMEOUT_S) as http:
        return await http.post("/v1/realtime/client_secrets", json=body, headers=bearer(key))


# --- real keys ----------------------------------------------------------------------


async def test_bearer_key_opens_a_session(serve: ServerFactory) -> None:
    server = await serve(api_keys=[KEY, "another"])
    async with open_ws(server, additional_headers=bearer(KEY)) as ws:
        await session_created(ws)


async def test_wrong_key_is_refused_before_the_upgrade(serve: ServerFactory) -> None:
    server = await serve(api_keys=[KEY])
    status, error = await refusal(server, additional_headers=bearer(KEY + "x"))
    assert (status, error["code"]) == (401, "invalid_api_key")
    assert error["type"] == "invalid_request_error"


async def test_missing_key_is_refused_when_keys_are_configured(serve: ServerFactory) -> None:
    server = await serve(api_keys=[KEY])
    status, error = await refusal(server)
    assert (status, error["code"]) == (401, "missing_api_key")


async def test_open_server_needs_no_key(server: RunningServer) -> None:
    async with open_ws(server) as ws:
        await session_created(ws)


async def test_browser_subprotocol_key_is_accepted_and_realtime_echoed(
    serve: ServerFactory,
) -> None:
    server = await serve(api_keys=[KEY])
    offered = ["realtime", f"openai-insecure-api-key.{KEY}"]
    async with open_ws(server, subprotocols=offered) as ws:
        assert ws.subprotocol == "realtime"
        await session_created(ws)
    status, _ = await refusal(server, subprotocols=["realtime", "openai-insecure-api-key.nope"])
    assert status == 401


async def test_http_endpoints_need_a_key_but_healthz_does_not(serve: ServerFactory) -> None:
    server = await serve(api_keys=[KEY])
    async with httpx.AsyncClient(base_url=server.http_url, timeout=TIMEOUT_S) as http:
        assert (await http.get("/healthz")).status_code == 200
        refused = await http.get("/v1/models")
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "missing_api_key"
        assert (await http.get("/v1/models", headers=bearer("wrong"))).status_code == 401
        assert (await http.get("/v1/models", headers=bearer(KEY))).status_code == 200
        minted = await http.post("/v1/realtime/client_secrets", json={})
        assert minted.status_code == 401


# --- ephemeral keys -----------------------------------------------------------------


async def test_ephemeral_key_opens_a_session_with_its_preset(
    serve: ServerFactory,
) -> None:
    server = await serve(api_keys=[KEY])
    response = await mint(
        server,
        {
            "expires_after": {"anchor": "created_at", "seconds": 60},
            "session": {
                "type": "realtime",
                "instructions": "Answer in French.",
                "audio": {"input": {"turn_detection": None}},
            },
        },
    )
    assert response.status_code == 200
    raw = response.json()
    _no_extras(ClientSecretCreateResponse.model_validate(raw), "client_secret")
    assert raw["value"].startswith("ek_")
    assert raw["session"]["instructions"] == "Answer in French."

    # Offered as a bearer or as the browser's subprotocol; one session each
    # (tests/server/test_key_admission.py).
    second = (await mint(server, {"session": {"instructions": "Answer in French."}})).json()
    async with (
        open_ws(server, additional_headers=bearer(raw["value"])) as first,
        open_ws(server, subprotocols=["realtime", KEY_SUBPROTOCOL + second["value"]]) as other,
    ):
        sessions = [await session_created(ws) for ws in (first, other)]
    assert [s["instructions"] for s in sessions] == ["Answer in French."] * 2
    assert sessions[0]["audio"]["input"]["turn_detection"] is None
    tampered = raw["value"][:-1] + ("A" if raw["value"][-1] != "A" else "B")
    status, error = await refusal(server, additional_headers=bearer(tampered))
    assert (status, error["code"]) == (401, "invalid_api_key")


async def test_ephemeral_key_expires(serve: ServerFactory, apps: list[FastAPI]) -> None:
    server = await serve(api_keys=[KEY])
    clock = [T0]
    apps[0].state.keys.now = lambda: clock[0]
    body = {"expires_after": {"anchor": "created_at", "seconds": 10}}
    early, late = [(await mint(server, body)).json() for _ in range(2)]
    assert early["expires_at"] == late["expires_at"] == T0 + 10

    clock[0] = T0 + 9.9
    async with open_ws(server, additional_headers=bearer(early["value"])) as ws:
        await session_created(ws)
    clock[0] = T0 + 10
    status, _ = await refusal(server, additional_headers=bearer(late["value"]))
    assert status == 401


async def test_ephemeral_key_cannot_mint_and_is_not_used_up_trying(
    serve: ServerFactory,
) -> None:
    server = await serve(api_keys=[KEY])
    value = (await mint(server, {})).json()["value"]
    refused = await mint(server, {}, key=value)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "insufficient_permissions"
    async with open_ws(server, additional_headers=bearer(value)) as ws:
        await session_created(ws)


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        (
            {
                "session": {
                    "audio": {
                        "input": {"turn_detection": {"type": "semantic_vad", "eagerness": "x"}}
                    }
                }
            },
            "invalid_value",
            "session.audio.input.turn_detection.eagerness",
        ),
        ({"session": {"type": "translation"}}, "invalid_value", "session.type"),
        (
            {"expires_after": {"anchor": "created_at", "seconds": 5}},
            "invalid_value",
            "expires_after.seconds",
        ),
        ({"expires_after": {"seconds": 7201}}, "invalid_value", "expires_after.seconds"),
        ({"expires_after": {"seconds": "600"}}, "invalid_type", "expires_after.seconds"),
        ({"expires_after": {"seconds": 600.0}}, "invalid_type", "expires_after.seconds"),
    ],
)
async def test_bad_client_secret_request_is_400(
    server: RunningServer, body: dict[str, Any], code: str, param: str
) -> None:
    response = await mint(server, body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["code"] == code
    assert error["param"] == param


async def test_official_sdk_creates_a_client_secret_and_connects_with_it(
    serve: ServerFactory,
) -> None:
    server = await serve(api_keys=[KEY])
    base_url = f"{server.http_url}/v1"
    async with AsyncOpenAI(base_url=base_url, api_key=KEY) as client:
        secret = await client.realtime.client_secrets.create(
            session={"type": "realtime", "instructions": "Be brief."},
            expires_after={"anchor": "created_at", "seconds": 120},
        )
    assert secret.value.startswith("ek_")
    assert secret.session.type == "realtime"
    assert secret.session.instructions == "Be brief."

    async with AsyncOpenAI(base_url=base_url, api_key=secret.value) as browser:
        async with browser.realtime.connect(model="parley") as conn:
            event = await asyncio.wait_for(conn.recv(), TIMEOUT_S)
            assert event.type == "session.created"
            assert event.session.instructions == "Be brief."

    async with AsyncOpenAI(base_url=base_url, api_key="wrong") as stranger:
        with pytest.raises(openai.AuthenticationError) as info:
            await stranger.realtime.client_secrets.create()
    assert info.value.code == "invalid_api_key"


async def test_replicas_accept_each_others_keys_only_with_the_same_secret(
    serve: ServerFactory,
) -> None:
    secret = "s" * 32
    minter = await serve(api_keys=[KEY], key_secret=secret)
    replica = await serve(api_keys=[KEY], key_secret=secret)
    stranger = await serve(api_keys=[KEY], key_secret="t" * 32)
    value = (await mint(minter, {"session": {"instructions": "From the minter."}})).json()["value"]
    async with open_ws(replica, additional_headers=bearer(value)) as ws:
        assert (await session_created(ws))["instructions"] == "From the minter."
    status, error = await refusal(stranger, additional_headers=bearer(value))
    assert (status, error["code"]) == (401, "invalid_api_key")


def deep_schema(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


@pytest.mark.parametrize(
    ("body", "param"),
    [
        # Too deep for the serializer (pydantic's depth limit, or another nesting limit).
        (
            json.dumps(
                {
                    "session": {
                        "tools": [{"type": "function", "name": "f", "parameters": deep_schema(300)}]
                    }
                }
            ),
            "session",
        ),
        # Python's NaN, which could not be written back out as JSON: not JSON at all.
        (
            '{"session": {"tools": [{"type": "function", "name": "f", "parameters": {"x": NaN}}]}}',
            None,
        ),
    ],
    ids=["300-deep-schema", "nan"],
)
async def test_a_preset_that_cannot_be_serialized_is_400_and_gives_no_key(
    serve: ServerFactory, body: str, param: str | None
) -> None:
    server = await serve(api_keys=[KEY])
    async with httpx.AsyncClient(base_url=server.http_url, timeout=TIMEOUT_S) as http:
        response = await http.post(
            "/v1/realtime/client_secrets",
            content=body,
            headers={**bearer(KEY), "Content-Type": "application/json"},
        )
    assert response.status_code == 400, response.text
    assert set(response.json()) == {"error"}
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    if param is None:
        assert (error["code"], error["param"]) == ("invalid_json", None)
    else:
        assert error["param"] is not None and error["param"].startswith(param)
    # The server still mints and opens sessions.
    value = (await mint(server, {})).json()["value"]
    async with open_ws(server, additional_headers=bearer(value)) as ws:
        await session_created(ws)


async def test_the_deepest_preset_that_mints_opens_a_session(serve: ServerFactory) -> None:
    """Every key handed out opens a session: a preset just shallow enough to mint is
    not too deep for session.created."""
    secret = "s" * 32
    server = await serve(key_secret=secret)
    keys = KeyStore([], secret)
    value = ""
    for levels in range(1, 400):
        body = {"session": {"tools": [{"name": "f", "parameters": deep_schema(levels)}]}}
        try:
            minted = create_client_secret(
                keys,
                parse_client_secret_request(json.dumps(body).encode()),
                default_model="parley",
                default_ttl_s=60,
            )
        except ApiError as refused:
            assert refused.status == 400
            break
        value = json.loads(minted)["value"]
    assert value and levels < 300
    async with open_ws(server, additional_headers=bearer(value)) as ws:
        tools = (await session_created(ws))["tools"]
    assert tools[0]["parameters"] == deep_schema(levels - 1)


async def test_a_preset_too_large_for_a_key_is_400_naming_the_limit(
    server: RunningServer,
) -> None:
    response = await mint(server, {"session": {"instructions": secrets.token_urlsafe(8000)}})
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["type"], error["code"], error["param"]) == (
        "invalid_request_error",
        "invalid_value",
        "session",
    )
    assert str(MAX_KEY_CHARS) in error["message"]


async def test_the_largest_key_fits_the_browsers_subprotocol_header(serve: ServerFactory) -> None:
    """MAX_KEY_CHARS is honest: a key just under it passes the header limits of the
    WebSocket client and server as a subprotocol."""
    secret = "s" * 32
    server = await serve(api_keys=[KEY], key_secret=secret)
    keys = KeyStore([KEY], secret)
    noise = secrets.token_urlsafe(MAX_KEY_CHARS)
    size, largest = 0, ""
    while True:  # grow random (incompressible) instructions until the key is refused
        size += 128
        try:
            largest, _ = keys.issue("parley", SessionIn(instructions=noise[:size]), ttl_s=60)
        except ApiError as refused:
            assert refused.status == 400
            break
    assert MAX_KEY_CHARS - 256 < len(largest) <= MAX_KEY_CHARS
    offered = ["realtime", KEY_SUBPROTOCOL + largest]
    async with open_ws(server, subprotocols=offered) as ws:
        assert (await session_created(ws))["instructions"] == noise[: size - 128]


def test_an_ephemeral_key_is_not_an_api_key() -> None:
    keys = KeyStore([KEY], "s" * 32)
    value, _ = keys.issue("parley", None, ttl_s=60)
    assert keys.authenticate(value, websocket=True) is not None
    with pytest.raises(ApiError) as info:
        keys.authenticate(value, websocket=False)
    assert (info.value.status, info.value.code) == (403, "insufficient_permissions")


def test_presented_key() -> None:
    assert presented_key({"authorization": f"bearer  {KEY} "}) == KEY
    assert presented_key({}, ["realtime", f"openai-insecure-api-key.{KEY}"]) == KEY
    assert presented_key({"authorization": f"Basic {KEY}"}, ["openai-insecure-api-key."]) is None


def test_settings_read_comma_separated_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARLEY_API_KEYS", f" {KEY}, second ,")
    assert Settings().api_keys == [KEY, "second"]
    monkeypatch.setenv("PARLEY_API_KEYS", "ek_reserved")
    with pytest.raises(ValueError, match="ek_") as info:
        Settings()
    assert "ek_reserved" not in str(info.value)  # keys are not echoed in errors


def test_settings_key_secret_is_long_and_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARLEY_KEY_SECRET", "short-secret-value")
    with pytest.raises(ValueError, match="at least 32 characters") as info:
        Settings()
    assert "short-secret-value" not in str(info.value)
    secret = "x" * 40
    monkeypatch.setenv("PARLEY_KEY_SECRET", secret)
    settings = Settings()
    assert settings.key_secret is not None
    assert settings.key_secret.get_secret_value() == secret
    assert secret not in repr(settings)


# --- session limit ------------------------------------------------------------------


async def test_max_sessions_closes_the_extra_connection_with_1013(
    serve: ServerFactory, apps: list[FastAPI]
) -> None:
    server = await serve(max_sessions=1)
    async with open_ws(server) as first:
        await session_created(first)
        async with open_ws(server) as second:
            with pytest.raises(ConnectionClosedError) as info:
                await asyncio.wait_for(second.recv(), TIMEOUT_S)
            assert info.value.rcvd is not None
            assert info.value.rcvd.code == 1013
            assert "try again later" in info.value.rcvd.reason
        await first.send(json.dumps({"type": "session.update", "session": {"instructions": "x"}}))
        assert (await until(first, "session.updated"))["session"]["instructions"] == "x"
    # The server lets the slot go once the first session has wound down.
    await asyncio.wait_for(apps[0].state.hub.drained.wait(), TIMEOUT_S)
    async with open_ws(server) as third:
        await session_created(third)


async def test_max_sessions_holds_under_concurrent_handshakes(serve: ServerFactory) -> None:
    server = await serve(max_sessions=2)

    async def outcome(stack: contextlib.AsyncExitStack) -> int | str:
        ws = await stack.enter_async_context(open_ws(server))
        try:
            return str((await next_event(ws))["type"])
        except ConnectionClosedError as exc:
            assert exc.rcvd is not None
            return exc.rcvd.code

    async with contextlib.AsyncExitStack() as stack:  # all stay open until the end
        results = await asyncio.gather(*(outcome(stack) for _ in range(6)))
    assert sorted(results, key=str) == [1013] * 4 + ["session.created"] * 2


class _GatedSocket:
    """Just enough of Starlette's WebSocket for `RealtimeEndpoint.handle`, whose
    accept() waits for `gate`: a handshake held open as long as the test likes."""

    def __init__(self, gate: asyncio.Event) -> None:
        self.scope: dict[str, Any] = {"subprotocols": []}
        self.headers: dict[str, str] = {}
        self.client = None  # no peer address (Starlette's is a (host, port) pair)
        self.client_state = WebSocketState.CONNECTING
        self.gate = gate
        self.accepting = asyncio.Event()
        self.close_code: int | None = None

    async def accept(self, subprotocol: str | None = None) -> None:
        self.accepting.set()
        await self.gate.wait()
        self.client_state = WebSocketState.CONNECTED

    async def close(self, code: int = 1000, reason: str | None = None) -> None:
        self.close_code = code
        self.client_state = WebSocketState.DISCONNECTED

    async def receive(self) -> dict[str, Any]:
        return {"type": "websocket.disconnect", "code": 1000}

    async def send_text(self, text: str) -> None:
        pass


async def test_max_sessions_counts_a_session_before_its_handshake_completes() -> None:
    app = create_app(Settings(**TEST_SETTINGS, max_sessions=1))
    endpoint, hub = app.state.realtime, app.state.hub
    gate = asyncio.Event()
    first = _GatedSocket(gate)
    first_handled = asyncio.create_task(endpoint.handle(first))
    await asyncio.wait_for(first.accepting.wait(), TIMEOUT_S)
    opened = asyncio.Event()
    opened.set()
    second = _GatedSocket(opened)
    await asyncio.wait_for(endpoint.handle(second), TIMEOUT_S)
    assert second.close_code == 1013
    gate.set()
    await asyncio.wait_for(first_handled, TIMEOUT_S)
    assert first.close_code == 1000
    assert hub.sessions == 0 and hub.drained.is_set()


async def test_an_ephemeral_keys_prompt_is_one_of_the_operators(
    serve: ServerFactory, tmp_path: Path
) -> None:
    """A key's preset names a prompt as session.update does: checked when minted,
    applied in the session the key opens."""
    (tmp_path / "desk.txt").write_text("Serve {{who}}.")
    server = await serve(api_keys=[KEY], prompts_dir=tmp_path)
    prompt = {"id": "desk", "variables": {"who": "Ada"}}
    raw = (await mint(server, {"session": {"type": "realtime", "prompt": prompt}})).json()
    assert raw["session"]["prompt"] == prompt
    async with open_ws(server, additional_headers=bearer(raw["value"])) as ws:
        assert (await session_created(ws))["prompt"] == prompt
    response = await mint(server, {"session": {"type": "realtime", "prompt": {"id": "../desk"}}})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "session.prompt.id"
    unconfigured = await serve(api_keys=[KEY])
    response = await mint(unconfigured, {"session": {"type": "realtime", "prompt": prompt}})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "unsupported_value"
