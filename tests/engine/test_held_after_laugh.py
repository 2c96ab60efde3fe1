"""Held speech heard after a laugh (engine/held_speech.py with AFTER_LAUGH_MS): once a
hearing is laughter alone, the next hearings hear only the speech from just before
that hearing's end, not the laugh from its onset (heard whole, Whisper writes the
laugh on over the words that follow)."""

from __future__ import annotations

import numpy as np

from engine.held_speech import HearingDone, HeldSpeech, Interrupt
from engine.input_buffer import InputBuffer
from engine.interruption import AFTER_LAUGH_MS, InterruptionParams
from models.base import PCM_RATE
from models.listening.hearing import Hearing

MS = PCM_RATE // 1000
PADDING_MS = 300


class Ears:
    def __init__(self) -> None:
        self.asked: list[tuple[int, np.ndarray]] = []

    def ask(self, request: int, pcm: np.ndarray) -> None:
        self.asked.append((request, pcm))

    def cancel(self) -> None:
        pass


class Input:
    guards_echo = False

    def __init__(self) -> None:
        self.buffer = InputBuffer(PCM_RATE)

    def own_voice(self, start: int, end: int) -> bool:
        return False


def grow_to(held: HeldSpeech, audio: Input, speech: np.ndarray, ms: int) -> None:
    """The held speech's first `ms` in the buffer, after the padding."""
    have = len(audio.buffer.copy(0, audio.buffer.end)) - PADDING_MS * MS
    audio.buffer.append(speech[have : ms * MS])
    held.grew(PADDING_MS + ms)


def test_after_laughter_alone_only_the_speech_from_near_its_end_is_heard() -> None:
    params = InterruptionParams()
    ears, audio = Ears(), Input()
    # One voice, whatever it measures: this test is about what is heard.
    held = HeldSpeech(ears, measure=lambda pcm: 20.0, clarity=lambda pcm: 1.0)
    speech = (np.arange(2000 * MS) % 30000).astype(np.int16)  # a sample tells its place
    audio.buffer.append(np.zeros(PADDING_MS * MS, np.int16))
    held.hold("held", 0, 0, PADDING_MS)

    grow_to(held, audio, speech, 600)
    held.step(params, audio, PADDING_MS)
    request, pcm = ears.asked[-1]
    assert len(pcm) == (PADDING_MS + 600) * MS  # from the padding: the whole of it
    held.heard(HearingDone(request, Hearing("Ha-ha-ha", True)), params)

    grow_to(held, audio, speech, 700)
    held.step(params, audio, PADDING_MS)
    request, pcm = ears.asked[-1]
    start = (600 - AFTER_LAUGH_MS) * MS
    assert np.array_equal(pcm, speech[start : 700 * MS])  # only after the laugh

    # Its words are heard there: they interrupt.
    held.heard(HearingDone(request, Hearing("Stop that!", True)), params)
    assert isinstance(held.step(params, audio, PADDING_MS), Interrupt)


def test_a_hearing_that_is_no_laugh_keeps_hearing_from_the_onset() -> None:
    params = InterruptionParams()
    ears, audio = Ears(), Input()
    held = HeldSpeech(ears, measure=lambda pcm: 20.0, clarity=lambda pcm: 1.0)
    speech = np.ones(2000 * MS, np.int16)
    audio.buffer.append(np.zeros(PADDING_MS * MS, np.int16))
    held.hold("held", 0, 0, PADDING_MS)
    grow_to(held, audio, speech, 600)
    held.step(params, audio, PADDING_MS)
    held.heard(HearingDone(ears.asked[-1][0], Hearing("Mm-hmm.", True)), params)
    grow_to(held, audio, speech, 700)
    held.step(params, audio, PADDING_MS)
    assert len(ears.asked[-1][1]) == (PADDING_MS + 700) * MS
