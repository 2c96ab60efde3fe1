"""Speaking a streamed text reply, shared by every executor that makes text and
synthesizes it with Parley's own TTS stage (the cascade, vLLM, remote servers).

The text arrives in pieces (tokens, SSE deltas); `SentenceBuffer` cuts it into
sentences as soon as each is complete, and `speak_sentences` synthesizes them one by
one, so the first sentence is heard while the model still writes the next. A
response stops within one sentence of an abort: no sentence is synthesized, nor
yielded, once `stopped()` holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import soxr

from models.base import OutputChunk, PromptItem
from models.cascade.asr import SpeechRecognizer
from models.cascade.tts import Synthesizer, split_sentences


@dataclass
class StageSlots:
    """A bound on concurrent calls into one model, with a count of who waits."""

    name: str
    limit: int
    queued: int = 0
    _sem: asyncio.Semaphore | None = None

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.limit)
        self.queued += 1
        try:
            await self._sem.acquire()
        finally:
            self.queued -= 1
        try:
            yield
        finally:
            self._sem.release()


class SentenceBuffer:
    """Text pieces in, complete sentences out (see `split_sentences`)."""

    def __init__(self) -> None:
        self._rest = ""

    def push(self, piece: str) -> list[str]:
        sentences, self._rest = split_sentences(self._rest + piece)
        return sentences

    def flush(self) -> str | None:
        """What is left once the stream ended, or None when nothing is."""
        rest, self._rest = self._rest.strip(), ""
        return rest or None


async def sentences_of(pieces: AsyncIterable[str]) -> AsyncGenerator[str, None]:
    """Sentences of a streamed reply as soon as each is complete."""
    buffer = SentenceBuffer()
    async for piece in pieces:
        for sentence in buffer.push(piece):
            yield sentence
    if (rest := buffer.flush()) is not None:
        yield rest


def resample_int16(audio: np.ndarray, rate: int, target: int) -> np.ndarray:
    """int16 mono audio at `rate` as int16 at `target`."""
    if rate == target or not len(audio):
        same: np.ndarray = audio.astype(np.int16, copy=False)
        return same
    out: np.ndarray = soxr.resample(audio.astype(np.float32), rate, target)
    resampled: np.ndarray = np.clip(np.rint(out), -32768, 32767).astype(np.int16)
    return resampled


@dataclass
class Speaker:
    """The TTS stage: a synthesizer behind its bound on concurrent calls, speaking at
    the executor's output rate."""

    tts: Synthesizer
    slot: StageSlots
    output_rate: int = 24_000

    def to_output_rate(self, audio: np.ndarray) -> np.ndarray:
        return resample_int16(audio, self.tts.sample_rate, self.output_rate)


@dataclass
class SpeakOutcome:
    """How `speak_sentences` ended: `stopped` when an abort cut it short."""

    stopped: bool = False


async def speak_sentences(
    sentences: AsyncIterable[str],
    speaker: Speaker,
    *,
    speak: bool,
    stopped: Callable[[], bool],
    on_audio: Callable[[], None] | None = None,
    outcome: SpeakOutcome | None = None,
) -> AsyncGenerator[OutputChunk, None]:
    """One chunk per sentence: its audio (when `speak`) with the sentence as its
    transcript, spaced as the reply was. `on_audio` runs after each synthesis (for
    counters). The caller closes `sentences`."""
    outcome = outcome if outcome is not None else SpeakOutcome()
    first = True
    async for piece in sentences:
        if stopped():
            outcome.stopped = True
            return
        sentence = piece if first else " " + piece  # the transcript's spacing
        first = False
        if not speak:
            yield OutputChunk(text=sentence)
            continue
        async with speaker.slot.slot():
            if stopped():
                outcome.stopped = True
                return
            audio = await asyncio.to_thread(speaker.tts.synthesize, piece)
        if on_audio is not None:
            on_audio()
        if stopped():
            outcome.stopped = True
            return  # aborted while synthesizing: drop it
        yield OutputChunk(audio=speaker.to_output_rate(audio), text=sentence)


@dataclass
class Marks:
    """time.monotonic() of each response's milestones ("started", "first_token",
    "first_audio"), the first time each is reached. For benchmarks and tests."""

    marks: dict[str, dict[str, float]] = field(default_factory=dict)

    def mark(self, key: str, milestone: str) -> None:
        self.marks.setdefault(key, {}).setdefault(milestone, time.monotonic())


class Transcripts:
    """Input transcription for executors whose model hears audio directly: Parley's
    own recognizer, run in the background from `prepare` so the response never
    waits for it. The text serves the client's transcription events and, for later
    responses, stands in for audio that no longer fits the prompt."""

    def __init__(self, recognizer: SpeechRecognizer | None, *, cache: int = 4096) -> None:
        self.recognizer = recognizer
        self.slot = StageSlots("asr", 1)
        self._done: OrderedDict[str, str] = OrderedDict()
        self._running: dict[str, asyncio.Task[str]] = {}
        self._cache = cache

    @property
    def known(self) -> Mapping[str, str]:
        return self._done

    def start(self, item: PromptItem) -> asyncio.Task[str] | None:
        """Begin recognizing a user audio item (once), without waiting for it."""
        if self.recognizer is None or item.audio is None or item.id in self._done:
            return None
        task = self._running.get(item.id)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._recognize(item))
            self._running[item.id] = task
            task.add_done_callback(lambda _: self._running.pop(item.id, None))
        return task

    async def get(self, item: PromptItem) -> str | None:
        if (done := self._done.get(item.id)) is not None:
            return done
        task = self.start(item)
        return None if task is None else await asyncio.shield(task)

    async def _recognize(self, item: PromptItem) -> str:
        assert self.recognizer is not None and item.audio is not None
        async with self.slot.slot():
            text = await asyncio.to_thread(self.recognizer.transcribe, item.audio, item.rate)
        self._done[item.id] = text
        while len(self._done) > self._cache:
            self._done.popitem(last=False)
        return text

    async def aclose(self) -> None:
        for task in list(self._running.values()):
            task.cancel()
        await asyncio.gather(*self._running.values(), return_exceptions=True)
