"""A hostile MCP server for the tests: it speaks just enough MCP over Streamable HTTP
(JSON answers) for a client to list its tools and call one, and answers as a server
that wants the client's memory would: a huge `tools/list`, a `nextCursor` on every
page, thousands of tools, schemas too large or deep, a huge `structuredContent`.
It counts what it is sent."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn

from bench.fakes.serving import bound_socket, serving

Page = Callable[[str | None], dict[str, Any]]  # a cursor to a tools/list result


def tools(count: int, start: int = 0) -> list[dict[str, Any]]:
    return [
        {"name": f"t{n}", "inputSchema": {"type": "object"}} for n in range(start, start + count)
    ]


@dataclass
class HostileMcp:
    """What the server answers; what it was sent."""

    page: Page = lambda cursor: {"tools": tools(2)}
    call_result: dict[str, Any] = field(default_factory=lambda: {"content": []})
    raw_list_body: bytes | None = None  # tools/list answers these bytes instead
    url: str = ""
    methods: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)  # the Host header of each request

    def answer(self, message: dict[str, Any]) -> dict[str, Any] | None:
        method = message.get("method", "")
        self.methods.append(method)
        if "id" not in message:
            return None  # a notification
        if method == "initialize":
            result: dict[str, Any] = {
                "protocolVersion": "2025-06-18",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "hostile", "version": "1"},
            }
        elif method == "tools/list":
            result = self.page((message.get("params") or {}).get("cursor"))
        elif method == "tools/call":
            result = self.call_result
        else:
            error = {"code": -32601, "message": "Method not found"}
            return {"jsonrpc": "2.0", "id": message["id"], "error": error}
        return {"jsonrpc": "2.0", "id": message["id"], "result": result}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        self.hosts.append(dict(scope["headers"]).get(b"host", b"").decode())
        body = b""
        while True:
            event = await receive()
            body += event.get("body", b"")
            if not event.get("more_body"):
                break
        if scope["method"] != "POST":
            await _send(send, 405, b"")
            return
        message = json.loads(body)
        if message.get("method") == "tools/list" and self.raw_list_body is not None:
            self.methods.append("tools/list")
            await _send(send, 200, self.raw_list_body)
            return
        answer = self.answer(message)
        if answer is None:
            await _send(send, 202, b"")
        else:
            await _send(send, 200, json.dumps(answer).encode())


async def _send(send: Any, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@contextlib.asynccontextmanager
async def hostile_mcp(server: HostileMcp) -> AsyncIterator[HostileMcp]:
    sock = bound_socket()
    server.url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    config = uvicorn.Config(server, log_level="warning", lifespan="off")
    async with serving(config, sock, name="hostile mcp server"):
        yield server
