"""MCP tools (engine/mcp/rules.py, engine/mcp/client.py, engine/mcp/calls.py): which
tools a session's MCP server offers, which calls wait for approval and which approved
calls are still to run, as pure decisions; listing and calling tools on a local MCP
server (the `mcp` package's own), with every failure an error in OpenAI's shape, or
on none (`NoMcp`); and the tool as a client sends it."""

from __future__ import annotations

import json

import pytest

from engine.conversation import Item, McpFields
from engine.mcp.calls import approved_requests
from engine.mcp.client import NoMcp, StreamableHttpMcp
from engine.mcp.rules import (
    ApprovalFilter,
    McpError,
    McpServer,
    McpTool,
    ToolFilter,
    needs_approval,
    offered,
    server_of,
)
from engine.protocol import ProtocolError, SessionUpdate, parse_client_event
from tests.support.mcp_server import allowing, local_mcp
from tests.support.servers import free_port

LOOKUP = McpTool("lookup_order", read_only=True)
CANCEL = McpTool("cancel_order")


def server(**kw: object) -> McpServer:
    return McpServer("orders", "http://127.0.0.1:1/mcp", **kw)  # type: ignore[arg-type]


def test_allowed_tools_narrow_what_is_offered() -> None:
    assert offered(CANCEL, server())  # no allowed_tools: every tool
    assert not offered(CANCEL, server(allowed=ToolFilter(("lookup_order",))))
    assert offered(LOOKUP, server(allowed=ToolFilter(("lookup_order",))))
    assert offered(LOOKUP, server(allowed=ToolFilter(read_only=True)))
    assert not offered(CANCEL, server(allowed=ToolFilter(read_only=True)))
    both = ToolFilter(("lookup_order", "cancel_order"), read_only=True)
    assert [offered(t, server(allowed=both)) for t in (LOOKUP, CANCEL)] == [True, False]
    assert not offered(LOOKUP, server(allowed=ToolFilter()))  # an empty filter


def test_calls_wait_for_approval_unless_a_rule_lets_them_run() -> None:
    assert needs_approval(CANCEL, server())  # OpenAI's default: always ask
    assert not needs_approval(CANCEL, server(approval="never"))
    never_reads = ApprovalFilter(never=ToolFilter(read_only=True))
    assert not needs_approval(LOOKUP, server(approval=never_reads))
    assert needs_approval(CANCEL, server(approval=never_reads))  # named by no filter
    always_cancel = ApprovalFilter(
        always=ToolFilter(("cancel_order",)), never=ToolFilter(read_only=False)
    )
    assert needs_approval(CANCEL, server(approval=always_cancel))  # `always` wins
    assert needs_approval(LOOKUP, server(approval=always_cancel))


def test_approved_requests_run_once_and_denied_ones_never() -> None:
    def item(item_id: str, kind: str, **mcp: object) -> Item:
        return Item(item_id, "user", kind=kind, mcp=McpFields(**mcp))  # type: ignore[arg-type]

    asked = [item(f"r{n}", "mcp_approval_request", server_label="s") for n in range(4)]
    answers = [
        item("a0", "mcp_approval_response", approval_request_id="r0", approve=True),
        item("a1", "mcp_approval_response", approval_request_id="r1", approve=False),
        item("a2", "mcp_approval_response", approval_request_id="r2", approve=True),
    ]
    ran = item("c2", "mcp_call", server_label="s", approval_request_id="r2")
    # r0 approved; r1 denied; r2 approved and run already; r3 not answered yet.
    assert approved_requests([*asked, *answers, ran]) == [asked[0]]
    assert approved_requests([*asked, *answers]) == [asked[0], asked[2]]


async def test_without_a_client_no_server_is_reached() -> None:
    listed = await NoMcp().list_tools(server())
    assert isinstance(listed, McpError) and listed.kind == "http_error"
    called = await NoMcp().call_tool(server(), "lookup_order", {})
    assert called.output is None and called.error is not None


def test_authorization_goes_as_a_bearer_token_beside_the_headers() -> None:
    s = server(headers=(("X-Team", "blue"),), authorization="tok")
    assert s.request_headers() == {"X-Team": "blue", "Authorization": "Bearer tok"}
    assert "tok" not in repr(s) and "blue" not in repr(s)  # secrets stay out of logs


def test_errors_have_openais_shape() -> None:
    assert McpError("tool_execution_error", "boom").wire() == {
        "type": "tool_execution_error",
        "message": "boom",
    }
    assert McpError("http_error", "no", 401).wire() == {
        "type": "http_error",
        "message": "no",
        "code": 401,
    }


async def test_a_local_server_lists_its_tools_and_runs_a_call() -> None:
    async with local_mcp() as mcp:
        s = McpServer("orders", mcp.url, headers=(("X-Team", "blue"),), authorization="tok")
        client = StreamableHttpMcp(mcp.policy)
        tools = await client.list_tools(s)
        assert not isinstance(tools, McpError)
        by_name = {t.name: t for t in tools}
        assert set(by_name) == {
            "lookup_order",
            "cancel_order",
            "count_samples",
            "broken_order",
            "slow_order",
        }
        assert by_name["lookup_order"].read_only and not by_name["cancel_order"].read_only
        assert by_name["lookup_order"].description == "Look up an order by its id."
        schema = json.loads(by_name["lookup_order"].input_schema)
        assert schema["required"] == ["order_id"]
        result = await client.call_tool(s, "lookup_order", {"order_id": "A-17"})
        assert result.output == "Order A-17 shipped yesterday." and result.error is None
        assert mcp.calls == [("lookup_order", {"order_id": "A-17"})]
        assert all(h.get("x-team") == "blue" for h in mcp.headers)
        assert all(h.get("authorization") == "Bearer tok" for h in mcp.headers)


async def test_a_failing_tool_is_a_tool_execution_error() -> None:
    async with local_mcp() as mcp:
        result = await StreamableHttpMcp(mcp.policy).call_tool(
            McpServer("orders", mcp.url), "broken_order", {"order_id": "A-17"}
        )
        assert result.output is None and result.error is not None
        assert result.error.kind == "tool_execution_error"


async def test_an_unknown_tool_is_an_error_and_the_server_lives() -> None:
    async with local_mcp() as mcp:
        client, s = StreamableHttpMcp(mcp.policy), McpServer("orders", mcp.url)
        result = await client.call_tool(s, "no_such_tool", {})
        assert result.error is not None, result
        again = await client.call_tool(s, "lookup_order", {"order_id": "B-2"})
        assert again.output == "Order B-2 shipped yesterday."


async def test_a_server_that_cannot_be_reached_is_an_http_error() -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    listed = await StreamableHttpMcp(allowing(url)).list_tools(McpServer("orders", url))
    assert isinstance(listed, McpError) and listed.kind == "http_error", listed
    assert "could not be reached" in listed.message


async def test_a_wrong_path_is_a_protocol_error_with_its_code() -> None:
    """The `mcp` client reports a 404 as JSON-RPC's "Not Found" (-32601)."""
    async with local_mcp() as mcp:
        listed = await StreamableHttpMcp(mcp.policy).list_tools(McpServer("orders", mcp.url + "x"))
        assert isinstance(listed, McpError), listed
        assert (listed.kind, listed.code) == ("protocol_error", -32601)
        assert listed.message == "orders: Not Found"


async def test_a_call_that_takes_too_long_fails_and_is_not_waited_for() -> None:
    async with local_mcp() as mcp:
        client = StreamableHttpMcp(mcp.policy, timeout_s=0.5)
        result = await client.call_tool(
            McpServer("orders", mcp.url), "slow_order", {"order_id": "C"}
        )
        assert result.error is not None and result.error.kind == "http_error"
        assert "no answer" in result.error.message


# --- the tool as a client sends it --------------------------------------------------


def mcp_tool(event_id: str = "evt_1", **fields: object) -> McpServer:
    """The first tool of a session.update carrying one MCP tool, parsed and checked
    as the session parses it."""
    tool = {"type": "mcp", "server_label": "orders", **fields}
    event = {"type": "session.update", "event_id": event_id, "session": {"tools": [tool]}}
    parsed = parse_client_event(json.dumps(event), 1 << 20)
    assert isinstance(parsed, SessionUpdate) and parsed.session.tools is not None
    return server_of(parsed.session.tools[0])


def test_a_sent_mcp_tool_becomes_its_server() -> None:
    s = mcp_tool(
        server_url="https://mcp.example/mcp",
        allowed_tools=["lookup_order"],
        require_approval="never",
        headers={"X-Team": "blue"},
        authorization="tok",
        server_description="Orders",
    )
    assert s == McpServer(
        "orders",
        "https://mcp.example/mcp",
        (("X-Team", "blue"),),
        "tok",
        ToolFilter(("lookup_order",)),
        "never",
        "Orders",
    )


def test_filters_and_the_default_approval() -> None:
    plain = mcp_tool(server_url="https://mcp.example/mcp")
    assert plain.allowed is None and plain.approval == "always"
    filtered = mcp_tool(
        server_url="https://mcp.example/mcp",
        allowed_tools={"read_only": True},
        require_approval={"never": {"tool_names": ["lookup_order"]}},
    )
    assert filtered.allowed == ToolFilter(None, True)
    assert filtered.approval == ApprovalFilter(None, ToolFilter(("lookup_order",)))


@pytest.mark.parametrize(
    ("fields", "code", "param"),
    [
        ({}, "missing_required_parameter", "session.tools[0].server_url"),
        ({"connector_id": "connector_gmail"}, "unsupported_value", "session.tools[0].connector_id"),
        (
            {"server_url": "https://x", "allowed_tools": "lookup_order"},
            "invalid_type",
            "session.tools[0].allowed_tools",
        ),
        (
            {"server_url": "https://x", "require_approval": "sometimes"},
            "invalid_value",
            "session.tools[0].require_approval",
        ),
    ],
)
def test_a_bad_mcp_tool_is_refused_naming_the_field(
    fields: dict[str, object], code: str, param: str
) -> None:
    with pytest.raises(ProtocolError) as info:
        mcp_tool(**fields)
    assert (info.value.code, info.value.param, info.value.event_id) == (code, param, "evt_1")
