"""server_vad turn detection: a pure state machine over frame scores.

`TurnDetector` turns the `FrameScore`s of a `VadStream` into SpeechStarted /
SpeechStopped events with OpenAI Realtime semantics. It does no I/O and has
no clock of its own: all times come from the frames (ms on the session's
input audio clock) or from the caller.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

from engine.interruption import InterruptionParams
from engine.vad import FrameScore

# Once in speech, a frame must fall this far below the threshold to count as
# silence, so a score wobbling around the threshold does not end the turn.
HYSTERESIS = 0.15
MIN_SILENCE_LEVEL = 0.01


@dataclass(frozen=True)
class ServerVadParams:
    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500
    # Internal, not a protocol field: shorter bursts (clicks, coughs) are not turns.
    min_speech_ms: int = 90
    # The next three are for the session engine; the detector ignores them.
    create_response: bool = True
    interrupt_response: bool = True
    idle_timeout_ms: int | None = None
    # Parley's extension: speech while the assistant is audible must qualify before
    # it interrupts (engine/interruption.py); on by default; None: every speech start
    # interrupts.
    interruption: InterruptionParams | None = field(default_factory=InterruptionParams)


@dataclass(frozen=True)
class SpeechStarted:
    audio_start_ms: int  # onset minus prefix padding, never before the floor
    onset_ms: int  # start of the first frame of the speech run


@dataclass(frozen=True)
class SpeechStopped:
    # End of the frame that completed the silence window: includes the
    # trailing silence, as OpenAI documents (the audio sent to the model).
    audio_end_ms: int
    # Where that silence began: the end of the speech itself (None: not known).
    speech_end_ms: int | None = field(default=None, compare=False)


@dataclass(frozen=True)
class PauseCandidate:
    """semantic_vad only: a pause in the turn long enough to ask the end-of-turn
    model about (engine/semantic_turns.py)."""

    pause_id: int
    audio_end_ms: int  # end of the frame that made the pause a candidate


TurnEvent = SpeechStarted | SpeechStopped | PauseCandidate


class FrameKind(Enum):
    SPEECH = "speech"
    SILENCE = "silence"
    # In speech, between the silence level and the threshold: see `counts_as_silence`.
    UNCERTAIN = "uncertain"


def silence_level(threshold: float) -> float:
    """In speech, scores below this are silence."""
    return max(threshold - HYSTERESIS, MIN_SILENCE_LEVEL)


def classify(score: float, threshold: float, in_speech: bool) -> FrameKind:
    if score >= threshold:
        return FrameKind.SPEECH
    if in_speech and score >= silence_level(threshold):
        return FrameKind.UNCERTAIN
    return FrameKind.SILENCE


def is_speech(score: float, threshold: float, in_speech: bool) -> bool:
    return classify(score, threshold, in_speech) is FrameKind.SPEECH


def counts_as_silence(kind: FrameKind, silence_running: bool) -> bool:
    """Whether a frame in a turn advances the silence clock.

    Uncertain frames (vLLM-Omni's rule) keep an already running silence
    clock going but never start it: a fading tail after the speaker stops
    cannot hold the turn open, and a dip mid-word cannot begin ending it.
    Only a speech frame stops and clears the clock.
    """
    return kind is FrameKind.SILENCE or (kind is FrameKind.UNCERTAIN and silence_running)


def padded_start(onset_ms: int, prefix_padding_ms: int, floor_ms: int) -> int:
    return max(onset_ms - prefix_padding_ms, floor_ms)


class TurnDetector:
    """Finds turns in a stream of frame scores.

    The floor is the earliest audio a turn may claim: the session start, the
    end of the previous turn, or the last reset / force_stop. Frames wholly
    before the floor are ignored (they can arrive late, since the VAD lags
    the input), and a speech run never begins before it.
    """

    def __init__(self, params: ServerVadParams) -> None:
        self.params = params
        self._floor_ms = 0
        self._in_speech = False
        self._run_onset_ms: int | None = None  # candidate onset while not in speech
        self._silence_ms: int | None = None  # None: silence clock not running

    @property
    def in_speech(self) -> bool:
        return self._in_speech

    @property
    def pause_ms(self) -> int | None:
        """Silence so far in the turn in progress; None outside a pause."""
        return self._silence_ms if self._in_speech else None

    @property
    def floor_ms(self) -> int:
        return self._floor_ms

    def feed(self, frames: Iterable[FrameScore]) -> list[TurnEvent]:
        events: list[TurnEvent] = []
        for frame in frames:
            if frame.end_ms <= self._floor_ms:
                continue
            event = self._speech_step(frame) if self._in_speech else self._idle_step(frame)
            if event is not None:
                events.append(event)
        return events

    def reset(self, now_ms: int) -> None:
        """Drop any turn in progress without an event; audio before now_ms is gone."""
        self._in_speech = False
        self._floor_ms = now_ms
        self._clear_run()

    def force_stop(self, now_ms: int) -> SpeechStopped | None:
        """End the turn in progress at now_ms (e.g. the input buffer is full).

        If the user keeps talking, a new turn starts from now_ms after
        min_speech_ms of speech, as after any other turn.
        """
        if not self._in_speech:
            return None
        self.reset(now_ms)
        return SpeechStopped(audio_end_ms=now_ms, speech_end_ms=now_ms)

    def _idle_step(self, frame: FrameScore) -> SpeechStarted | None:
        if not is_speech(frame.score, self.params.threshold, in_speech=False):
            self._clear_run()
            return None
        if self._run_onset_ms is None:
            self._run_onset_ms = max(frame.start_ms, self._floor_ms)
        if frame.end_ms - self._run_onset_ms < self.params.min_speech_ms:
            return None
        onset = self._run_onset_ms
        self._in_speech = True
        self._clear_run()
        start = padded_start(onset, self.params.prefix_padding_ms, self._floor_ms)
        return SpeechStarted(audio_start_ms=start, onset_ms=onset)

    def _speech_step(self, frame: FrameScore) -> SpeechStopped | PauseCandidate | None:
        kind = classify(frame.score, self.params.threshold, in_speech=True)
        if kind is FrameKind.SPEECH:
            self._silence_ms = None
            return None
        if not counts_as_silence(kind, self._silence_ms is not None):
            return None
        self._silence_ms = (self._silence_ms or 0) + frame.end_ms - frame.start_ms
        if self._silence_ms < self.params.silence_duration_ms:
            return None
        speech_end = frame.end_ms - self._silence_ms
        self.reset(frame.end_ms)
        return SpeechStopped(audio_end_ms=frame.end_ms, speech_end_ms=speech_end)

    def _clear_run(self) -> None:
        self._run_onset_ms = None
        self._silence_ms = None
