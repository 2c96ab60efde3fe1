"""Noise reduction of the input, before the VAD and the model: WebRTC's noise
suppressor (`pywebrtc-audio`, Apache-2.0), as OpenAI's `audio.input.noise_reduction`.

The suppressor runs at 16 kHz (the band the recognizers and the VAD use) on 10 ms
frames; the session's audio is 24 kHz, so each chunk is resampled down, suppressed
frame by frame (a partial frame waits for the next chunk) and resampled back, all as
streams (models/listening/frame_stage.py), and the suppressor's own 6 ms delay is cut
from the start: sample k out is
sample k in, about 40 ms later. Above 8 kHz the output is empty. Measured on 2 cores:
~3 ms of CPU per second of audio, white noise down by ~14 dB.

`near_field` (a headset, a phone at the mouth) suppresses moderately; `far_field`
(a laptop or room microphone) harder.
"""

from __future__ import annotations

from typing import Literal

from models.errors import ModelMissing
from models.listening.frame_stage import RATE, FrameStage, Pcm16

NoiseReduction = Literal["near_field", "far_field"]
# The suppressor's own delay: its 256-point analysis window over 160-sample frames.
DELAY = 96
# WebRTC's suppression levels (0 mild ... 3 very high), per OpenAI's type.
LEVELS: dict[str, int] = {"near_field": 1, "far_field": 2}
FIX = "pip install pywebrtc-audio==0.2.0"


class Denoiser:
    """One session's noise suppressor: stateful, so one per input stream."""

    def __init__(self, kind: NoiseReduction) -> None:
        try:
            from pywebrtc_audio import NoiseSuppressor
        except ImportError as exc:
            raise ModelMissing("The pywebrtc-audio package is not installed.", FIX) from exc
        self.kind = kind
        self._suppressor = NoiseSuppressor(sample_rate=RATE, level=LEVELS[kind])
        self._stage = FrameStage(self._suppressor.process, DELAY)

    def process(self, pcm: Pcm16) -> Pcm16:
        """Suppress noise in a chunk of 24 kHz audio; returns what is ready."""
        return self._stage.process(pcm)

    def flush(self) -> Pcm16:
        """The rest of the input (a commit ends it for now): the partial frame and the
        suppressor's delay are pushed out with silence, which is then cut away."""
        out = self._stage.flush()
        self._suppressor.reset()
        return out

    def reset(self) -> None:
        self._suppressor.reset()
        self._stage.reset()
