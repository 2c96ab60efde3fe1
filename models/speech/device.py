"""Where the embedded speech models run: the CPU, or a CUDA GPU when there is one.

`PARLEY_SPEECH_DEVICE` (auto, cpu, cuda) applies to every embedded Whisper (the
cascade's recognizer and the hearing recognizer, on CTranslate2) and to Piper (on
onnxruntime, in its own process). `auto` takes the GPU when the runtime can use one;
`cuda` refuses to start without one rather than running a GPU deployment slowly on
the CPU. The choices are pure functions of what the runtimes report, so tests (which
never have a GPU) give them device counts and provider lists directly.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

from models.errors import ModelMissing

SpeechDevice = Literal["auto", "cpu", "cuda"]

# On a GPU: int8 weights with float16 arithmetic, CTranslate2's usual GPU choice for
# Whisper; older GPUs without fast float16 fall back to the next they support.
GPU_COMPUTE_TYPES = ("int8_float16", "float16", "int8_float32", "float32")
ORT_CUDA = "CUDAExecutionProvider"
CUDA_FIX = (
    "check that the GPU is visible here (nvidia-smi; in a container, a GPU reservation),"
    " or set PARLEY_SPEECH_DEVICE=auto or cpu"
)


@dataclass(frozen=True)
class Placement:
    """Where a CTranslate2 model loads and what it computes in."""

    device: Literal["cpu", "cuda"]
    compute_type: str


def whisper_placement(
    asked: SpeechDevice,
    cuda_devices: int,
    cuda_compute_types: Collection[str] = GPU_COMPUTE_TYPES,
    cpu_compute_type: str = "int8",
) -> Placement:
    """Whisper on CTranslate2: the GPU when asked or (auto) when CTranslate2 sees one,
    else the CPU as before. ModelMissing when cuda is asked and there is none."""
    if asked == "cpu" or (asked == "auto" and cuda_devices <= 0):
        return Placement("cpu", cpu_compute_type)
    if cuda_devices <= 0:
        problem = "PARLEY_SPEECH_DEVICE=cuda, but CTranslate2 sees no CUDA device."
        raise ModelMissing(problem, CUDA_FIX)
    usable = [kind for kind in GPU_COMPUTE_TYPES if kind in cuda_compute_types]
    return Placement("cuda", usable[0] if usable else "float32")


def piper_uses_cuda(asked: SpeechDevice, providers: Collection[str], cuda_devices: int) -> bool:
    """Piper on onnxruntime's CUDA provider: when onnxruntime offers it (the
    onnxruntime-gpu package) and a CUDA device is there; asked for cpu, never.
    ModelMissing when cuda is asked and either is missing."""
    if asked == "cpu":
        return False
    usable = ORT_CUDA in providers and cuda_devices > 0
    if asked == "cuda" and not usable:
        missing = "no CUDA device" if ORT_CUDA in providers else f"no {ORT_CUDA} in onnxruntime"
        raise ModelMissing(
            f"PARLEY_SPEECH_DEVICE=cuda, but Piper would run on the CPU ({missing}).",
            "pip install onnxruntime-gpu in place of onnxruntime, and " + CUDA_FIX,
        )
    return usable


def cuda_device_count() -> int:
    """CUDA devices CTranslate2 can use (0 without a GPU, a driver or CUDA libraries)."""
    import ctranslate2  # heavy import: only when asked

    try:
        return int(ctranslate2.get_cuda_device_count())
    except RuntimeError:
        return 0


def cuda_compute_types() -> frozenset[str]:
    """What CTranslate2 computes in on the first GPU (empty without one)."""
    import ctranslate2

    try:
        return frozenset(ctranslate2.get_supported_compute_types("cuda"))
    except (RuntimeError, ValueError):
        return frozenset()


def onnx_providers() -> tuple[str, ...]:
    import onnxruntime  # type: ignore[import-untyped]

    return tuple(onnxruntime.get_available_providers())


def place_whisper(asked: SpeechDevice, cpu_compute_type: str = "int8") -> Placement:
    """`whisper_placement` with what this machine has."""
    if asked == "cpu":
        return Placement("cpu", cpu_compute_type)
    count = cuda_device_count()
    types = cuda_compute_types() if count > 0 else frozenset[str]()
    return whisper_placement(asked, count, types, cpu_compute_type)


def piper_on_cuda(asked: SpeechDevice) -> bool:
    """`piper_uses_cuda` with what this machine has."""
    if asked == "cpu":
        return False
    return piper_uses_cuda(asked, onnx_providers(), cuda_device_count())


def where_speech_runs(asked: SpeechDevice) -> tuple[str, bool]:
    """`parley models`' line on where the embedded Whisper and Piper would run, and
    whether they can start as set."""
    setting = f"embedded speech (PARLEY_SPEECH_DEVICE={asked})"
    try:
        whisper = place_whisper(asked)
        piper = "cuda" if piper_on_cuda(asked) else "cpu"
    except ModelMissing as exc:
        return f"{setting}: cannot start: {exc.problem} Fix: {exc.fix}", False
    return (
        f"{setting}: Whisper on {whisper.device} ({whisper.compute_type}), Piper on {piper}",
        True,
    )
