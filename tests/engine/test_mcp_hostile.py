"""Connections to MCP servers (engine/mcp/client.py, engine/mcp/transport.py): to the
address checked when the connection is made, never to one the name resolves to later
(DNS rebinding), nothing sent where the policy refuses; and a hostile server bounded:
answers read to a byte cap, listings cut at a number of pages and of tools, tools
with too large or deep a schema dropped, structured output cut like text."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest

from engine.mcp.client import MAX_OUTPUT_CHARS, StreamableHttpMcp
from engine.mcp.egress import MAX_TOOLS, McpPolicy, Target, policy_of
from engine.mcp.listing import MAX_DESCRIPTION_CHARS, Listing, tool_of
from engine.mcp.rules import McpError, McpServer
from engine.mcp.transport import AnswerTooLarge, CappedStream, EgressRefused, PinnedTransport, pin
from tests.support.hostile_mcp import HostileMcp, hostile_mcp, tools
from tests.support.mcp_server import allowing


class Resolver:
    """A DNS that answers `answers` in turn (the last one again), counting questions."""

    def __init__(self, *answers: list[str]) -> None:
        self.answers = list(answers)
        self.asked: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append(host)
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


async def listed(server: HostileMcp, policy: McpPolicy | None = None) -> Any:
    client = StreamableHttpMcp(policy or allowing(server.url))
    return await client.list_tools(McpServer("hostile", server.url))


# --- where a connection goes ---------------------------------------------------------


async def test_an_allowlisted_name_is_resolved_once_and_its_address_kept() -> None:
    """The operator listed `mcp.test`: every request of the connection goes to the
    address it resolved to first, though the name then resolves elsewhere."""
    async with hostile_mcp(HostileMcp()) as server:
        port = server.url.split(":")[2].split("/")[0]
        resolver = Resolver(["127.0.0.1"], ["10.255.255.1"])  # the second: a rebind
        policy = policy_of([f"http://mcp.test:{port}"], public=False)
        client = StreamableHttpMcp(policy, resolver=resolver)
        tools_listed = await client.list_tools(McpServer("s", f"http://mcp.test:{port}/mcp"))
        assert not isinstance(tools_listed, McpError), tools_listed
        assert [t.name for t in tools_listed] == ["t0", "t1"]
        assert resolver.asked == ["mcp.test"]  # once, for three requests and more
        assert "tools/list" in server.methods
        assert set(server.hosts) == {f"mcp.test:{port}"}  # the server's name, kept


@pytest.mark.parametrize(
    "answer",
    [["127.0.0.1"], ["8.8.8.8", "127.0.0.1"], ["::ffff:127.0.0.1"], ["169.254.169.254"], []],
)
async def test_a_public_name_resolving_to_a_private_address_is_refused(
    answer: list[str],
) -> None:
    """Public mode: a name with any non-public address is refused before anything is
    sent (the local server hears nothing)."""
    async with hostile_mcp(HostileMcp()) as server:
        client = StreamableHttpMcp(McpPolicy(public=True), resolver=Resolver(answer))
        result = await client.list_tools(McpServer("s", "https://mcp.example.org/mcp"))
        assert isinstance(result, McpError) and "refused" in result.message, result
        assert server.methods == [] and server.hosts == []


async def test_a_rebinding_name_connects_to_the_checked_address_only() -> None:
    """A name that resolves to a public address, then to loopback: the request goes to
    the public address checked, with the name as Host and TLS server name."""
    resolver = Resolver(["8.8.8.8"], ["127.0.0.1"])
    target = Target("https", "mcp.example.org", 443, "/mcp")
    address = await pin(target, resolver)
    assert address == "8.8.8.8"
    seen: list[httpx2.Request] = []

    class Recording(httpx2.AsyncBaseTransport):  # stands in for the network
        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            seen.append(request)
            return httpx2.Response(503)

    transport = PinnedTransport(target, address, 1024, inner=Recording())
    async with httpx2.AsyncClient(transport=transport, trust_env=False) as http:
        for _ in range(2):
            assert (await http.post("https://mcp.example.org/mcp")).status_code == 503
        with pytest.raises(EgressRefused):  # a request elsewhere (no redirect gets there)
            await http.post("https://other.example.org/mcp")
    assert resolver.asked == ["mcp.example.org"]
    assert [(r.url.host, r.headers["host"], r.extensions["sni_hostname"]) for r in seen] == [
        ("8.8.8.8", "mcp.example.org", "mcp.example.org")
    ] * 2


async def test_connections_wait_for_the_process_limit() -> None:
    """One connection at a time (max_connections=1): a second listing does not even
    resolve its host until the first is done."""
    held = asyncio.Event()
    release = asyncio.Event()

    class Slow(Resolver):
        async def __call__(self, host: str, port: int) -> list[str]:
            answer = await super().__call__(host, port)
            if len(self.asked) == 1:
                held.set()
                await release.wait()
            return answer

    async with hostile_mcp(HostileMcp()) as server:
        port = server.url.split(":")[2].split("/")[0]
        resolver = Slow(["127.0.0.1"])
        policy = policy_of([f"http://mcp.test:{port}"], public=False)
        client = StreamableHttpMcp(McpPolicy(policy.allowed, max_connections=1), resolver=resolver)
        s = McpServer("s", f"http://mcp.test:{port}/mcp")
        first = asyncio.create_task(client.list_tools(s))
        await held.wait()
        second = asyncio.create_task(client.list_tools(s))
        for _ in range(10):
            await asyncio.sleep(0)
        assert len(resolver.asked) == 1  # the second waits for the first's connection
        release.set()
        assert not isinstance(await first, McpError) and not isinstance(await second, McpError)
        assert len(resolver.asked) == 2


# --- a hostile server ------------------------------------------------------------------


async def test_an_answer_past_the_byte_cap_fails_the_listing() -> None:
    huge = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"tools": tools(40_000)}})
    async with hostile_mcp(HostileMcp(raw_list_body=huge.encode())) as server:
        assert len(huge) > McpPolicy().max_answer_bytes
        result = await listed(server)
        assert isinstance(result, McpError), result
        assert result.message == "hostile: the answer is larger than 1048576 bytes"


async def test_an_endless_answer_is_read_no_further_than_the_cap() -> None:
    drawn = 0

    class Endless(httpx2.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            nonlocal drawn
            while True:
                drawn += 1
                yield b"x" * 1000

    with pytest.raises(AnswerTooLarge):
        async for _ in CappedStream(Endless(), 10_000):
            pass
    assert drawn == 11  # memory holds one chunk past the cap, and no more


async def test_an_endless_cursor_stops_at_the_page_cap() -> None:
    hostile = HostileMcp(page=lambda cursor: {"tools": tools(1, int(cursor or 0)),
                                              "nextCursor": str(int(cursor or 0) + 1)})  # fmt: skip
    async with hostile_mcp(hostile) as server:
        result = await listed(server)
        assert not isinstance(result, McpError), result
        pages = McpPolicy().max_pages
        assert [t.name for t in result] == [f"t{n}" for n in range(pages)]
        assert server.methods.count("tools/list") == pages


async def test_a_server_listing_20000_tools_keeps_the_first_ones() -> None:
    async with hostile_mcp(HostileMcp(page=lambda cursor: {"tools": tools(20_000)})) as server:
        # 1.1 MB in one answer: let it be read, to see what is kept of it.
        result = await listed(
            server, McpPolicy(allowing(server.url).allowed, max_answer_bytes=4 << 20)
        )
        assert not isinstance(result, McpError), result
        assert [t.name for t in result] == [f"t{n}" for n in range(MAX_TOOLS)]


def deep(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


async def test_tools_with_too_large_or_deep_a_schema_are_dropped() -> None:
    big = {"type": "object", "description": "x" * (McpPolicy().max_schema_bytes + 1)}
    page = {
        "tools": [
            {"name": "big", "inputSchema": big},
            {"name": "deep", "inputSchema": deep(40)},
            {"name": "fine", "inputSchema": deep(5)},
        ]
    }
    async with hostile_mcp(HostileMcp(page=lambda cursor: page)) as server:
        result = await listed(server)
        assert not isinstance(result, McpError), result
        assert [t.name for t in result] == ["fine"]


async def test_structured_content_is_cut_like_text() -> None:
    answer = {"content": [], "structuredContent": {"x": "y" * 300_000}}
    async with hostile_mcp(HostileMcp(call_result=answer)) as server:
        client = StreamableHttpMcp(allowing(server.url))
        result = await client.call_tool(McpServer("hostile", server.url), "t0", {})
        assert result.error is None and result.output is not None, result
        assert len(result.output) == MAX_OUTPUT_CHARS


# --- what a listing keeps (pure) -------------------------------------------------------


def raw_tool(name: str, description: str = "", schema: dict[str, Any] | None = None) -> Any:
    from mcp_types import Tool

    return Tool(name=name, description=description, input_schema=schema or {"type": "object"})


def test_a_tool_a_model_cannot_call_is_dropped_and_descriptions_are_cut() -> None:
    policy = McpPolicy()
    assert isinstance(tool_of(raw_tool("x" * 65), policy), str)
    assert isinstance(tool_of(raw_tool("rm -rf"), policy), str)
    kept = tool_of(raw_tool("ok.tool_1", "d" * 10_000), policy)
    assert not isinstance(kept, str) and len(kept.description) == MAX_DESCRIPTION_CHARS


def test_a_listing_keeps_a_bounded_number_of_bytes() -> None:
    kept = Listing(McpPolicy(max_answer_bytes=10_000), "s")
    for n in range(100):
        kept.add(raw_tool(f"t{n}", "d" * 4000))
    assert [t.name for t in kept.tools] == ["t0", "t1", "t2"] and kept.full
    assert kept.dropped == {"past the caps on tools per server": 97}
