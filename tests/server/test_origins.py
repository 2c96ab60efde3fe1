"""Browser origins (server/origins.py): a web page other than the server's own and
the allowlist cannot open a WebSocket session or make a WebRTC offer; clients that
send no Origin (SDKs, servers) are not affected. CORS headers go to allowlisted
pages only."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest
from pydantic import ValidationError
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from server.config import Settings
from server.origins import normalize_origin, origin_allowed
from tests.support.events import TIMEOUT_S, read_event
from tests.support.servers import RunningServer, ServerFactory

EVIL = "https://evil.example"
APP = "https://app.example"
KEY = "sk-origin-test-key"


@pytest.mark.parametrize(
    ("origin", "host", "allowed", "open_server", "expected"),
    [
        # Not a browser: SDKs and servers send no Origin.
        (None, "127.0.0.1:8000", [], True, True),
        # The server's own page.
        ("http://127.0.0.1:8000", "127.0.0.1:8000", [], True, True),
        ("http://[::1]:8000", "[::1]:8000", [], True, True),
        ("http://localhost:8000", "localhost:8000", [], True, True),
        # Another page, or the same machine under another name or port.
        (EVIL, "127.0.0.1:8000", [], True, False),
        ("http://localhost:8000", "127.0.0.1:8000", [], True, False),
        ("http://127.0.0.1:8001", "127.0.0.1:8000", [], True, False),
        ("http://127.0.0.1:8000", None, [], True, False),
        # Behind a TLS proxy: the page is https, Parley sees ws; host and port match.
        ("https://voice.example", "voice.example", [], False, True),
        ("https://voice.example", "voice.example:443", [], False, True),
        ("https://voice.example", "voice.example:8000", [], False, False),
        ("https://voice.example:8443", "voice.example:8443", [], False, True),
        # DNS rebinding: a keyless server trusts its own page on a loopback Host only.
        ("http://evil.example:8000", "evil.example:8000", [], True, False),
        # Sandboxed frames and file:// pages.
        ("null", "127.0.0.1:8000", [], True, False),
        ("null", "127.0.0.1:8000", ["null"], True, True),
        # The allowlist, exact origins or any.
        (APP, "127.0.0.1:8000", [APP], True, True),
        ("https://app.example:443", "127.0.0.1:8000", [APP], True, True),
        ("http://app.example", "127.0.0.1:8000", [APP], True, False),
        ("https://sub.app.example", "127.0.0.1:8000", [APP], True, False),
        (EVIL, "127.0.0.1:8000", ["*"], True, True),
        ("null", "127.0.0.1:8000", ["*"], True, True),
        # Not an origin at all.
        ("javascript:alert(1)", "127.0.0.1:8000", [], True, False),
        ("", "127.0.0.1:8000", [], True, False),
    ],
)
def test_origin_allowed(
    origin: str | None, host: str | None, allowed: list[str], open_server: bool, expected: bool
) -> None:
    assert origin_allowed(origin, host, allowed, open_server=open_server) is expected


def test_allowlist_entries_are_written_as_browsers_write_origins() -> None:
    assert normalize_origin("HTTPS://App.Example:443/") == APP
    assert normalize_origin("http://app.example:8080") == "http://app.example:8080"
    assert normalize_origin("http://[::1]:80") == "http://[::1]"
    assert normalize_origin(" * ") == "*"
    for bad in ("app.example", "ftp://app.example", "https://app.example/path", "https://"):
        with pytest.raises(ValueError, match="not an origin"):
            normalize_origin(bad)


def test_settings_read_the_allowlist(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARLEY_ALLOWED_ORIGINS", "https://App.example, http://b.example:81,")
    assert Settings().allowed_origins == [APP, "http://b.example:81"]
    assert Settings(allowed_origins=[]).allowed_origins == []
    monkeypatch.setenv("PARLEY_ALLOWED_ORIGINS", "app.example")
    with pytest.raises(ValidationError, match="not an origin"):
        Settings()


# --- over a real server ---------------------------------------------------------------


def own_origin(server: RunningServer) -> str:
    return server.http_url  # the page at `/` connects to the host and port it came from


async def opens_a_session(server: RunningServer, **options: Any) -> None:
    async with connect(server.ws_url, open_timeout=TIMEOUT_S, **options) as ws:
        assert (await read_event(ws.recv))["type"] == "session.created"


async def refused_upgrade(server: RunningServer, **options: Any) -> tuple[int, dict[str, Any]]:
    with pytest.raises(InvalidStatus) as info:
        async with connect(server.ws_url, open_timeout=TIMEOUT_S, **options):
            pass
    response = info.value.response
    return response.status_code, json.loads(response.body or b"")["error"]


async def test_a_foreign_page_cannot_open_a_session(
    serve: ServerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    server = await serve()
    with caplog.at_level(logging.INFO):
        status, error = await refused_upgrade(server, origin=EVIL)
        null_status, _ = await refused_upgrade(server, origin="null")
    assert (status, error["code"], null_status) == (403, "origin_not_allowed", 403)
    assert error["type"] == "invalid_request_error"
    lines = [record.getMessage() for record in caplog.records]
    assert not [line for line in lines if " opened" in line]  # no session began
    assert "realtime handshake refused: 403 origin_not_allowed" in lines
    # The server's own page, and clients that send no Origin, are unaffected.
    await opens_a_session(server, origin=own_origin(server))
    await opens_a_session(server)


async def test_the_origin_is_refused_before_the_key_is_looked_at(serve: ServerFactory) -> None:
    server = await serve(api_keys=[KEY])
    headers = {"Authorization": f"Bearer {KEY}"}
    status, error = await refused_upgrade(server, origin=EVIL, additional_headers=headers)
    assert (status, error["code"]) == (403, "origin_not_allowed")
    await opens_a_session(server, origin=own_origin(server), additional_headers=headers)


async def test_an_allowlisted_page_opens_a_session(serve: ServerFactory) -> None:
    server = await serve(allowed_origins=[APP])
    await opens_a_session(server, origin=APP)
    status, _ = await refused_upgrade(server, origin=EVIL)
    assert status == 403


async def offer(
    server: RunningServer, origin: str | None, content: str = "not an SDP offer"
) -> httpx.Response:
    """A `text/plain` offer: a "simple" request, which no CORS preflight guards."""
    headers = {"Content-Type": "text/plain"} | ({"Origin": origin} if origin else {})
    async with httpx.AsyncClient(base_url=server.http_url, timeout=TIMEOUT_S) as http:
        return await http.post("/v1/realtime/calls", content=content, headers=headers)


async def test_a_foreign_pages_offer_is_refused_before_it_is_read(serve: ServerFactory) -> None:
    server = await serve(allowed_origins=[APP])
    refused = await offer(server, EVIL)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "origin_not_allowed"
    assert "access-control-allow-origin" not in refused.headers
    # The others get as far as reading the offer (which is no SDP: 400).
    for origin in (own_origin(server), APP, None):
        read = await offer(server, origin)
        assert (read.status_code, read.json()["error"]["code"]) == (400, "invalid_sdp"), origin
    # An allowlisted page may read the answer and the call's Location.
    allowed = await offer(server, APP)
    assert allowed.headers["access-control-allow-origin"] == APP
    assert "location" in allowed.headers["access-control-expose-headers"].lower()


async def test_no_cors_headers_by_default(server: RunningServer) -> None:
    preflight = {"Origin": EVIL, "Access-Control-Request-Method": "POST"}
    async with httpx.AsyncClient(base_url=server.http_url, timeout=TIMEOUT_S) as http:
        for path in ("/v1/realtime/calls", "/v1/realtime/client_secrets", "/v1/models"):
            answered = await http.options(path, headers=preflight)
            assert "access-control-allow-origin" not in answered.headers, path
            assert answered.status_code >= 400, path
        own = await http.post(
            "/v1/realtime/calls",
            content="x",
            headers={"Origin": own_origin(server), "Content-Type": "text/plain"},
        )
    assert own.status_code == 400 and "access-control-allow-origin" not in own.headers


async def test_an_allowlisted_page_passes_the_preflight(serve: ServerFactory) -> None:
    server = await serve(allowed_origins=[APP])
    headers = {
        "Origin": APP,
        "Access-Control-Request-Method": "DELETE",
        "Access-Control-Request-Headers": "authorization",
    }
    async with httpx.AsyncClient(base_url=server.http_url, timeout=TIMEOUT_S) as http:
        answered = await http.options("/v1/realtime/calls/rtc_x", headers=headers)
        foreign = await http.options(
            "/v1/realtime/calls/rtc_x", headers={**headers, "Origin": EVIL}
        )
    assert answered.status_code == 200
    assert answered.headers["access-control-allow-origin"] == APP
    assert "access-control-allow-origin" not in foreign.headers
