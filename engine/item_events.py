"""Client events that edit the conversation: `conversation.item.create`, `.retrieve`,
`.delete` and `.truncate`. Handled on the session's task; the session owns one
`ItemEvents`. Items of the response in progress are the Responder's to settle."""

from __future__ import annotations

import logging

from openai.types.realtime import (
    ConversationItemAdded,
    ConversationItemDeletedEvent,
    ConversationItemDone,
    ConversationItemTruncatedEvent,
)
from openai.types.realtime.realtime_server_event import ConversationItemRetrieved

from engine import protocol
from engine.conversation import Conversation, Item
from engine.emitter import Emitter, Ids
from engine.images import NO_IMAGES, ImageRules, images_held, over_held
from engine.items import item_from_wire
from engine.playback import Playback
from engine.responder import Responder

log = logging.getLogger(__name__)


class ItemEvents:
    def __init__(
        self,
        conversation: Conversation,
        emit: Emitter,
        ids: Ids,
        responder: Responder,
        playback: Playback,
        images: ImageRules = NO_IMAGES,
    ) -> None:
        self._conversation = conversation
        self._emit = emit
        self._ids = ids
        self._responder = responder
        self._playback = playback  # what was sent of an item bounds its truncation
        self.images = images  # what a user message may show

    def _get(self, item_id: str, event_id: str | None) -> Item:
        item = self._conversation.get(item_id)
        if item is None:
            raise protocol.ProtocolError(
                "item_not_found", f"Item '{item_id}' does not exist.", "item_id", event_id
            )
        return item

    def create(self, event: protocol.ConversationItemCreate) -> None:
        item = item_from_wire(
            event.item, self._ids.new, event_id=event.event_id, images=self.images
        )
        full = over_held(self.images, images_held(self._conversation.items), len(item.images))
        if full is not None:
            full += " Delete an item with images first."
            raise protocol.ProtocolError("invalid_value", full, "item.content", event.event_id)
        if item.kind == "mcp_approval_response":
            asked = self._conversation.get(item.mcp.approval_request_id or "")
            if asked is None or asked.kind != "mcp_approval_request":
                raise protocol.ProtocolError(
                    "item_not_found",
                    f"No MCP approval request '{item.mcp.approval_request_id}'.",
                    "item.approval_request_id",
                    event.event_id,
                )
        if self._conversation.get(item.id) is not None:
            raise protocol.ProtocolError(
                "invalid_value",
                f"An item with id '{item.id}' already exists.",
                "item.id",
                event.event_id,
            )
        previous = event.previous_item_id
        if previous is None:
            previous = self._conversation.items[-1].id if self._conversation.items else None
        elif previous == "root":
            previous = None
        elif self._conversation.get(previous) is None:
            raise protocol.ProtocolError(
                "item_not_found",
                f"previous_item_id '{previous}' does not exist.",
                "previous_item_id",
                event.event_id,
            )
        self._conversation.insert_after(item, previous)
        self._emit.control(ConversationItemAdded, item=item.wire(), previous_item_id=previous)
        self._emit.control(ConversationItemDone, item=item.wire(), previous_item_id=previous)

    def retrieve(self, event: protocol.ConversationItemRetrieve) -> None:
        item = self._get(event.item_id, event.event_id)
        self._emit.control(ConversationItemRetrieved, item=item.wire(with_audio=True))

    def delete(self, event: protocol.ConversationItemDelete) -> None:
        item = self._get(event.item_id, event.event_id)
        if self._responder.holds_item(item.id):
            raise protocol.ProtocolError(
                "invalid_value",
                "This item belongs to the response in progress; cancel it first.",
                "item_id",
                event.event_id,
            )
        self._conversation.remove(item.id)
        self._playback.forget(item.id)  # nothing can truncate it now
        self._emit.control(ConversationItemDeletedEvent, item_id=item.id)

    async def truncate(self, event: protocol.ConversationItemTruncate) -> None:
        item = self._conversation.get(event.item_id)
        if item is None:
            raise protocol.ProtocolError(
                "item_not_found",
                f"Item '{event.item_id}' does not exist.",
                "item_id",
                event.event_id,
            )
        if item.role != "assistant" or item.kind != "message" or item.text is not None:
            raise protocol.ProtocolError(
                "invalid_value",
                "Only assistant audio items can be truncated.",
                "item_id",
                event.event_id,
            )
        if event.content_index != 0:
            raise protocol.ProtocolError(
                "invalid_value",
                "The item has one content part: use content_index 0.",
                "content_index",
                event.event_id,
            )
        active = self._responder.active
        if active is not None and active.item_id == item.id:
            # The client stopped playing the response being generated: the rest of it
            # would never be heard.
            await self._responder.cancel_active("client_cancelled")
        sent = self._playback.sent_samples(item.id)
        available = min(sent, item.audio_samples)
        end_ms = self._conversation.truncate(item, event.audio_end_ms, available)
        self._emit.control(
            ConversationItemTruncatedEvent,
            item_id=item.id,
            content_index=0,
            audio_end_ms=end_ms,
        )

    async def truncate_played(self, item_id: str, played_ms: int) -> None:
        """A playout the server paces dropped the rest of the item's audio: it keeps
        what was played (as OpenAI truncates an interrupted answer over WebRTC by
        itself)."""
        truncate = protocol.ConversationItemTruncate(
            type="conversation.item.truncate",
            item_id=item_id,
            content_index=0,
            audio_end_ms=played_ms,
        )
        try:
            await self.truncate(truncate)
        except protocol.ProtocolError as exc:  # the client deleted it meanwhile
            log.debug("no truncation after playout: %s", exc)
