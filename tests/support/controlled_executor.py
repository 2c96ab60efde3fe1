"""An executor whose every step a test releases by hand.

Each `generate()` call becomes a `Generation` that waits for commands: a chunk
(audio with its word, text only, or a function call), a clean finish, or a failure.
Nothing happens until a test sends one, so a test (or a state machine) decides
exactly when each response makes progress. `abort()` is acknowledged at once but, as
with a real model, the generation stops only at its next step: until the engine
closes it (or the test sends another command) it is still live, so an engine that
aborts and walks away leaves it running for all to see. `prepare()` takes a turn at
once, or fails when told to.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Literal

from models.base import Executor, ExecutorStats, FunctionCall, OutputChunk, Prompt, PromptItem
from models.scripted import tone

ChunkKind = Literal["audio", "text", "call"]
CHUNK_MS = 100


class ModelFailure(RuntimeError):
    """The failure a test injects into a generation or a preparation."""


@dataclass(frozen=True)
class Chunk:
    kind: ChunkKind


@dataclass(frozen=True)
class Finish:
    pass


@dataclass(frozen=True)
class Fail:
    pass


Command = Chunk | Finish | Fail


@dataclass
class Generation:
    prompt: Prompt
    commands: asyncio.Queue[Command] = field(default_factory=asyncio.Queue)
    aborted: bool = False
    chunks: int = 0

    @property
    def request_id(self) -> str:
        return self.prompt.request_id


class ControlledExecutor(Executor):
    name = "controlled"

    def __init__(self) -> None:
        self.stats = ExecutorStats()
        self.live: dict[str, Generation] = {}  # running generations, in start order
        self.started: list[str] = []  # request ids, every generation ever started
        self.closed: list[str] = []  # request ids whose generator was closed
        self.aborted: list[str] = []  # request ids asked to abort
        self.fail_next_prepare = False
        self._tone = tone(CHUNK_MS * self.output_rate // 1000, self.output_rate)

    # --- what a test releases --------------------------------------------------------

    def send(self, request_id: str, command: Command) -> None:
        self.live[request_id].commands.put_nowait(command)

    # --- the executor interface ------------------------------------------------------

    async def prepare(self, item: PromptItem) -> None:
        if self.fail_next_prepare:
            self.fail_next_prepare = False
            raise ModelFailure(f"prepare of {item.id} failed")

    async def transcribe(self, item: PromptItem) -> str | None:
        return f"audio of {0 if item.audio is None else len(item.audio)} samples"

    async def generate(self, prompt: Prompt) -> AsyncGenerator[OutputChunk, None]:
        gen = Generation(prompt)
        self.live[prompt.request_id] = gen
        self.started.append(prompt.request_id)
        try:
            while not gen.aborted:
                command = await gen.commands.get()
                if gen.aborted or isinstance(command, Finish):
                    return
                if isinstance(command, Fail):
                    raise ModelFailure(f"generation {prompt.request_id} failed")
                gen.chunks += 1
                yield self._chunk(gen, command.kind)
        finally:
            del self.live[prompt.request_id]
            self.closed.append(prompt.request_id)

    def _chunk(self, gen: Generation, kind: ChunkKind) -> OutputChunk:
        word = f"w{gen.chunks}" if gen.chunks == 1 else f" w{gen.chunks}"
        if kind == "call":
            arguments = json.dumps({"n": gen.chunks})
            call_id = f"call_{gen.request_id}_{gen.chunks}"
            return OutputChunk(function_call=FunctionCall("lookup", arguments, call_id))
        if kind == "audio" and "audio" in gen.prompt.output_modalities:
            return OutputChunk(audio=self._tone, text=word)
        return OutputChunk(text=word)

    async def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)
        gen = self.live.get(request_id)
        if gen is not None:
            gen.aborted = True  # read at its next command: a model stops late
