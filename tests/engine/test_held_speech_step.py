"""Held speech as one object (engine/held_speech.py), driven directly: what it asks
to hear, and what each step decides, with no session around it."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from bench.speech import load_wav
from engine.held_speech import WAIT, Drop, HearingDone, HeldSpeech, Interrupt
from engine.input_buffer import InputBuffer
from engine.interruption import HEAR_EVERY_MS, InterruptionParams
from engine.turns import SpeechStopped
from models.base import PCM_RATE
from models.listening.hearing import Hearing

PARAMS = InterruptionParams(max_backchannel_ms=5000)
PADDING_MS = 300
SPEECH = load_wav("weather")


def ms(n: int) -> int:
    return n * PCM_RATE // 1000


@dataclass
class Input:
    """The input as held speech reads it: 300 ms of silence, then speech."""

    guards_echo: bool = False
    echo: bool = False  # what the echo guard says of the held speech
    buffer: InputBuffer = field(default_factory=InputBuffer)
    asked_echo: list[tuple[int, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.buffer.append(np.zeros(ms(PADDING_MS), np.int16))

    def speak(self, until_ms: int) -> int:
        """Speech up to `until_ms` of it; the input clock's ms now."""
        said = self.buffer.end - ms(PADDING_MS)
        self.buffer.append(SPEECH[said : ms(until_ms)])
        return self.buffer.pos_to_ms(self.buffer.end)

    def own_voice(self, start: int, end: int) -> bool:
        self.asked_echo.append((start, end))
        return self.echo


@dataclass
class Ears:
    asked: list[tuple[int, npt.NDArray[np.int16]]] = field(default_factory=list)
    cancelled: int = 0

    def ask(self, request: int, pcm: npt.NDArray[np.int16]) -> None:
        self.asked.append((request, pcm))

    def cancel(self) -> None:
        self.cancelled += 1


def held_by(ears: Ears | None, **kw: float) -> HeldSpeech:
    held = HeldSpeech(ears, **({"measure": lambda pcm: kw["kurtosis"]} if kw else {}))
    held.hold("item_1", 0, 0, PADDING_MS)
    return held


def grow(held: HeldSpeech, audio: Input, speech_ms: int) -> None:
    held.grew(audio.speak(speech_ms))


def test_it_is_heard_from_min_speech_ms_and_sure_words_interrupt() -> None:
    ears, audio = Ears(), Input()
    held = held_by(ears)
    grow(held, audio, 100)
    assert held.step(PARAMS, audio, PADDING_MS) is WAIT and ears.asked == []
    grow(held, audio, 200)
    assert held.step(PARAMS, audio, PADDING_MS) is WAIT
    [(request, pcm)] = ears.asked
    assert len(pcm) == ms(PADDING_MS + 200)  # the padding and the speech so far
    assert held.step(PARAMS, audio, PADDING_MS) is WAIT and len(ears.asked) == 1  # one at a time
    assert not held.heard(HearingDone(request + 1, Hearing("Wait.", True)), PARAMS)  # stale
    assert held.heard(HearingDone(request, Hearing("Wait, stop.", True)), PARAMS)
    decision = held.step(PARAMS, audio, PADDING_MS)
    assert decision == Interrupt("item_1", 0, 0, False, None, None)
    assert held.held is None and ears.cancelled == 1


def test_a_backchannel_that_ends_is_heard_whole_once_more_then_dropped() -> None:
    ears, audio = Ears(), Input()
    held = held_by(ears)
    grow(held, audio, 250)
    held.step(PARAMS, audio, PADDING_MS)
    assert held.heard(HearingDone(ears.asked[-1][0], Hearing("Mm-hm.", True)), PARAMS)
    assert held.step(PARAMS, audio, PADDING_MS) is WAIT
    end_ms = PADDING_MS + 400
    audio.speak(400)
    assert held.stopped(SpeechStopped(end_ms, speech_end_ms=end_ms), None)
    assert not held.stopped(SpeechStopped(end_ms + 20), None)  # it ended once
    assert held.step(PARAMS, audio, PADDING_MS) is WAIT  # heard whole, once more
    request, pcm = ears.asked[-1]
    assert len(ears.asked) == 2 and len(pcm) == ms(end_ms)
    held.heard(HearingDone(request, Hearing("Mm-hm.", True)), PARAMS)
    assert held.step(PARAMS, audio, PADDING_MS) == Drop(end_ms)


def test_without_a_recognizer_duration_alone_qualifies_it() -> None:
    audio = Input()
    held = held_by(None)
    grow(held, audio, 100)
    assert held.step(PARAMS, audio, PADDING_MS) is WAIT
    grow(held, audio, PARAMS.min_speech_ms)
    assert isinstance(held.step(PARAMS, audio, PADDING_MS), Interrupt)
    short = held_by(None)
    short.stopped(SpeechStopped(PADDING_MS + 150, speech_end_ms=PADDING_MS + 150), None)
    assert short.step(PARAMS, audio, PADDING_MS) == Drop(PADDING_MS + 150)


def test_how_many_voices_it_sounds_like_weighs_its_words() -> None:
    for kurtosis, interrupts in ((12.0, True), (4.0, False), (2.0, False)):
        ears, audio = Ears(), Input()
        held = held_by(ears, kurtosis=kurtosis)  # one voice, background talk, music
        grow(held, audio, 300)
        held.step(PARAMS, audio, PADDING_MS)
        held.heard(HearingDone(ears.asked[-1][0], Hearing("No, stop that.", True)), PARAMS)
        decision = held.step(PARAMS, audio, PADDING_MS)
        assert isinstance(decision, Interrupt) is interrupts, kurtosis


def test_the_assistants_echo_stays_held_and_a_user_over_it_starts_after_it() -> None:
    audio = Input(guards_echo=True, echo=True)
    held = held_by(None)
    grow(held, audio, 400)
    assert held.step(PARAMS, audio, PADDING_MS) is WAIT  # it would interrupt, but it is echo
    echo_end = audio.buffer.end
    grow(held, audio, 400 + HEAR_EVERY_MS // 2)
    assert held.step(PARAMS, audio, PADDING_MS) is WAIT
    assert len(audio.asked_echo) == 1  # checked moments ago: not again yet
    audio.echo = False  # the user talks over it
    grow(held, audio, 400 + HEAR_EVERY_MS)
    decision = held.step(PARAMS, audio, 200)
    start = echo_end - ms(200)  # where the echo was last heard alone, less the padding
    assert decision == Interrupt("item_1", start, audio.buffer.pos_to_ms(start), True, None, None)


def test_echo_that_ends_is_dropped() -> None:
    audio = Input(guards_echo=True, echo=True)
    held = held_by(None)
    grow(held, audio, 400)
    end_ms = PADDING_MS + 400
    held.stopped(SpeechStopped(end_ms, speech_end_ms=end_ms), None)
    assert held.step(PARAMS, audio, PADDING_MS) == Drop(end_ms)


def test_final_decides_with_what_is_known_and_reset_cancels_the_hearing() -> None:
    ears, audio = Ears(), Input()
    held = held_by(ears)
    grow(held, audio, 250)
    held.step(PARAMS, audio, PADDING_MS)
    assert ears.asked and ears.cancelled == 0
    # Never heard: an interruption is not swallowed for want of a hearing.
    assert isinstance(held.step(PARAMS, audio, PADDING_MS, final=True), Interrupt)
    assert held.held is None and ears.cancelled == 1
    assert held.step(PARAMS, audio, PADDING_MS) is WAIT  # nothing held
    held = held_by(ears)
    grow(held, audio, 350)
    held.step(PARAMS, audio, PADDING_MS)
    held.heard(HearingDone(ears.asked[-1][0], Hearing("Mm-hm.", True)), PARAMS)
    grow(held, audio, 500)
    held.step(PARAMS, audio, PADDING_MS)  # heard again as it grew: under way
    assert held.step(PARAMS, audio, PADDING_MS, final=True) == Drop(None)
    assert ears.cancelled == 2
    held = held_by(ears)
    held.reset()
    assert held.held is None and ears.cancelled == 3
