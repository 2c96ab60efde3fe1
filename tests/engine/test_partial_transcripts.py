"""Partial transcripts while the user speaks (engine/partials.py), from real espeak-ng
speech through the embedded Whisper: deltas for the turn before it ends, each only new
text, adding up to the completed transcript; token log-probabilities when `include`
asks; and no partial recognition at all when the session does not transcribe."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from bench.recognizing import RecognizingExecutor
from bench.speech import silence
from bench.turns.synth import speak
from models.speech.asr import WhisperRecognizer
from tests.support.espeak import require_espeak
from tests.support.harness import Harness

SENTENCE = "please turn off the lights in the kitchen and set a timer for ten minutes"
STEP = 2400  # 100 ms appends


@pytest.fixture(scope="module")
def asr() -> WhisperRecognizer:
    return WhisperRecognizer("tiny.en")


@pytest.fixture(scope="module")
def turn() -> np.ndarray:
    require_espeak()
    spoken = speak(SENTENCE, "en-us", 160)
    return np.concatenate([silence(300), spoken, silence(1200)]).astype(np.int16)


def chunks(pcm: np.ndarray) -> Iterator[np.ndarray]:
    for i in range(0, len(pcm), STEP):
        yield pcm[i : i + STEP]


async def speak_turn(h: Harness, pcm: np.ndarray) -> None:
    """The turn in 100 ms appends; after each, what it started is let finish, as
    audio at real time would give a recognition of a few hundred ms time to."""
    for chunk in chunks(pcm):
        await h.append(chunk)
        await h.wait_until(lambda: h.session.handled() and h.session.transcription.idle())
    await h.wait_until(lambda: bool(h.of("conversation.item.input_audio_transcription.completed")))
    await h.settle()


async def transcribed(h: Harness, **extra: Any) -> None:
    await h.send(
        {
            "type": "session.update",
            "session": {
                "type": "realtime",
                "audio": {"input": {"transcription": {"model": "whisper-1"}}},
                **extra,
            },
        }
    )
    await h.settle()


async def test_partial_deltas_arrive_while_the_user_speaks_and_add_up_to_the_transcript(
    asr: WhisperRecognizer, turn: np.ndarray
) -> None:
    async with Harness(RecognizingExecutor(asr)) as h:
        await transcribed(h)
        await speak_turn(h, turn)
        item_id = h.of("input_audio_buffer.speech_started")[0]["item_id"]
        stopped = h.index("input_audio_buffer.speech_stopped", item_id=item_id)
        committed = h.index("input_audio_buffer.committed", item_id=item_id)
        deltas = [
            (i, e)
            for i, e in enumerate(h.events)
            if e["type"] == "conversation.item.input_audio_transcription.delta"
        ]
        assert all(e["item_id"] == item_id and e["content_index"] == 0 for _, e in deltas)
        before_the_end = [e["delta"] for i, e in deltas if i < stopped]
        assert len(before_the_end) >= 2, before_the_end
        (done,) = h.of("conversation.item.input_audio_transcription.completed")
        done_at = h.index("conversation.item.input_audio_transcription.completed")
        assert all(i < done_at for i, _ in deltas) and committed < done_at
        assert "".join(e["delta"] for _, e in deltas) == done["transcript"]
        words = done["transcript"].lower()
        assert "lights" in words and "kitchen" in words and "timer" in words
        assert "logprobs" not in done and all("logprobs" not in e for _, e in deltas)
        stored = h.session.conversation.get(item_id)
        assert stored is not None and stored.transcript == done["transcript"]


async def test_a_transcription_session_gets_partial_deltas_too(
    asr: WhisperRecognizer, turn: np.ndarray
) -> None:
    async with Harness(RecognizingExecutor(asr), intent="transcription") as h:
        audio = {"input": {"transcription": {"model": "whisper-1"}}}
        update = {"type": "transcription", "audio": audio}
        await h.send({"type": "session.update", "session": update})
        await speak_turn(h, turn)
        assert not h.errors()
        stopped = h.index("input_audio_buffer.speech_stopped")
        deltas = h.of("conversation.item.input_audio_transcription.delta")
        early = h.types()[:stopped].count("conversation.item.input_audio_transcription.delta")
        assert early >= 2
        (done,) = h.of("conversation.item.input_audio_transcription.completed")
        assert "".join(e["delta"] for e in deltas) == done["transcript"]


async def test_logprobs_when_include_asks_for_them(
    asr: WhisperRecognizer, turn: np.ndarray
) -> None:
    async with Harness(RecognizingExecutor(asr)) as h:
        await transcribed(h, include=["item.input_audio_transcription.logprobs"])
        await speak_turn(h, turn)
        deltas = h.of("conversation.item.input_audio_transcription.delta")
        (done,) = h.of("conversation.item.input_audio_transcription.completed")
        # Every event validated against the SDK's types (the harness does, strictly);
        # each delta's tokens spell its text, and the completed event's all of them.
        for event in deltas:
            tokens = event["logprobs"]
            assert "".join(t["token"] for t in tokens).strip() == event["delta"].strip()
            for t in tokens:
                assert t["logprob"] <= 0 and bytes(t["bytes"]).decode() == t["token"]
        assert "".join(t["token"] for t in done["logprobs"]) == done["transcript"]
        assert len(deltas) >= 3


async def test_no_partial_recognition_without_input_transcription(
    asr: WhisperRecognizer, turn: np.ndarray
) -> None:
    executor = RecognizingExecutor(asr)
    async with Harness(executor) as h:
        await speak_turn_untranscribed(h, turn)
        assert h.of("input_audio_buffer.committed")
        assert not h.of("conversation.item.input_audio_transcription.delta")
        assert executor.transcripts.speculation.partials == 0


async def speak_turn_untranscribed(h: Harness, pcm: np.ndarray) -> None:
    for chunk in chunks(pcm):
        await h.append(chunk)
        await h.settle()
