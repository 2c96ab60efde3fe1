"""A deterministic executor for tests and for measuring the server's own overhead.

Its reply says what it received: the sample count of the latest user audio turn and
the number of items in the prompt, so a test can check exactly what each prompt
held. Audio is a quiet tone, `chunk_ms` per chunk, with one word of the reply as
each chunk's transcript. Given `speech` (PARLEY_SCRIPTED_SPEECH, a WAV), every audio
reply speaks that recording whole instead, `chunk_ms` at a time, its words spread over
the chunks: an assistant that talks for seconds with speech, for measuring what the
user's side does while it does (bench/turns/interruptions.py).
"""

from __future__ import annotations

import asyncio
import json
import wave
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeVar

import numpy as np

from models.base import (
    PCM_RATE,
    Executor,
    ExecutorStats,
    FunctionCall,
    OutputChunk,
    Prompt,
    PromptItem,
)
from models.context import PromptTokens, count_prompt

T = TypeVar("T")


def read_speech(path: Path) -> np.ndarray:
    """A 24 kHz mono pcm16 WAV (the protocol's audio) as int16 samples."""
    with wave.open(str(path), "rb") as wav:
        if (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) != (PCM_RATE, 1, 2):
            raise ValueError(f"{path.name}: the scripted speech must be 24 kHz mono pcm16")
        return np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2").astype(np.int16)


def tone(samples: int, rate: int) -> np.ndarray:
    """A quiet 220 Hz tone: audio that is plainly the model's, with no words in it."""
    return (1000 * np.sin(2 * np.pi * 220 * np.arange(samples) / rate)).astype(np.int16)


@dataclass
class ScriptedExecutor(Executor):
    chunk_ms: int = 100
    # Wall-clock pause before each chunk; 0 still yields to the loop each chunk.
    chunk_delay_s: float = 0.0
    output_rate: int = PCM_RATE
    # int16 mono at output_rate: what every audio reply says instead of the tone.
    speech: np.ndarray | None = None
    name: str = "scripted"
    # Test seams: when set, each chunk / prepare / abort first waits on them.
    chunk_gate: asyncio.Semaphore | None = None
    prepare_gate: asyncio.Event | None = None
    abort_gate: asyncio.Event | None = None
    # What the executor was asked, for tests: the last `history` entries of each list,
    # so a long-running server (`parley serve --executor scripted`, bench/load.py)
    # does not keep every prompt's audio.
    history: int = 100
    # A context this small, in words (one word is one token here; 10 a second of
    # audio), so tests can overflow it: the session's `truncation` then cuts.
    context_tokens: int | None = None
    prompts: list[Prompt] = field(default_factory=list)
    prepared: list[str] = field(default_factory=list)
    aborted: list[str] = field(default_factory=list)
    abort_requests: list[str] = field(default_factory=list)  # before any abort_gate
    _aborted: set[str] = field(default_factory=set)
    stats: ExecutorStats = field(default_factory=ExecutorStats)  # nothing is timed

    @staticmethod
    def reply_for(prompt: Prompt) -> str:
        last = prompt.items[-1] if prompt.items else None
        if last is not None and last.kind == "function_call_output":
            return f"The tool said {last.output}."
        latest = next(
            (i for i in reversed(prompt.items) if i.role == "user" and i.kind == "message"), None
        )
        if latest is None or latest.audio is None:
            return f"I heard no audio in {len(prompt.items)} items."
        return f"I heard {len(latest.audio)} samples in {len(prompt.items)} items."

    @staticmethod
    def samples_heard(transcript: str) -> int:
        """Inverse of `reply_for`, for tests."""
        return int(transcript.split()[2])

    def context_limit(self, prompt: Prompt) -> int | None:
        if self.context_tokens is None:
            return None
        return self.context_tokens - (prompt.max_output_tokens or 0)

    def prompt_tokens(self, prompt: Prompt) -> PromptTokens:
        return count_prompt(
            prompt, lambda text: len(text.split()), exact=True, audio_tokens_per_s=10, frame=0
        )

    async def prepare(self, item: PromptItem) -> None:
        if self.prepare_gate is not None:
            await self.prepare_gate.wait()
        self._record(self.prepared, item.id)

    async def transcribe(self, item: PromptItem) -> str | None:
        """Deterministic: says how much audio the item held."""
        n = 0 if item.audio is None else len(item.audio)
        return f"audio of {n} samples"

    @staticmethod
    def tool_call_for(prompt: Prompt) -> FunctionCall | None:
        """Told to use tools (any given and tool_choice not "none"), it calls the
        chosen one (or the first) with the sample count it heard, unless it is
        answering that call's output already."""
        if not prompt.tools or prompt.tool_choice == "none":
            return None
        if prompt.items and prompt.items[-1].kind == "function_call_output":
            return None
        names = [t.name for t in prompt.tools]
        name = prompt.tool_choice if prompt.tool_choice in names else names[0]
        latest = next((i for i in reversed(prompt.items) if i.role == "user"), None)
        samples = 0 if latest is None or latest.audio is None else len(latest.audio)
        arguments = json.dumps({"samples": samples})
        return FunctionCall(name, arguments, f"call_{prompt.request_id}")

    async def generate(self, prompt: Prompt) -> AsyncGenerator[OutputChunk, None]:
        self._record(self.prompts, prompt)
        call = self.tool_call_for(prompt)
        if call is not None:
            await asyncio.sleep(self.chunk_delay_s)
            yield OutputChunk(function_call=call)
            return
        words = self.reply_for(prompt).split(" ")
        cut = prompt.max_output_tokens is not None and len(words) > prompt.max_output_tokens
        if cut:
            words = words[: prompt.max_output_tokens]  # one word is one "token" here
        chunks = self.chunks_for(words, "audio" in prompt.output_modalities)
        for i, (text, audio) in enumerate(chunks):
            if self.chunk_gate is not None:
                await self.chunk_gate.acquire()
            else:
                await asyncio.sleep(self.chunk_delay_s)
            if prompt.request_id in self._aborted:
                return
            finish: Literal["length"] | None = "length" if cut and i == len(chunks) - 1 else None
            yield OutputChunk(audio=audio, text=text, finish=finish)

    def chunks_for(self, words: list[str], audio: bool) -> list[tuple[str, np.ndarray | None]]:
        """The reply's chunks: one word each (with a tone chunk when audio is asked
        for), or the speech whole with the words spread evenly over its chunks."""
        texts = [w if i == 0 else " " + w for i, w in enumerate(words)]
        if not audio:
            return [(text, None) for text in texts]
        n = self.chunk_ms * self.output_rate // 1000
        if self.speech is None or not len(self.speech):
            chunk = tone(n, self.output_rate)
            return [(text, chunk) for text in texts]
        pieces = [self.speech[i : i + n] for i in range(0, len(self.speech), n)]
        spoken = [""] * len(pieces)
        for i, text in enumerate(texts):
            spoken[i * len(pieces) // len(texts)] += text
        return list(zip(spoken, pieces, strict=True))

    async def abort(self, request_id: str) -> None:
        self._record(self.abort_requests, request_id)
        if self.abort_gate is not None:
            await self.abort_gate.wait()
        self._aborted.add(request_id)
        self._record(self.aborted, request_id)

    def _record(self, log: list[T], value: T) -> None:
        log.append(value)
        if len(log) > self.history:
            del log[: len(log) - self.history]
