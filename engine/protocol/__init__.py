"""The wire vocabulary: client events, their parsing, refusals, and beta both ways.

It imports nothing else of Parley: the engine and the server build on it.

- `events`: client events as pydantic models (GA names, beta spellings accepted);
- `parse`: one text frame -> one client event in GA shape (`parse_client_event`),
  with a lean path for `input_audio_buffer.append`;
- `errors`: `ProtocolError`, every refusal with `code`, `param` and `event_id`;
- `normalize`: beta spellings on input moved to their GA fields;
- `beta`: GA server events in the beta shape, for clients that asked for beta.
"""

from engine.protocol.beta import BETA_HEADER, to_beta, to_beta_text, wants_beta
from engine.protocol.errors import ProtocolError, validation_error
from engine.protocol.events import (
    AudioFormatIn,
    AudioIn,
    AudioInputIn,
    AudioOutputIn,
    ClientEvent,
    ContentIn,
    ConversationItemCreate,
    ConversationItemDelete,
    ConversationItemRetrieve,
    ConversationItemTruncate,
    EchoCancellationIn,
    InputAudioBufferAppend,
    InputAudioBufferClear,
    InputAudioBufferCommit,
    InterruptionIn,
    ItemIn,
    OutputAudioBufferClear,
    PromptRefIn,
    ResponseCancel,
    ResponseCreate,
    ResponseIn,
    RetentionRatioIn,
    SessionIn,
    SessionUpdate,
    ToolChoiceIn,
    ToolIn,
    TracingIn,
    TranscriptionIn,
    TurnDetectionIn,
    VoiceIdIn,
)
from engine.protocol.normalize import normalize, normalize_session
from engine.protocol.parse import APPEND, SUPPORTED_TYPES, loads_json, parse_client_event

__all__ = [
    "APPEND",
    "BETA_HEADER",
    "SUPPORTED_TYPES",
    "AudioFormatIn",
    "AudioIn",
    "AudioInputIn",
    "AudioOutputIn",
    "ClientEvent",
    "ContentIn",
    "ConversationItemCreate",
    "ConversationItemDelete",
    "ConversationItemRetrieve",
    "ConversationItemTruncate",
    "EchoCancellationIn",
    "InputAudioBufferAppend",
    "InputAudioBufferClear",
    "InputAudioBufferCommit",
    "InterruptionIn",
    "ItemIn",
    "OutputAudioBufferClear",
    "PromptRefIn",
    "ProtocolError",
    "ResponseCancel",
    "ResponseCreate",
    "ResponseIn",
    "RetentionRatioIn",
    "SessionIn",
    "SessionUpdate",
    "ToolChoiceIn",
    "ToolIn",
    "TracingIn",
    "TranscriptionIn",
    "TurnDetectionIn",
    "VoiceIdIn",
    "loads_json",
    "normalize",
    "normalize_session",
    "parse_client_event",
    "to_beta",
    "to_beta_text",
    "validation_error",
    "wants_beta",
]
