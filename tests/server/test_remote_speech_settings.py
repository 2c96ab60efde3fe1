"""The remote speech stages' settings become the stages' options (server/remote_stages.py,
server/app.py's voice_options); embedded stages by default."""

from __future__ import annotations

from server.app import voice_options
from server.config import Settings


def test_by_default_both_speech_stages_are_embedded() -> None:
    voice = voice_options(Settings())
    assert (voice.asr_remote, voice.tts_remote, voice.tts_voices) == (None, None, {})


def test_remote_speech_settings_make_the_stages_options() -> None:
    settings = Settings(
        asr_url="http://whisper-0:8000, http://whisper-1:8000/v1",  # as PARLEY_ASR_URL
        asr_server_model="openai/whisper-large-v3",
        asr_api_key="sk-asr",
        tts_url=["http://kokoro:8880"],  # as repeated --tts-url
        tts_voices="alloy=af_bella,*=af_heart",
        speech_timeout_s=12,
        speech_retries=1,
    )
    voice = voice_options(settings)
    asr, tts = voice.asr_remote, voice.tts_remote
    assert asr is not None and tts is not None
    assert asr.urls == ("http://whisper-0:8000", "http://whisper-1:8000/v1")
    assert (asr.stage, asr.model, asr.api_key) == ("asr", "openai/whisper-large-v3", "sk-asr")
    assert (asr.read_timeout_s, asr.connect_timeout_s, asr.retries) == (12, 5, 1)
    assert (tts.stage, tts.urls, tts.model, tts.api_key) == (
        "tts",
        ("http://kokoro:8880",),
        None,
        None,
    )
    assert voice.tts_voices == {"alloy": "af_bella", "*": "af_heart"}
