"""MCP servers for the tests.

`local_mcp`: the `mcp` package's own server over Streamable HTTP on a free port, run
by uvicorn in the test's event loop. Its tools look up and cancel orders; one is
annotated read-only, one always fails, one is slow. It keeps the headers of every
request it was sent.

`FakeMcp`: an `McpClient` with no server at all, whose listing and calls a test
controls, for exact interleavings (and no network: a session's default client would
try to reach the URL it is given)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn

from bench.fakes.serving import bound_socket, serving
from engine.mcp.egress import McpPolicy, policy_of
from engine.mcp.rules import McpError, McpResult, McpServer, McpTool

ANY_PUBLIC = McpPolicy(public=True)
SCHEMA = json.dumps({"type": "object", "properties": {"samples": {"type": "integer"}}})


@dataclass
class LocalMcp:
    url: str
    headers: list[dict[str, str]] = field(default_factory=list)  # of each request
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    slow: asyncio.Event = field(default_factory=asyncio.Event)  # set: the slow tool ends

    @property
    def policy(self) -> McpPolicy:
        """An MCP policy allowing this server (its origin, on loopback), as an
        operator's PARLEY_MCP_ALLOWED_ORIGINS would."""
        return allowing(self.url)


def allowing(url: str) -> McpPolicy:
    """The policy of a server whose allowlist holds `url`'s origin (any path)."""
    scheme, _, rest = url.partition("://")
    return policy_of([f"{scheme}://{rest.split('/')[0]}"], public=False)


def _server(state: LocalMcp) -> Any:
    from mcp.server.mcpserver import MCPServer
    from mcp_types import ToolAnnotations

    server = MCPServer("orders")
    read_only = ToolAnnotations(read_only_hint=True)

    def called(name: str, answer: str, **arguments: Any) -> str:
        state.calls.append((name, arguments))
        return answer

    @server.tool(annotations=read_only)
    def lookup_order(order_id: str) -> str:
        """Look up an order by its id."""
        return called("lookup_order", f"Order {order_id} shipped yesterday.", order_id=order_id)

    @server.tool()
    def cancel_order(order_id: str) -> str:
        """Cancel an order."""
        return called("cancel_order", f"Order {order_id} is cancelled.", order_id=order_id)

    @server.tool(annotations=read_only)
    def count_samples(samples: int) -> str:
        """Says how many samples were heard (what the scripted model calls with)."""
        return called("count_samples", f"{samples} samples counted", samples=samples)

    @server.tool()
    def broken_order(order_id: str) -> str:
        """Always fails."""
        raise ValueError(f"no order {order_id}")

    @server.tool()
    async def slow_order(order_id: str) -> str:
        """Answers once the test lets it."""
        await state.slow.wait()
        return f"Order {order_id} took its time."

    return server


@contextlib.asynccontextmanager
async def local_mcp() -> AsyncIterator[LocalMcp]:
    sock = bound_socket()
    port = sock.getsockname()[1]
    state = LocalMcp(f"http://127.0.0.1:{port}/mcp")
    app = _server(state).streamable_http_app()

    async def recording(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            state.headers.append({k.decode(): v.decode() for k, v in scope["headers"]})
        await app(scope, receive, send)

    config = uvicorn.Config(recording, log_level="warning", lifespan="on")
    async with serving(config, sock, name="local mcp server"):
        yield state
        state.slow.set()


@dataclass
class FakeMcp:
    """An MCP client whose server lists `tools` and answers calls with `results`;
    its policy allows any public https server (it reaches none)."""

    tools: list[McpTool] = field(
        default_factory=lambda: [
            McpTool("count", "Counts.", SCHEMA, read_only=True),
            McpTool("erase", "Erases.", SCHEMA),
        ]
    )
    listing: McpError | None = None  # the listing fails with this
    results: dict[str, McpResult] = field(default_factory=dict)
    hold_calls: asyncio.Event | None = None  # calls wait for it when given
    calls: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    policy: McpPolicy = ANY_PUBLIC

    async def list_tools(self, server: McpServer) -> list[McpTool] | McpError:
        return self.listing or list(self.tools)

    async def call_tool(self, server: McpServer, name: str, arguments: dict[str, Any]) -> McpResult:
        self.calls.append((server.label, name, arguments))
        if self.hold_calls is not None:
            try:
                await self.hold_calls.wait()
            except asyncio.CancelledError:
                self.cancelled.append(name)
                raise
        return self.results.get(name, McpResult(output=f"{name} said {arguments['samples']}"))
