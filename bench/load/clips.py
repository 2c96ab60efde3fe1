"""The audio the load clients send: the speech fixtures looped with silence, cut into
chunks, each client starting at its own rotation; and where its turns end."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

import numpy as np

from bench.speech import FIXTURES, PCM_RATE, load_wav, silence
from bench.vad_backends import speech_extent_ms
from engine.turns import ServerVadParams, SpeechStopped, TurnDetector
from engine.vad import VadBackend, VadStream

ROTATIONS = 32  # distinct start offsets: turns of independent users seldom line up


@dataclass
class Clip:
    pcm: np.ndarray
    onsets_ms: list[int]  # where each utterance's audible speech starts

    @staticmethod
    def build(lead_ms: int, trail_ms: int) -> Clip:
        parts, onsets, at = [], [], 0
        for name in FIXTURES:
            wav = load_wav(name)
            start, _ = speech_extent_ms(wav)
            parts += [silence(lead_ms), wav, silence(trail_ms)]
            onsets.append(at + lead_ms + start)
            at += lead_ms + len(wav) * 1000 // PCM_RATE + trail_ms
        pcm = np.concatenate(parts)
        block = PCM_RATE // 5  # a whole number of 20, 40 and 100 ms chunks
        pad = -len(pcm) % block
        return Clip(np.concatenate([pcm, np.zeros(pad, np.int16)]), onsets)

    def chunks(self, chunk_ms: int) -> list[np.ndarray]:
        n = PCM_RATE * chunk_ms // 1000
        return [self.pcm[i : i + n] for i in range(0, len(self.pcm), n)]

    def texts(self, chunk_ms: int) -> list[str]:
        """Each chunk as the append event a client sends (built once, shared)."""
        return [
            json.dumps(
                {
                    "type": "input_audio_buffer.append",
                    "audio": base64.b64encode(c.tobytes()).decode(),
                }
            )
            for c in self.chunks(chunk_ms)
        ]


def rotation(index: int, n_chunks: int) -> int:
    return (index % ROTATIONS) * n_chunks // ROTATIONS


def plan_stops(clip: Clip, chunk_ms: int, backend: VadBackend, n_send: int) -> list[dict[int, int]]:
    """Per rotation: speech_stopped audio_end_ms -> index of the chunk whose arrival
    completes it, by running Parley's VadStream and TurnDetector over the same
    chunks (default server_vad parameters, as the sessions use)."""
    chunks = clip.chunks(chunk_ms)
    plans = []
    for r in range(ROTATIONS):
        offset = rotation(r, len(chunks))
        stream, detector = VadStream(backend), TurnDetector(ServerVadParams())
        plan: dict[int, int] = {}
        for k in range(n_send):
            for event in detector.feed(stream.process(chunks[(offset + k) % len(chunks)])):
                if isinstance(event, SpeechStopped):
                    plan[event.audio_end_ms] = k
        plans.append(plan)
    return plans
