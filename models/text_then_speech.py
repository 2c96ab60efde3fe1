"""The shared skeleton of executors whose model writes text and Parley's own stages
do the speech (`vllm` in this process, `openai_compat` on a server): Parley's
recognizer transcribes the user's turns in the background, and its synthesizer
speaks the reply sentence by sentence. Each executor adds only how it gets the
reply's text from its model and how it stops a request there."""

from __future__ import annotations

import asyncio
import time
from abc import abstractmethod
from collections import OrderedDict
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from models.base import ExecutorStats, OutputChunk, Prompt, PromptItem
from models.remote_http import Replicas, open_clients, replicas_of
from models.speculating import SpeculatingExecutor
from models.speech.asr import SpeechRecognizer
from models.speech.speaker import Speaker, speak_text
from models.speech.transcripts import Transcripts
from models.stage_timing import Clock, StageTimer, Where

# Request ids aborted before they started, remembered so they never start.
EARLY_ABORTS = 1024


@dataclass
class RequestState:
    """A response in flight at the model."""

    aborted: bool = False
    # Times the model: its first text or call, and its whole reply (`_begin`).
    llm: StageTimer | None = None


@dataclass
class TextThenSpeechStats(ExecutorStats):
    aborted: list[str] = field(default_factory=list)  # request ids aborted at the model


R = TypeVar("R", bound=RequestState)


class TextThenSpeechExecutor(SpeculatingExecutor, Generic[R]):
    stats: TextThenSpeechStats

    def __init__(
        self, speaker: Speaker, *, recognizer: SpeechRecognizer | None, owns_tts: bool
    ) -> None:
        # The model hears the turn's audio itself, so an early answer is the plain
        # request on the turn so far.
        super().__init__(Transcripts(recognizer), self._generate, self._abort)
        self.speaker = speaker
        self.output_rate = speaker.output_rate
        self._owns_tts = owns_tts
        self._requests: dict[str, R] = {}
        self._aborted_early: OrderedDict[str, None] = OrderedDict()
        self.clock: Clock = time.monotonic  # times the synthesizer (models/stage_timing.py)

    async def start(self) -> None:
        open_clients(self, self.speaker.tts)

    def remote_stages(self) -> list[Replicas]:
        return replicas_of(self, self.transcripts.recognizer, self.speaker.tts)

    async def prepare(self, item: PromptItem) -> None:
        if item.role == "user" and item.text is None:
            self.transcripts.start(item)  # for history and the client; never awaited here

    async def transcribe(self, item: PromptItem) -> str | None:
        return await self.transcripts.get(item)

    def _aborted_before_start(self, request_id: str) -> bool:
        return request_id in self._aborted_early

    def _begin(self, request_id: str, state: R) -> R:
        self._requests[request_id] = state
        self.stats.mark(request_id, "started")
        return state

    def _time_llm(self, state: RequestState, request_id: str, where: Where) -> None:
        """Time the model of `state` from now (models/stage_timing.py)."""
        state.llm = StageTimer("llm", where, request_id, self.stats.timings.add, self.clock)
        state.llm.begin()

    def _speak(
        self, pieces: AsyncGenerator[str, None], prompt: Prompt, state: R
    ) -> AsyncGenerator[OutputChunk, None]:
        """The reply's text pieces spoken sentence by sentence in the session's voice
        (a remote synthesizer maps it to one of its own); stops at an abort."""
        speaker, request_id = self.speaker, prompt.request_id
        timer = StageTimer("tts", speaker.where, request_id, self.stats.timings.add, self.clock)
        return speak_text(
            pieces,
            speaker,
            speak=True,
            stopped=lambda: state.aborted,
            on_audio=lambda: self.stats.mark(request_id, "first_audio"),
            voice=prompt.voice,
            timer=timer,
        )

    async def abort(self, request_id: str) -> None:
        await self._abort(self.responses.resolve(request_id))

    async def _abort(self, request_id: str) -> None:
        state = self._requests.get(request_id)
        if state is None:
            # Not started (cancelled before it reached the model): never start it.
            self._aborted_early[request_id] = None
            while len(self._aborted_early) > EARLY_ABORTS:
                self._aborted_early.popitem(last=False)
            return
        if not state.aborted:
            await self._abort_started(request_id, state)

    @abstractmethod
    async def _abort_started(self, request_id: str, state: R) -> None:
        """Stop a request the model is working on."""

    async def aclose(self) -> None:
        await self.responses.aclose()
        await self.transcripts.aclose()
        if self._owns_tts:
            await asyncio.to_thread(self.speaker.tts.close)
