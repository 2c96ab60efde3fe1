"""Speaking a streamed text reply, shared by every executor that makes text and
synthesizes it with Parley's own TTS stage (the cascade, vLLM, remote servers).

The text arrives in pieces (tokens, SSE deltas); they are cut into the first clause,
then sentences, as soon as each is complete (sentences.py), and `speak_text`
synthesizes them one by one, so the first words are heard while the model still
writes the next. A response stops within one piece of an abort: no piece is
synthesized, nor yielded, once `stopped()` holds.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from models.base import PCM_RATE, OutputChunk
from models.speech.audio import resample_int16
from models.speech.remote_tts import RemoteSynthesizer
from models.speech.sentences import sentences_of
from models.speech.slots import StageSlots
from models.speech.tts import Synthesizer
from models.stage_timing import StageTimer, Where


@dataclass
class Speaker:
    """The TTS stage: a synthesizer behind its bound on concurrent calls, speaking at
    the executor's output rate."""

    tts: Synthesizer
    slot: StageSlots
    output_rate: int = PCM_RATE

    @property
    def where(self) -> Where:
        return "remote" if isinstance(self.tts, RemoteSynthesizer) else "embedded"

    def to_output_rate(self, audio: np.ndarray) -> np.ndarray:
        return resample_int16(audio, self.tts.sample_rate, self.output_rate)


@runtime_checkable
class AsyncSynthesizer(Protocol):
    """A synthesizer that speaks in the event loop (a remote one): cancelling the
    caller cancels the synthesis, so a barge-in closes the request in flight."""

    async def synthesize_async(self, text: str, voice: str = "") -> np.ndarray: ...


@runtime_checkable
class StreamingSynthesizer(Protocol):
    """A synthesizer whose server streams a sentence's audio (a remote one): each
    piece can be played as it arrives. Closing the iterator closes the request."""

    def synthesize_stream(self, text: str, voice: str = "") -> AsyncGenerator[np.ndarray, None]: ...


async def synthesized(tts: Synthesizer, sentence: str, voice: str = "") -> np.ndarray:
    """One sentence's audio: in the event loop when the synthesizer can, else in a
    worker thread (blocking ones: Piper, Flite), which an abort cannot interrupt."""
    if isinstance(tts, AsyncSynthesizer):
        return await tts.synthesize_async(sentence, voice)
    return await asyncio.to_thread(tts.synthesize, sentence)


async def sentence_audio(
    speaker: Speaker, sentence: str, voice: str
) -> AsyncGenerator[np.ndarray, None]:
    """One sentence's audio at the output rate: piece by piece as a streaming
    server sends it (its first words play while it speaks the rest), else whole."""
    tts = speaker.tts
    if isinstance(tts, StreamingSynthesizer) and tts.sample_rate == speaker.output_rate:
        stream = tts.synthesize_stream(sentence, voice)
        async with contextlib.aclosing(stream):
            async for piece in stream:
                yield piece
        return
    yield speaker.to_output_rate(await synthesized(tts, sentence, voice))


async def sentence_in_slot(
    speaker: Speaker, sentence: str, voice: str, stopped: Callable[[], bool]
) -> AsyncGenerator[np.ndarray, None]:
    """The sentence's audio pieces, synthesized within the stage's slot. The slot is
    held while the synthesizer works, not while the pieces wait for their consumer
    (a session whose client reads slowly keeps no other session's sentence waiting).
    Nothing is synthesized once `stopped()` holds; closing this stops the synthesis
    (a remote one's request is closed)."""
    pieces: asyncio.Queue[np.ndarray | Exception | None] = asyncio.Queue()

    async def synthesize() -> None:
        try:
            async with speaker.slot.slot():
                if stopped():
                    return
                audio = sentence_audio(speaker, sentence, voice)
                async with contextlib.aclosing(audio):
                    async for piece in audio:
                        pieces.put_nowait(piece)
        except Exception as exc:  # the consumer raises it
            pieces.put_nowait(exc)
        finally:
            pieces.put_nowait(None)

    worker = asyncio.ensure_future(synthesize())
    try:
        while (piece := await pieces.get()) is not None:
            if isinstance(piece, Exception):
                raise piece
            yield piece
    finally:
        if not worker.done():
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker


@dataclass
class SpeakOutcome:
    """How `speak_text` ended: `stopped` when an abort cut it short."""

    stopped: bool = False


async def speak_text(
    pieces: AsyncGenerator[str, None],
    speaker: Speaker,
    *,
    speak: bool,
    stopped: Callable[[], bool],
    on_audio: Callable[[], None] | None = None,
    outcome: SpeakOutcome | None = None,
    voice: str = "",
    timer: StageTimer | None = None,
) -> AsyncGenerator[OutputChunk, None]:
    """One chunk per sentence of the streamed reply `pieces`: its audio (when
    `speak`) with the sentence as its transcript, spaced as the reply was. `on_audio`
    runs after each synthesis (for counters); `voice` is the session's; `timer`
    times the first clause to its first audio (a streaming server's first piece),
    if that audio is kept. Closes
    `pieces` however it ends, so the model's stream stops when this one is closed."""
    outcome = outcome if outcome is not None else SpeakOutcome()
    first = True
    async with contextlib.aclosing(pieces):
        async for sentence in sentences_of(pieces):
            if stopped():
                outcome.stopped = True
                return
            spaced = sentence if first else " " + sentence  # the transcript's spacing
            first = False
            if not speak:
                yield OutputChunk(text=spaced)
                continue
            if timer is not None:
                timer.begin()  # handed to the stage: its wait for a slot counts
            text = spaced  # with the sentence's first audio
            audio = sentence_in_slot(speaker, sentence, voice, stopped)
            async with contextlib.aclosing(audio):
                async for piece in audio:
                    if text and on_audio is not None:
                        on_audio()
                    if stopped():
                        outcome.stopped = True
                        return  # aborted while synthesizing: drop it
                    if timer is not None and len(piece):
                        timer.reached("first_audio")
                    yield OutputChunk(audio=piece, text=text)
                    text = ""
            if stopped():
                outcome.stopped = True
                return
            if text:  # nothing to hear (e.g. only symbols): the words still count
                if on_audio is not None:
                    on_audio()
                yield OutputChunk(audio=np.zeros(0, np.int16), text=text)
