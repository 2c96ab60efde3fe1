"""A session's MCP servers, owned by the session task: each server the configuration
names is listed once (again when its settings change), and what it lists is offered
to the model and routed back when the model calls it.

Listing, as OpenAI does it: an `mcp_list_tools` item joins the conversation with no
tools (`conversation.item.added`, `mcp_list_tools.in_progress`); the listing runs in
the background and its result comes back through the session's mailbox
(`McpListed`), so only the session task changes state; then
`mcp_list_tools.completed` and `conversation.item.done` with the tools the server
lets the model use, or `mcp_list_tools.failed`. A response asked for while a server
is still being listed goes without that server's tools.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass

from openai.types.realtime import (
    ConversationItemAdded,
    ConversationItemDone,
    McpListToolsCompleted,
    McpListToolsFailed,
    McpListToolsInProgress,
)

from engine.conversation import Conversation, Item, McpFields
from engine.emitter import Emitter
from engine.mcp.client import McpClient
from engine.mcp.rules import McpError, McpServer, McpTool, offered
from models.base import Tool

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class McpListed:
    """A listing's result, posted to the session's mailbox."""

    label: str
    item_id: str
    tools: list[McpTool] | McpError


@dataclass
class _Listing:
    server: McpServer
    item: Item
    task: asyncio.Task[None] | None = None
    tools: tuple[McpTool, ...] = ()  # offered to the model, once listed


class McpTools:
    def __init__(
        self,
        client: McpClient,
        *,
        emit: Emitter,
        conversation: Conversation,
        new_id: Callable[[str], str],
        post: Callable[[McpListed], None],
    ) -> None:
        self.client = client
        self._emit = emit
        self._conversation = conversation
        self._new_id = new_id
        self._post = post
        self._listings: dict[str, _Listing] = {}  # by server label

    def sync(self, servers: tuple[McpServer, ...]) -> None:
        """List every server of the configuration that is new or changed; forget
        the ones it no longer names."""
        wanted = {s.label: s for s in servers}
        for label in list(self._listings):
            if label not in wanted or self._listings[label].server != wanted[label]:
                self._forget(label)
        for label, server in wanted.items():
            if label not in self._listings:
                self._list(server)

    def _list(self, server: McpServer) -> None:
        listed = McpFields(server.label, tools=[])
        item = Item(self._new_id("item"), "assistant", kind="mcp_list_tools", mcp=listed)
        previous = self._conversation.append(item)
        listing = _Listing(server, item)
        self._listings[server.label] = listing
        self._emit.control(ConversationItemAdded, item=item.wire(), previous_item_id=previous)
        self._emit.control(McpListToolsInProgress, item_id=item.id)

        async def run() -> None:
            tools = await self.client.list_tools(server)
            self._post(McpListed(server.label, item.id, tools))

        listing.task = asyncio.get_running_loop().create_task(run(), name=f"mcp:{server.label}")

    def listed(self, message: McpListed) -> None:
        """A listing came back: its tools are offered from now on."""
        listing = self._listings.get(message.label)
        if listing is None or listing.item.id != message.item_id:
            return  # forgotten or listed again since
        listing.task = None
        item = listing.item
        if isinstance(message.tools, McpError):
            log.info("MCP server %s: listing failed: %s", message.label, message.tools.message)
            self._emit.control(McpListToolsFailed, item_id=item.id)
            return
        listing.tools = tuple(t for t in message.tools if offered(t, listing.server))
        item.mcp.tools = [
            {
                "name": t.name,
                "description": t.description,
                "input_schema": json.loads(t.input_schema),
                "annotations": t.annotations,
            }
            for t in listing.tools
        ]
        self._emit.control(McpListToolsCompleted, item_id=item.id)
        if self._conversation.get(item.id) is not None:
            previous = self._conversation.previous_id(item.id)
            self._emit.control(ConversationItemDone, item=item.wire(), previous_item_id=previous)

    def offered_tools(self, taken: set[str]) -> tuple[Tool, ...]:
        """The listed tools as the model is offered them; a name a function tool
        already has (`taken`) stays the function's."""
        tools: dict[str, Tool] = {}
        for listing in self._listings.values():
            for t in listing.tools:
                if t.name not in taken and t.name not in tools:
                    tools[t.name] = Tool(t.name, t.description, t.input_schema)
        return tuple(tools.values())

    def route(self, name: str) -> tuple[McpServer, McpTool] | None:
        """The server and tool behind a call of `name`, if an MCP server lists it."""
        for listing in self._listings.values():
            for t in listing.tools:
                if t.name == name:
                    return listing.server, t
        return None

    def _forget(self, label: str) -> None:
        listing = self._listings.pop(label)
        if listing.task is not None:
            listing.task.cancel()

    async def close(self) -> None:
        tasks = [x.task for x in self._listings.values() if x.task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._listings.clear()
