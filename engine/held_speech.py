"""Held speech: speech that started while the assistant was audible, held until it
qualifies as an interruption (engine/interruption.py has the rules).

`HeldSpeech` owns the one held utterance, its hearing requests, the echo-guard check
and the voice count. The session feeds it (`hold`, `grew`, `stopped`, `heard`) and
acts on what `step` returns: `Wait`, `Interrupt` (release `speech_started`, barge in)
or `Drop` (no turn; the answer plays on). It never calls into the session: hearings
go out through an `Ears` port (off the event loop in a session, answered at once in
the offline replay of bench/turns/crowd.py, which drives this same object).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from engine.input_buffer import InputBuffer
from engine.interruption import (
    AFTER_LAUGH_MS,
    HEAR_EVERY_MS,
    Heard,
    HearingRecognizer,
    InterruptionParams,
    Verdict,
    Voices,
    counted,
    held_verdict,
    laughed,
    needs_clarity,
    voices_decide,
    voices_of,
    weigh,
)
from engine.turns import SpeechStopped
from engine.user_voice import VoiceProfile, learned, level_of, profile_of, sounds_like
from models.base import PCM_RATE
from models.listening.crowd import kurtosis, pitch_clarity
from models.listening.hearing import Hearing

log = logging.getLogger(__name__)

# How many voices held speech has is judged over its last seconds at most (the measure
# is cheap, but held speech can grow without bound on a noisy line).
CROWD_WINDOW = 10 * PCM_RATE
CROWD_LEAST = PCM_RATE // 10  # less held speech than this tells nothing
# The pitch clarity is a median over the louder half of 40 ms frames: over less held
# speech than this, a moment when one talker of a babble stands out decides it (over
# the 20 espeak babble bursts of seeds 15-24, from their onset and up to 200 ms into
# them, at most 0.80 over 300 ms of it, 0.79 over 400, 0.74 over 800).
CLARITY_LEAST = PCM_RATE * 400 // 1000

Pcm16 = npt.NDArray[np.int16]


@dataclass(frozen=True)
class HearingDone:
    """The recognizer's hearing of held speech (None: it could not), for `request`."""

    request: int
    hearing: Hearing | None


# --- what `step` decides ------------------------------------------------------------


@dataclass(frozen=True)
class Wait:
    """Keep holding."""


@dataclass(frozen=True)
class Interrupt:
    """It qualified: its turn starts at buffer position `start` (`moved`: past echo
    heard before the user talked over it); `stop`: it already ended there."""

    item_id: str
    start: int
    audio_start_ms: int
    moved: bool
    stop: SpeechStopped | None
    frame_received: float | None


@dataclass(frozen=True)
class Drop:
    """No turn: its audio up to `end_ms` goes (None: it had not ended)."""

    end_ms: int | None


Decision = Wait | Interrupt | Drop
WAIT = Wait()


# --- what it reads and asks ------------------------------------------------------------


class HeldInput(Protocol):
    """The input audio as held speech reads it (engine/input_audio.py)."""

    @property
    def buffer(self) -> InputBuffer: ...

    @property
    def guards_echo(self) -> bool: ...

    def own_voice(self, start: int, end: int) -> bool: ...


class Ears(Protocol):
    """Where hearing requests go; each is answered by `HeldSpeech.heard`."""

    def ask(self, request: int, pcm: Pcm16) -> None: ...

    def cancel(self) -> None: ...


class OffLoopHearing:
    """Ears for a session: one hearing at a time, off the event loop, its answer
    posted to the session's mailbox."""

    def __init__(
        self, recognizer: HearingRecognizer, post: Callable[[HearingDone], None], name: str
    ) -> None:
        self._recognizer = recognizer
        self._post = post
        self._name = name
        self._task: asyncio.Task[None] | None = None

    def ask(self, request: int, pcm: Pcm16) -> None:
        async def hear() -> None:
            try:
                hearing = await self._recognizer.transcribe(pcm)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("session %s: hearing held speech failed", self._name)
                hearing = None
            self._post(HearingDone(request, hearing))

        self.cancel()
        self._task = asyncio.create_task(hear())

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None


# --- the held utterance and its owner ------------------------------------------------------


@dataclass
class Held:
    """Speech that has not qualified as an interruption yet: nothing of it is on the
    wire."""

    item_id: str
    start: int  # buffer position of audio_start_ms
    audio_start_ms: int
    onset_ms: int
    last_speech_ms: int  # the latest audio the VAD called speech
    request: int = 0  # the hearing under way (0: none)
    asked_ms: int = 0  # how much of its speech that hearing hears
    heard: Heard | None = None  # the latest hearing's answer
    heard_ms: int = 0  # of this much of its speech
    stop: SpeechStopped | None = None  # it ended; the verdict is still to come
    frame_received: float | None = None
    own_voice_ms: int | None = None  # the echo guard last heard the assistant's voice here
    echo_end: int | None = None  # the buffer position up to which it was the echo
    words: frozenset[str] = frozenset()  # the latest hearing's strong words
    agreed: bool = False  # they share a strong word with the hearing before
    unheard: bool = False  # the latest hearing failed
    # Hearings hear its speech from this many ms after the onset on (0: all of it, with
    # the prefix padding); moved on by a hearing of laughter alone (AFTER_LAUGH_MS).
    hear_from_ms: int = 0

    @property
    def speech_ms(self) -> int:
        return self.last_speech_ms - self.onset_ms

    def end(self, buffer: InputBuffer) -> int:
        """The buffer position where it ends so far: its end once it ended."""
        return buffer.end if self.stop is None else buffer.ms_to_pos(self.stop.audio_end_ms)


class HeldSpeech:
    """The one held utterance of a session (or none), and its hearings.

    `ears` None: there is no recognizer, and duration alone qualifies held speech.
    `measure` and `clarity`: the voice count's measures of a waveform (its kurtosis and
    pitch clarity; the offline replay passes ones it measured before)."""

    def __init__(
        self,
        ears: Ears | None,
        measure: Callable[[Pcm16], float] = kurtosis,
        clarity: Callable[[Pcm16], float] | None = None,
    ) -> None:
        self._ears = ears
        self._measure = measure
        self._clarity = clarity or _clarity
        self._requests = 0
        self.held: Held | None = None
        # The user's voice from their turns said while the assistant was silent
        # (engine/user_voice.py); None until the first.
        self.user: VoiceProfile | None = None

    def learn(self, turn: Pcm16) -> None:
        """A turn of the user's, said while the assistant was silent: their voice."""
        profile = profile_of(turn[-CROWD_WINDOW:])
        if profile is not None:
            self.user = learned(self.user, profile)

    @property
    def ended(self) -> bool:
        """Speech is held that has ended: its verdict is still to come."""
        return self.held is not None and self.held.stop is not None

    def hold(self, item_id: str, start: int, audio_start_ms: int, onset_ms: int) -> None:
        self.held = Held(item_id, start, audio_start_ms, onset_ms, onset_ms)

    def grew(self, last_speech_ms: int) -> None:
        """It is still going: the VAD called audio up to `last_speech_ms` speech."""
        held = self.held
        if held is not None and held.stop is None:
            held.last_speech_ms = max(held.last_speech_ms, last_speech_ms)

    def stopped(self, event: SpeechStopped, frame_received: float | None) -> bool:
        """The VAD ended the speech; False: it was not held (or had ended already)."""
        held = self.held
        if held is None or held.stop is not None:
            return False
        held.stop, held.frame_received = event, frame_received
        if event.speech_end_ms is not None:
            held.last_speech_ms = max(held.last_speech_ms, event.speech_end_ms)
        return True

    def heard(self, done: HearingDone, params: InterruptionParams) -> bool:
        """A hearing came back; False: stale (decided meanwhile), nothing changed."""
        held = self.held
        if held is None or held.request != done.request:
            return False
        held.request, held.heard_ms = 0, held.asked_ms
        hearing = done.hearing
        held.unheard = hearing is None
        if hearing is None:
            held.heard = Heard.WORDS  # cannot tell: do not swallow an interruption
        else:
            weighed = weigh(
                hearing.text, hearing.sure, held.words, held.asked_ms, params.backchannels
            )
            held.heard, held.words, held.agreed = weighed.heard, weighed.words, weighed.agreed
            if laughed(hearing.text, params.backchannels):
                held.hear_from_ms = max(held.hear_from_ms, held.asked_ms - AFTER_LAUGH_MS)
        return True

    def reset(self) -> None:
        """Nothing is held any more; a hearing under way is cancelled."""
        self.held = None
        if self._ears is not None:
            self._ears.cancel()

    def step(
        self,
        params: InterruptionParams,
        audio: HeldInput,
        padding_ms: int,
        *,
        final: bool = False,
    ) -> Decision:
        """The next step for the held speech (engine/interruption.py's verdict);
        `final`: decide now with what is known (new speech needs the floor).
        `padding_ms`: the turn's prefix padding, kept before echo the user talked over."""
        held = self.held
        if held is None:
            return WAIT
        speech_ms = held.speech_ms
        heard = held.heard
        if heard is not None and voices_decide(heard, speech_ms, params) and not held.unheard:
            # Words count by what the held speech sounds like now: it may have grown
            # from sounding like several voices to one since it was heard.
            heard = counted(heard, held.agreed, self._voices(held, params, audio.buffer))
        verdict = held_verdict(
            params,
            speech_ms,
            ended=held.stop is not None,
            heard=heard,
            heard_ms=held.heard_ms,
            pending=held.request != 0,
            can_classify=self._ears is not None and not final,
        )
        # The echo guard: speech about to interrupt whose latest second is the
        # assistant's own voice stays held (or is dropped once it ends); it is checked
        # again every HEAR_EVERY_MS, so a user who starts talking over the echo still
        # interrupts.
        if verdict is Verdict.INTERRUPT and self._own_voice(held, audio):
            verdict = Verdict.DROP if held.stop is not None else Verdict.WAIT
        if verdict is Verdict.CLASSIFY:
            self._ask(held, audio.buffer)
            return WAIT
        if verdict is Verdict.INTERRUPT:
            self.reset()
            return self._interrupt(held, audio.buffer, padding_ms)
        if verdict is Verdict.DROP or final:
            self.reset()
            return Drop(None if held.stop is None else held.stop.audio_end_ms)
        return WAIT

    # --- the measures behind a step ----------------------------------------------------

    @staticmethod
    def _interrupt(held: Held, buffer: InputBuffer, padding_ms: int) -> Interrupt:
        start, audio_start_ms = held.start, held.audio_start_ms
        if held.echo_end is not None:
            # The user talked over held echo: their turn starts where the echo was last
            # heard alone, less the prefix padding, not where the echo began.
            start = max(held.start, held.echo_end - buffer.ms_to_pos(padding_ms))
            audio_start_ms = buffer.pos_to_ms(start)
        return Interrupt(
            held.item_id,
            start,
            audio_start_ms,
            held.echo_end is not None,
            held.stop,
            held.frame_received,
        )

    @staticmethod
    def _own_voice(held: Held, audio: HeldInput) -> bool:
        if not audio.guards_echo:
            return False
        speech_ms = held.speech_ms
        recent = held.own_voice_ms is not None and speech_ms - held.own_voice_ms < HEAR_EVERY_MS
        if recent and held.stop is None:
            return True  # checked moments ago
        end = held.end(audio.buffer)
        own = audio.own_voice(held.start, end)
        held.own_voice_ms = speech_ms if own else None
        if own:
            held.echo_end = end
        return own

    def _ask(self, held: Held, buffer: InputBuffer) -> None:
        """Hear the held speech so far."""
        assert self._ears is not None
        self._requests += 1
        held.request, held.asked_ms = self._requests, held.speech_ms
        start = held.start
        if held.hear_from_ms:
            start = max(start, buffer.ms_to_pos(held.onset_ms + held.hear_from_ms))
        self._ears.ask(held.request, buffer.copy(start, held.end(buffer)))

    def _voices(self, held: Held, params: InterruptionParams, buffer: InputBuffer) -> Voices:
        """What held speech sounds like so far, one voice or several: from its onset to
        its latest speech (silence around it would raise the kurtosis: the prefix
        padding, the silence that ended it), over its last CROWD_WINDOW at most."""
        end = min(held.end(buffer), buffer.ms_to_pos(held.last_speech_ms))
        start = max(held.start, buffer.ms_to_pos(held.onset_ms), end - CROWD_WINDOW)
        if end - start < CROWD_LEAST:
            return Voices.ONE  # too little to tell: words count as they were heard
        pcm = buffer.copy(start, end)
        measured = self._measure(pcm)
        if params.crowd_kurtosis and self.user and sounds_like(self.user, level_of(pcm), measured):
            return Voices.ONE  # the user's own voice, as their turns taught it
        clear = end - start >= CLARITY_LEAST and needs_clarity(measured, params)
        clarity = self._clarity(pcm) if clear else 0.0
        return voices_of(measured, params, clarity)


def _clarity(pcm: Pcm16) -> float:
    return pitch_clarity(pcm, PCM_RATE)
