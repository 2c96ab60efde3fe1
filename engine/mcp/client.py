"""Talking to an MCP server over Streamable HTTP, with the `mcp` package's client.

One connection per listing or call: a session's MCP servers are few, and a call
is seldom, so nothing is kept open between them (nor left open when a session ends).
Every failure comes back as an `McpError` in OpenAI's shape, never as an exception:
a server that cannot be reached, answers with an error status, breaks the protocol,
takes longer than `timeout_s`, or whose tool reports an error.

`NoMcp` reaches no server: a session that was handed no client can name MCP servers
(their listing fails) without the engine opening a connection of its own.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Protocol

from engine.mcp.rules import McpError, McpResult, McpServer, McpTool

log = logging.getLogger(__name__)

TIMEOUT_S = 30.0  # a listing or a call that takes longer fails
MAX_OUTPUT_CHARS = 100_000  # a call's text output is cut here (it goes into a prompt)


class McpClient(Protocol):
    async def list_tools(self, server: McpServer) -> list[McpTool] | McpError: ...

    async def call_tool(
        self, server: McpServer, name: str, arguments: dict[str, Any]
    ) -> McpResult: ...


def text_of(content: list[Any]) -> str:
    """A tool result's text parts, joined; other parts (images, resources) are
    named, since the model reads text only."""
    parts = []
    for part in content:
        kind = getattr(part, "type", "")
        parts.append(getattr(part, "text", "") if kind == "text" else f"[{kind} content]")
    return "\n".join(parts)[:MAX_OUTPUT_CHARS]


class NoMcp:
    """The `McpClient` of a session given none (tests, benchmarks): it reaches no
    server, so every listing fails, and nothing is offered or called. The server
    hands its sessions a `StreamableHttpMcp` (server/app.py)."""

    async def list_tools(self, server: McpServer) -> list[McpTool] | McpError:
        return McpError("http_error", f"{server.label}: this session has no MCP client")

    async def call_tool(self, server: McpServer, name: str, arguments: dict[str, Any]) -> McpResult:
        return McpResult(error=McpError("http_error", f"{server.label}: no MCP client"))


class StreamableHttpMcp:
    """`McpClient` over the `mcp` package (imported when first used)."""

    def __init__(self, timeout_s: float = TIMEOUT_S) -> None:
        self.timeout_s = timeout_s

    async def list_tools(self, server: McpServer) -> list[McpTool] | McpError:
        async def listing(client: Any) -> list[McpTool]:
            tools: list[McpTool] = []
            cursor = None
            while True:
                page = await client.list_tools(cursor=cursor)
                tools += [_tool_of(t) for t in page.tools]
                cursor = page.next_cursor
                if cursor is None:
                    return tools

        result = await self._session(server, listing)
        return result if isinstance(result, McpError) else list(result)

    async def call_tool(self, server: McpServer, name: str, arguments: dict[str, Any]) -> McpResult:
        async def call(client: Any) -> McpResult:
            result = await client.call_tool(name, arguments)
            text = text_of(result.content)
            if result.is_error:
                return McpResult(error=McpError("tool_execution_error", text or "tool failed"))
            if not text and result.structured_content is not None:
                text = json.dumps(result.structured_content)
            return McpResult(output=text)

        outcome = await self._session(server, call)
        return McpResult(error=outcome) if isinstance(outcome, McpError) else outcome

    async def _session(self, server: McpServer, work: Any) -> Any:
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared.exceptions import MCPError

        try:
            async with asyncio.timeout(self.timeout_s):
                async with httpx2.AsyncClient(headers=server.request_headers()) as http:
                    transport = streamable_http_client(server.url, http_client=http)
                    async with Client(transport, raise_exceptions=True) as client:
                        return await work(client)
        except TimeoutError:
            return McpError("http_error", f"no answer from {server.label} in {self.timeout_s} s")
        except Exception as exc:  # whatever failed becomes the listing's or call's error
            cause = _leaf(exc)  # the client's task groups wrap what failed
            if isinstance(cause, MCPError):
                return McpError("protocol_error", f"{server.label}: {cause.message}", cause.code)
            status = getattr(getattr(cause, "response", None), "status_code", None)
            if isinstance(status, int):
                return McpError("http_error", f"{server.label} answered HTTP {status}", status)
            log.info("MCP server %s failed: %r", server.label, cause)
            return McpError("http_error", f"{server.label} could not be reached: {cause}")


def _leaf(exc: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _tool_of(tool: Any) -> McpTool:
    annotations = tool.annotations.model_dump(exclude_none=True) if tool.annotations else None
    read_only = bool(tool.annotations and tool.annotations.read_only_hint)
    return McpTool(
        tool.name,
        tool.description or "",
        json.dumps(tool.input_schema or {}),
        read_only,
        annotations,
    )
