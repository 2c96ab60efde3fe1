"""MCP closed by default, opened by the operator (engine/mcp/egress.py), over the real
server: a client naming an MCP server the policy refuses gets an `error` naming the
field, its session lives on unchanged, and the server named hears nothing (a plain
TCP listener counts connections). Ephemeral-key presets and a call's own session are
checked the same way, at minting and when the session opens."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from engine.mcp.client import StreamableHttpMcp
from engine.protocol import ProtocolError, SessionIn
from server.app import create_app
from server.config import Settings
from tests.support.events import Events
from tests.support.refusals import handshake_refusal
from tests.support.servers import TEST_SETTINGS, RunningServer, ServerFactory


@contextlib.asynccontextmanager
async def session(server: RunningServer) -> AsyncIterator[tuple[Events, Any]]:
    """A realtime session: its events, and a send of one."""
    async with connect(server.ws_url) as ws:
        events = Events(ws.recv)

        async def send(event: dict[str, Any]) -> None:
            await ws.send(json.dumps(event))

        await events.until("session.created")
        yield events, send


@contextlib.asynccontextmanager
async def listener() -> AsyncIterator[tuple[int, list[bytes]]]:
    """A local service that must hear nothing: its port and what each connection sent."""
    heard: list[bytes] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heard.append(await reader.read(1024))
        writer.close()

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    async with server:
        yield server.sockets[0].getsockname()[1], heard


def mcp_tool(url: str, **fields: Any) -> dict[str, Any]:
    tool = {"type": "mcp", "server_label": "internal", "server_url": url}
    return {**tool, "require_approval": "never", **fields}


def tools_update(event_id: str, *tools: dict[str, Any]) -> dict[str, Any]:
    session = {"type": "realtime", "instructions": "Changed.", "tools": list(tools)}
    return {"type": "session.update", "event_id": event_id, "session": session}


async def refusals(server: RunningServer, cases: list[tuple[dict[str, Any], str, str]]) -> None:
    """Each tool refused with its code and param; then the session works, with the
    configuration it had before."""
    async with session(server) as (events, send):
        await send({"type": "session.update", "session": {"instructions": "Kept."}})
        await events.until("session.updated")
        for n, (tool, code, param) in enumerate(cases):
            await send(tools_update(f"evt_{n}", tool))
            error = (await events.until("error"))["error"]
            assert (error["code"], error["param"], error["event_id"]) == (code, param, f"evt_{n}")
        await send({"type": "session.update", "session": {"voice": "echo"}})  # it lives
        updated = await events.until("session.updated")
        assert updated["session"]["instructions"] == "Kept."  # not "Changed."
        assert updated["session"]["tools"] == []
        assert not [t for t in events.types() if t.startswith("mcp_list_tools")]


URL = "session.tools[0].server_url"


async def test_mcp_is_off_by_default_and_nothing_is_sent(serve: ServerFactory) -> None:
    async with listener() as (port, heard):
        server = await serve()
        probe = f"http://127.0.0.1:{port}/internal/admin?action=probe"
        await refusals(
            server,
            [
                (mcp_tool(probe, headers={"Host": "internal.example"}), "mcp_disabled", URL),
                (mcp_tool(f"https://127.0.0.1:{port}/mcp"), "mcp_disabled", URL),
            ],
        )
        assert heard == []


async def test_only_allowlisted_origins_are_reached(serve: ServerFactory) -> None:
    async with listener() as (port, heard):
        server = await serve(mcp_allowed_origins="https://mcp.example.com,http://10.0.0.5:9000")
        await refusals(
            server,
            [
                (mcp_tool(f"http://127.0.0.1:{port}/mcp"), "mcp_server_not_allowed", URL),
                (mcp_tool(f"https://127.0.0.1:{port}/mcp"), "mcp_server_not_allowed", URL),
                (mcp_tool("https://mcp.example.com@127.0.0.1/"), "mcp_server_not_allowed", URL),
                (
                    mcp_tool("https://mcp.example.com/mcp", headers={"Host": "127.0.0.1"}),
                    "mcp_header_not_allowed",
                    "session.tools[0].headers",
                ),
                (
                    mcp_tool("https://mcp.example.com/mcp", headers={"Connection": "close"}),
                    "mcp_header_not_allowed",
                    "session.tools[0].headers",
                ),
            ],
        )
        assert heard == []


async def test_public_mode_refuses_local_addresses(serve: ServerFactory) -> None:
    async with listener() as (port, heard):
        server = await serve(mcp_public=True)
        await refusals(
            server,
            [
                (mcp_tool(f"http://127.0.0.1:{port}/mcp"), "mcp_server_not_allowed", URL),
                (mcp_tool(f"https://127.0.0.1:{port}/mcp"), "mcp_server_not_allowed", URL),
                (mcp_tool(f"https://localhost:{port}/mcp"), "mcp_server_not_allowed", URL),
                (mcp_tool(f"https://[::ffff:7f00:1]:{port}/"), "mcp_server_not_allowed", URL),
                (mcp_tool("https://169.254.169.254/"), "mcp_server_not_allowed", URL),
            ],
        )
        assert heard == []


async def test_too_many_servers_are_refused(serve: ServerFactory) -> None:
    server = await serve(mcp_public=True)
    many = [mcp_tool("https://mcp.example.com/", server_label=f"s{n}") for n in range(9)]
    async with session(server) as (events, send):
        await send(tools_update("evt_1", *many))
        error = (await events.until("error"))["error"]
        assert (error["code"], error["param"]) == ("too_many_mcp_servers", "session.tools")


async def mint(server: RunningServer, tool: dict[str, Any]) -> httpx.Response:
    body = {"session": {"type": "realtime", "tools": [tool]}}
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        return await http.post("/v1/realtime/client_secrets", json=body)


async def test_a_key_preset_naming_a_refused_server_is_not_minted(serve: ServerFactory) -> None:
    server = await serve(mcp_allowed_origins="https://mcp.example.com")
    refused = await mint(server, mcp_tool("http://127.0.0.1:9/mcp"))
    assert refused.status_code == 400
    error = json.loads(refused.content)["error"]
    assert (error["code"], error["param"]) == ("mcp_server_not_allowed", URL)
    minted = await mint(server, mcp_tool("https://mcp.example.com/mcp"))
    assert minted.status_code == 200, minted.content


async def test_a_key_whose_preset_the_server_now_refuses_is_denied_before_the_upgrade(
    serve: ServerFactory,
) -> None:
    """A key minted while its MCP server was allowed, used after the operator closed
    MCP (here: another server with the same secret): the handshake gets HTTP 400
    naming the field, no session opens, and the server named hears nothing."""
    secret = "s" * 32
    async with listener() as (port, heard):
        allowing = await serve(mcp_allowed_origins=f"http://127.0.0.1:{port}", key_secret=secret)
        minted = await mint(allowing, mcp_tool(f"http://127.0.0.1:{port}/mcp"))
        assert minted.status_code == 200, minted.content
        closed = await serve(key_secret=secret)
        headers = {"Authorization": f"Bearer {json.loads(minted.content)['value']}"}
        status, error = await handshake_refusal(connect(closed.ws_url, additional_headers=headers))
        assert (status, error["code"], error["param"]) == (400, "mcp_disabled", URL)
        assert heard == []


@pytest.mark.parametrize("public", [False, True])
def test_a_preset_naming_a_refused_server_opens_no_session(public: bool) -> None:
    """A call's own `session` (and a key's, should the policy change after minting)
    is refused when the session is made, which the call endpoint answers with 400."""
    hub = create_app(Settings(**TEST_SETTINGS, mcp_public=public)).state.hub
    assert isinstance(hub.mcp_client, StreamableHttpMcp)
    assert hub.mcp_client.policy.public is public
    preset = SessionIn.model_validate({"tools": [mcp_tool("http://127.0.0.1:9/mcp")]})
    with pytest.raises(ProtocolError) as info:
        hub.new_session("m", preset)
    assert info.value.param == URL


def test_a_bad_allowlist_entry_stops_the_server_at_start() -> None:
    with pytest.raises(ValueError, match="scheme"):
        Settings(mcp_allowed_origins="ftp://mcp.example.com")
