"""Input transcription for the client (`audio.input.transcription`): each committed
turn transcribed in a task of its own, reported back through the session's mailbox.
It never holds up a response; the session owns one `InputTranscription`.

While a turn is spoken, its partial transcript goes out as deltas
(engine/partials.py); the final recognition adds the rest as the last delta, and the
completed transcript is what the deltas add up to.

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
from engine.partials import (
    PARTIAL_EVERY_MS,
    PartialHeard,
    Partials,
    Word,
    delta_logprobs,
    delta_text,
    remainder,
    words_of,
)
from models.base import Executor, Heard, PromptItem, TokenLogprob


@dataclass(frozen=True)
class TranscriptionFinished:
    """Mailbox message: a turn's transcription ended (`text` None when it failed)."""

    item_id: str
    text: Heard | None
    error: BaseException | None
    audio_s: float
    for_client: bool = True  # False: for history only, no events


class InputTranscription:
    def __init__(
        self,
        executor: Executor,
        emit: Emitter,
        conversation: Conversation,
        post: Callable[[TranscriptionFinished | PartialHeard], None],
        partial_every_ms: int = PARTIAL_EVERY_MS,
    ) -> None:
        self._executor = executor
        self._emit = emit
        self._conversation = conversation
        self._post = post  # into the session's mailbox
        self._tasks: set[asyncio.Task[None]] = set()
        self.partials = Partials(executor, post, partial_every_ms)
        self._sent: dict[str, tuple[Word, ...]] = {}  # partial words of committed turns

    def idle(self) -> bool:
        return not self._tasks and self.partials.idle()

    def start(self, item: PromptItem, *, for_client: bool = True) -> None:
        if for_client:
            self._sent[item.id] = self.partials.take(item.id)
        task = asyncio.get_running_loop().create_task(self._transcribe(item, for_client))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def cancel_all(self) -> None:
        self.partials.cancel()
        for task in self._tasks:
            task.cancel()

    def partial_heard(self, m: PartialHeard) -> None:
        """On the session's task: a partial recognition's newly stable words go out,
        with their tokens' log-probabilities when the recognizer gave them (it does
        when the turn's hint asks, from `include`)."""
        logprobs = m.heard is not None and m.heard.logprobs is not None
        state = self.partials.turn
        first = state is None or not state.sent
        new = self.partials.heard(m)
        if new:
            self._delta(m.item_id, new, first=first, logprobs=logprobs)

    def _delta(self, item_id: str, words: tuple[Word, ...], *, first: bool, logprobs: bool) -> str:
        text = delta_text(words, first=first)
        extra = {"logprobs": wire_logprobs(delta_logprobs(words))} if logprobs else {}
        self._emit.control(
            ConversationItemInputAudioTranscriptionDeltaEvent,
            item_id=item_id,
            content_index=0,
            delta=text,
            **extra,
        )
        return text

    async def _transcribe(self, item: PromptItem, for_client: bool) -> None:
        audio_s = 0.0 if item.audio is None else len(item.audio) / item.rate
        try:
            text = await self._executor.transcribe(item)
            heard = (
                None if text is None else Heard(text, self._executor.transcript_logprobs(item.id))
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._post(TranscriptionFinished(item.id, None, exc, audio_s, for_client))
        else:
            self._post(TranscriptionFinished(item.id, heard, None, audio_s, for_client))

    def finished(self, m: TranscriptionFinished) -> None:
        """On the session's task: the transcript joins its item and goes to the client."""
        sent = self._sent.pop(m.item_id, ())  # also when the item is gone meanwhile
        item = self._conversation.get(m.item_id)
        if item is None:
            return
        if not m.for_client:
            if m.text and m.text.text and not item.transcript:
                item.transcript = m.text.text
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
        # The final recognition's words past the partial ones are the last delta;
        # the transcript is what the deltas add up to.
        logprobs = m.text.logprobs is not None
        rest = remainder(sent, words_of(m.text))
        last = self._delta(m.item_id, rest, first=not sent, logprobs=logprobs) if rest else ""
        transcript = delta_text(sent, first=True) + last
        if not sent and not rest:
            transcript = m.text.text  # nothing but whitespace: as recognized
            self._delta(m.item_id, (), first=True, logprobs=logprobs)
        item.transcript = transcript
        extra = {"logprobs": wire_logprobs(delta_logprobs((*sent, *rest)))} if logprobs else {}
        self._emit.control(
            ConversationItemInputAudioTranscriptionCompletedEvent,
            item_id=m.item_id,
            content_index=0,
            transcript=transcript,
            usage={"type": "duration", "seconds": round(m.audio_s, 3)},
            **extra,
        )


def wire_logprobs(tokens: list[TokenLogprob]) -> list[dict[str, object]]:
    """Token log-probabilities in the SDK's shape (`LogProbProperties`)."""
    return [
        {
            "token": t.token,
            "logprob": t.logprob,
            "bytes": list(t.raw if t.raw is not None else t.token.encode()),
        }
        for t in tokens
    ]
