"""semantic_vad turn detection: Silero finds the speech, an end-of-turn model
decides when a pause ends the turn.

`SemanticTurnDetector` is `TurnDetector` (same speech start, same silence rule)
with a different end: after its curve's `candidate_pause_ms` of silence it emits a
`PauseCandidate`; the session has the pause scored off its task and hands the
probability back with `decide`, which sets how much silence ends the turn
(`silence_needed_ms`). Until a score arrives, the eagerness' maximum wait
applies, so a slow or stuck model never holds a turn open past OpenAI's cap.
Pure: no I/O, no clock; times come from the frames.

All the tuning lives in `CURVES` below, one `TurnCurve` per eagerness, chosen on the
offline sweep of the evaluation set (bench/turns/sweep.py) and checked live by
`make eval-turns`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
import soxr

from engine.end_of_turn import END_OF_TURN_RATE, END_OF_TURN_WINDOW_S
from engine.room_noise import RoomNoise, noisy_room_silence_ms
from engine.turns import (
    FrameKind,
    PauseCandidate,
    ServerVadParams,
    SpeechStarted,
    SpeechStopped,
    TurnDetector,
    classify,
    counts_as_silence,
)
from engine.vad import FrameScore

Eagerness = Literal["low", "medium", "high", "auto"]

# OpenAI's maximum waits: a pause this long always ends the turn.
MAX_WAIT_MS: dict[str, int] = {"low": 8000, "medium": 4000, "high": 2000}
# No model, or it could not score: server_vad's default silence.
FALLBACK_SILENCE_MS = 500


@dataclass(frozen=True)
class TurnCurve:
    """How a pause's score becomes the silence that ends the turn."""

    candidate_pause_ms: int  # silence before a pause is scored (shorter: within speech)
    confident_probability: float  # at or above it the turn is taken as finished
    confident_silence_ms: int  # the silence that ends a turn the model is sure of
    # While the model is unsure, score the pause again after this much more silence
    # (its score rises as the silence grows); None: once per pause.
    rescore_ms: int | None = None
    # The longest an unsure score makes the user wait: the linear scale is cut off here
    # (unchanged below it); None: at the eagerness' maximum wait, which always holds.
    unsure_wait_ms: int | None = None


# One curve per eagerness, chosen on `python -m bench.turns.sweep` (docs/turn-taking.md):
# on the evaluation's voices the model is as sure of many unfinished phrases as of
# finished questions, so no curve is both quick and patient; each eagerness takes
# one end of the measured front. medium (and auto): answer quickly, taking the model's
# word at 0.7; low: let the user take their time, a turn ends on a near-certain score
# and 750 ms, or the long wait; high: the quickest end the model allows.
# medium waits at most 1 s on an unsure score: on recorded voices Smart Turn stays
# unsure of some finished read sentences (0.05, 0.39), which waited up to 3.8 s; capped,
# complete turns' committed p90 is 1064 ms (dev) and 992 (held) instead of 2834 and
# 1140, espeak's 1106 instead of 1436, with the same cut-offs on every set (espeak's
# pauses are 600-900 ms) and the same p50 (replayed, bench/turns/sweep.py, 2026-12-05).
# high takes the same cap (so it never waits longer than medium; its p90s fall the
# same way, cut-offs unchanged); low keeps the long wait, its patience being its point.
CURVES: dict[str, TurnCurve] = {
    "low": TurnCurve(120, 0.98, 750, rescore_ms=400),
    "medium": TurnCurve(120, 0.7, 150, unsure_wait_ms=1000),
    "high": TurnCurve(120, 0.5, 100, unsure_wait_ms=1000),
}


NEVER = 1 << 30  # ms of silence


def effective_eagerness(eagerness: Eagerness) -> str:
    return "medium" if eagerness == "auto" else eagerness


def max_wait_ms(eagerness: Eagerness) -> int:
    return MAX_WAIT_MS[effective_eagerness(eagerness)]


def curve_for(eagerness: Eagerness) -> TurnCurve:
    return CURVES[effective_eagerness(eagerness)]


def looks_final(probability: float | None, curve: TurnCurve) -> bool:
    """Whether the model is sure enough that the turn has ended to begin answering
    it speculatively (the turn ends once the silence reaches the curve's)."""
    return probability is not None and probability >= curve.confident_probability


def silence_needed_ms(
    eagerness: Eagerness, probability: float | None, curve: TurnCurve | None = None
) -> int:
    """Silence (from the end of speech) that ends the turn, given the model's
    probability that the user has finished: short when confident, scaled up
    linearly to the maximum wait as the probability falls to 0, and never past the
    curve's unsure wait."""
    cap = max_wait_ms(eagerness)
    if probability is None:
        return min(FALLBACK_SILENCE_MS, cap)
    curve = curve or curve_for(eagerness)
    short = curve.confident_silence_ms
    p = min(max(probability, 0.0), 1.0)
    if p >= curve.confident_probability:
        return short
    doubt = 1.0 - p / curve.confident_probability  # 0 at the confident line, 1 at p = 0
    wait = cap if curve.unsure_wait_ms is None else max(curve.unsure_wait_ms, short)
    return min(cap, wait, round(short + (cap - short) * doubt))


@dataclass(frozen=True)
class SemanticVadParams(ServerVadParams):
    """semantic_vad: only eagerness, create_response and interrupt_response are
    protocol fields; speech is found with server_vad's defaults."""

    eagerness: Eagerness = "auto"


def turn_audio(pcm: npt.NDArray[np.int16], rate: int) -> npt.NDArray[np.int16]:
    """The model's input: the last `END_OF_TURN_WINDOW_S` of `pcm`, at 16 kHz."""
    tail = pcm[-int(END_OF_TURN_WINDOW_S * rate) :]
    if rate == END_OF_TURN_RATE or not len(tail):
        return np.asarray(tail, dtype=np.int16)
    out = soxr.resample(tail.astype(np.float32), rate, END_OF_TURN_RATE)
    return np.asarray(np.clip(np.rint(out), -32768, 32767), dtype=np.int16)


class SemanticTurnDetector(TurnDetector):
    """TurnDetector whose silence window is set per pause by the model's score.

    A pause (a run of silence inside a turn) becomes a candidate after
    `candidate_pause_ms`, and again every `rescore_ms` while the model is unsure;
    each candidate gets a new id, and a score for any other id is stale and ignored. With `scoring`
    off (no model) every pause ends after `silence_needed_ms(e, None)`. In a noisy room
    (engine/room_noise.py) a pause never needs more silence than server_vad's.
    """

    def __init__(
        self,
        params: SemanticVadParams,
        *,
        scoring: bool = True,
        curve: TurnCurve | None = None,
    ) -> None:
        super().__init__(params)
        self.eagerness: Eagerness = params.eagerness
        self.scoring = scoring
        self.curve = curve or curve_for(params.eagerness)
        self._pause_id = 0
        self._candidate: int | None = None  # id of the pause being scored
        self._next_score_ms = self.curve.candidate_pause_ms  # silence that raises the next one
        self._needed_ms = self._initial_needed()
        self._last_end_ms = 0
        self.room = RoomNoise(params.threshold)  # kept across turns: it is the room's

    @property
    def pending_pause(self) -> int | None:
        """The id of the pause awaiting its score, if any."""
        return self._candidate

    def decide(self, pause_id: int, probability: float | None) -> SpeechStopped | None:
        """The model's score for pause `pause_id`: ends the turn now if the pause
        is already long enough, else sets the silence the pause needs."""
        if pause_id != self._candidate or not self.in_speech or self._silence_ms is None:
            return None  # stale: speech resumed, or the turn ended meanwhile
        self._candidate = None
        self._needed_ms = silence_needed_ms(self.eagerness, probability, self.curve)
        if self._silence_ms < self._limit_ms():
            rescore = self.curve.rescore_ms
            if rescore is not None:
                self._next_score_ms = self._silence_ms + rescore
            return None
        end = self._last_end_ms
        speech_end = end - self._silence_ms
        self.reset(end)
        return SpeechStopped(audio_end_ms=end, speech_end_ms=speech_end)

    def reset(self, now_ms: int) -> None:
        super().reset(now_ms)
        self._end_pause()

    def _limit_ms(self) -> int:
        """The silence that ends the pause now: what the score set, capped in noise."""
        return noisy_room_silence_ms(
            self._needed_ms, self.room.level, self.params.silence_duration_ms
        )

    def _initial_needed(self) -> int:
        if self.scoring:
            return max_wait_ms(self.eagerness)
        return silence_needed_ms(self.eagerness, None)

    def _end_pause(self) -> None:
        self._candidate = None
        self._needed_ms = self._initial_needed()
        self._next_score_ms = self.curve.candidate_pause_ms

    def _idle_step(self, frame: FrameScore) -> SpeechStarted | None:
        self.room.hear(frame)
        return super()._idle_step(frame)

    def _speech_step(self, frame: FrameScore) -> SpeechStopped | PauseCandidate | None:
        self.room.hear(frame)
        self._last_end_ms = frame.end_ms
        kind = classify(frame.score, self.params.threshold, in_speech=True)
        if kind is FrameKind.SPEECH:
            if self._silence_ms is not None:
                self._end_pause()  # speech resumed: the pause and its score are moot
            self._silence_ms = None
            return None
        if not counts_as_silence(kind, self._silence_ms is not None):
            return None
        before = self._silence_ms or 0
        self._silence_ms = before + frame.end_ms - frame.start_ms
        if self._silence_ms >= self._limit_ms():
            speech_end = frame.end_ms - self._silence_ms
            self.reset(frame.end_ms)
            return SpeechStopped(audio_end_ms=frame.end_ms, speech_end_ms=speech_end)
        if self.scoring and self._candidate is None and self._silence_ms >= self._next_score_ms:
            self._next_score_ms = NEVER  # until this one is decided
            self._pause_id += 1
            self._candidate = self._pause_id
            return PauseCandidate(pause_id=self._pause_id, audio_end_ms=frame.end_ms)
        return None
