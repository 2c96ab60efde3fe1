"""Items a client sends (`conversation.item.create`, `response.create` input) turned
into conversation items, with a precise `param` for whatever is wrong."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable

import numpy as np

from engine.conversation import Item, McpFields
from engine.images import NO_IMAGES, ImageRefused, ImageRules, checked_image
from engine.protocol import ItemIn, ProtocolError
from models.base import PCM_RATE, PromptImage, PromptItem, SpeechHint


def item_from_wire(
    wire: ItemIn,
    new_id: Callable[[str], str],
    *,
    param: str = "item",
    event_id: str | None = None,
    rate: int = PCM_RATE,
    images: ImageRules = NO_IMAGES,
) -> Item:
    """A conversation item from the client's description of one.

    GA content types (`engine.protocol` has renamed beta's); user audio is base64
    16-bit PCM at `rate`; user images as `images` allows (by default none). Raises
    ProtocolError naming the field.
    """

    def fail(message: str, field: str, code: str = "invalid_value") -> ProtocolError:
        return ProtocolError(code, message, f"{param}.{field}", event_id)

    def missing(field: str) -> ProtocolError:
        return fail(
            f"Missing required parameter: '{param}.{field}'.", field, "missing_required_parameter"
        )

    def require(*fields: str) -> None:
        for name in fields:
            if getattr(wire, name) is None:
                raise missing(name)

    item_id = wire.id or new_id("item")
    if wire.type == "item_reference":
        raise fail("An item_reference is only valid in response.create input.", "type")
    if wire.type == "function_call":
        require("name")
        return Item(
            item_id,
            "assistant",
            kind="function_call",
            name=wire.name,
            arguments=wire.arguments or "{}",
            call_id=wire.call_id or new_id("call"),
        )
    if wire.type == "mcp_approval_response":
        require("approval_request_id", "approve")
        answer = McpFields(
            approval_request_id=wire.approval_request_id, approve=wire.approve, reason=wire.reason
        )
        return Item(item_id, "user", kind="mcp_approval_response", mcp=answer)
    if wire.type == "function_call_output":
        require("call_id", "output")
        return Item(
            item_id, "user", kind="function_call_output", call_id=wire.call_id, output=wire.output
        )
    if wire.role is None:
        raise missing("role")
    if not wire.content:
        raise missing("content")
    item = Item(item_id, wire.role)
    texts: list[str] = []
    shown: list[PromptImage] = []
    for i, part in enumerate(wire.content):
        where = f"content[{i}]"
        if wire.role == "assistant":
            if part.type == "output_text":
                item.text = (item.text or "") + (part.text or "")
            elif part.type == "output_audio":
                item.transcript += part.transcript or ""
            else:
                raise fail(f"Assistant content cannot be '{part.type}'.", f"{where}.type")
        elif part.type == "input_text":
            texts.append(part.text or "")
        elif part.type == "input_image" and wire.role == "user":
            # Any image refused refuses the whole item: none of it is added.
            if not images.sees:
                raise fail(
                    f"Item '{item_id}' {where} is an input_image, and the session's model "
                    "cannot see images; describe the image in input_text instead.",
                    where,
                    "unsupported_content",
                )
            if len(shown) == images.max_per_item:
                raise fail(
                    f"An item may show at most {images.max_per_item} images; {where} is one more.",
                    where,
                )
            try:
                shown.append(
                    checked_image(part.image_url, part.file_id, part.detail, images.max_bytes)
                )
            except ImageRefused as refused:
                raise fail(refused.message, f"{where}.{refused.field}") from None
        elif part.type == "input_audio" and wire.role == "user":
            if part.audio is not None:
                item.audio = _pcm(part.audio, f"{param}.{where}.audio", event_id)
                item.rate = rate
            item.transcript = part.transcript or ""
        else:
            raise fail(f"{wire.role.title()} content cannot be '{part.type}'.", f"{where}.type")
    if texts:
        item.text = " ".join(texts)
    item.images = tuple(shown)
    return item


def prompt_item(item: Item, hint: SpeechHint | None = None) -> PromptItem:
    """What an executor sees of a message or function call item: user audio as
    audio (with the session's `hint` for its recognition), text and transcripts as
    text, user images as images, function calls and their outputs as they are."""
    assert item.kind in ("message", "function_call", "function_call_output"), item.kind
    text = item.text if item.text is not None else (item.transcript or None)
    return PromptItem(
        item.id,
        item.role,
        audio=item.audio if item.role == "user" else None,
        rate=item.rate,
        hint=hint if item.role == "user" and item.audio is not None else None,
        text=text,
        images=item.images,
        kind=item.kind,  # narrowed by the assert
        call_id=item.call_id,
        name=item.name,
        arguments=item.arguments,
        output=item.output,
    )


def prompt_items(item: Item, hint: SpeechHint | None = None) -> tuple[PromptItem, ...]:
    """What an executor sees of any conversation item: an MCP call the server ran is
    a function call and its output (the model called it, and reads the result); an
    MCP listing and approvals are not the model's to read."""
    if item.kind == "mcp_call":
        error = item.mcp.error
        result = item.output if error is None else f"Error: {error.get('message', '')}"
        return (
            PromptItem(
                item.id,
                "assistant",
                kind="function_call",
                call_id=item.id,
                name=item.name,
                arguments=item.arguments or "{}",
            ),
            PromptItem(
                f"{item.id}_output",
                "user",
                kind="function_call_output",
                call_id=item.id,
                name=item.name,
                output=result or "",
            ),
        )
    if item.kind.startswith("mcp_"):
        return ()
    return (prompt_item(item, hint),)


def _pcm(audio: str, param: str, event_id: str | None) -> np.ndarray:
    try:
        raw = base64.b64decode(audio, validate=True)
    except (binascii.Error, ValueError):
        raise ProtocolError("invalid_value", "Invalid base64 audio.", param, event_id) from None
    if len(raw) % 2:
        raise ProtocolError(
            "invalid_value", "16-bit PCM needs an even number of bytes.", param, event_id
        )
    return np.frombuffer(raw, dtype="<i2").astype(np.int16)
