"""Partial recognitions on the shared recognizer (models/speech/transcripts.py): only
on an idle one, and the turn's own speculation waits behind its partial instead of
being skipped, while another turn's is skipped as before."""

from __future__ import annotations

import asyncio
import threading

import numpy as np

from models.base import PromptItem, SpeechHint
from models.speech.files import ModelInfo
from models.speech.transcripts import Transcripts


class GatedRecognizer:
    """Says how many samples it heard, once let go."""

    name = "gated"

    def __init__(self) -> None:
        self.go = threading.Event()

    def transcribe(self, pcm: np.ndarray, rate: int, hint: SpeechHint | None = None) -> str:
        assert self.go.wait(30)
        return f"{len(pcm)} samples"

    def describe(self) -> ModelInfo:
        raise NotImplementedError


def turn(item_id: str, samples: int) -> PromptItem:
    return PromptItem(item_id, "user", audio=np.zeros(samples, np.int16))


async def until(condition: object) -> None:
    for _ in range(100_000):
        if callable(condition) and condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("never")


async def test_the_turns_speculation_waits_behind_its_partial_another_is_skipped() -> None:
    recognizer = GatedRecognizer()
    transcripts = Transcripts(recognizer)
    partial = asyncio.create_task(transcripts.partial(turn("item_a", 12_000)))
    await until(lambda: not transcripts.slot.idle)
    # Busy: a second partial is not begun, nor another turn's speculation.
    assert await transcripts.partial(turn("item_a", 24_000)) is None
    assert not transcripts.speculate(turn("item_b", 24_000))
    assert transcripts.speculate(turn("item_a", 24_000))
    recognizer.go.set()
    heard = await partial
    assert heard is not None and heard.text == "12000 samples"
    assert await transcripts.speculative_text("item_a") == "24000 samples"
    stats = transcripts.speculation
    assert (stats.partials, stats.partials_skipped_busy, stats.skipped_busy) == (1, 1, 1)
    await transcripts.aclose()
