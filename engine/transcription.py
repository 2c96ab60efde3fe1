"""Input transcription for the client (`audio.input.transcription`): each committed
turn transcribed in a task of its own, reported back through the session's mailbox.
It never holds up a response; the session owns one `InputTranscription`.

It also keeps the text of a user turn whose audio the history bound releases
(engine/history.py) when the turn has no transcript yet: the executor's own
transcript, stored on the item without telling the client, so later prompts and
`retrieve` still hold what was said."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from openai.types.realtime import (
    ConversationItemInputAudioTranscriptionCompletedEvent,
    ConversationItemInputAudioTranscriptionDeltaEvent,
    ConversationItemInputAudioTranscriptionFailedEvent,
)

from engine.conversation import Conversation
from engine.emitter import Emitter
from models.base import Executor, PromptItem


@dataclass(frozen=True)
class TranscriptionFinished:
    """Mailbox message: a turn's transcription ended (`text` None when it failed)."""

    item_id: str
    text: str | None
    error: BaseException | None
    audio_s: float
    for_client: bool = True  # False: for history only, no events


class InputTranscription:
    def __init__(
        self,
        executor: Executor,
        emit: Emitter,
        conversation: Conversation,
        post: Callable[[TranscriptionFinished], None],
    ) -> None:
        self._executor = executor
        self._emit = emit
        self._conversation = conversation
        self._post = post  # into the session's mailbox
        self._tasks: set[asyncio.Task[None]] = set()

    def idle(self) -> bool:
        return not self._tasks

    def start(self, item: PromptItem, *, for_client: bool = True) -> None:
        task = asyncio.get_running_loop().create_task(self._transcribe(item, for_client))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def cancel_all(self) -> None:
        for task in self._tasks:
            task.cancel()

    async def _transcribe(self, item: PromptItem, for_client: bool) -> None:
        audio_s = 0.0 if item.audio is None else len(item.audio) / item.rate
        try:
            text = await self._executor.transcribe(item)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._post(TranscriptionFinished(item.id, None, exc, audio_s, for_client))
        else:
            self._post(TranscriptionFinished(item.id, text, None, audio_s, for_client))

    def finished(self, m: TranscriptionFinished) -> None:
        """On the session's task: the transcript joins its item and goes to the client."""
        item = self._conversation.get(m.item_id)
        if item is None:
            return
        if not m.for_client:
            if m.text and not item.transcript:
                item.transcript = m.text
            return
        if m.text is None:
            reason = str(m.error) if m.error else "this model does not transcribe input audio"
            self._emit.control(
                ConversationItemInputAudioTranscriptionFailedEvent,
                item_id=m.item_id,
                content_index=0,
                error={"type": "server_error", "code": "transcription_failed", "message": reason},
            )
            return
        item.transcript = m.text
        # Whisper is not streaming: the whole text is one delta, then completed.
        self._emit.control(
            ConversationItemInputAudioTranscriptionDeltaEvent,
            item_id=m.item_id,
            content_index=0,
            delta=m.text,
        )
        self._emit.control(
            ConversationItemInputAudioTranscriptionCompletedEvent,
            item_id=m.item_id,
            content_index=0,
            transcript=m.text,
            usage={"type": "duration", "seconds": round(m.audio_s, 3)},
        )
