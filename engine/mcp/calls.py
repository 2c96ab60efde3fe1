"""A response's calls of MCP tools, run inside its response task, so a barge-in
cancels a call with its response.

A call of a tool an MCP server listed (engine/mcp/tools.py) is an `mcp_call` item
with its events; the stream (engine/response_stream.py) then runs the model again
with the result, the answer going on in the same message (at most MAX_MCP_ROUNDS
times). A call that needs the client's approval is an `mcp_approval_request` item
instead, and the response ends; once the client approved it
(`mcp_approval_response`), the next response runs it first.

The calls add items to the response's output through `Outputs` (the stream owns
their order); they never touch the conversation, which the Responder settles.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from openai.types.realtime import (
    ResponseMcpCallArgumentsDelta,
    ResponseMcpCallArgumentsDone,
    ResponseMcpCallCompleted,
    ResponseMcpCallFailed,
    ResponseMcpCallInProgress,
)

from engine.conversation import Conversation, Item, McpFields
from engine.emitter import Emitter
from engine.mcp.rules import McpError, McpServer, needs_approval
from engine.mcp.tools import McpTools
from models.base import FunctionCall, Tool

# MCP calls answered within one response before the model must answer in words.
MAX_MCP_ROUNDS = 4


class Outputs(Protocol):
    """A response's output items, as its MCP calls add to them."""

    def announce(
        self, item: Item, in_progress: dict[str, Any] | None = None
    ) -> tuple[int, str | None]: ...

    def settle(self, item: Item, index: int, previous: str | None) -> None: ...

    def fenced(self) -> bool: ...


def approved_requests(items: Sequence[Item]) -> list[Item]:
    """The approval requests the client approved whose call has not run yet, in
    conversation order."""
    called = {i.mcp.approval_request_id for i in items if i.kind == "mcp_call"}
    approved = {
        i.mcp.approval_request_id
        for i in items
        if i.kind == "mcp_approval_response" and i.mcp.approve
    }
    return [
        i
        for i in items
        if i.kind == "mcp_approval_request" and i.id in approved and i.id not in called
    ]


def cut_off(calls: Sequence[Item]) -> None:
    """Calls cut off with their response: the server's answer never came back."""
    for call in calls:
        if call.kind == "mcp_call" and call.output is None and call.mcp.error is None:
            call.mcp.error = McpError(
                "tool_execution_error", "The call was cancelled with its response."
            ).wire()


@dataclass(frozen=True, kw_only=True)
class McpCalls:
    """One response's MCP calls."""

    tools: McpTools
    response_id: str
    functions: Callable[[], tuple[Tool, ...]]  # the response's: their names are theirs
    emit: Emitter
    conversation: Conversation  # read for approvals only
    new_id: Callable[[str], str]

    def routes(self, name: str) -> bool:
        """Whether a call of `name` goes to an MCP server; a function tool's name
        stays the function's (as the prompt offered it)."""
        if name in {t.name for t in self.functions()}:
            return False
        return self.tools.route(name) is not None

    async def run_approved(self, outputs: Outputs) -> list[Item]:
        """The calls the client approved since the response that asked for them,
        run first (each once); one the server no longer lists is passed over."""
        ran: list[Item] = []
        for request in approved_requests(self.conversation.items):
            name = request.name or ""
            if not self.routes(name):
                continue
            call = FunctionCall(name, request.arguments or "{}", request.id)
            done = await self.call(call, outputs, approval_request_id=request.id)
            if done is not None:
                ran.append(done)
        return ran

    def _item(
        self,
        kind: Literal["mcp_call", "mcp_approval_request"],
        call: FunctionCall,
        server: McpServer,
        approval_request_id: str | None = None,
    ) -> Item:
        return Item(
            self.new_id("mcp" if kind == "mcp_call" else "mcpr"),
            "assistant",
            kind=kind,
            name=call.name,
            arguments=call.arguments,
            mcp=McpFields(server.label, approval_request_id=approval_request_id),
        )

    async def call(
        self, call: FunctionCall, outputs: Outputs, *, approval_request_id: str | None = None
    ) -> Item | None:
        """A call `routes` said is an MCP server's: asked for approval (None), or
        run, its item returned for the model to read (None if fenced meanwhile)."""
        route = self.tools.route(call.name)
        assert route is not None
        server, tool = route
        if approval_request_id is None and needs_approval(tool, server):
            request = self._item("mcp_approval_request", call, server)
            outputs.settle(request, *outputs.announce(request))
            return None
        item = self._item("mcp_call", call, server, approval_request_id)
        index, previous = outputs.announce(item, {**item.wire(), "arguments": ""})
        ids = {"response_id": self.response_id, "item_id": item.id, "output_index": index}
        self.emit.control(ResponseMcpCallArgumentsDelta, delta=call.arguments, **ids)
        self.emit.control(ResponseMcpCallArgumentsDone, arguments=call.arguments, **ids)
        self.emit.control(ResponseMcpCallInProgress, item_id=item.id, output_index=index)
        try:
            arguments = json.loads(call.arguments or "{}")
        except json.JSONDecodeError:
            arguments = None
        if isinstance(arguments, dict):
            result = await self.tools.client.call_tool(server, tool.name, arguments)
            item.output, error = result.output, result.error
        else:
            error = McpError("protocol_error", "The arguments are not a JSON object.", -32602)
        if outputs.fenced():
            return None
        if error is not None:
            item.mcp.error = error.wire()
            self.emit.control(ResponseMcpCallFailed, item_id=item.id, output_index=index)
        else:
            self.emit.control(ResponseMcpCallCompleted, item_id=item.id, output_index=index)
        outputs.settle(item, index, previous)
        return item
