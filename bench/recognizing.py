"""The scripted executor with a real recognizer behind its input transcripts: the
session's transcription events (partials included) from real speech, without a
language model or a voice."""

from __future__ import annotations

from models.base import Heard, PromptItem, TokenLogprob
from models.scripted import ScriptedExecutor
from models.speech.asr import SpeechRecognizer
from models.speech.transcripts import Transcripts


class RecognizingExecutor(ScriptedExecutor):
    def __init__(self, recognizer: SpeechRecognizer) -> None:
        super().__init__()
        self.transcripts = Transcripts(recognizer)

    async def transcribe(self, item: PromptItem) -> str | None:
        return await self.transcripts.get(item) or ""

    async def transcribe_partial(self, item: PromptItem) -> Heard | None:
        return await self.transcripts.partial(item)

    def transcript_logprobs(self, item_id: str) -> tuple[TokenLogprob, ...] | None:
        return self.transcripts.logprobs(item_id)

    async def aclose(self) -> None:
        await self.transcripts.aclose()
