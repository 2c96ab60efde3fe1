"""Where the embedded speech models run (models/speech/device.py): the choice from
what the runtimes report, given directly (no test machine has a GPU), and what a
server asked for a GPU it lacks does at start."""

from __future__ import annotations

import pytest

from models.errors import ModelMissing
from models.listening.hearing import WhisperHearing
from models.speech import device, tts
from models.speech.device import (
    ORT_CUDA,
    Placement,
    SpeechDevice,
    piper_uses_cuda,
    where_speech_runs,
    whisper_placement,
)
from models.speech.tts import PiperSynthesizer
from server.app import create_app
from server.cli import print_models
from server.config import Settings

ON_GPU = Placement("cuda", "int8_float16")
ON_CPU = Placement("cpu", "int8")


@pytest.mark.parametrize(
    ("asked", "gpus", "placement"),
    [
        ("auto", 0, ON_CPU),
        ("auto", 1, ON_GPU),
        ("auto", 4, ON_GPU),
        ("cpu", 2, ON_CPU),
        ("cuda", 1, ON_GPU),
    ],
)
def test_whisper_runs_on_a_gpu_when_there_is_one(
    asked: SpeechDevice, gpus: int, placement: Placement
) -> None:
    assert whisper_placement(asked, gpus) == placement


def test_whisper_on_the_cpu_keeps_its_compute_type() -> None:
    assert whisper_placement("auto", 0, cpu_compute_type="float32") == Placement("cpu", "float32")


def test_a_gpu_without_float16_takes_the_next_type_it_has() -> None:
    pascal = {"float32", "int8", "int8_float32"}
    assert whisper_placement("auto", 1, pascal) == Placement("cuda", "int8_float32")
    assert whisper_placement("auto", 1, set()) == Placement("cuda", "float32")


def test_whisper_asked_for_cuda_without_a_gpu_is_a_start_error() -> None:
    with pytest.raises(ModelMissing, match=r"PARLEY_SPEECH_DEVICE=cuda.*no CUDA device") as caught:
        whisper_placement("cuda", 0)
    assert "PARLEY_SPEECH_DEVICE=auto or cpu" in caught.value.fix


@pytest.mark.parametrize(
    ("asked", "providers", "gpus", "cuda"),
    [
        ("auto", [ORT_CUDA, "CPUExecutionProvider"], 1, True),
        ("auto", ["CPUExecutionProvider"], 1, False),  # onnxruntime, not onnxruntime-gpu
        ("auto", [ORT_CUDA, "CPUExecutionProvider"], 0, False),  # the package, no GPU
        ("cpu", [ORT_CUDA], 1, False),
        ("cuda", [ORT_CUDA], 1, True),
    ],
)
def test_piper_uses_cuda_when_onnxruntime_and_a_gpu_offer_it(
    asked: SpeechDevice, providers: list[str], gpus: int, cuda: bool
) -> None:
    assert piper_uses_cuda(asked, providers, gpus) is cuda


def test_piper_asked_for_cuda_names_what_is_missing() -> None:
    with pytest.raises(ModelMissing, match=f"no {ORT_CUDA} in onnxruntime") as caught:
        piper_uses_cuda("cuda", ["CPUExecutionProvider"], 1)
    assert "onnxruntime-gpu" in caught.value.fix
    with pytest.raises(ModelMissing, match="no CUDA device"):
        piper_uses_cuda("cuda", [ORT_CUDA], 0)


def test_this_machine_has_no_gpu_so_auto_is_the_cpu() -> None:
    assert device.place_whisper("auto") == ON_CPU
    assert not device.piper_on_cuda("auto")
    line, can_start = where_speech_runs("auto")
    assert can_start and "Whisper on cpu (int8), Piper on cpu" in line


def test_a_gpu_the_runtimes_report_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device, "cuda_device_count", lambda: 1)
    monkeypatch.setattr(device, "cuda_compute_types", lambda: frozenset({"int8_float16"}))
    monkeypatch.setattr(device, "onnx_providers", lambda: (ORT_CUDA, "CPUExecutionProvider"))
    assert device.place_whisper("auto") == ON_GPU
    line, can_start = where_speech_runs("auto")
    assert can_start and "Whisper on cuda (int8_float16), Piper on cuda" in line


def test_piper_is_started_with_cuda_when_it_runs_there(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "--cuda" not in PiperSynthesizer()._command()
    monkeypatch.setattr(tts, "piper_on_cuda", lambda asked: asked == "auto")
    on_gpu = PiperSynthesizer()
    assert on_gpu._command()[-1] == "--cuda" and "on cuda" in on_gpu.describe().source
    assert "--cuda" not in PiperSynthesizer(device="cpu")._command()


def test_cuda_asked_without_a_gpu_stops_the_server_at_start() -> None:
    with pytest.raises(ModelMissing, match="PARLEY_SPEECH_DEVICE=cuda"):
        WhisperHearing(device="cuda")
    # Even with no embedded recognizer of its own (scripted), the hearing's Whisper is.
    with pytest.raises(ModelMissing, match="PARLEY_SPEECH_DEVICE=cuda"):
        create_app(Settings(executor="scripted", speech_device="cuda"))


def test_parley_models_says_where_speech_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PARLEY_SPEECH_DEVICE", "cuda")
    assert print_models() == 1
    assert "PARLEY_SPEECH_DEVICE=cuda): cannot start" in capsys.readouterr().out
    monkeypatch.setenv("PARLEY_SPEECH_DEVICE", "cpu")
    assert print_models() == 0
    assert "Whisper on cpu (int8), Piper on cpu" in capsys.readouterr().out
