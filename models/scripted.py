"""A deterministic executor for tests and for measuring the server's own overhead.

Its reply says what it received: the sample count of the latest user audio turn and
the number of items in the prompt, so a test can check exactly what each prompt
held. Audio is a quiet tone, `chunk_ms` per chunk, with one word of the reply as
each chunk's transcript.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field

import numpy as np

from models.base import Executor, OutputChunk, Prompt, PromptItem


@dataclass
class ScriptedExecutor(Executor):
    chunk_ms: int = 100
    # Wall-clock pause before each chunk; 0 still yields to the loop each chunk.
    chunk_delay_s: float = 0.0
    output_rate: int = 24_000
    name: str = "scripted"
    # Test seams: when set, each chunk / prepare / abort first waits on them.
    chunk_gate: asyncio.Semaphore | None = None
    prepare_gate: asyncio.Event | None = None
    abort_gate: asyncio.Event | None = None
    prompts: list[Prompt] = field(default_factory=list)
    prepared: list[str] = field(default_factory=list)
    aborted: list[str] = field(default_factory=list)
    abort_requests: list[str] = field(default_factory=list)  # before any abort_gate
    _aborted: set[str] = field(default_factory=set)

    @staticmethod
    def reply_for(prompt: Prompt) -> str:
        latest = next((i for i in reversed(prompt.items) if i.role == "user"), None)
        if latest is None or latest.audio is None:
            return f"I heard no audio in {len(prompt.items)} items."
        return f"I heard {len(latest.audio)} samples in {len(prompt.items)} items."

    @staticmethod
    def samples_heard(transcript: str) -> int:
        """Inverse of `reply_for`, for tests."""
        return int(transcript.split()[2])

    async def prepare(self, item: PromptItem) -> None:
        if self.prepare_gate is not None:
            await self.prepare_gate.wait()
        self.prepared.append(item.id)

    async def transcribe(self, item: PromptItem) -> str | None:
        """Deterministic: says how much audio the item held."""
        n = 0 if item.audio is None else len(item.audio)
        return f"audio of {n} samples"

    async def generate(self, prompt: Prompt) -> AsyncGenerator[OutputChunk, None]:
        self.prompts.append(prompt)
        words = self.reply_for(prompt).split(" ")
        n = self.chunk_ms * self.output_rate // 1000
        t = np.arange(n) / self.output_rate
        tone = (1000 * np.sin(2 * np.pi * 220 * t)).astype(np.int16)
        for i, word in enumerate(words):
            if self.chunk_gate is not None:
                await self.chunk_gate.acquire()
            else:
                await asyncio.sleep(self.chunk_delay_s)
            if prompt.request_id in self._aborted:
                return
            text = word if i == 0 else " " + word
            if "audio" in prompt.output_modalities:
                yield OutputChunk(audio=tone, text=text)
            else:
                yield OutputChunk(text=text)

    async def abort(self, request_id: str) -> None:
        self.abort_requests.append(request_id)
        if self.abort_gate is not None:
            await self.abort_gate.wait()
        self._aborted.add(request_id)
        self.aborted.append(request_id)
