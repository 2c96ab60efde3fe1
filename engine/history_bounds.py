"""The history bounds kept on one session's conversation (engine/history.py decides).

Enforced on the session's task after each commit, item create, response end and
transcript arrival: the oldest audio past `max_history_audio_ms` is released, then
the oldest items past `max_history_items` or `max_history_text_chars` leave, told
to the client as `conversation.item.deleted`.
"""

from __future__ import annotations

from collections.abc import Callable

from openai.types.realtime import ConversationItemDeletedEvent

from engine.conversation import Conversation
from engine.emitter import Emitter
from engine.history import audio_to_release, items_to_drop
from engine.items import prompt_item
from engine.limits import EngineLimits
from engine.playback import Playback
from engine.responder import Responder
from engine.session_config import SessionConfig
from engine.transcription import InputTranscription


class HistoryBounds:
    def __init__(
        self,
        *,
        config: Callable[[], SessionConfig],
        conversation: Conversation,
        limits: EngineLimits,
        responder: Responder,
        transcription: InputTranscription,
        playback: Playback,
        emit: Emitter,
    ) -> None:
        self._config = config  # the session's current configuration
        self._conversation = conversation
        self._limits = limits
        self._responder = responder  # items a running response uses stay
        self._transcription = transcription
        self._playback = playback  # a dropped item's sent-audio entry goes with it
        self._emit = emit

    def enforce(self) -> None:
        """Release the oldest audio past `max_history_audio_ms`, then drop the oldest
        items past `max_history_items` or `max_history_text_chars` (engine/history.py).
        A user turn with no transcript first gets the executor's, for history."""
        limits = self._limits
        in_use = self._responder.items_in_use()
        items = self._conversation.items
        for item in audio_to_release(items, limits.max_history_audio_ms, in_use):
            if item.role == "user" and item.kind == "message" and not item.transcript:
                turn = prompt_item(item, self._config().speech_hint)
                self._transcription.start(turn, for_client=False)
            item.release_audio()
        dropped = items_to_drop(
            items, limits.max_history_items, limits.max_history_text_chars, in_use
        )
        for item in dropped:
            self._conversation.remove(item.id)
            self._playback.forget(item.id)
            self._emit.control(ConversationItemDeletedEvent, item_id=item.id)
