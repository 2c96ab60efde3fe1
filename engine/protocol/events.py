"""Client events as pydantic models.

They are our own models, not the SDK's, so that a bad field gets a precise `param`
in the error. They accept GA names and beta spellings alike; `normalize` then moves
the beta spellings to their GA fields, so the engine reads GA only. Server events
are the official SDK's models (`openai.types.realtime`), built by `engine.emitter`,
so the wire matches the SDK by construction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, PrivateAttr, Tag

from engine.protocol.errors import TAG_ARRAY, TAG_INF, TAG_INTEGER, TAG_OBJECT, TAG_STRING
from engine.protocol.nesting import JsonObject

# Unknown fields are ignored rather than refused: newer clients send fields this
# server does not know yet, and refusing them would break those clients. Known
# fields are strict, as OpenAI checks them: "500" is no integer, `true` no number,
# "yes" no boolean (an integer is a number: JSON has one number type).
_CONFIG = ConfigDict(extra="ignore", frozen=True, strict=True)


class ValidatedEvent(BaseModel):
    """Every client event but the append, which takes the lean path."""

    model_config = _CONFIG
    event_id: str | None = None


# --- session configuration (GA nested and beta flat) -----------------------------


class _Loose(BaseModel):
    model_config = _CONFIG


# Unions are told apart by the input's JSON type, each member under a tag that
# `errors.json_path` leaves out of `param`; input of no member's type is one
# `invalid_type` error for the field rather than one per member.


def _by_json_type(
    tag_of: Callable[[object], str | None], error: str, expected: str
) -> Discriminator:
    return Discriminator(
        tag_of, custom_error_type=error, custom_error_message=f"Input should be {expected}"
    )


def _int_or_inf(value: object) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return TAG_INTEGER
    return TAG_INF if value == "inf" else None


MaxTokens = Annotated[
    Annotated[int, Tag(TAG_INTEGER)] | Annotated[Literal["inf"], Tag(TAG_INF)],
    _by_json_type(_int_or_inf, "int_or_inf_type", "an integer or 'inf'"),
]


class InterruptionIn(_Loose):
    """Parley's extension of turn_detection (engine/interruption.py)."""

    enabled: bool | None = None
    min_speech_ms: int | None = Field(default=None, ge=0, le=10_000)
    max_backchannel_ms: int | None = Field(default=None, ge=0, le=60_000)
    crowd_kurtosis: float | None = Field(default=None, ge=0.0, le=100.0)
    one_voice_kurtosis: float | None = Field(default=None, ge=0.0, le=100.0)
    one_voice_clarity: float | None = Field(default=None, ge=0.0, le=1.0)
    backchannels: list[Annotated[str, Field(max_length=100)]] | None = Field(
        default=None, max_length=200
    )


class TurnDetectionIn(_Loose):
    type: Literal["server_vad", "semantic_vad"] = "server_vad"
    threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    prefix_padding_ms: int | None = Field(default=None, ge=0, le=10_000)
    silence_duration_ms: int | None = Field(default=None, ge=0, le=60_000)
    create_response: bool | None = None
    interrupt_response: bool | None = None
    idle_timeout_ms: int | None = Field(default=None, ge=0)
    eagerness: Literal["low", "medium", "high", "auto"] | None = None
    interruption: InterruptionIn | None = None


class AudioFormatIn(_Loose):
    type: Literal["audio/pcm", "audio/pcmu", "audio/pcma"]
    rate: int | None = None


class TranscriptionIn(_Loose):
    model: str | None = None
    language: str | None = None
    prompt: str | None = None


class NoiseReductionIn(_Loose):
    type: Literal["near_field", "far_field"]


class EchoCancellationIn(_Loose):
    """Parley's extension of audio.input (models/listening/echo.py): speech heard while
    the assistant talks is checked against what was sent, and the assistant's own
    voice never interrupts; `cancel_input` also runs WebRTC's AEC3 on the input."""

    type: Literal["server"]
    cancel_input: bool = False


class AudioInputIn(_Loose):
    format: AudioFormatIn | None = None
    turn_detection: TurnDetectionIn | None = None
    transcription: TranscriptionIn | None = None
    noise_reduction: NoiseReductionIn | None = None
    echo_cancellation: EchoCancellationIn | None = None


class VoiceIdIn(_Loose):
    """A voice named as an object (`{"id": ...}`), as GA allows for custom voices."""

    id: str = Field(min_length=1, max_length=256)


def _string_or_object(value: object) -> str | None:
    """An object (or a model already validated from one), else a string."""
    if isinstance(value, dict | BaseModel):
        return TAG_OBJECT
    return TAG_STRING if isinstance(value, str) else None


# A voice: its name, or `{"id": name}`.
VoiceIn = Annotated[
    Annotated[str, Tag(TAG_STRING)] | Annotated[VoiceIdIn, Tag(TAG_OBJECT)],
    _by_json_type(_string_or_object, "string_or_object_type", "a string or an object"),
]


class AudioOutputIn(_Loose):
    format: AudioFormatIn | None = None
    voice: VoiceIn | None = None
    speed: float | None = Field(default=None, ge=0.25, le=1.5)


class AudioIn(_Loose):
    input: AudioInputIn | None = None
    output: AudioOutputIn | None = None


class McpFilterIn(_Loose):
    """An MCP tool filter: by name and/or by the tool's read-only hint."""

    tool_names: list[Annotated[str, Field(max_length=256)]] | None = Field(
        default=None, max_length=1024
    )
    read_only: bool | None = None


def _array_or_object(value: object) -> str | None:
    if isinstance(value, list):
        return TAG_ARRAY
    return TAG_OBJECT if isinstance(value, dict | McpFilterIn) else None


# An MCP tool's `allowed_tools`: tool names, or a filter.
AllowedToolsIn = Annotated[
    Annotated[list[Annotated[str, Field(max_length=256)]], Tag(TAG_ARRAY)]
    | Annotated[McpFilterIn, Tag(TAG_OBJECT)],
    _by_json_type(_array_or_object, "array_or_object_type", "an array or an object"),
]


class McpApprovalIn(_Loose):
    always: McpFilterIn | None = None
    never: McpFilterIn | None = None


# An MCP tool's `require_approval`: "always", "never", or filters under each.
RequireApprovalIn = Annotated[
    Annotated[McpApprovalIn, Tag(TAG_OBJECT)]
    | Annotated[Literal["always", "never"], Tag(TAG_STRING)],
    _by_json_type(_string_or_object, "string_or_object_type", "a string or an object"),
]


class ToolIn(_Loose):
    # OpenAI also takes MCP servers as tools: accepted here so one cannot drop a whole
    # session.update (engine/session_config.py reports it as not applied). A function
    # needs its name, an MCP tool its label and URL: `normalize` checks, as missing
    # required parameters.
    type: Literal["function", "mcp"] = "function"
    name: str | None = None
    server_label: str | None = Field(default=None, max_length=256)
    description: str | None = None
    parameters: JsonObject | None = None
    # MCP (engine/mcp/rules.py).
    server_url: str | None = Field(default=None, max_length=2048)
    connector_id: str | None = None
    allowed_tools: AllowedToolsIn | None = None
    require_approval: RequireApprovalIn | None = None
    headers: dict[str, Annotated[str, Field(max_length=8192)]] | None = Field(
        default=None, max_length=64
    )
    authorization: str | None = Field(default=None, max_length=8192)
    server_description: str | None = None


class PromptVariableIn(_Loose):
    """A prompt variable given as a content part (`input_text`; an image or a file
    is refused when the prompt is applied)."""

    type: Literal["input_text", "input_image", "input_file"]
    text: str | None = Field(default=None, max_length=65_536)


PromptVariable = Annotated[
    Annotated[Annotated[str, Field(max_length=65_536)], Tag(TAG_STRING)]
    | Annotated[PromptVariableIn, Tag(TAG_OBJECT)],
    _by_json_type(_string_or_object, "string_or_object_type", "a string or an object"),
]


class PromptRefIn(_Loose):
    """`prompt`: a prompt template the operator configured (engine/prompts.py)."""

    id: str = Field(max_length=128)
    version: str | None = Field(default=None, max_length=64)
    variables: dict[Annotated[str, Field(max_length=64)], PromptVariable] | None = Field(
        default=None, max_length=64
    )


class TracingIn(_Loose):
    workflow_name: str | None = Field(default=None, max_length=1024)
    group_id: str | None = Field(default=None, max_length=1024)
    metadata: JsonObject | None = None


# `tracing`: "auto", or a trace's names.
TracingChoiceIn = Annotated[
    Annotated[Literal["auto"], Tag(TAG_STRING)] | Annotated[TracingIn, Tag(TAG_OBJECT)],
    _by_json_type(_string_or_object, "string_or_object_type", "a string or an object"),
]


class TokenLimitsIn(_Loose):
    post_instructions: int | None = Field(default=None, ge=0)


class RetentionRatioIn(_Loose):
    type: Literal["retention_ratio"]
    retention_ratio: float = Field(ge=0.0, le=1.0)
    token_limits: TokenLimitsIn | None = None


# `truncation`: "auto", "disabled", or a retention ratio.
TruncationIn = Annotated[
    Annotated[Literal["auto", "disabled"], Tag(TAG_STRING)]
    | Annotated[RetentionRatioIn, Tag(TAG_OBJECT)],
    _by_json_type(_string_or_object, "string_or_object_type", "a string or an object"),
]


class ReasoningIn(_Loose):
    effort: Literal["minimal", "low", "medium", "high", "xhigh"] | None = None


class ToolChoiceFunction(_Loose):
    type: Literal["function"]
    name: str


# "auto", "none", "required", a function ({"type": "function", "name": ...}), or in
# beta a function's bare name.
ToolChoiceIn = Annotated[
    Annotated[ToolChoiceFunction, Tag(TAG_OBJECT)] | Annotated[str, Tag(TAG_STRING)],
    _by_json_type(_string_or_object, "string_or_object_type", "a string or an object"),
]


class ContentIn(_Loose):
    # GA names, and beta's "text"/"audio" for assistant content.
    type: Literal[
        "input_text", "input_audio", "input_image", "output_text", "output_audio", "text", "audio"
    ]
    text: str | None = None
    audio: str | None = None  # base64, in the session's input format
    transcript: str | None = None
    image_url: str | None = None  # input_image: a data: URL (engine/images.py)
    detail: Literal["auto", "low", "high"] | None = None
    file_id: str | None = None  # input_image: refused, there is no files API


class ItemIn(_Loose):
    id: str | None = Field(default=None, max_length=64)
    type: Literal[
        "message",
        "function_call",
        "function_call_output",
        "item_reference",
        "mcp_approval_response",
    ]
    role: Literal["user", "assistant", "system"] | None = None
    content: list[ContentIn] | None = None
    status: Literal["completed", "incomplete", "in_progress"] | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | None = None
    # mcp_approval_response: the client's answer to an mcp_approval_request
    approval_request_id: str | None = None
    approve: bool | None = None
    reason: str | None = None


class SessionIn(_Loose):
    """A partial session configuration. Which fields were sent matters (`null` for
    turn detection disables it; absent leaves it), so read `model_fields_set`.

    After `normalize` only the GA fields are set; `param` still names a field where
    the client put it, for errors. (The field order decides which of several bad
    fields pydantic names first, so it stays as it is.)"""

    type: Literal["realtime", "transcription"] | None = None
    model: str | None = None
    instructions: str | None = None
    output_modalities: list[Literal["text", "audio"]] | None = None
    audio: AudioIn | None = None
    max_output_tokens: MaxTokens | None = None
    prompt: PromptRefIn | None = None
    tracing: TracingChoiceIn | None = None
    include: list[Literal["item.input_audio_transcription.logprobs"]] | None = None
    reasoning: ReasoningIn | None = None
    parallel_tool_calls: bool | None = None
    truncation: TruncationIn | None = None
    # Beta (flat) spellings.
    modalities: list[Literal["text", "audio"]] | None = None
    voice: str | None = None
    # Checked when normalized (unsupported_audio_format), and only when the GA
    # nested format is not sent: GA's wins.
    input_audio_format: str | None = None
    output_audio_format: str | None = None
    turn_detection: TurnDetectionIn | None = None
    input_audio_transcription: TranscriptionIn | None = None
    input_audio_noise_reduction: NoiseReductionIn | None = None
    tools: list[ToolIn] | None = None
    tool_choice: ToolChoiceIn | None = None
    max_response_output_tokens: MaxTokens | None = None
    # GA path -> the beta path `normalize` moved it from.
    _moved_from: dict[str, str] = PrivateAttr(default_factory=dict)

    def param(self, path: str) -> str:
        """An error's `param` for the GA field at `path` (e.g. "audio.input.format"),
        spelled the way the client sent it."""
        return "session." + self._moved_from.get(path, path)


# --- client events ----------------------------------------------------------------


class SessionUpdate(ValidatedEvent):
    type: Literal["session.update"]
    session: SessionIn


@dataclass(frozen=True)
class InputAudioBufferAppend:
    """Built by the lean path in `parse_client_event`; `pcm` is the decoded bytes,
    in the session's input format. A plain dataclass: it is the one event that
    arrives 25-50 times a second per session, and its fields are checked there."""

    pcm: bytes
    event_id: str | None = None
    type: Literal["input_audio_buffer.append"] = "input_audio_buffer.append"
    # time.monotonic() when the transport read the frame; stamped only for an
    # engine observer (engine/observer.py), so the hot path pays nothing otherwise.
    received_at: float | None = None


class InputAudioBufferCommit(ValidatedEvent):
    type: Literal["input_audio_buffer.commit"]


class InputAudioBufferClear(ValidatedEvent):
    type: Literal["input_audio_buffer.clear"]


class ResponseIn(_Loose):
    instructions: str | None = None
    tools: list[ToolIn] | None = None
    tool_choice: ToolChoiceIn | None = None
    input: list[ItemIn] | None = None
    output_modalities: list[Literal["text", "audio"]] | None = None
    modalities: list[Literal["text", "audio"]] | None = None
    conversation: str | None = None
    metadata: dict[str, str] | None = None
    max_output_tokens: MaxTokens | None = None
    max_response_output_tokens: MaxTokens | None = None  # beta spelling
    # Parley's extension: false, speech cannot cut this answer (engine/postponed_speech.py).
    interruptible: bool | None = None


class ResponseCreate(ValidatedEvent):
    type: Literal["response.create"]
    response: ResponseIn | None = None


class ResponseCancel(ValidatedEvent):
    type: Literal["response.cancel"]
    response_id: str | None = None


class ConversationItemTruncate(ValidatedEvent):
    type: Literal["conversation.item.truncate"]
    item_id: str
    content_index: int = Field(ge=0)
    audio_end_ms: int = Field(ge=0)


class ConversationItemCreate(ValidatedEvent):
    type: Literal["conversation.item.create"]
    item: ItemIn
    previous_item_id: str | None = None


class ConversationItemRetrieve(ValidatedEvent):
    type: Literal["conversation.item.retrieve"]
    item_id: str


class ConversationItemDelete(ValidatedEvent):
    type: Literal["conversation.item.delete"]
    item_id: str


class OutputAudioBufferClear(ValidatedEvent):
    type: Literal["output_audio_buffer.clear"]


ClientEvent = (
    SessionUpdate
    | InputAudioBufferAppend
    | InputAudioBufferCommit
    | InputAudioBufferClear
    | ResponseCreate
    | ResponseCancel
    | ConversationItemTruncate
    | ConversationItemCreate
    | ConversationItemRetrieve
    | ConversationItemDelete
    | OutputAudioBufferClear
)
