"""A cascade whose fake stages take known times of a fake clock (models/stage_timing.py
times them): recognition 0.3 s, the reply's first sentence 0.2 s and the rest 0.5 s
more, each synthesis 0.05 s."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence

import numpy as np

from models.base import SpeechHint
from models.cascade.pipeline import CascadeExecutor
from models.cascade.text import ChatMessage
from models.speech.files import ModelInfo
from tests.support.clock import FakeClock


class HearingModel:
    """A recognizer that takes 0.3 s of the fake clock."""

    name = "hearing"

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock

    def transcribe(self, pcm: np.ndarray, rate: int, hint: SpeechHint | None = None) -> str:
        self.clock.t += 0.3
        return "What is the weather?"

    def describe(self) -> ModelInfo:
        return ModelInfo("asr", self.name, "-", 0, "-", "test")


class WritingModel:
    """Its first sentence after 0.2 s; the rest once `more` is set, 0.5 s later."""

    name = "writing"
    calls_tools = False

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.more = threading.Event()
        self.asked = threading.Event()

    def stream(
        self, messages: Sequence[ChatMessage], *, max_tokens: int, stop: threading.Event
    ) -> Iterator[str]:
        self.asked.set()
        self.clock.t += 0.2
        yield "It is sunny."
        yield " Take"
        self.more.wait()
        if stop.is_set():
            return
        self.clock.t += 0.5
        yield " a hat."

    def describe(self) -> ModelInfo:
        return ModelInfo("llm", self.name, "-", 0, "-", "test")

    def close(self) -> None:
        self.more.set()


class SpeakingModel:
    """A synthesizer on the event loop that takes 0.05 s of the fake clock, or waits
    for `go` when held."""

    name = "speaking"
    sample_rate = 24_000

    def __init__(self, clock: FakeClock, held: bool = False) -> None:
        self.clock = clock
        self.go = asyncio.Event()
        self.asked = asyncio.Event()
        if not held:
            self.go.set()

    async def synthesize_async(self, text: str, voice: str = "") -> np.ndarray:
        self.asked.set()
        await self.go.wait()
        self.clock.t += 0.05
        return np.zeros(240, np.int16)

    def synthesize(self, text: str) -> np.ndarray:
        raise AssertionError("spoken on the event loop")

    def describe(self) -> ModelInfo:
        return ModelInfo("tts", self.name, "-", 0, "-", "test")

    def close(self) -> None:
        pass


def cascade(
    clock: FakeClock, *, written: bool = False, held: bool = False
) -> tuple[CascadeExecutor, WritingModel, SpeakingModel]:
    """The cascade and its language model and synthesizer. `written`: the model
    writes its whole reply at once; `held`: each synthesis waits for the
    synthesizer's `go`."""
    llm, tts = WritingModel(clock), SpeakingModel(clock, held)
    if written:
        llm.more.set()
    return CascadeExecutor(HearingModel(clock), llm, tts, clock=clock), llm, tts
