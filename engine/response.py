"""A response as data: what it is asked to be (a client's `response.create` or a
server_vad commit), its record while it runs, and its wire shape. The lifecycle that
uses them is the Responder's (engine/responder.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from engine import protocol
from engine.conversation import Conversation, Item
from engine.images import NO_IMAGES, ImageRules, over_held
from engine.items import item_from_wire, prompt_items
from engine.observer import ResponseStatus
from engine.prompts import with_prompt
from engine.response_stream import ResponseStream
from engine.session_config import (
    Modality,
    SessionConfig,
    tool_choice_name,
    tools_from_wire,
)
from engine.truncation import ContextTooLong
from models.base import Prompt, PromptItem, Tool

CancelReason = Literal["turn_detected", "client_cancelled"]
CONVERSATION = "conversation"  # the output lane of the default conversation


@dataclass(frozen=True)
class ResponseRequest:
    from_client: bool
    event_id: str | None = None
    instructions: str | None = None
    modalities: tuple[Modality, ...] | None = None
    metadata: dict[str, str] | None = None
    max_output_tokens: int | Literal["inf"] | None = None
    tools: tuple[Tool, ...] | None = None  # None: the session's
    tool_choice: str | None = None
    # Explicit input instead of the conversation (resolved items).
    input: tuple[Item, ...] | None = None
    # conversation: "none": outside the conversation, beside the active response.
    out_of_band: bool = False
    # False (Parley's extension): the user's speech does not cut it; it becomes the
    # next turn once the answer has played (engine/postponed_speech.py).
    interruptible: bool = True


def request_from_create(
    event: protocol.ResponseCreate,
    conversation: Conversation,
    new_id: Callable[[str], str],
    images: ImageRules = NO_IMAGES,
) -> ResponseRequest:
    """The request a client's `response.create` makes; raises ProtocolError naming
    the field that is wrong. New input items may show `images`, as many in all as
    a conversation may hold."""
    r = event.response or protocol.ResponseIn()
    if r.conversation not in (None, "auto", "none"):
        raise protocol.ProtocolError(
            "invalid_value",
            "conversation must be 'auto' or 'none'.",
            "response.conversation",
            event.event_id,
        )
    modalities = r.output_modalities
    if modalities is not None and len(modalities) != 1:
        raise protocol.ProtocolError(
            "invalid_value",
            "output_modalities must be exactly one of ['audio'] or ['text'].",
            "response.output_modalities",
            event.event_id,
        )
    inputs = None
    if r.input is not None:
        inputs = tuple(
            _input_item(item, f"response.input[{i}]", event.event_id, conversation, new_id, images)
            for i, item in enumerate(r.input)
        )
        new = sum(
            len(item.images)
            for item, wire in zip(inputs, r.input, strict=True)
            if wire.type != "item_reference"
        )
        if (full := over_held(images, 0, new)) is not None:
            raise protocol.ProtocolError("invalid_value", full, "response.input", event.event_id)
    return ResponseRequest(
        from_client=True,
        event_id=event.event_id,
        instructions=r.instructions,
        modalities=tuple(modalities) if modalities else None,
        metadata=r.metadata,
        max_output_tokens=r.max_output_tokens,
        tools=None if r.tools is None else tools_from_wire(r.tools),
        tool_choice=None if r.tool_choice is None else tool_choice_name(r.tool_choice),
        input=inputs,
        out_of_band=r.conversation == "none",
        interruptible=r.interruptible is not False,
    )


def _input_item(
    wire: protocol.ItemIn,
    param: str,
    event_id: str | None,
    conversation: Conversation,
    new_id: Callable[[str], str],
    images: ImageRules,
) -> Item:
    """An item of `response.create` input: a reference to the conversation, or
    a new item that is used for this response only."""
    if wire.type == "item_reference":
        found = conversation.get(wire.id or "")
        if found is None:
            raise protocol.ProtocolError(
                "item_not_found", f"Item '{wire.id}' does not exist.", f"{param}.id", event_id
            )
        return found
    return item_from_wire(wire, new_id, param=param, event_id=event_id, images=images)


@dataclass
class ActiveResponse:
    """A response from `response.created` to its `response.done`: the Responder's
    record. Its `stream` belongs to `task`."""

    request: ResponseRequest
    modalities: tuple[Modality, ...]
    max_output_tokens: int | Literal["inf"]
    stream: ResponseStream
    task: asyncio.Task[None] | None = None
    finalized: bool = False

    @property
    def id(self) -> str:
        return self.stream.response_id

    @property
    def item_id(self) -> str:
        return self.stream.item_id


@dataclass(frozen=True)
class ResponseFinished:
    """Mailbox message: a response task's stream ended (with `error` if it failed)."""

    response: ActiveResponse
    error: BaseException | None


def response_wire(
    resp: ActiveResponse,
    status: str,
    *,
    conversation_id: str,
    voice: str,
    audio_format: dict[str, Any],
    details: dict[str, Any] | None = None,
    output: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The SDK's `RealtimeResponse`."""
    wire: dict[str, Any] = {
        "id": resp.id,
        "object": "realtime.response",
        "status": status,
        "status_details": details,
        "output": output or [],
        "conversation_id": None if resp.request.out_of_band else conversation_id,
        "output_modalities": list(resp.modalities),
        "max_output_tokens": resp.max_output_tokens,
        "metadata": resp.request.metadata,
    }
    if resp.stream.audio_out:
        wire["audio"] = {"output": {"format": audio_format, "voice": voice}}
    return wire


def function_tools(request: ResponseRequest, config: SessionConfig) -> tuple[Tool, ...]:
    """The function tools a response offers: its own, else the session's."""
    return request.tools if request.tools is not None else config.tools


def prompt_for(
    resp: ActiveResponse,
    items: list[Item],
    config: SessionConfig,
    session_id: str,
    *,
    mcp_tools: tuple[Tool, ...] = (),
    ran: tuple[Item, ...] = (),
) -> Prompt:
    """The prompt of the response `resp`: the explicit input if the request had one;
    otherwise the conversation `items` before the response's own (turns committed
    during it belong to a later response). Then the MCP calls this response `ran`:
    the model is asked again with their results, choosing freely this time."""
    request = resp.request
    if request.input is not None:
        source: list[Item] = list(request.input)
    else:
        source = []
        for i in items:
            if i.id == resp.item_id:
                break
            source.append(i)
    return response_prompt(
        resp.id,
        request,
        tuple(p for i in (*source, *ran) for p in prompt_items(i, config.speech_hint)),
        config,
        session_id,
        modalities=resp.modalities,
        max_output_tokens=resp.max_output_tokens,
        mcp_tools=mcp_tools,
        choose_freely=bool(ran),
    )


def speculative_prompt(
    request_id: str,
    items: list[Item],
    turn: PromptItem,
    config: SessionConfig,
    session_id: str,
    mcp_tools: tuple[Tool, ...] = (),
) -> Prompt:
    """The prompt the response to `turn` (not committed yet) will have if the turn
    commits as it is and the commit asks for the session's own response (a request
    that sets nothing): the conversation, then the turn."""
    return response_prompt(
        request_id,
        ResponseRequest(from_client=False),
        (*(p for i in items for p in prompt_items(i, config.speech_hint)), turn),
        config,
        session_id,
        modalities=config.output_modalities,
        max_output_tokens=config.max_output_tokens,
        mcp_tools=mcp_tools,
    )


def response_prompt(
    request_id: str,
    request: ResponseRequest,
    items: tuple[PromptItem, ...],
    config: SessionConfig,
    session_id: str,
    *,
    modalities: tuple[Modality, ...],
    max_output_tokens: int | Literal["inf"],
    mcp_tools: tuple[Tool, ...] = (),
    choose_freely: bool = False,
) -> Prompt:
    """The model's prompt for a response to `request` over `items`: what the request
    sets, else the session's settings. The tools are the function tools and the
    `mcp_tools` the session's MCP servers listed."""
    return Prompt(
        request_id=request_id,
        session_id=session_id,
        instructions=with_prompt(
            config.prompt,
            request.instructions if request.instructions is not None else config.instructions,
        ),
        items=items,
        output_modalities=modalities,
        max_output_tokens=None if max_output_tokens == "inf" else int(max_output_tokens),
        tools=(*function_tools(request, config), *mcp_tools),
        tool_choice="auto" if choose_freely else request.tool_choice or config.tool_choice,
        voice=config.voice,
        parallel_tool_calls=config.parallel_tool_calls,
        reasoning_effort=config.reasoning_effort,
    )


Ending = tuple[ResponseStatus, dict[str, Any] | None]  # status and status_details of response.done


def ending_of(error: BaseException | None, finish: Literal["length"] | None) -> Ending:
    """How a response whose stream ended by itself is reported."""
    if isinstance(error, ContextTooLong):
        return "failed", {
            "type": "failed",
            "error": {
                "type": "invalid_request_error",
                "code": "context_length_exceeded",
                "message": str(error),
            },
        }
    if error is not None:
        return "failed", {
            "type": "failed",
            "error": {"type": "server_error", "code": "model_error", "message": str(error)},
        }
    if finish == "length":
        return "incomplete", {"type": "incomplete", "reason": "max_output_tokens"}
    return "completed", None
