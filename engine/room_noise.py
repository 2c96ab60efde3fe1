"""How noisy the room sounds to the VAD, so semantic_vad can end turns in noise.

semantic_vad waits for a long run of unbroken silence when the end-of-turn model is
unsure (up to its eagerness' maximum wait). In background babble the VAD calls a frame
of someone else's voice speech every second or so, which restarts that run, so the
wait never completes and consecutive questions merge into one turn; and the model,
fed the noise, is unsure more often. server_vad needs only its 500 ms and keeps one
turn per question. So in a noisy room semantic_vad never needs more silence than
server_vad would (`noisy_room_silence_ms`); in a quiet one it waits as before.

The room's level is the VAD's mean score over frames it calls silence, once the last
speech frame is `SETTLE_MS` behind (a word's fading tail is the speaker, not the
room), each frame counted at most `MAX_FRAME_SCORE`, smoothed over about 0.6 s. On the
evaluation's espeak set a quiet room sits at 0.003-0.016 and babble with pink noise at
10 dB mostly at 0.05-0.1 (docs/turn-taking.md).
Pure: times come from the frames.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.vad import FrameScore

# Above this level the room is noisy: twice a quiet room's highest level on the
# evaluation set (~0.016), below most of babble's at 10 dB SNR (0.05-0.1).
NOISY_LEVEL = 0.035
# A silence frame counts toward the level once speech is this far behind.
SETTLE_MS = 200
# Weight of each new frame in the level: ~20 frames (~0.6 s of 32 ms frames) of memory.
SMOOTHING = 0.05
# A frame adds at most this score: the rising frames of a speaker's next word (0.1-0.4)
# must not make a quiet room noisy in the pause before it; a noisy room's frames sit
# near or above it, steadily.
MAX_FRAME_SCORE = 0.1


def next_level(level: float, score: float) -> float:
    """The room's level after one more settled silence frame scored `score`."""
    return level + SMOOTHING * (min(score, MAX_FRAME_SCORE) - level)


def is_noisy(level: float) -> bool:
    return level > NOISY_LEVEL


def noisy_room_silence_ms(needed_ms: int, level: float, server_silence_ms: int) -> int:
    """The silence that ends a semantic_vad turn: `needed_ms`, but never more than
    server_vad's `server_silence_ms` when the room is noisy."""
    return min(needed_ms, server_silence_ms) if is_noisy(level) else needed_ms


@dataclass
class RoomNoise:
    """The room's level, fed every frame the detector sees."""

    threshold: float  # the VAD's speech threshold
    level: float = 0.0
    _last_speech_ms: int | None = None

    def hear(self, frame: FrameScore) -> None:
        if frame.score >= self.threshold:
            self._last_speech_ms = frame.end_ms
            return
        if self._last_speech_ms is None or frame.start_ms - self._last_speech_ms >= SETTLE_MS:
            self.level = next_level(self.level, frame.score)
