"""Talking to an MCP server over Streamable HTTP, with the `mcp` package's client.

One connection per listing or call: a session's MCP servers are few, and a call
is seldom, so nothing is kept open between them (nor left open when a session ends).
Every failure comes back as an `McpError` in OpenAI's shape, never as an exception:
a server that cannot be reached, answers with an error status, breaks the protocol,
takes longer than `timeout_s`, or whose tool reports an error.

Where a connection may go is the operator's policy (engine/mcp/egress.py): the
session refuses a server the policy refuses before anything is sent, and the
connection goes only to the address checked when it is made (engine/mcp/transport.py).
A hostile server is bounded: its answers are read to a byte cap, a listing stops after
`max_pages` pages and keeps `max_tools` tools, a tool whose schema is too large or deep
is dropped, and outputs are cut at MAX_OUTPUT_CHARS.

`NoMcp` reaches no server: its policy is off, so a session handed no client refuses
MCP servers, and the engine never opens a connection of its own.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Protocol

from engine.mcp.egress import OFF, McpPolicy, target_of
from engine.mcp.listing import Listing
from engine.mcp.rules import McpError, McpResult, McpServer, McpTool
from engine.mcp.transport import (
    AnswerTooLarge,
    EgressRefused,
    PinnedTransport,
    Resolver,
    pin,
    resolve,
)

log = logging.getLogger(__name__)

TIMEOUT_S = 30.0  # a listing or a call that takes longer fails
MAX_OUTPUT_CHARS = 100_000  # a call's text output is cut here (it goes into a prompt)
MAX_ERROR_CHARS = 500  # what a failure says of its cause (a server may write anything)


class McpClient(Protocol):
    @property
    def policy(self) -> McpPolicy: ...  # which servers a session may name

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

    policy = OFF

    async def list_tools(self, server: McpServer) -> list[McpTool] | McpError:
        return McpError("http_error", f"{server.label}: this session has no MCP client")

    async def call_tool(self, server: McpServer, name: str, arguments: dict[str, Any]) -> McpResult:
        return McpResult(error=McpError("http_error", f"{server.label}: no MCP client"))


class StreamableHttpMcp:
    """`McpClient` over the `mcp` package (imported when first used)."""

    def __init__(
        self,
        policy: McpPolicy = OFF,
        timeout_s: float = TIMEOUT_S,
        resolver: Resolver = resolve,
    ) -> None:
        self.policy = policy
        self.timeout_s = timeout_s
        self._resolver = resolver
        # Connections open at once in the process; one more waits (within its deadline).
        self._connections = asyncio.Semaphore(policy.max_connections)

    async def list_tools(self, server: McpServer) -> list[McpTool] | McpError:
        policy = self.policy

        async def listing(client: Any) -> list[McpTool]:
            kept = Listing(policy, server.label)
            cursor = None
            for _ in range(policy.max_pages):
                page = await client.list_tools(cursor=cursor)
                for tool in page.tools:
                    kept.add(tool)
                cursor = page.next_cursor
                if cursor is None or kept.full:
                    break
            kept.report(pages_left=cursor is not None and not kept.full)
            return kept.tools

        result = await self._session(server, listing)
        return result if isinstance(result, McpError) else list(result)

    async def call_tool(self, server: McpServer, name: str, arguments: dict[str, Any]) -> McpResult:
        async def call(client: Any) -> McpResult:
            result = await client.call_tool(name, arguments)
            text = text_of(result.content)
            if result.is_error:
                return McpResult(error=McpError("tool_execution_error", text or "tool failed"))
            if not text and result.structured_content is not None:
                text = json.dumps(result.structured_content)[:MAX_OUTPUT_CHARS]
            return McpResult(output=text)

        outcome = await self._session(server, call)
        return McpResult(error=outcome) if isinstance(outcome, McpError) else outcome

    async def _session(self, server: McpServer, work: Any) -> Any:
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared.exceptions import MCPError

        target = target_of(server.url, self.policy)
        if isinstance(target, str):  # the session checked it: the policy changed since
            return McpError("http_error", f"{server.label}: {target}")
        headers = {**server.request_headers(), "Accept-Encoding": "identity"}
        try:
            async with asyncio.timeout(self.timeout_s), self._connections:
                address = await pin(target, self._resolver)
                http = httpx2.AsyncClient(
                    headers=headers,
                    transport=PinnedTransport(target, address, self.policy.max_answer_bytes),
                    trust_env=False,
                    max_redirects=0,  # the mcp client follows same-origin ones: none
                )
                async with http:
                    transport = streamable_http_client(server.url, http_client=http)
                    async with Client(transport, raise_exceptions=True) as client:
                        return await work(client)
        except EgressRefused as exc:
            log.info("MCP server %s refused: %s", server.label, exc)
            return McpError("http_error", f"{server.label} refused: {exc}")
        except TimeoutError:
            return McpError("http_error", f"no answer from {server.label} in {self.timeout_s} s")
        except Exception as exc:  # whatever failed becomes the listing's or call's error
            cause = _leaf(exc)  # the client's task groups wrap what failed
            if isinstance(cause, AnswerTooLarge):
                return McpError("http_error", f"{server.label}: {cause}")
            if isinstance(cause, MCPError):
                message = cause.message[:MAX_ERROR_CHARS]
                return McpError("protocol_error", f"{server.label}: {message}", cause.code)
            status = getattr(getattr(cause, "response", None), "status_code", None)
            if isinstance(status, int):
                return McpError("http_error", f"{server.label} answered HTTP {status}", status)
            reason = str(cause)[:MAX_ERROR_CHARS]
            log.info("MCP server %s failed: %s: %s", server.label, type(cause).__name__, reason)
            return McpError("http_error", f"{server.label} could not be reached: {reason}")


def _leaf(exc: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
