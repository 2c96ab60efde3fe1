"""Transcription sessions (`session.type: "transcription"`): what sets them apart.

A transcription session is a Session with its responder switched off, not a class of
its own: the input side (decode, noise reduction, VAD and turn detection, the input
buffer, commits, input transcription) is the same code with the same limits, and
one owner of that state is simpler than two that must agree. What differs is decided
here, in pure functions the session calls at a few hooks:

- which type a session is: fixed when it opens (a `?intent=transcription`, a key's
  preset, a WebRTC call's `session`), never changed by `session.update`, as OpenAI
  answers a change of type;
- which client events a transcription session refuses (responses and the
  conversation's items: it has no responses, and its items are only its turns);
- which session fields it takes: `type`, `audio.input` and `include`, as the SDK's
  `RealtimeTranscriptionSessionCreateRequest` has them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from engine.protocol import ProtocolError, SessionIn
from engine.protocol.events import ValidatedEvent
from models.base import Executor

SessionType = Literal["realtime", "transcription"]

# Fields of a transcription session (as `session.update` sends them, in GA shape).
_TRANSCRIPTION_FIELDS = frozenset({"type", "audio", "include"})

# Client events with no place in a transcription session.
REFUSED_EVENTS = frozenset(
    {
        "response.create",
        "response.cancel",
        "conversation.item.create",
        "conversation.item.retrieve",
        "conversation.item.truncate",
        "conversation.item.delete",
        "output_audio_buffer.clear",
    }
)


def intent_of(query: str | None) -> SessionType | None:
    """`?intent=` of a WebSocket URL (OpenAI's beta way to open a transcription
    session, still what GA clients send): only "transcription" means one."""
    return "transcription" if query == "transcription" else None


def session_type(presets: Iterable[SessionIn], intent: SessionType | None = None) -> SessionType:
    """The type of a session opened with `presets` (a key's, a call's) and the
    connection's `intent`: all that name one must agree; none named, realtime."""
    named = {p.type for p in presets if p.type is not None}
    if intent is not None:
        named.add(intent)
    if len(named) > 1:
        raise ProtocolError(
            "invalid_value",
            "The session's type is given twice and differs (the key's session, the "
            "call's session or ?intent=): a session is either realtime or transcription.",
            "session.type",
        )
    return named.pop() if named else "realtime"


def check_patch(patch: SessionIn, kind: SessionType, event_id: str | None = None) -> None:
    """Refuse a session patch that changes the type or, in a transcription session,
    sets a field only realtime sessions have (instructions, voice, tools...)."""
    if patch.type is not None and patch.type != kind:
        raise ProtocolError(
            "invalid_value",
            f"This is a {kind} session; its type cannot be changed to '{patch.type}'. "
            + (
                "Open a transcription session with ?intent=transcription, or with an "
                "ephemeral key or call whose session has type 'transcription'."
                if patch.type == "transcription"
                else "Open a new session for responses."
            ),
            "session.type",
            event_id,
        )
    if kind != "transcription":
        return
    extra = sorted(patch.model_fields_set - _TRANSCRIPTION_FIELDS)
    if patch.audio is not None and patch.audio.output is not None:
        extra.append("audio.output")
    if extra:
        raise ProtocolError(
            "unknown_parameter",
            f"Unknown parameter for a transcription session: '{patch.param(extra[0])}'. "
            "A transcription session takes type, audio.input and include.",
            patch.param(extra[0]),
            event_id,
        )


def refusal(event: ValidatedEvent) -> ProtocolError | None:
    """The error for a client event a transcription session does not take."""
    event_type = str(getattr(event, "type", ""))
    event_id = event.event_id
    if event_type not in REFUSED_EVENTS:
        return None
    return ProtocolError(
        "invalid_value",
        f"'{event_type}' is not available in a transcription session: it transcribes "
        "input audio and creates no responses.",
        "type",
        event_id,
    )


def opened_type(
    executor: Executor, presets: Iterable[SessionIn], intent: SessionType | None
) -> SessionType:
    """`session_type`, refused when it is transcription and `executor` cannot
    transcribe (a session that could never say what it heard)."""
    kind = session_type(presets, intent)
    if kind == "transcription" and not can_transcribe(executor):
        raise ProtocolError(
            "unsupported_session_type",
            "This server's model cannot transcribe input audio, so it offers no "
            "transcription sessions.",
            "session.type",
        )
    return kind


def can_transcribe(executor: Executor) -> bool:
    """Whether `executor` has a recognizer: the base class's `transcribe` has none."""
    return type(executor).transcribe is not Executor.transcribe
