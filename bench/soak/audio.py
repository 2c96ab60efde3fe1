"""The audio soak clients send: each speech fixture as ready-made append events at
CHUNK_MS, with where its audible speech starts and ends, and a chunk of silence."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from bench.speech import FIXTURES, PCM_RATE, load_wav, silence
from bench.vad_backends import speech_extent_ms

CHUNK_MS = 40  # what many clients send; half the messages of 20 ms at 50 sessions


def append_text(pcm: npt.NDArray[np.int16]) -> str:
    audio = base64.b64encode(pcm.astype("<i2").tobytes()).decode()
    return json.dumps({"type": "input_audio_buffer.append", "audio": audio})


def chunk_texts(pcm: npt.NDArray[np.int16], chunk_ms: int = CHUNK_MS) -> list[str]:
    n = PCM_RATE * chunk_ms // 1000
    pad = -len(pcm) % n
    whole = np.concatenate([pcm, np.zeros(pad, np.int16)])
    return [append_text(whole[i : i + n]) for i in range(0, len(whole), n)]


@dataclass(frozen=True)
class Utterance:
    name: str
    chunks: list[str]  # append events, CHUNK_MS each, from the speech onset
    last_speech: int  # index of the chunk holding the end of the audible speech


@dataclass(frozen=True)
class Audio:
    utterances: list[Utterance]
    silence: str  # one CHUNK_MS append of silence

    @staticmethod
    def build() -> Audio:
        """Each fixture cut to start at its speech onset, so an utterance sent during
        an answer barges in at once."""
        utterances = []
        for name in FIXTURES:
            wav = load_wav(name)
            start_ms, end_ms = speech_extent_ms(wav)
            cut = wav[start_ms * PCM_RATE // 1000 :]
            last = (end_ms - start_ms - 1) // CHUNK_MS
            utterances.append(Utterance(name, chunk_texts(cut), last))
        return Audio(utterances, append_text(silence(CHUNK_MS)))
