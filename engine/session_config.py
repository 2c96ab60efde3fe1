"""A session's effective configuration and how `session.update` patches it.

The patch arrives in GA shape (nested `audio.input...`; `engine.protocol` has moved
any beta spellings there) and is folded into one immutable `SessionConfig`.
`apply_update` is pure: it returns a new config or raises ProtocolError naming the
offending `param`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Literal

from engine.audio_format import PCM24, AudioFormat
from engine.interruption import InterruptionParams
from engine.mcp.rules import ApprovalFilter, McpServer, ToolFilter, server_of
from engine.prompts import PromptLibrary, PromptRef, resolve_prompt
from engine.protocol import (
    AudioFormatIn,
    InterruptionIn,
    ProtocolError,
    RetentionRatioIn,
    SessionIn,
    ToolChoiceIn,
    ToolIn,
    TracingIn,
    TranscriptionIn,
    TurnDetectionIn,
    VoiceIdIn,
)
from engine.semantic_turns import SemanticVadParams
from engine.tracing import TraceNames, Tracing
from engine.transcription_session import SessionType, check_patch
from engine.turns import ServerVadParams
from models.base import SpeechHint, Tool

Modality = Literal["text", "audio"]
ReasoningEffort = Literal["minimal", "low", "medium", "high", "xhigh"]
DEFAULT_VAD = ServerVadParams()


@dataclass(frozen=True)
class InputTranscription:
    """Asked for by the client; Parley transcribes with its own recognizer and
    echoes the model name the client gave."""

    model: str = "whisper-1"
    language: str | None = None
    prompt: str | None = None


@dataclass(frozen=True)
class RetentionRatio:
    """`truncation: {type: "retention_ratio", ...}`, as sent."""

    retention_ratio: float
    post_instructions: int | None = None
    token_limits_sent: bool = False  # `token_limits` sent (maybe empty): echoed so


# The `include` value that asks for input transcripts' token log-probabilities.
LOGPROBS = "item.input_audio_transcription.logprobs"

# Applied to each response's prompt by engine/truncation.py.
Truncation = Literal["auto", "disabled"] | RetentionRatio


@dataclass(frozen=True)
class SessionConfig:
    model: str
    # Fixed when the session opens (engine/transcription_session.py): a transcription
    # session has no responses and is echoed in its own shape.
    type: SessionType = "realtime"
    instructions: str = ""
    output_modalities: tuple[Modality, ...] = ("audio",)
    voice: str = "alloy"
    turn_detection: ServerVadParams | None = DEFAULT_VAD
    input_transcription: InputTranscription | None = None
    input_format: AudioFormat = PCM24
    output_format: AudioFormat = PCM24
    tools: tuple[Tool, ...] = ()
    mcp: tuple[McpServer, ...] = ()  # the `type: "mcp"` tools (engine/mcp/rules.py)
    tool_choice: str = "auto"  # auto, none, required, or a function's name
    max_output_tokens: int | Literal["inf"] = "inf"
    # audio.input.noise_reduction: WebRTC's suppressor before the VAD
    # (models/listening/denoise.py)
    noise_reduction: Literal["near_field", "far_field"] | None = None
    # audio.input.echo_cancellation, Parley's extension (models/listening/echo.py): the
    # own-voice guard, and with `cancel_input` AEC3 on the input as well, with what
    # was sent as the far end; never echoed in session.updated.
    echo_cancellation: bool = False
    echo_cancel_input: bool = False
    # The voice as `{"id": voice}` rather than a string: echoed in the shape it came.
    voice_as_id: bool = False
    prompt: PromptRef | None = None  # the operator's template (engine/prompts.py)
    tracing: Tracing = None  # a label on the session's log lines (engine/tracing.py)
    include: tuple[str, ...] | None = None  # LOGPROBS: the transcripts' log-probabilities
    reasoning_effort: ReasoningEffort | None = None  # sent to chat backends
    parallel_tool_calls: bool | None = None  # sent to chat backends
    truncation: Truncation = "auto"

    @property
    def speech_hint(self) -> SpeechHint | None:
        """The recognizer's hint from `audio.input.transcription`: its language and
        prompt (None: neither given)."""
        t = self.input_transcription
        logprobs = t is not None and LOGPROBS in (self.include or ())
        if t is None or (t.language is None and not t.prompt and not logprobs):
            return None
        return SpeechHint(t.language, t.prompt or None, logprobs)


def apply_update(
    config: SessionConfig,
    patch: SessionIn,
    *,
    audio_started: bool,
    event_id: str | None = None,
    prompts: PromptLibrary | None = None,
) -> SessionConfig:
    """Merge a partial `session` object into `config` (fields absent stay as they are);
    `prompts` are the operator's, for `prompt` (None: none configured)."""

    def fail(code: str, message: str, param: str) -> ProtocolError:
        return ProtocolError(code, message, param, event_id)

    check_patch(patch, config.type, event_id)
    sent = patch.model_fields_set
    changes: dict[str, Any] = {}
    if "model" in sent and patch.model not in (None, config.model):
        raise fail("invalid_value", "The session's model cannot be changed.", "session.model")
    if "instructions" in sent:
        changes["instructions"] = patch.instructions or ""
    # (The errors for modalities and voice name the GA field, however it was sent.)
    modalities = patch.output_modalities
    if modalities is not None:
        if len(modalities) != 1:
            raise fail(
                "invalid_value",
                "output_modalities must be exactly one of ['audio'] or ['text'].",
                "session.output_modalities",
            )
        changes["output_modalities"] = tuple(modalities)
    if "max_output_tokens" in sent:
        value = patch.max_output_tokens
        changes["max_output_tokens"] = "inf" if value is None else value

    if "prompt" in sent:
        changes["prompt"] = (
            None if patch.prompt is None else resolve_prompt(patch.prompt, prompts, event_id)
        )
    if "tracing" in sent:
        changes["tracing"] = _tracing(patch.tracing)
    if "include" in sent:
        changes["include"] = None if patch.include is None else tuple(patch.include)
    if "reasoning" in sent:
        changes["reasoning_effort"] = patch.reasoning.effort if patch.reasoning else None
    if "parallel_tool_calls" in sent:
        changes["parallel_tool_calls"] = patch.parallel_tool_calls
    if "truncation" in sent:
        changes["truncation"] = _truncation(patch.truncation)

    audio_in = patch.audio.input if patch.audio else None
    audio_out = patch.audio.output if patch.audio else None

    # Turn detection: an explicit null disables it.
    if audio_in is not None and "turn_detection" in audio_in.model_fields_set:
        changes["turn_detection"] = _turn_detection(audio_in.turn_detection)

    if "tools" in sent:
        changes["tools"] = tools_from_wire(patch.tools or [])  # [] (or null) clears them
        changes["mcp"] = tuple(server_of(t) for t in patch.tools or [] if t.type == "mcp")
    if "tool_choice" in sent:
        changes["tool_choice"] = (
            "auto" if patch.tool_choice is None else tool_choice_name(patch.tool_choice)
        )

    # Input transcription: null turns it off.
    if audio_in is not None and "noise_reduction" in audio_in.model_fields_set:
        nr = audio_in.noise_reduction
        changes["noise_reduction"] = None if nr is None else nr.type
    if audio_in is not None and "echo_cancellation" in audio_in.model_fields_set:
        echo = audio_in.echo_cancellation
        changes["echo_cancellation"] = echo is not None
        changes["echo_cancel_input"] = echo is not None and echo.cancel_input
    if audio_in is not None and "transcription" in audio_in.model_fields_set:
        changes["input_transcription"] = _transcription(audio_in.transcription)

    sent_voice = audio_out.voice if audio_out else None
    voice = sent_voice.id if isinstance(sent_voice, VoiceIdIn) else sent_voice
    if voice is not None and voice != config.voice:
        if audio_started:
            raise fail(
                "invalid_value",
                "The voice cannot be changed once the assistant has spoken.",
                "session.audio.output.voice",
            )
        changes["voice"] = voice
    if voice is not None:
        changes["voice_as_id"] = isinstance(sent_voice, VoiceIdIn)

    for side, nested in (("input", audio_in), ("output", audio_out)):
        fmt = _format(
            nested.format if nested else None, patch.param(f"audio.{side}.format"), event_id
        )
        if fmt is not None:
            changes[f"{side}_format"] = fmt
    return replace(config, **changes)


def unhonoured(patch: SessionIn, event_id: str | None = None) -> list[ProtocolError]:
    """Values OpenAI accepts that Parley cannot honour. Each is reported in its own
    `error` naming the field, and `apply_update` applies the rest of the update: one
    such value never drops a whole update (a client's other settings would be lost).
    Values OpenAI itself refuses are refused whole by `apply_update` instead."""
    found: list[ProtocolError] = []
    audio_out = patch.audio.output if patch.audio else None
    if audio_out is not None and audio_out.speed not in (None, 1.0):
        found.append(
            ProtocolError(
                "unsupported_value",
                f"Parley speaks at one speed: speed {audio_out.speed} is not applied "
                "(the rest of the update is).",
                patch.param("audio.output.speed"),
                event_id,
            )
        )
    return found


def tools_from_wire(tools: list[ToolIn]) -> tuple[Tool, ...]:
    """The function tools (MCP tools are `SessionConfig.mcp`)."""
    return tuple(
        Tool(t.name, t.description or "", json.dumps(t.parameters or {}))
        for t in tools
        if t.type == "function" and t.name is not None
    )


def tool_choice_name(choice: ToolChoiceIn) -> str:
    return choice if isinstance(choice, str) else choice.name


def _filter_wire(f: ToolFilter) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if f.tool_names is not None:
        out["tool_names"] = list(f.tool_names)
    if f.read_only is not None:
        out["read_only"] = f.read_only
    return out


def _mcp_wire(server: McpServer) -> dict[str, Any]:
    """An MCP tool as configured; its headers and token are not echoed."""
    approval: Any = server.approval
    if isinstance(approval, ApprovalFilter):
        approval = {
            side: _filter_wire(f)
            for side, f in (("always", approval.always), ("never", approval.never))
            if f is not None
        }
    out: dict[str, Any] = {
        "type": "mcp",
        "server_label": server.label,
        "server_url": server.url,
        "require_approval": approval,
    }
    if server.allowed is not None:
        out["allowed_tools"] = _filter_wire(server.allowed)
    if server.description:
        out["server_description"] = server.description
    return out


def _tool_choice_wire(choice: str) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    return {"type": "function", "name": choice}


def _tracing(value: Literal["auto"] | TracingIn | None) -> Tracing:
    if value is None or value == "auto":
        return value
    metadata = None if value.metadata is None else json.dumps(value.metadata)
    return TraceNames(value.workflow_name, value.group_id, metadata)


def _truncation(value: Literal["auto", "disabled"] | RetentionRatioIn | None) -> Truncation:
    if value is None:
        return "auto"  # null: the default
    if isinstance(value, str):
        return value
    limits = value.token_limits
    return RetentionRatio(
        value.retention_ratio, limits.post_instructions if limits else None, limits is not None
    )


def _truncation_wire(truncation: Truncation) -> Any:
    if isinstance(truncation, str):
        return truncation
    out: dict[str, Any] = {
        "type": "retention_ratio",
        "retention_ratio": truncation.retention_ratio,
    }
    if truncation.token_limits_sent:
        limits = truncation.post_instructions
        out["token_limits"] = {} if limits is None else {"post_instructions": limits}
    return out


def _tracing_wire(tracing: Tracing) -> Any:
    return tracing.wire() if isinstance(tracing, TraceNames) else tracing


def _transcription(value: TranscriptionIn | None) -> InputTranscription | None:
    if value is None:
        return None
    return InputTranscription(value.model or "whisper-1", value.language, value.prompt)


def _interruption(value: InterruptionIn | None) -> InterruptionParams | None:
    if value is None:
        return None  # null: every speech start interrupts
    fields: dict[str, Any] = {
        name: getattr(value, name)
        for name in (
            "enabled",
            "min_speech_ms",
            "max_backchannel_ms",
            "crowd_kurtosis",
            "one_voice_kurtosis",
            "one_voice_clarity",
        )
        if getattr(value, name) is not None
    }
    if value.backchannels is not None:
        fields["backchannels"] = tuple(value.backchannels)
    return InterruptionParams(**fields)


def _turn_detection(value: TurnDetectionIn | None) -> ServerVadParams | None:
    if value is None:
        return None
    # Absent: qualified interruption with its defaults; null: off.
    sent = "interruption" in value.model_fields_set
    interruption = _interruption(value.interruption) if sent else InterruptionParams()
    if value.type == "semantic_vad":
        # Only these three are semantic_vad fields (server_vad's are ignored, as the
        # SDK's SemanticVad has none of them), and Parley's interruption.
        semantic: dict[str, Any] = {
            name: getattr(value, name)
            for name in ("eagerness", "create_response", "interrupt_response")
            if getattr(value, name) is not None
        }
        return SemanticVadParams(**semantic, interruption=interruption)
    defaults = ServerVadParams()
    fields = {
        name: getattr(value, name)
        for name in (
            "threshold",
            "prefix_padding_ms",
            "silence_duration_ms",
            "create_response",
            "interrupt_response",
            "idle_timeout_ms",
        )
        if getattr(value, name) is not None
    }
    return replace(defaults, **fields, interruption=interruption)


def _format(fmt: AudioFormatIn | None, param: str, event_id: str | None) -> AudioFormat | None:
    if fmt is None:
        return None
    try:
        return AudioFormat.from_wire(fmt.type, fmt.rate)
    except ValueError as exc:
        raise ProtocolError("unsupported_audio_format", str(exc), param, event_id) from None


def new_config(model: str, kind: SessionType = "realtime") -> SessionConfig:
    """A session's configuration before any update: a transcription session
    transcribes every turn unless told not to (that is what it is for)."""
    if kind == "transcription":
        return SessionConfig(model=model, type=kind, input_transcription=InputTranscription())
    return SessionConfig(model=model)


def _audio_input_wire(config: SessionConfig) -> dict[str, Any]:
    """`audio.input`, the same in both session shapes."""
    vad = config.turn_detection
    turn_detection: dict[str, Any] | None = None
    if isinstance(vad, SemanticVadParams):
        turn_detection = {
            "type": "semantic_vad",
            "eagerness": vad.eagerness,
            "create_response": vad.create_response,
            "interrupt_response": vad.interrupt_response,
        }
    elif vad is not None:
        turn_detection = {
            "type": "server_vad",
            "threshold": vad.threshold,
            "prefix_padding_ms": vad.prefix_padding_ms,
            "silence_duration_ms": vad.silence_duration_ms,
            "create_response": vad.create_response,
            "interrupt_response": vad.interrupt_response,
            "idle_timeout_ms": vad.idle_timeout_ms,
        }
    transcription: dict[str, Any] | None = None
    if config.input_transcription is not None:
        t = config.input_transcription
        transcription = {"model": t.model}
        if t.language:
            transcription["language"] = t.language
        if t.prompt:
            transcription["prompt"] = t.prompt
    return {
        "format": config.input_format.to_wire(),
        "turn_detection": turn_detection,
        "transcription": transcription,
        "noise_reduction": None
        if config.noise_reduction is None
        else {"type": config.noise_reduction},
    }


def to_wire(config: SessionConfig) -> dict[str, Any]:
    """The full effective configuration, shaped as the GA `session` object (the
    SDK's RealtimeTranscriptionSessionCreateRequest for a transcription session)."""
    include = None if config.include is None else list(config.include)
    if config.type == "transcription":
        return {
            "type": "transcription",
            "audio": {"input": _audio_input_wire(config)},
            "include": include,
        }
    optional: dict[str, Any] = {}
    if config.reasoning_effort is not None:
        optional["reasoning"] = {"effort": config.reasoning_effort}
    if config.parallel_tool_calls is not None:
        optional["parallel_tool_calls"] = config.parallel_tool_calls
    return {
        "type": "realtime",
        "model": config.model,
        "instructions": config.instructions,
        "output_modalities": list(config.output_modalities),
        "max_output_tokens": config.max_output_tokens,
        "tools": [
            {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": json.loads(t.parameters),
            }
            for t in config.tools
        ]
        + [_mcp_wire(s) for s in config.mcp],
        "tool_choice": _tool_choice_wire(config.tool_choice),
        "audio": {
            "input": _audio_input_wire(config),
            "output": {
                "format": config.output_format.to_wire(),
                "voice": {"id": config.voice} if config.voice_as_id else config.voice,
            },
        },
        "prompt": None if config.prompt is None else config.prompt.wire(),
        "tracing": _tracing_wire(config.tracing),
        "include": include,
        "truncation": _truncation_wire(config.truncation),
        **optional,
    }
